"""check_env: drive an ``Environment`` through its contract and name every rule it breaks.

``check_env(env)`` resets the environment and steps it with random valid
actions, first in episodic mode (``auto_reset=False``), then in auto-reset
mode (``auto_reset=True``), and checks every result against the contract
written in ``rlstruct.env``:

| rule | where |
|---|---|
| a DictTensor of ``n_envs`` rows, every key on the environment's ``device`` (the CPU unless it says otherwise) | every result |
| the keys of ``REQUIRED_KEYS``, one value per row: ``reward`` of a floating dtype, the others bool | every result |
| ``done`` equals ``terminated \\| truncated`` | every result |
| the same keys, dtypes and per-row shapes as the first observation | every result |
| ``initial_state`` True, ``reward`` 0, ``terminated``, ``truncated`` and ``done`` False | ``reset`` |
| ``step`` returns the pair ``(reached, observation)``; ``initial_state`` False in ``reached`` | ``step`` |
| ``observation`` is ``reached`` itself | episodic ``step`` |
| a finished row repeats its final observation, ``reward`` 0 and ``done`` True, until ``reset`` | episodic ``step`` |
| ``observation`` equals ``reached`` except in the rows that auto-reset (``done`` True in ``reached``), which hold ``initial_state`` True, ``reward`` 0, ``done`` False | auto-reset ``step`` |
| ``step_into`` writes what ``step`` returns, into every key, through strided views | auto-reset, when overridden |

``step_into`` is checked when the environment's class overrides it where
batchers would call it (in the class that defines ``step`` or below). From the
second auto-reset step on, a deep copy of the environment (``copy.deepcopy``)
is stepped through ``step_into`` while the environment itself is stepped
through ``step``, with the same actions and the same global random states
(torch, numpy, ``random``): the arrays must then hold exactly what ``step``
returned, in every cell (each array is filled beforehand with values that
differ from it, so a cell left unwritten shows). An environment that cannot
be deep-copied (it holds a process or an open file) has the results of its
``step_into`` checked by the rules of the table instead.

Each broken rule is reported once, at the first step that broke it, with how
many more times it was broken. A call of the environment that raises is
reported too, with its exception, and ends the mode it happened in (the first
such exception is the ``__cause__`` of the error raised).

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor, check_env
    >>> from rlstruct.testing import CounterEnv
    >>> check_env(CounterEnv(n_envs=2), action=DictTensor({"action": torch.zeros(2, dtype=torch.int64)}))
"""

from __future__ import annotations

import contextlib
import copy
import random
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rlstruct.checks import check_device, check_int
from rlstruct.dicttensor import DictTensor
from rlstruct.env import REQUIRED_KEYS, Environment, writes_in_place
from rlstruct.errors import describe

__all__ = ["EnvironmentCheckError", "check_env"]

Action = DictTensor | Callable[[DictTensor], DictTensor]
"""What ``check_env`` steps an environment with: a fixed action, or a function of the observation."""

_DTYPES = {
    "reward": torch.float32,
    "terminated": torch.bool,
    "truncated": torch.bool,
    "done": torch.bool,
    "initial_state": torch.bool,
}
"""The dtype of each key of ``REQUIRED_KEYS``."""

_SHOWN_ROWS = 8
"""A message lists at most this many rows, then ``...``."""


class EnvironmentCheckError(ValueError):
    """An environment that breaks the contract of ``rlstruct.env``, with every rule it broke.

    The message is one line naming the environment's class and the number of
    problems, then one line per problem.

    Attributes:
        environment: the name of the environment's class.
        problems: one message per broken rule, in the order they were found:
            where (``reset`` or ``step t``, the mode, ``reached`` or
            ``observation``), the key, what was expected and what was received.
    """

    def __init__(self, environment: str, problems: list[str]) -> None:
        count = f"{len(problems)} way{'s' if len(problems) > 1 else ''}"
        lines = "\n".join(f"- {problem}" for problem in problems)
        super().__init__(f"{environment} breaks the Environment contract (rlstruct.env) in {count}:\n{lines}")
        self.environment = environment
        self.problems = problems

    def __reduce__(self) -> tuple[type[EnvironmentCheckError], tuple[str, list[str]]]:
        return type(self), (self.environment, self.problems)


