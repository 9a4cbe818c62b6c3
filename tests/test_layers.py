"""Imports point one way: down the layers of rlstruct, never up, sideways or into private names.

``LAYERS`` is the one table of the layers (docs/concepts.md draws it): bottom
first, each layer a list of parts; a part names modules or packages of
``rlstruct``. A module may import any module of its own part and of the
layers below; every other import of rlstruct's fails the test, named
``module -> imported module``: up to a higher layer, or sideways to another
part of the same layer (the parts of a layer know nothing of each other).
Every import counts, at module level or inside a function, under
``TYPE_CHECKING`` or not, since each would be a cycle waiting to happen.

No module imports another module's private (underscore) name, except that the
modules of one package may use that package's private modules (and their
private names). The same rule holds for the private members of classes
(``DictTensor._new``, ``x._data``): a module uses only its own, and those of
its package's private modules; ``self._x`` and ``cls._x`` are always its own.
A fast path that needs another module's internals gets a public, documented
door (``DictTensor.unchecked``, ``DictTensor.tensors``).

No import cycle joins modules of rlstruct, counting imports inside functions:
a cycle that a deferred import hides today is one module-level import away
from a partially initialised module.
"""

from __future__ import annotations

import ast
import builtins
import functools
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rlstruct"

LAYERS: list[tuple[str, list[list[str]]]] = [
    # Structures: pure torch. Its leaves import nothing of rlstruct's.
    ("leaves", [["errors"], ["specs"], ["seeding"], ["version"]]),
    # The argument checks every layer above shares, on errors' describe.
    ("checks", [["checks"]]),
    ("structures", [["dicttensor", "temporal", "trajectories"]]),
    # Interfaces: agents, and environments with the gymnasium adapter, unaware of each other.
    (
        "interfaces",
        [
            ["agent", "history"],
            ["env", "env_check", "envs", "gym_env", "gym_vector_env", "torch_env", "torch_envs"],
        ],
    ),
    # Batchers, and the hand-checkable agents and environments that test them and learners.
    ("batchers", [["batchers"], ["testing"]]),
    # Learning blocks: pure maths, replay buffers, normalisers.
    ("learning blocks", [["returns"], ["replay"], ["normalize"]]),
    ("run surroundings", [["progress", "logger"], ["checkpoint"]]),
    ("cluster", [["cluster"]]),
    # The learning layer: losses, agent protocols, the actor-critic, encoders, metrics.
    ("learning layer", [["learning"]]),
    # The training scripts and the Ray schemes, both on the learning layer, unaware of each other.
    ("learners", [["algos", "cli"], ["distributed"]]),
]

GYMNASIUM_USERS = {
    # The gymnasium adapter and the tasks it registers.
    "rlstruct.gym_env",
    "rlstruct.gym_vector_env",
    "rlstruct.envs",
    # The algorithms make environments from gymnasium ids and record their frames; a Policy
    # reads an environment's raw observations by its observation space.
    "rlstruct.algos.evaluation",
    "rlstruct.algos.policy",
    "rlstruct.algos.recording",
}


@dataclass(frozen=True)
class Place:
    layer: int
    part: int

    def name(self) -> str:
        layer, parts = LAYERS[self.layer]
        return f"{layer} ({', '.join(parts[self.part])})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def place(module: str) -> Place | None:
    """Where ``module`` sits in ``LAYERS``; None for the package itself (the public facade)."""
    best: tuple[int, Place] | None = None
    for i, (_, parts) in enumerate(LAYERS):
        for j, names in enumerate(parts):
            for name in names:
                prefix = f"rlstruct.{name}"
                if (module == prefix or module.startswith(prefix + ".")) and (
                    best is None or len(prefix) > best[0]
                ):
                    best = (len(prefix), Place(i, j))
    if best is None:
        if module == "rlstruct":
            return None
        raise AssertionError(f"{module} is in no layer: add it to LAYERS (and to docs/concepts.md)")
    return best[1]


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def package_of(module: str) -> str:
    return module if is_package(module) else module.rpartition(".")[0]


@functools.cache
def parse(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))


