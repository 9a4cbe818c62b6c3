"""The agent a training script trains: its own ``ActorCritic``, or the user's class named by ``config.agent``.

``config.agent`` names an ``Agent`` subclass as ``"module:Class"`` (the
module imported as Python imports it, from the working directory too) or
``"path/to/file.py:Class"`` (the file's folder joins ``sys.path``, so that
worker processes import it the same way); from Python it may also be the
class itself. The class is made with ``config.agent_args``, to which the
script adds, for each of ``ENV_ARGUMENTS`` that the constructor takes and
``agent_args`` does not give, the environment's value: a class with
``__init__(self, obs_dim, n_actions, hidden=64)`` gets ``obs_dim`` and
``n_actions`` from the environment and ``hidden`` from ``agent_args``.
The batchers' workers and the evaluator make their copies from those final
arguments; ``config.json`` keeps ``agent`` (as ``"module:Class"``) and
``agent_args`` as given, from which ``load_run`` makes the agent again.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rlstruct.agent import Agent
from rlstruct.algos.evaluation import EnvSpaces
from rlstruct.errors import AgentError, describe
from rlstruct.learning.actor_critic import ActorCritic
from rlstruct.learning.protocols import check_on_policy_agent

__all__ = [
    "ACTOR_CRITIC_FIELDS",
    "ENV_ARGUMENTS",
    "actor_critic_agent",
    "agent_class",
    "agent_name",
    "agent_observation_keys",
    "check_spaces",
    "observation_args",
    "on_policy_agent",
    "own_agent",
    "user_agent",
    "with_agent_name",
]

C = TypeVar("C")

ENV_ARGUMENTS = ("obs_dim", "n_actions", "action_low", "action_high", "action_nvec", "observation_spaces")
"""The constructor arguments a script fills in from the environment (``EnvSpaces``) when the class takes them.