def check_env(
    env: Environment,
    env_info: DictTensor | None = None,
    *,
    action: Action | None = None,
    n_steps: int = 300,
    seed: int = 0,
) -> None:
    """Run ``env`` through the contract of ``rlstruct.env`` in both modes; raise if it breaks a rule.

    The environment is reset with ``env_info`` and stepped ``n_steps`` times
    in episodic mode (fewer if every instance has finished: one more step then
    checks that they stay finished), then reset and stepped ``n_steps`` times
    in auto-reset mode; the rules are listed in the module docstring of
    ``rlstruct.env_check``. Rules about the end of an episode are checked
    only if an episode ends within ``n_steps``. The environment is left reset
    and stepped, not closed.

    Args:
        env: the environment to check.
        env_info: w, one row per instance (``env.n_envs`` rows); None gives
            ``DictTensor(batch_size=env.n_envs)``, no keys.
        action: what to step with. None draws random actions from the
            environment's ``action_space`` (a gymnasium space, read after the
            first reset, as ``GymEnv`` has it; a seeded copy samples one
            action per instance). Otherwise a DictTensor of ``n_envs`` rows
            holding the key ``action``, used at every step, or a function
            that takes the observation the agent acts on and returns one.
        n_steps: the steps taken in each mode; ``step_into`` is compared from
            the second auto-reset step on, so it needs at least 2.
        seed: seeds the random actions drawn from ``action_space``.

    Raises:
        EnvironmentCheckError: (a ValueError) if ``env`` breaks any rule; its
            ``problems`` list every rule broken.
        TypeError: if ``env`` is not an ``Environment``, ``env_info`` not a
            DictTensor, ``n_steps`` or ``seed`` not an int, or ``action`` is
            None for an environment without an ``action_space`` (or neither
            a DictTensor nor a callable), or returns something else than a
            DictTensor.
        ValueError: if ``env_info`` or an action does not have ``n_envs``
            rows, an action lacks the key ``action``, ``n_steps`` is below 1
            or ``seed`` below 0.

    Examples:
        >>> import torch
        >>> from rlstruct import DictTensor
        >>> from rlstruct.testing import CounterEnv
        >>> class IntReward(CounterEnv):  # a reward of the wrong dtype
        ...     def step(self, action):
        ...         reached, observation = super().step(action)
        ...         reached.set("reward", reached["reward"].long())
        ...         return reached, observation
        >>> zeros = DictTensor({"action": torch.zeros(2, dtype=torch.int64)})
        >>> check_env(CounterEnv(n_envs=2), action=zeros)  # quiet: the contract holds
        >>> try:
        ...     check_env(IntReward(n_envs=2), action=zeros, n_steps=3)
        ... except EnvironmentCheckError as error:
        ...     print(error)
        IntReward breaks the Environment contract (rlstruct.env) in 1 way:
        - step 1 (auto_reset=False), reached: key 'reward' must have a floating dtype (float32 unless the environment chooses another), got torch.int64 (and 5 more times)
    """
    if not isinstance(env, Environment):
        hint = ""
        gym = sys.modules.get("gymnasium")  # not imported here: a gymnasium environment means it was
        if gym is not None and isinstance(env, (gym.Env, gym.vector.VectorEnv)):
            hint = "; wrap a gymnasium environment's id or maker in rlstruct.GymEnv (or GymVectorEnv)"
        raise TypeError(f"check_env: env must be an rlstruct Environment, got {describe(env)}{hint}")
    n_steps = check_int("check_env", "n_steps", n_steps, 1)
    seed = check_int("check_env", "seed", seed, 0)
    n = getattr(env, "n_envs", None)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        got = repr(n) if isinstance(n, int) else describe(n)
        problem = f"n_envs (the number of instances) must be a positive int, got {got}"
        raise EnvironmentCheckError(type(env).__name__, [problem])
    declared = getattr(env, "device", "cpu")
    try:
        device = check_device("check_env", declared)
    except (TypeError, ValueError):
        got = repr(declared) if isinstance(declared, str) else describe(declared)
        problem = f"device (where its observations are) must be a torch.device or its name, got {got}"
        raise EnvironmentCheckError(type(env).__name__, [problem]) from None
    if env_info is None:
        env_info = DictTensor(batch_size=n)
    if not isinstance(env_info, DictTensor):
        raise TypeError(f"check_env: env_info must be a DictTensor, got {describe(env_info)}")
    if env_info.n_elems() != n:
        raise ValueError(f"check_env: env_info must have {n} rows (env.n_envs), got {env_info.n_elems()}")
    if action is not None and not (isinstance(action, DictTensor) or callable(action)):
        raise TypeError(
            f"check_env: action must be a DictTensor, a function of the observation or None, "
            f"got {describe(action)}"
        )
    if isinstance(action, DictTensor):
        _check_action(action, n)
    checker = _Checker(env, n, env_info, action, seed, device)
    try:
        checker.run(n_steps)
    finally:
        checker.close()
    if checker.problems:
        error = EnvironmentCheckError(type(env).__name__, checker.problems.messages())
        raise error from checker.raised