@dataclass(frozen=True)
class Import:
    importer: str
    line: int
    target: str  # the rlstruct module imported, or that the name was imported from
    name: str | None  # the name imported from ``target``, for ``from target import name``
    alias: str | None = None  # the name it is bound to in ``importer`` (None for a plain ``import a.b``)


def imports(module: str, tree: ast.Module | None = None) -> list[Import]:
    """Every import of rlstruct's in ``module`` (or in ``tree``, its code), wherever it is written."""
    found = []
    for node in ast.walk(parse(module) if tree is None else tree):
        if isinstance(node, ast.Import):
            found += [Import(module, node.lineno, alias.name, None, alias.asname) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_of(module).split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule, bound = f"{source}.{alias.name}", alias.asname or alias.name
                if submodule in MODULES:
                    found.append(Import(module, node.lineno, submodule, None, bound))
                else:
                    found.append(Import(module, node.lineno, source, alias.name, bound))
    return [i for i in found if i.target == "rlstruct" or i.target.startswith("rlstruct.")]


def private_attributes(module: str) -> list[Import]:
    """``alias._name`` where ``alias`` is a module of rlstruct's imported by ``module``."""
    tree = ast.parse(MODULES[module].read_text())
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname})
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for a in node.names:
                if f"{node.module}.{a.name}" in MODULES:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return [
        Import(module, node.lineno, aliases[node.value.id], node.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in aliases
        and aliases[node.value.id].startswith("rlstruct")
        and is_private(node.attr)
    ]


def shares_privates(user: str, owner: str) -> bool:
    """Whether module ``user`` may use the private names of module ``owner``.

    A module's private names are its own, except that a private module (one
    with a ``_`` part in its dotted name), and everything in it, belongs to
    the package that holds it: ``rlstruct.batchers.local`` may use what
    ``rlstruct.batchers._group`` defines, private or not, but not the private
    names of ``rlstruct.batchers.process``.
    """
    if user == owner:
        return True
    parts = owner.split(".")
    first = next((i for i, part in enumerate(parts) if is_private(part)), None)
    if first is None:
        return False
    package = ".".join(parts[:first])
    return user == package or user.startswith(package + ".")


def reaches_into_privates(imp: Import) -> bool:
    """Whether ``imp`` uses a private name or module outside the module or package that owns it."""
    private = any(is_private(part) for part in imp.target.split(".")) or (
        imp.name is not None and is_private(imp.name)
    )
    return private and not shares_privates(imp.importer, imp.target)


# ---------------------------------------------------------------------------- private members of classes


def defined_private_members(tree: ast.Module) -> set[str]:
    """The private member names the classes of ``tree`` define.

    A member is defined by a method or nested class, a class-level assignment
    or annotation, a ``__slots__`` entry, or ``self._x = ...`` (``cls._x``) in
    the module's code.
    """
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(item.name)
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    for target in targets:
                        if isinstance(target, ast.Name):
                            names.add(target.id)
                            if target.id == "__slots__" and item.value is not None:
                                names |= {
                                    c.value
                                    for c in ast.walk(item.value)
                                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                                }
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {
                a.attr
                for target in targets
                for a in ast.walk(target)
                if isinstance(a, ast.Attribute)
                and isinstance(a.value, ast.Name)
                and a.value.id in ("self", "cls")
            }
    return {name for name in names if is_private(name)}


@functools.cache
def private_member_owners() -> Mapping[str, frozenset[str]]:
    """Each private member name of rlstruct's classes -> the modules that define it."""
    owners: dict[str, set[str]] = {}
    for module in MODULES:
        for name in defined_private_members(parse(module)):
            owners.setdefault(name, set()).add(module)
    return {name: frozenset(modules) for name, modules in owners.items()}


@functools.cache
def class_modules() -> Mapping[str, frozenset[str]]:
    """Each class name of rlstruct's -> the modules that define a class of that name at module level."""
    found: dict[str, set[str]] = {}
    for module in MODULES:
        for node in parse(module).body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, set()).add(module)
    return {name: frozenset(modules) for name, modules in found.items()}