``observation_spaces`` is ``EnvSpaces.observation`` (every key and its
``ObservationSpace``: what ``ObservationEncoder`` takes); the others are the
fields of ``EnvSpaces`` of the same name: ``n_actions`` for a ``Discrete``
action space, ``action_low`` and ``action_high`` for a ``Box``,
``action_nvec`` (the number of choices of each component, a list of ints)
for a ``MultiDiscrete`` or ``MultiBinary``, and None for the others.
"""


def actor_critic_agent(config: Any, spaces: EnvSpaces, **extra: Any) -> tuple[ActorCritic, dict[str, Any]]:
    """The ``ActorCritic`` an algorithm's config asks for on an environment of ``spaces``, and its arguments.

    Args:
        config: a config with ``hidden`` (units of both hidden layers),
            ``recurrent``, ``memory`` and ``normalize``.
        spaces: the environment's spaces (``env_spaces``).
        **extra: more ``ActorCritic`` arguments (PPO's ``orthogonal``).

    Returns:
        ``(ActorCritic(**agent_args), agent_args)``: a new agent on the CPU,
        initialised from torch's global generator, and the arguments that
        make its copies (the batchers') and rebuild it (``load_run``). A
        flat observation is given as ``obs_dim``; any other (discrete keys,
        several keys, images) as ``observation_spaces``, which the agent
        encodes (``ObservationEncoder``). ``action_nvec`` is among the
        arguments only for multi-discrete actions.
    """
    agent_args: dict[str, Any] = {
        **observation_args(spaces),
        "n_actions": spaces.n_actions,
        "action_low": spaces.action_low,
        "action_high": spaces.action_high,
        **({"action_nvec": spaces.action_nvec} if spaces.action_nvec is not None else {}),
        "hidden": (config.hidden, config.hidden),
        "recurrent": config.recurrent,
        "memory": config.memory,
        "normalize": config.normalize,
        **extra,
    }
    return ActorCritic(**agent_args), agent_args


ACTOR_CRITIC_FIELDS = ("hidden", "recurrent", "memory", "normalize")
"""The config fields only the built-in ``ActorCritic`` reads (``make_actor_critic``): an agent of your own
(``--agent``) is not given the tuned settings of these."""


def observation_args(spaces: EnvSpaces) -> dict[str, Any]:
    """How a built-in network is told its observation: ``obs_dim`` for one flat box, else ``observation_spaces``."""
    return {"obs_dim": spaces.obs_dim} if spaces.flat else {"observation_spaces": spaces.observation}


def agent_name(agent: str | type[Agent]) -> str:
    """``"module:Class"`` for an Agent class (what config.json keeps), or the name as given."""
    if isinstance(agent, str):
        return agent
    return f"{agent.__module__}:{agent.__qualname__}"


def agent_class(name: str | type[Agent]) -> type[Agent]:
    """The ``Agent`` subclass ``name`` names (``"module:Class"`` or ``"path/file.py:Class"``), or ``name`` itself.

    Raises:
        AgentError: (a ValueError and a TypeError) for a name without ``:``,
            a module or file that cannot be imported, no attribute of that
            name in it, or something that is not an ``Agent`` subclass; the
            message names ``config.agent`` (``--agent``) and what was given.
    """
    if not isinstance(name, str):
        cls: object = name
    else:
        module_name, colon, attribute = name.partition(":")
        if not colon or not module_name or not attribute:
            raise AgentError(
                f"config.agent (--agent) must be 'module:Class' or 'path/to/file.py:Class', got {name!r}"
            )
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            if not path.is_file():
                raise AgentError(f"config.agent (--agent): no file {module_name!r} (from {name!r})")
            folder, module_name = str(path.parent), path.stem
        else:
            folder = str(Path.cwd())
        if folder not in sys.path:
            sys.path.insert(0, folder)  # spawned workers get the parent's sys.path
        try:
            module = importlib.import_module(module_name)
        except Exception as error:  # not found, or the module's own code failed (a SyntaxError, a raise)
            raise AgentError(
                f"config.agent (--agent): cannot import {module_name!r} ({type(error).__name__}: {error})"
            ) from error
        cls = module
        for part in attribute.split("."):
            if not hasattr(cls, part):
                hint = (  # a run trained from a script, loaded elsewhere
                    " (a class of the script that trained the run: define it in a module to rebuild it)"
                    if module_name == "__main__"
                    else ""
                )
                raise AgentError(f"config.agent (--agent): module {module_name!r} has no {attribute!r}{hint}")
            cls = getattr(cls, part)
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        got = f"the class {cls.__module__}.{cls.__qualname__}" if isinstance(cls, type) else describe(cls)
        raise AgentError(f"config.agent (--agent) must name an rlstruct.Agent subclass, got {got}")
    return cls


def user_agent(
    cls: type[Agent], agent_args: dict[str, Any] | None, spaces: EnvSpaces
) -> tuple[Agent, dict[str, Any]]:
    """``cls(**args)`` and ``args``: ``agent_args`` plus the ``ENV_ARGUMENTS`` the constructor takes.

    A constructor that takes ``obs_dim`` and ``observation_spaces`` both
    defaulting to None takes one or the other (as the library's networks
    do): it gets ``observation_spaces`` alone, or ``obs_dim`` alone if
    ``agent_args`` gives it.

    Raises:
        AgentError: if ``agent_args`` is not a dict, or the constructor
            refuses the arguments (its message, with the class's name; when
            an action argument it got is None, with the environment's kind
            of actions and the argument that carries them).
    """
    if agent_args is not None and not isinstance(agent_args, dict):
        raise AgentError(
            f"config.agent_args must be a dict (a JSON object on the command line), got {agent_args!r}"
        )
    args = dict(agent_args or {})
    takes = inspect.signature(cls).parameters
    given = {
        **{name: getattr(spaces, name) for name in ENV_ARGUMENTS if name != "observation_spaces"},
        "observation_spaces": spaces.observation,
    }
    either = all(name in takes and takes[name].default is None for name in ("obs_dim", "observation_spaces"))
    for name in ENV_ARGUMENTS:
        if name in takes and name not in args:
            args[name] = given[name]
    chosen = set(agent_args or {}) & {"obs_dim", "observation_spaces"}
    if (
        either and len(chosen) < 2
    ):  # one or the other (the library's networks): the one given, else the spaces
        del args["observation_spaces" if "obs_dim" in chosen else "obs_dim"]
    try:
        agent = cls(**args)
    except (TypeError, ValueError, RuntimeError) as error:  # what a constructor refusing its arguments raises
        raise AgentError(
            f"config.agent: {cls.__name__}(**{args!r}) failed: {error}{_unfit_actions(args, agent_args, spaces)}"
        ) from error
    return agent, args


def _unfit_actions(args: dict[str, Any], agent_args: dict[str, Any] | None, spaces: EnvSpaces) -> str:
    """Why an action argument the script gave is None (the environment's actions are of another kind), or ""."""
    unset = [
        name
        for name in ("n_actions", "action_low", "action_high", "action_nvec")
        if name in args and args[name] is None and name not in (agent_args or {})
    ]
    if not unset:
        return ""
    if spaces.n_actions is not None:
        kind, given = f"discrete (Discrete({spaces.n_actions}))", "n_actions"
    elif spaces.action_nvec is not None:
        kind, given = f"multi-discrete (nvec {spaces.action_nvec})", "action_nvec"
    else:
        kind, given = "continuous (Box)", "action_low and action_high"
    return (
        f" ({' and '.join(unset)} {'is' if len(unset) == 1 else 'are'} None: config.env's actions are {kind}, "
        f"which a constructor receives as {given})"
    )


def with_agent_name(config: C) -> C:
    """``config`` with an Agent class in ``agent`` replaced by its ``"module:Class"`` (what config.json keeps)."""
    agent = getattr(config, "agent", None)
    if agent is None or isinstance(agent, str):
        return config
    agent_class(agent)  # an Agent subclass, or a TypeError naming config.agent
    return dataclasses.replace(config, agent=agent_name(agent))  # type: ignore[type-var]


def named_agent(config: Any, learner: str | None = None) -> type[Agent] | None:
    """The class ``config.agent`` names, or None when it names none (and then ``config.agent_args`` must be None).

    Raises:
        AgentError: see ``agent_class``; or for ``agent_args`` given without an agent.
    """
    if config.agent is None:
        if config.agent_args is not None:
            raise AgentError(
                f"{learner + ': ' if learner else ''}config.agent_args (--agent-args) is for the agent --agent "
                f"names, and no agent is named; got agent_args={config.agent_args!r}"
            )
        return None
    return agent_class(config.agent)


def check_spaces(spaces: object, learner: str) -> None:
    """Raise a TypeError unless ``spaces``, the second argument of ``make_agent(config, spaces)``, is an ``EnvSpaces``.

    Raises:
        TypeError: naming ``spaces``, what it must be (what
            ``env_spaces(config.env)`` returns) and what was given.
    """
    if not isinstance(spaces, EnvSpaces):
        raise TypeError(
            f"{learner}: make_agent's spaces must be an EnvSpaces (what "
            f"rlstruct.algos.evaluation.env_spaces(config.env) returns), got {describe(spaces)}"
        )


def own_agent(
    config: Any, spaces: EnvSpaces, learner: str, check: Callable[[object, str], None]
) -> tuple[Agent, dict[str, Any]] | None:
    """``config.agent``'s class made with ``config.agent_args`` and ``check``-ed, or None when it is not set.

    Args:
        config: a config with ``agent`` and ``agent_args``.
        spaces: the environment's spaces, for ``ENV_ARGUMENTS``.
        learner: the learner's name, for the messages.
        check: raises ``AgentError`` for an agent the learner cannot train
            (``check_on_policy_agent``, ``check_q_agent``, ``check_sac_agent``).

    Raises:
        AgentError: see ``agent_class``, ``user_agent`` and ``check``.
    """
    cls = named_agent(config, learner)
    if cls is None:
        return None
    agent, args = user_agent(cls, config.agent_args, spaces)
    check(agent, learner)
    return agent, args


def on_policy_agent(
    config: Any, spaces: EnvSpaces, learner: str, **extra: Any
) -> tuple[Agent, dict[str, Any]]:
    """The agent an on-policy script (A2C, PPO, IMPALA) trains, and its arguments.

    ``config.agent``'s class made with ``config.agent_args`` (``user_agent``)
    and checked to speak ``OnPolicyAgent`` when set, else
    ``actor_critic_agent(config, spaces, **extra)``.

    Raises:
        AgentError: for an agent ``learner`` cannot train (see ``agent_class``,
            ``user_agent`` and ``check_on_policy_agent``).
    """
    own = own_agent(config, spaces, learner, check_on_policy_agent)
    return actor_critic_agent(config, spaces, **extra) if own is None else own


def agent_observation_keys(agent: object, spaces: EnvSpaces) -> tuple[str, ...]:
    """The observation keys ``agent`` reads: its ``observation_keys`` if it names them, else every key of ``spaces``.

    What an off-policy learner stores of each step, and hands to the
    agent's ``q_values``, ``sample`` and critics.
    """
    keys = getattr(agent, "observation_keys", None)
    if keys is None:
        return tuple(sorted(spaces.observation))
    return tuple(keys)