# ---------------------------------------------------------------------- the checker


class _Problems:
    """The problems found: one message per rule, the first time it is broken, and how often after.

    A rule is named by a tuple: what it checks, the key, and the result it is
    checked on (``reset``, ``reached``, ``observation``...).
    """

    def __init__(self) -> None:
        self._found: dict[tuple[str, ...], list[Any]] = {}

    def __bool__(self) -> bool:
        return bool(self._found)

    def add(self, rule: tuple[str, ...], message: str) -> None:
        if rule in self._found:
            self._found[rule][1] += 1
        else:
            self._found[rule] = [message, 0]

    def messages(self) -> list[str]:
        return [
            message + (f" (and {k} more time{'s' if k > 1 else ''})" if k else "")
            for message, k in self._found.values()
        ]


class _ModeEnds(Exception):
    """The environment raised, or returned nothing to act on: the mode being checked ends there."""


class _Checker:
    """One run of ``check_env``: the environment, its actions, and the problems found so far."""

    def __init__(
        self,
        env: Environment,
        n: int,
        env_info: DictTensor,
        action: Action | None,
        seed: int,
        device: torch.device,
    ) -> None:
        self.env, self.n, self.env_info = env, n, env_info
        self.device = device
        self.problems = _Problems()
        self.raised: BaseException | None = None  # the first exception the environment raised
        self._given_action = action
        self._seed = seed
        self._draw: Callable[[DictTensor], DictTensor] | None = None
        # key -> (dtype, shape of a row), from the first observation, and where that was
        self._layout: dict[str, tuple[torch.dtype, tuple[int, ...]]] | None = None
        self._layout_from = ""
        self._twin: Environment | None = None  # the deep copy stepped through step_into

    def run(self, n_steps: int) -> None:
        for mode in (self._episodic, self._auto_reset):
            with contextlib.suppress(_ModeEnds):
                mode(n_steps)

    def close(self) -> None:
        """Close the deep copy, if one was made (never the environment itself)."""
        if self._twin is not None:
            self._twin.close()

    # ------------------------------------------------------------------ the two modes

    def _episodic(self, n_steps: int) -> None:
        mode = "auto_reset=False"
        observation = self._reset(mode)
        previous: DictTensor | None = None  # the last reached, when its values could be read
        for t in range(1, n_steps + 1):
            all_finished = previous is not None and bool(previous["done"].all())
            where = f"step {t} ({mode})"
            reached, following = self._step(where, self._action(observation))
            usable = self._check_batch(where, "reached", reached)
            if not isinstance(reached, DictTensor):
                raise _ModeEnds
            if following is not reached:
                difference = _difference(following, reached)
                if difference:
                    self.problems.add(
                        ("episodic observation",),
                        f"{where}: observation must be reached itself in episodic mode; {difference}",
                    )
            if usable:
                self._check_not_initial(where, reached)
                if previous is not None:
                    self._check_finished_rows(where, previous, reached)
            previous = reached.clone() if usable else None
            observation = reached
            if all_finished:
                return

    def _auto_reset(self, n_steps: int) -> None:
        mode = "auto_reset=True"
        observation = self._reset(mode)
        into = writes_in_place(type(self.env))
        for t in range(1, n_steps + 1):
            where = f"step {t} ({mode})"
            action = self._action(observation)
            before = _global_random_states() if self._twin is not None else None
            reached, following = self._step(where, action)
            usable = self._check_auto_step(where, reached, following)
            if self._twin is not None and before is not None and usable:
                after = _global_random_states()
                _set_global_random_states(before)  # the copy draws what the environment drew
                self._compare_step_into(self._twin, t, action, reached, following)
                _set_global_random_states(after)
            if not isinstance(following, DictTensor):
                raise _ModeEnds
            if into and t == 1:
                self._twin = _deep_copy(self.env)
                if self._twin is None and n_steps > 1:
                    self._step_into_by_the_rules(following, n_steps)
                    return
            observation = following

    def _step_into_by_the_rules(self, observation: DictTensor, n_steps: int) -> None:
        """Steps 2 to ``n_steps`` through ``step_into``, for an environment that cannot be copied.

        The results are checked by the rules of an auto-reset step, since
        there is no ``step`` of an identical environment to compare them with.
        """
        layout = self._layout or {}
        for t in range(2, n_steps + 1):
            where = f"step_into at step {t} (auto_reset=True)"
            action = self._action(observation)
            try:
                reached_arrays, observation_arrays = _storage(layout, self.n), _storage(layout, self.n)
            except TypeError as error:  # a dtype numpy has not (bfloat16)
                self.problems.add(
                    ("numpy",), f"{where}: the arrays step_into writes into cannot be made: {error}"
                )
                return
            self._call(where, self.env.step_into, action, reached_arrays, observation_arrays)
            device = self.device  # what step_into wrote, checked as if the environment had returned it
            reached = DictTensor(
                {k: torch.from_numpy(v.copy()).to(device) for k, v in reached_arrays.items()}
            )
            observation = DictTensor(
                {k: torch.from_numpy(v.copy()).to(device) for k, v in observation_arrays.items()}
            )
            self._check_auto_step(where, reached, observation)

    # ------------------------------------------------------------------ calls

    def _call(self, where: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``method(*args, **kwargs)``; if the environment raises, the problem is noted and the mode ends."""
        try:
            return method(*args, **kwargs)
        except Exception as error:
            self.problems.add(("raised", where), f"{where}: raised {type(error).__name__}: {error}")
            if self.raised is None:
                self.raised = error
            raise _ModeEnds from error

    def _reset(self, mode: str) -> DictTensor:
        where = f"reset({mode})"
        observation = self._call(where, self.env.reset, self.env_info, auto_reset=mode == "auto_reset=True")
        if self._check_batch(where, "reset", observation):
            every = torch.ones(self.n, dtype=torch.bool, device=observation["done"].device)
            self._check_first(where, observation, every, "reset")
        if not isinstance(observation, DictTensor):
            raise _ModeEnds
        return observation

    def _step(self, where: str, action: DictTensor) -> tuple[Any, Any]:
        result = self._call(where, self.env.step, action)
        if not (isinstance(result, tuple) and len(result) == 2):
            length = f" of length {len(result)}" if isinstance(result, (tuple, list)) else ""
            self.problems.add(
                ("pair",),
                f"{where}: step must return the pair (reached, observation), got {describe(result)}{length}",
            )
            raise _ModeEnds
        return result[0], result[1]

    def _action(self, observation: DictTensor) -> DictTensor:
        if self._draw is None:
            self._draw = self._action_source()
        action = self._draw(observation)
        _check_action(action, self.n)
        return action

    def _action_source(self) -> Callable[[DictTensor], DictTensor]:
        """What draws the actions: ``action`` as given, else a seeded copy of ``env.action_space``."""
        given = self._given_action
        if isinstance(given, DictTensor):
            return lambda observation: given
        if given is not None:
            return given
        space: Any = getattr(self.env, "action_space", None)
        if not (hasattr(space, "sample") and hasattr(space, "seed")):
            raise TypeError(
                f"check_env: action is needed, since {type(self.env).__name__} has no action_space to draw "
                f"random actions from (got {describe(space)}): pass a DictTensor of {self.n} rows holding "
                "the key 'action', or a function of the observation that returns one"
            )
        space = copy.deepcopy(space)  # seeded here, the environment's own space untouched
        space.seed(self._seed)
        n, device = self.n, self.device
        return lambda observation: DictTensor(
            {"action": torch.from_numpy(np.stack([np.asarray(space.sample()) for _ in range(n)])).to(device)}
        )

    # ------------------------------------------------------------------ rules

    def _check_batch(self, where: str, kind: str, batch: Any) -> bool:
        """The rules of every result; whether its values can be read by the rules that follow."""
        problems, n = self.problems, self.n
        if kind != "reset":
            where = f"{where}, {kind}"
        if not isinstance(batch, DictTensor):
            problems.add(("type", kind), f"{where}: expected a DictTensor, got {describe(batch)}")
            return False
        usable = True
        missing = [key for key in REQUIRED_KEYS if key not in batch]
        if missing:
            problems.add(
                ("missing", kind, *missing),
                f"{where}: lacks the key{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}; "
                f"every observation holds {', '.join(REQUIRED_KEYS)} (rlstruct.env.REQUIRED_KEYS), "
                f"got keys {list(batch.keys())}",
            )
            usable = False
        if batch.n_elems() != n:
            problems.add(
                ("rows", kind),
                f"{where}: must have {n} rows (n_envs, one per instance), got {batch.n_elems()}",
            )
            return False
        for key, value in batch.items():
            if value.dim() == 0 or value.shape[0] != n:
                problems.add(
                    ("rows", kind, key),
                    f"{where}: key {key!r} must have {n} rows (n_envs), got shape {list(value.shape)}",
                )
                usable = False
            if not _on(value.device, self.device):
                problems.add(
                    ("device", kind, key),
                    f"{where}: key {key!r} must be on {_device_name(self.device)}, got device {value.device}",
                )
                usable = False
        for key, dtype in _DTYPES.items():
            if key not in batch:
                continue
            value = batch[key]
            if key == "reward" and not value.dtype.is_floating_point:
                problems.add(
                    ("dtype", kind, key),
                    f"{where}: key 'reward' must have a floating dtype (float32 unless the environment "
                    f"chooses another), got {value.dtype}",
                )
                usable = False
            elif key != "reward" and value.dtype != dtype:
                problems.add(
                    ("dtype", kind, key), f"{where}: key {key!r} must have dtype {dtype}, got {value.dtype}"
                )
                usable = False
            if tuple(value.shape) != (n,):
                problems.add(
                    ("shape", kind, key),
                    f"{where}: key {key!r} must have shape [{n}] (one value per row), got {list(value.shape)}",
                )
                usable = False
        self._check_layout(where, kind, batch)
        if usable:
            done, either = batch["done"], batch["terminated"] | batch["truncated"]
            wrong = done != either
            if wrong.any():
                problems.add(
                    ("done", kind),
                    f"{where}: done must equal terminated | truncated; in rows {_rows(wrong)} done is "
                    f"{_values(done, wrong)}, terminated | truncated is {_values(either, wrong)}",
                )
        return usable

    def _check_layout(self, where: str, kind: str, batch: DictTensor) -> None:
        """The same keys, dtypes and per-row shapes as the first observation."""
        layout = {key: (value.dtype, tuple(value.shape[1:])) for key, value in batch.items()}
        if self._layout is None:
            self._layout, self._layout_from = layout, where
            return
        first = self._layout_from
        for key, (dtype, shape) in self._layout.items():
            if key not in layout:
                if key not in REQUIRED_KEYS:  # a missing required key is reported as such
                    self.problems.add(
                        ("key gone", kind, key), f"{where}: key {key!r} is missing; it was there at {first}"
                    )
                continue
            got_dtype, got_shape = layout[key]
            # a required key's wrong dtype is reported as such; reward may be any float, the same one throughout
            floats = dtype.is_floating_point and got_dtype.is_floating_point
            if got_dtype != dtype and (key not in _DTYPES or (key == "reward" and floats)):
                self.problems.add(
                    ("dtype changed", kind, key),
                    f"{where}: key {key!r} has dtype {got_dtype}, but {dtype} at {first}; "
                    "dtypes must stay the same at every step",
                )
            if got_shape != shape:
                self.problems.add(
                    ("shape changed", kind, key),
                    f"{where}: key {key!r} has shape {list(got_shape)} per row, but {list(shape)} at "
                    f"{first}; shapes must stay the same at every step",
                )
        extra = [key for key in layout if key not in self._layout]
        if extra:
            self.problems.add(
                ("key new", kind, *extra),
                f"{where}: key{'s' if len(extra) > 1 else ''} {', '.join(map(repr, extra))} "
                f"{'were' if len(extra) > 1 else 'was'} not there at {first}; the keys must stay the same "
                "at every step",
            )

    def _check_first(self, where: str, observation: DictTensor, rows: torch.Tensor, kind: str) -> None:
        """``rows`` hold first observations: initial_state True, reward 0, done and its parts False."""
        wrong = []
        for key, expected in (
            ("initial_state", True),
            ("reward", 0),
            ("done", False),
            ("terminated", False),
            ("truncated", False),
        ):
            off = rows & (observation[key] != expected)
            if off.any():
                wrong.append(f"{key} {_values(observation[key], off)} in rows {_rows(off)}")
        if wrong:
            self.problems.add(
                ("first", kind),
                f"{where}: a first observation must hold initial_state True, reward 0, done, terminated "
                f"and truncated False; got {', '.join(wrong)}",
            )

    def _check_not_initial(self, where: str, reached: DictTensor) -> None:
        initial = reached["initial_state"]
        if initial.any():
            self.problems.add(
                ("reached initial",),
                f"{where}, reached: initial_state must be False after a step (reached is never a first "
                f"observation), got True in rows {_rows(initial)}",
            )

    def _check_finished_rows(self, where: str, previous: DictTensor, reached: DictTensor) -> None:
        """Rows whose episode had ended repeat their final observation, reward 0 and done True."""
        finished = previous["done"]
        if not finished.any():
            return
        rule = (
            f"{where}, reached: rows {_rows(finished)} had finished, so until reset they must repeat "
            "their final observation with reward 0 and done True"
        )
        reward, done = reached["reward"], reached["done"]
        if (finished & (reward != 0)).any():
            self.problems.add(
                ("finished", "reward"), f"{rule}; got reward {_values(reward, finished & (reward != 0))}"
            )
        if (finished & ~done).any():
            self.problems.add(
                ("finished", "done"), f"{rule}; got done False in rows {_rows(finished & ~done)}"
            )
        for key, value in reached.items():
            if key in ("reward", "done") or key not in previous:
                continue
            changed = finished & _differing_rows(value, previous[key])
            if changed.any():
                self.problems.add(("finished", key), f"{rule}; key {key!r} changed in rows {_rows(changed)}")

    def _check_auto_step(self, where: str, reached: Any, following: Any) -> bool:
        """The rules of one step in auto-reset mode; whether both results could be read."""
        usable = self._check_batch(where, "reached", reached)
        if following is not reached:  # else checked already
            usable = self._check_batch(where, "observation", following) and usable
        if not usable:
            return False
        self._check_not_initial(where, reached)
        ended = reached["done"]
        for key, value in reached.items():
            differ = ~ended & _differing_rows(following[key], value) if key in following else ~ended
            if differ.any():
                self.problems.add(
                    ("auto running", key),
                    f"{where}: observation must equal reached in the rows that did not auto-reset (done "
                    f"False in reached); key {key!r} differs in rows {_rows(differ)}",
                )
        self._check_first(f"{where}, observation (rows that auto-reset)", following, ended, "auto-reset")
        return True

    def _compare_step_into(
        self, twin: Environment, t: int, action: DictTensor, reached: DictTensor, following: DictTensor
    ) -> None:
        """The deep copy, stepped through ``step_into``, writes what the environment's ``step`` returned."""
        where = f"step_into at step {t} (auto_reset=True)"
        layout = {key: (value.dtype, tuple(value.shape[1:])) for key, value in reached.items()}
        try:
            reached_arrays = _storage(layout, self.n, reached)
            observation_arrays = _storage(layout, self.n, following)
        except TypeError as error:  # a dtype numpy has not (bfloat16)
            self.problems.add(
                ("numpy",), f"{where}: the arrays step_into writes into cannot be made: {error}"
            )
            self._twin = None
            twin.close()
            return
        try:
            twin.step_into(action, reached_arrays, observation_arrays)
        except Exception as error:
            self.problems.add(("raised", "step_into"), f"{where}: raised {type(error).__name__}: {error}")
            if self.raised is None:
                self.raised = error
            self._twin = None  # no more comparisons, but closed by close()
            twin.close()
            return
        for name, arrays, expected in (
            ("reached", reached_arrays, reached),
            ("observation", observation_arrays, following),
        ):
            for key, value in expected.items():
                value = value.cpu()  # what step returned, compared with the arrays
                written = torch.from_numpy(np.ascontiguousarray(arrays[key]))
                differ = _differing_rows(written, value)
                if differ.any():
                    shown = (
                        f": step_into wrote {_values(written, differ)}, step returned {_values(value, differ)}"
                        if value.dim() == 1
                        else ""
                    )
                    self.problems.add(
                        ("step_into", name, key),
                        f"{where}: {name}[{key!r}] must receive what step returns, but differs in rows "
                        f"{_rows(differ)}{shown}",
                    )


# ---------------------------------------------------------------------- helpers


def _check_action(action: object, n: int) -> None:
    """An action is a DictTensor of ``n`` rows holding the key ``action``."""
    if not isinstance(action, DictTensor):
        raise TypeError(f"check_env: action must be or return a DictTensor, got {describe(action)}")
    if action.n_elems() != n:
        raise ValueError(f"check_env: action must have {n} rows (env.n_envs), got {action.n_elems()}")
    if "action" not in action:
        raise ValueError(f"check_env: action must hold the key 'action', got keys {list(action.keys())}")


def _deep_copy(env: Environment) -> Environment | None:
    """A deep copy of ``env`` to step through ``step_into``; None if it cannot be copied."""
    try:
        return copy.deepcopy(env)
    except Exception:  # a process, a lock, an open file: step_into is then checked by the rules
        return None


def _storage(
    layout: dict[str, tuple[torch.dtype, tuple[int, ...]]], n: int, unlike: DictTensor | None = None
) -> dict[str, np.ndarray[Any, Any]]:
    """The arrays ``step_into`` writes into: strided views (``[:, 0]`` of ``[n, 2, ...]``), as a batcher's storage.

    With ``unlike``, each view is filled with values that differ from its
    values in every cell, so that a cell ``step_into`` leaves unwritten shows.
    """
    arrays = {}
    for key, (dtype, shape) in layout.items():
        view = np.zeros((n, 2, *shape), torch.empty(0, dtype=dtype).numpy().dtype)[:, 0]
        if unlike is not None and key in unlike and tuple(unlike[key].shape) == view.shape:
            view[...] = _unlike(unlike[key].cpu().numpy())
        arrays[key] = view
    return arrays


def _unlike(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """An array of the dtype and shape of ``values`` that differs from it in every cell (but NaNs)."""
    if values.dtype == np.bool_:
        return ~values
    if np.issubdtype(values.dtype, np.integer):
        return values ^ 1
    return np.where(values == 0, 1, -values).astype(values.dtype)


def _differing_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """bool [rows]: where ``a`` and ``b`` differ (every row if their dtypes or shapes do; NaN equals NaN)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return torch.ones(b.shape[0], dtype=torch.bool, device=b.device)
    same = a == b
    if a.is_floating_point() or a.is_complex():
        same |= a.isnan() & b.isnan()
    return ~same.reshape(a.shape[0], -1).all(1)


def _difference(got: Any, expected: DictTensor) -> str:
    """How ``got`` differs from ``expected`` (the first difference found); empty if it does not."""
    if not isinstance(got, DictTensor):
        return f"got {describe(got)}"
    if got.keys() != expected.keys():
        return f"it has keys {list(got.keys())}, reached {list(expected.keys())}"
    if got.n_elems() != expected.n_elems():
        return f"it has {got.n_elems()} rows, reached {expected.n_elems()}"
    for key, value in expected.items():
        differ = _differing_rows(got[key], value)
        if differ.any():
            return f"key {key!r} differs in rows {_rows(differ)}"
    return ""


def _on(device: torch.device, expected: torch.device) -> bool:
    """Whether a tensor on ``device`` is on ``expected`` (``"cuda"``, without an index, is any CUDA device)."""
    return device.type == expected.type and expected.index in (None, device.index)


def _device_name(device: torch.device) -> str:
    """The environment's device, as a rule names it."""
    return "the CPU" if device.type == "cpu" else f"the environment's device, {device}"


def _rows(mask: torch.Tensor) -> str:
    """The indices of the True rows of ``mask``, as a message lists them."""
    rows = mask.nonzero().flatten().tolist()
    shown = ", ".join(map(str, rows[:_SHOWN_ROWS]))
    return f"[{shown}{', ...' if len(rows) > _SHOWN_ROWS else ''}]"


def _values(values: torch.Tensor, mask: torch.Tensor) -> str:
    """The values of ``values`` [rows] in the rows of ``mask``, as a message lists them."""
    picked = values[mask].tolist()
    shown = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in picked[:_SHOWN_ROWS])
    return f"[{shown}{', ...' if len(picked) > _SHOWN_ROWS else ''}]"


def _global_random_states() -> tuple[torch.Tensor, Any, Any]:
    """The states of torch's, numpy's and ``random``'s global generators."""
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def _set_global_random_states(states: tuple[torch.Tensor, Any, Any]) -> None:
    torch.set_rng_state(states[0])
    np.random.set_state(states[1])
    random.setstate(states[2])
