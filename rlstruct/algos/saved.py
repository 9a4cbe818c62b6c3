"""A finished run rebuilt from its directory: its configuration, its trained agent, and their evaluation.

``rlstruct train ALGO`` leaves ``config.json`` and ``checkpoint.pt`` in the
run's directory (see ``Run``). ``load_run`` reads the configuration back into
the algorithm's ``Config``, builds the agent as training built it (the
module's ``make_agent``) and loads the trained weights into it.
``SavedRun.evaluate`` then plays greedy episodes with the ``Evaluator`` the
run used, seeded as the run seeded its evaluations: with the defaults it
replays the run's final evaluation and returns the same figure.
``SavedRun.record_episode`` plays the first of those episodes with frames, for
a GIF. ``rlstruct eval RUN_DIR`` does all this from the command line.

From Python, ``load_run("runs/ppo-CartPole-v1-s0-...").evaluate()`` returns
the ``EvalResult`` of the run's final evaluation again (``.mean``, ``.std``,
``.returns``). Given a checkpoint file of the run directory instead, such as
the ``best.pt`` that the ``SaveBest`` hook writes, ``load_run`` loads its
weights: ``load_run("runs/ppo-.../best.pt").evaluate()`` replays the best
evaluation.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlstruct.agent import Agent
from rlstruct.algos.config import ALGORITHMS, TrainConfig, check_field_types, stored_config
from rlstruct.algos.evaluation import EvalResult, Evaluator, env_spaces, eval_seed
from rlstruct.algos.recording import Recording, record_episode
from rlstruct.batchers import cpu_weights
from rlstruct.checkpoint import load_checkpoint
from rlstruct.checks import check_int, is_int
from rlstruct.errors import describe
from rlstruct.logger import CHECKPOINT_NAME, CONFIG_NAME
from rlstruct.seeding import SEEDS

__all__ = ["SavedRun", "load_run"]


@dataclass(frozen=True)
class SavedRun:
    """A trained run, rebuilt by ``load_run``."""

    run_dir: Path
    """The run's directory."""
    algo: str
    """The algorithm's name, one of ``rlstruct.algos.ALGORITHMS``."""
    config: TrainConfig
    """The run's configuration, an instance of the algorithm's ``Config``."""
    agent: Agent
    """The trained policy (the checkpoint's ``model``), on the CPU."""
    agent_args: dict[str, Any]
    """The keyword arguments that make the agent: ``type(agent)(**agent_args)``."""
    env_steps: int
    """The env steps the run trained for (the checkpoint's ``env_steps``: for ``best.pt``, those of its weights)."""

    def eval_seed(self, seed: int | None = None) -> int:
        """The seed of the first evaluation environment for a run seeded ``seed`` (None: this run's seed).

        A run seeded s resets its evaluation environment i with
        ``derive_seed(s, "eval") + i`` at every evaluation (see ``rlstruct.seeding``).

        Raises:
            TypeError: if ``seed`` is neither None nor an int.
            ValueError: if ``seed`` is outside the run seeds ``rlstruct.seeding.SEEDS``.
        """
        if seed is None:
            return eval_seed(self.config.seed)
        seed = check_int("SavedRun", "seed", seed, SEEDS[0])
        if seed > SEEDS[1]:
            raise ValueError(f"SavedRun: seed must be in [{SEEDS[0]}, {SEEDS[1]}] (a run seed), got {seed}")
        return eval_seed(seed)

    def evaluate(self, n_episodes: int | None = None, seed: int | None = None) -> EvalResult:
        """Play ``n_episodes`` greedy episodes with the trained weights, in a worker process, and wait.

        It runs the ``Evaluator`` the run used, on the run's environment,
        with environment i reset with ``eval_seed(seed) + i``: with the
        defaults, the episodes of the run's final evaluation, hence its
        returns (``result.mean`` is the ``eval_return_mean`` the run
        reported). A greedy policy acts deterministically, so the returns
        depend only on the weights and these seeds.

        Args:
            n_episodes: the number of episodes (one environment each);
                None for the run's ``eval_episodes``.
            seed: a run seed as ``rlstruct train --seed`` takes it; None for
                this run's.

        Returns:
            The returns of the episodes, in the order of their environments;
            ``env_steps`` is the run's.

        Raises:
            ValueError: if ``n_episodes`` is not a positive int (a Python or
                NumPy int; not a bool).
        """
        n = self.config.eval_episodes if n_episodes is None else n_episodes
        if not is_int(n) or n < 1:  # a NumPy int counts, a bool does not
            raise ValueError(f"SavedRun.evaluate: n_episodes must be a positive int, got {n!r}")
        n = int(n)
        with Evaluator(
            type(self.agent),
            self.agent_args,
            self.config.env,
            n_episodes=n,
            max_steps=env_spaces(self.config.env).max_episode_steps,
            seed=self.eval_seed(seed),
        ) as evaluator:
            return evaluator.evaluate(cpu_weights(self.agent), self.env_steps)

    def record_episode(self, seed: int | None = None) -> Recording:
        """Play the first episode of ``evaluate(seed=seed)`` again, in this process, keeping its frames.

        The environment is made with ``render_mode="rgb_array"``; see
        ``rlstruct.algos.recording.record_episode``.

        Raises:
            CannotRender: (a ValueError) if the environment cannot render
                ``rgb_array`` frames; the message says why in one line.
        """
        return record_episode(
            type(self.agent),
            self.agent_args,
            cpu_weights(self.agent),
            self.config.env,
            seed=self.eval_seed(seed),
            max_steps=env_spaces(self.config.env).max_episode_steps,
        )


