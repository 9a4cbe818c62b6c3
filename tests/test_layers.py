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
private names).
"""

from __future__ import annotations

import ast
import builtins
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rlstruct"

LAYERS: list[tuple[str, list[list[str]]]] = [
    # Structures: pure torch. Its leaves import nothing of rlstruct's.
    ("leaves", [["errors"], ["specs"], ["seeding"]]),
    # The argument checks every layer above shares, on errors' describe.
    ("checks", [["checks"]]),
    ("structures", [["dicttensor", "temporal", "trajectories"]]),
    # Interfaces: agents, and environments with the gymnasium adapter, unaware of each other.
    ("interfaces", [["agent", "history"], ["env", "envs", "gym_env"]]),
    # Batchers, and the hand-checkable agents and environments that test them and learners.
    ("batchers", [["batchers"], ["testing"]]),
    # Learning blocks: pure maths, replay buffers, normalisers.
    ("learning", [["returns"], ["replay"], ["normalize"]]),
    ("run surroundings", [["progress", "logger"], ["checkpoint"]]),
    ("algorithms", [["algos", "cli"]]),
    ("cluster", [["cluster"]]),
    ("distributed", [["distributed"]]),
]

GYMNASIUM_USERS = {
    # The gymnasium adapter and the tasks it registers.
    "rlstruct.gym_env",
    "rlstruct.envs",
    # The algorithms make environments from gymnasium ids and record their frames.
    "rlstruct.algos.evaluation",
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


@dataclass(frozen=True)
class Import:
    importer: str
    line: int
    target: str  # the rlstruct module imported, or that the name was imported from
    name: str | None  # the name imported from ``target``, for ``from target import name``


def imports(module: str) -> list[Import]:
    """Every import of rlstruct's in ``module``, wherever it is written."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(module, node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_of(module).split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in MODULES:
                    found.append(Import(module, node.lineno, submodule, None))
                else:
                    found.append(Import(module, node.lineno, source, alias.name))
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


def reaches_into_privates(imp: Import) -> bool:
    """Whether ``imp`` uses a private name or module outside the module or package that owns it."""
    parts = imp.target.split(".")
    first = next((i for i, part in enumerate(parts) if is_private(part)), None)
    if first is not None:  # a private module, and its names, belong to the package that holds it
        owner = ".".join(parts[:first])
        return not (imp.importer == owner or imp.importer.startswith(owner + "."))
    return imp.name is not None and is_private(imp.name)


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
        "sideways within layer interfaces, from interfaces (agent, history) to interfaces (env, envs, gym_env)"
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