def is_own_object(node: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: whose private members are the module's own."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def private_member_uses(module: str, tree: ast.Module | None = None) -> list[str]:
    """Where ``module`` (or ``tree``, its code) uses a private member of a class of another module.

    ``Class._x``, with ``Class`` imported from rlstruct, is named as such; for
    ``anything._x`` the checker cannot know the class, so it reports ``._x``
    when no class of ``module`` defines ``_x`` and every module that does
    keeps it private from ``module`` (see ``shares_privates``). A name that
    no class of rlstruct's defines (``torch._foreach_copy_``) is not rlstruct's.
    """
    tree = parse(module) if tree is None else tree
    own = defined_private_members(tree)
    owners = {name: modules - {module} for name, modules in private_member_owners().items()}
    classes: dict[str, str] = {}  # bound name -> the module that defines the class imported
    for imp in imports(module, tree):
        if imp.name is None or imp.alias is None or imp.name not in class_modules():
            continue
        defining = class_modules()[imp.name]
        classes[imp.alias] = imp.target if imp.target in defining else min(defining)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not is_private(node.attr) or is_own_object(node.value):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in classes:
            owner = classes[node.value.id]
            if not shares_privates(module, owner):
                found.append((node.lineno, f"{module} -> {node.value.id}.{node.attr} (line {node.lineno})"))
        elif (
            node.attr not in own
            and owners.get(node.attr)
            and not any(shares_privates(module, owner) for owner in owners[node.attr])
        ):
            where = ", ".join(sorted(owners[node.attr]))
            found.append((node.lineno, f"{module} -> .{node.attr} (line {node.lineno}), defined in {where}"))
    return [use for _, use in sorted(found)]


# ---------------------------------------------------------------------------- import cycles


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: the first line that does}, for every import between modules of rlstruct.

    ``from rlstruct.algos import X`` is an edge to the package ``rlstruct.algos``
    (its ``__init__`` runs). The parent packages that Python imports first are
    not edges: the package's ``__init__`` is already on its way by then.
    """
    graph: dict[str, dict[str, int]] = {module: {} for module in MODULES}
    for module in MODULES:
        for imp in imports(module):
            if imp.target in MODULES and imp.target != module:
                graph[module].setdefault(imp.target, imp.line)
    return graph


def cycles(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan), each starting at its smallest name."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    found = []
    for group in groups:  # the shortest way back to the group's first module, breadth first
        start = min(group)
        paths = {start: [start]}
        queue = [start]
        while queue:
            node = queue.pop(0)
            for nxt in sorted(graph.get(node, {})):
                if nxt == start:
                    found.append(paths[node])
                    queue = []
                    break
                if nxt in group and nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    queue.append(nxt)
    return sorted(found)


def describe_cycle(cycle: list[str], graph: Mapping[str, Mapping[str, int]]) -> str:
    steps = [f"{a} -> {b} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True)]
    return ", ".join(steps)


def wrong_way(imp: Import) -> str | None:
    """Why ``imp`` points the wrong way across the layers, or None."""
    here, there = place(imp.importer), place(imp.target)
    if here is None:  # the package's public facade imports from every layer
        return None
    if there is None:
        return "imports the package's facade (import from the module that defines the name)"
    if there.layer > here.layer:
        return f"up from layer {here.name()} to layer {there.name()}"
    if there.layer == here.layer and there.part != here.part:
        return f"sideways within layer {LAYERS[here.layer][0]}, from {here.name()} to {there.name()}"
    return None


def test_every_module_has_a_layer_and_every_entry_of_the_table_a_module() -> None:
    for module in MODULES:
        place(module)
    stale = [
        name for _, parts in LAYERS for names in parts for name in names if f"rlstruct.{name}" not in MODULES
    ]
    assert not stale, f"entries of LAYERS that name no module of rlstruct: {stale}"


def test_imports_point_down_the_layers() -> None:
    wrong = [
        f"{imp.importer} -> {imp.target} (line {imp.line}): {why}"
        for module in MODULES
        for imp in imports(module)
        if (why := wrong_way(imp)) is not None
    ]
    assert not wrong, "imports that do not point down the layers:\n" + "\n".join(wrong)


def test_no_module_imports_another_modules_private_names() -> None:
    wrong = [
        f"{imp.importer} -> {imp.target}{'.' + imp.name if imp.name else ''} (line {imp.line})"
        for module in MODULES
        for imp in imports(module) + private_attributes(module)
        if reaches_into_privates(imp)
    ]
    assert not wrong, "private names used outside their module or package:\n" + "\n".join(wrong)


def test_no_module_uses_the_private_members_of_another_modules_classes() -> None:
    wrong = [use for module in MODULES for use in private_member_uses(module)]
    assert not wrong, (
        "private members of classes used outside their module or package "
        "(give the fast path a public, documented name):\n" + "\n".join(wrong)
    )


def test_no_import_cycle_joins_modules_of_rlstruct() -> None:
    graph = import_graph()
    found = [describe_cycle(cycle, graph) for cycle in cycles(graph)]
    assert not found, "import cycles (imports inside functions count):\n" + "\n".join(found)


# rlstruct.cluster exports its reductions as sum, max and min (docs/cluster.md); nothing calls a builtin there.
PUBLIC_BUILTIN_NAMES = {"rlstruct.cluster": {"sum", "max", "min"}}


def test_no_module_shadows_a_builtin_at_module_level() -> None:
    """A later ``max(a, b)`` in such a module would call the module's function, not Python's."""
    wrong = []
    for module, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.asname or a.name.split(".")[0] for a in node.names]
            else:
                continue
            allowed = PUBLIC_BUILTIN_NAMES.get(module, set())
            wrong += [
                f"{module}: {name} (line {node.lineno})"
                for name in names
                if name in dir(builtins) and name not in allowed
            ]
    assert not wrong, "module-level names that shadow builtins:\n" + "\n".join(wrong)


def test_gymnasium_is_imported_only_by_its_adapter_and_the_algorithms() -> None:
    wrong = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            if any(n.split(".")[0] == "gymnasium" for n in names) and module not in GYMNASIUM_USERS:
                wrong.append(f"{module} -> gymnasium (line {node.lineno})")
    assert not wrong, "gymnasium imported outside the adapter:\n" + "\n".join(wrong)


def test_importing_rlstruct_imports_neither_gymnasium_nor_the_upper_layers() -> None:
    script = (
        "import sys, rlstruct; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'gymnasium' or m in "
        "('rlstruct.gym_env', 'rlstruct.envs', 'rlstruct.algos', 'rlstruct.cluster', 'rlstruct.distributed')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_gymenv_is_reached_through_rlstruct_and_registers_the_memory_tasks() -> None:
    script = (
        "import sys, rlstruct; "
        "env = rlstruct.GymEnv('CueMemory-v0', n_envs=1); env.close(); "
        "from rlstruct import GymEnv; "
        "import gymnasium; "
        "print(GymEnv is rlstruct.GymEnv, 'GymEnv' in dir(rlstruct), 'CartPoleNoVel-v1' in gymnasium.registry)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT, timeout=120
    )
    assert out.stdout.split() == ["True", "True", "True"]


@pytest.mark.parametrize(
    "imports",
    ["import rlstruct, gymnasium", "import gymnasium, rlstruct"],
    ids=["rlstruct first", "gymnasium first"],
)
def test_the_memory_tasks_are_gymnasium_ids_after_import_rlstruct(imports: str) -> None:
    script = (
        f"{imports}; import sys; "
        "env = gymnasium.make('CartPoleNoVel-v1'); "
        "print(env.observation_space.shape, 'CueMemory-v0' in gymnasium.registry, 'rlstruct.gym_env' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT, timeout=120
    )
    assert out.stdout.split() == ["(2,)", "True", "False"]


def test_an_unknown_attribute_of_rlstruct_is_an_attribute_error() -> None:
    import rlstruct

    with pytest.raises(AttributeError, match="module 'rlstruct' has no attribute 'NoSuchThing'"):
        rlstruct.NoSuchThing  # noqa: B018


# ---------------------------------------------------------------------------- the checker itself


def test_the_checker_names_an_upward_a_sideways_and_a_facade_import() -> None:
    up = Import("rlstruct.specs", 1, "rlstruct.dicttensor", "DictTensor")
    sideways = Import("rlstruct.agent", 1, "rlstruct.env", "Environment")
    facade = Import("rlstruct.returns", 1, "rlstruct", "DictTensor")
    down = Import("rlstruct.distributed.scheme", 1, "rlstruct.batchers", "cpu_weights")
    assert (
        wrong_way(up)
        == "up from layer leaves (specs) to layer structures (dicttensor, temporal, trajectories)"
    )
    assert wrong_way(sideways) == (
        "sideways within layer interfaces, from interfaces (agent, history) to interfaces (env, env_check, envs, gym_env, gym_vector_env, torch_env, torch_envs)"
    )
    assert wrong_way(facade) is not None
    assert wrong_way(down) is None


def test_the_checker_tells_private_names_of_a_package_from_those_of_another() -> None:
    assert not reaches_into_privates(
        Import("rlstruct.batchers.process", 1, "rlstruct.batchers._shared", "SharedBuffers")
    )
    assert not reaches_into_privates(Import("rlstruct.batchers.local", 1, "rlstruct.batchers._checks", None))
    assert reaches_into_privates(Import("rlstruct.distributed.scheme", 1, "rlstruct.algos.run", "_resumable"))
    assert reaches_into_privates(Import("rlstruct.algos.run", 1, "rlstruct.batchers._group", "Group"))
    assert reaches_into_privates(Import("rlstruct.batchers.local", 1, "rlstruct.batchers.process", "_x"))


def test_the_checker_names_a_private_member_of_another_modules_class_and_passes_its_own() -> None:
    code = ast.parse(
        "from rlstruct.dicttensor import DictTensor as DT\n"
        "class Mine:\n"
        "    def __init__(self, other):\n"
        "        self._x = DT._new({}, 0, None)\n"
        "        self._y = other._x, other._dtype_signature(), self._x, super()._z\n"
        "    def _helper(self, other):\n"
        "        return other._helper(), other._no_class_defines_this\n"
    )
    assert private_member_uses("rlstruct.returns", code) == [
        "rlstruct.returns -> DT._new (line 4)",
        "rlstruct.returns -> ._dtype_signature (line 5), defined in rlstruct.dicttensor",
    ]
    # the same code in the module that defines DictTensor uses nothing of another module's
    assert private_member_uses("rlstruct.dicttensor", code) == []


def test_the_checker_lets_a_package_use_the_private_members_of_its_private_modules() -> None:
    code = ast.parse("from rlstruct.batchers._group import Group\nGroup._write\nmystery._sources\n")
    assert private_member_uses("rlstruct.batchers.local", code) == []
    assert private_member_uses("rlstruct.algos.run", code) == [
        "rlstruct.algos.run -> Group._write (line 2)",
        "rlstruct.algos.run -> ._sources (line 3), defined in rlstruct.batchers._group",
    ]
    # a public module's private members stay its own, even within its package
    code = ast.parse("from rlstruct.batchers.local import LocalBatcher\nLocalBatcher._run\n")
    assert private_member_uses("rlstruct.batchers.process", code) == [
        "rlstruct.batchers.process -> LocalBatcher._run (line 2)"
    ]


def test_the_checker_finds_a_cycle_and_names_its_lines() -> None:
    graph = {"a": {"b": 3}, "b": {"c": 5}, "c": {"a": 7, "d": 1}, "d": {}, "e": {"a": 2}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert describe_cycle(["a", "b", "c"], graph) == "a -> b (line 3), b -> c (line 5), c -> a (line 7)"
    assert cycles({"a": {"b": 1}, "b": {"a": 2}, "c": {"c": 1}}) == [["a", "b"]]
    del graph["c"]["a"]
    assert cycles(graph) == []


def test_the_graph_counts_imports_inside_functions_and_of_a_packages_init() -> None:
    graph = import_graph()
    # a deferred import in cli.main, and ``from rlstruct.algos import ALGORITHMS`` (the package's __init__)
    assert "rlstruct.algos.saved" in graph["rlstruct.cli"]
    assert "rlstruct.algos" in graph["rlstruct.cli"]
    assert "rlstruct.algos.saved" in graph["rlstruct.algos"]