def _config_class(algo: str) -> type[TrainConfig]:
    config: type[TrainConfig] = importlib.import_module(f"rlstruct.algos.{algo}").Config
    return config


def _find_algo(run_dir: Path, names: set[str]) -> str:
    """The algorithm whose ``Config`` has every field named in config.json (the directory's prefix if several)."""
    fields = {algo: {f.name for f in dataclasses.fields(_config_class(algo))} for algo in ALGORITHMS}
    candidates = [algo for algo in ALGORITHMS if names <= fields[algo]]
    if len(candidates) > 1:  # a config of shared fields only: the name Run gave the directory decides
        candidates = [algo for algo in candidates if run_dir.name.startswith(f"{algo}-")] or candidates
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        closest = min(ALGORITHMS, key=lambda algo: len(names - fields[algo]))
        raise ValueError(
            f"{str(run_dir / CONFIG_NAME)!r} fits no algorithm's Config; the closest, {closest}, "
            f"has no field {sorted(names - fields[closest])}"
        )
    raise ValueError(
        f"{str(run_dir / CONFIG_NAME)!r} fits the Config of {', '.join(candidates)}; name the "
        f"directory <algo>-... as rlstruct train does, or pass algo="
    )


def load_run(run_dir: str | os.PathLike[str], *, algo: str | None = None) -> SavedRun:
    """Rebuild the trained agent of a run directory written by ``rlstruct train`` (or ``ALGO.train``).

    The configuration is read from ``config.json`` into the algorithm's
    ``Config`` (a field missing from the file takes the value of
    ``Config.ADDED_FIELDS`` where that names it, else its default), the agent
    is made as ``train`` made it (``make_agent``: the same network, memory and
    observation normalisation) and the checkpoint's ``model`` weights are
    loaded into it, on the CPU, whatever device trained it.

    Args:
        run_dir: the run's directory, holding ``config.json`` and
            ``checkpoint.pt``; or a checkpoint file in a run directory, whose
            ``model`` weights are loaded instead of ``checkpoint.pt``'s, such
            as the ``best.pt`` of ``rlstruct.algos.hooks.SaveBest``.
        algo: the algorithm; None finds it from the fields of
            ``config.json`` (each algorithm's Config has fields of its own),
            or else from the directory's name (``<algo>-<env>-s<seed>-...``).

    Returns:
        The run: its configuration, trained agent, agent arguments and env
        steps; ``evaluate()`` and ``record_episode()`` play it.

    Raises:
        TypeError: if ``run_dir`` is not a str or ``os.PathLike``.
        FileNotFoundError: if ``run_dir`` does not exist or lacks
            ``config.json`` or ``checkpoint.pt``; the message names the path
            and what is missing.
        ValueError: if ``run_dir`` is ``""`` or ``algo`` is unknown, ``config.json`` fits no
            algorithm's Config (or several, with no name to tell them apart)
            or does not hold a JSON object, or the checkpoint's weights do not
            fit the agent the configuration describes, or a field of
            ``config.json`` is not of its type (a hand-edited file: ``"hidden":
            "x"``) or out of range (``eval_episodes`` below 1, a ``seed``
            torch does not take). ``UnknownEnvironment`` (a ValueError) if the
            run's environment cannot be made.
    """
    if not isinstance(run_dir, str | os.PathLike):
        raise TypeError(f"load_run: run_dir must be a path (a str or os.PathLike), got {describe(run_dir)}")
    if not os.fspath(run_dir):
        raise ValueError("load_run: run_dir must name a run directory, got ''")
    path = Path(run_dir)
    if not path.exists():
        what = "checkpoint" if path.suffix == ".pt" else "run directory"  # RUN_DIR/best.pt, not saved
        raise FileNotFoundError(f"{what} {str(path)!r} does not exist")
    checkpoint_path = path / CHECKPOINT_NAME
    given_file = path.is_file()
    if given_file:  # a checkpoint of the run directory it is in (best.pt)
        path, checkpoint_path = path.parent, path
    if not path.is_dir():
        raise FileNotFoundError(f"run directory {str(path)!r} is not a directory")
    config_path = path / CONFIG_NAME
    if not config_path.is_file():
        if given_file:
            raise FileNotFoundError(
                f"{str(checkpoint_path)!r} is a file, not a run directory, and its folder {str(path)!r} "
                f"has no {CONFIG_NAME}: a checkpoint given alone (best.pt) must lie in its run directory"
            )
        raise FileNotFoundError(
            f"run directory {str(path)!r} has no {CONFIG_NAME} (rlstruct train writes it when a run starts)"
        )
    if not checkpoint_path.is_file():
        raise FileNotFoundError(
            f"run directory {str(path)!r} has no {CHECKPOINT_NAME} (rlstruct train writes it when a run "
            "finishes: was it interrupted?)"
        )
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:  # a damaged or binary file
        raise ValueError(f"{str(config_path)!r} is not valid JSON ({error})") from error
    if not isinstance(data, dict):
        raise ValueError(f"{str(config_path)!r} must hold a JSON object, got {type(data).__name__}")
    if algo is None:
        algo = _find_algo(path, set(data))
    elif algo not in ALGORITHMS:
        raise ValueError(f"load_run: algo must be one of {', '.join(ALGORITHMS)}, got {algo!r}")
    module = importlib.import_module(f"rlstruct.algos.{algo}")
    try:
        config = module.Config(**stored_config(module.Config, data))
    except TypeError as error:
        raise ValueError(f"{str(config_path)!r} is not a {algo} Config: {error}") from error
    try:  # a hand-edited file: what the agent is made from, and what evaluate() reads
        check_field_types(config)
        check_int("config", "eval_episodes", config.eval_episodes)
        check_int("config", "hidden", getattr(config, "hidden", 1))
        if not SEEDS[0] <= config.seed <= SEEDS[1]:
            raise ValueError(f"config.seed must be in [{SEEDS[0]}, {SEEDS[1]}], got {config.seed}")
    except (TypeError, ValueError) as error:
        raise ValueError(f"{str(config_path)!r}: {error}") from error
    agent, agent_args = module.make_agent(config, env_spaces(config.env))
    try:
        state = load_checkpoint(checkpoint_path, map_location="cpu")  # a ValueError for an unreadable file
    except pickle.UnpicklingError as error:  # objects other than weights, which weights_only refuses
        raise ValueError(f"{str(checkpoint_path)!r} holds objects other than weights: {error}") from error
    if "model" not in state:
        raise ValueError(f"{str(checkpoint_path)!r} holds no 'model' weights; it holds {sorted(state)}")
    if not isinstance(state["model"], Mapping):  # not what save_checkpoint stores for a module
        raise ValueError(
            f"{str(checkpoint_path)!r} must hold the 'model' weights as a state dict, got {describe(state['model'])}"
        )
    try:
        agent.load_state_dict(state["model"])
    except RuntimeError as error:  # missing, unexpected or mis-shaped weights
        raise ValueError(
            f"{str(checkpoint_path)!r} does not fit the {algo} agent {CONFIG_NAME} describes: "
            f"{' '.join(str(error).split())}"
        ) from error
    env_steps = state.get("env_steps", 0)
    if isinstance(env_steps, torch.Tensor) and env_steps.numel() == 1 and not env_steps.is_floating_point():
        env_steps = env_steps.item()  # a counter kept as a tensor
    if not is_int(env_steps) or env_steps < 0:
        raise ValueError(
            f"{str(checkpoint_path)!r} must hold env_steps as a non-negative int, got {env_steps!r}"
        )
    return SavedRun(path, algo, config, agent, agent_args, int(env_steps))
