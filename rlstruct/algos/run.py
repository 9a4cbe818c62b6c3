"""One training run's surroundings: its collection, directory, logger, evaluator, episode returns and results.

The algorithms keep only their learning loop; ``prepare`` and ``Run`` do the
rest the same way for all of them. Every script has one shape::

    spaces = check(config)  # the algorithm's checks: nothing started yet
    config, device, spaces = prepare(config, spaces)
    agent, agent_args = make_agent(config, spaces)
    model, optimizer = agent.to(device), ...
    with Run("ppo", config, type(agent), agent_args, hooks) as run:
        run.collector(device, config.n_envs, config.n_steps)
        env_steps = run.restore(model=model, optimizer=optimizer)  # 0 for a new run
        run.start(model)
        while env_steps + per_iteration <= config.total_steps and not run.stopped:
            run.batcher.execute()
            batch = run.batcher.get()
            env_steps += per_iteration
            ...  # learn from batch
            run.batcher.update(run.weights(model))
            run.step(env_steps, model, loss=loss)
            if run.checkpoint_due(env_steps):
                run.checkpoint(env_steps, model, optimizer=optimizer)
        return run.finish(model, env_steps, optimizer=optimizer)

``Run`` owns:

- the collection batcher (``collector``, ``run.batcher``), started by
  ``start``, restarted in place by ``checkpoint`` and closed with the run;
- a run directory ``<run_dir>/<algo>-<env>-s<seed>-<time>`` holding
  ``config.json``, ``progress.csv``, TensorBoard event files, the checkpoint
  and ``learning_curve.png``;
- evaluations every ``eval_every`` env steps, running in a worker while
  training goes on (``Evaluator``), logged when they finish;
- the returns of the training episodes, read from the collected batches;
- the hooks given to ``train`` and those the config asks for (``hooks``):
  called after each logged iteration and evaluation, they may log scalars
  into the row and ask the run to stop (``stopped``, which ends the loop);
- at the end, a final greedy evaluation of ``eval_episodes`` episodes: the
  figure the run reports, in the returned dict and in ``--json``.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

import torch

from rlstruct.agent import Agent
from rlstruct.algos.agents import with_agent_name
from rlstruct.algos.config import TrainConfig
from rlstruct.algos.evaluation import EnvSpaces, EvalResult, Evaluator, env_spaces, eval_seed
from rlstruct.algos.hooks import Hook, HookRunner, check_hooks, config_hooks
from rlstruct.batchers import LocalBatcher, MultiprocessBatcher, cpu_weights
from rlstruct.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from rlstruct.dicttensor import DictTensor
from rlstruct.env import Environment
from rlstruct.errors import ConfigError
from rlstruct.gym_env import GymEnv
from rlstruct.gym_vector_env import GymVectorEnv
from rlstruct.learning.metrics import EpisodeReturns
from rlstruct.logger import CHECKPOINT_NAME, LOCK_NAME, Logger, make_run_dir
from rlstruct.seeding import derive_seed
from rlstruct.torch_envs import make_torch_env

__all__ = ["CannotResume", "Run", "RunInterrupted", "ScriptConfig", "TrainingDiverged", "diverged", "prepare"]


class ScriptConfig(Protocol):
    """What ``prepare`` reads of a config: a ``TrainConfig`` with the script's ``torch_threads``."""

    env: str
    seed: int
    device: str
    torch_threads: int


C = TypeVar("C", bound=ScriptConfig)

Collector = MultiprocessBatcher | LocalBatcher
"""A run's collection batcher: worker processes, or one in-process batcher on a GPU (see ``Run.collector``)."""


def collection_env(config: TrainConfig) -> tuple[Callable[..., Environment], dict[str, Any]]:
    """The environment factory and arguments of a run's collection batcher, by ``config.env_backend``.

    Examples:
        >>> collection_env(TrainConfig(env="CartPole-v1", env_backend="torch"))[1]
        {'env': 'CartPole-v1'}
    """
    factories: dict[str, Callable[..., Environment]] = {
        "gymnasium": GymEnv,
        "vector": GymVectorEnv,
        "torch": make_torch_env,
    }
    return factories[config.env_backend], {"env": config.env}


def prepare(config: C, spaces: EnvSpaces | None = None) -> tuple[C, torch.device, EnvSpaces]:
    """What every training script does once its config is checked, before it makes its agent.

    Sets torch's threads (``config.torch_threads``) and seeds its global
    generator (``config.seed``), in that order, so that the agent made next
    starts from the same weights in every run of the same seed.

    Args:
        config: the checked configuration.
        spaces: the spaces of ``config.env`` where the checks read them
            already; None reads them (``env_spaces``).

    Returns:
        ``(config, device, spaces)``: the config with an Agent class in
        ``agent`` replaced by its ``"module:Class"`` (``with_agent_name``: what
        ``config.json`` keeps), the device of ``config.device``, and the
        spaces of ``config.env`` (``env_spaces``).
    """
    torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)
    device = torch.device(config.device)
    return with_agent_name(config), device, env_spaces(config.env) if spaces is None else spaces


class Run:
    """The collection batcher, directory, logger and evaluator of one training run.

    A context manager: leaving the ``with`` block closes them all (``close``),
    whether training ended or failed.

    Args:
        algo: the algorithm's name, used in the directory name.
        config: the run's configuration (written to ``config.json``).
        agent_factory: makes the agent the evaluator runs (greedy).
        agent_args: keyword arguments for ``agent_factory``.
        hooks: callables taking a ``TrainingEvent`` (see
            ``rlstruct.algos.hooks``), called after those the config asks
            for (``config_hooks``).

    Raises:
        TypeError: if ``hooks`` is not a list or tuple of callables, before
            anything is made.
        CannotResume: if ``config.resume`` names a run that cannot be
            continued, before anything is made.
    """

    def __init__(
        self,
        algo: str,
        config: TrainConfig,
        agent_factory: Callable[..., Agent],
        agent_args: Mapping[str, Any],
        hooks: Sequence[Hook] = (),
    ) -> None:
        self._created = time.monotonic()  # total_s counts from here
        hooks = (*config_hooks(config), *check_hooks(hooks))
        self.algo, self.config = algo, config
        self.agent_factory, self.agent_args = agent_factory, dict(agent_args)
        self._started = time.monotonic()  # wall_s and sps count from here (begin() moves it)
        self.resumed: dict[str, Any] | None = None
        """The checkpoint a ``--resume`` run continues from (None for a new run)."""
        if config.resume is None:
            env_name = config.env.split(":")[-1].replace("/", "_")
            try:
                self.dir = make_run_dir(config.run_dir, f"{algo}-{env_name}-s{config.seed}")
            except OSError as error:  # a folder it cannot write in: nothing is started yet
                raise ConfigError(
                    f"config.run_dir {config.run_dir!r} cannot hold the run's directory: "
                    f"{error.strerror or error}"
                ) from error
        else:
            self.dir = Path(config.resume)
            self.resumed = _resumable(algo, self.dir / CHECKPOINT_NAME, config.checkpoint_every)
            self._check_fits(self.agent_factory(**self.agent_args), "model")  # before anything is written
        self.segment = 0 if self.resumed is None else int(self.resumed["segment"])
        """How many times the collection restarted at a checkpoint (``checkpoint_every``)."""
        # a resumed run's wall_s goes on from its checkpoint's (0 for one saved before it was kept),
        # and its sps counts the steps it trains itself
        self._wall_before = 0.0 if self.resumed is None else float(self.resumed.get("wall_s", 0.0))
        self._steps_before = 0 if self.resumed is None else int(self.resumed["env_steps"])
        self._lock: Path | None = lock_run(algo, self.dir)  # before anything is written in it
        try:
            self.logger = Logger(
                self.dir,
                config=config,
                progress=config.progress,
                total_steps=config.total_steps,
                purge_step=None if self.resumed is None else int(self.resumed["env_steps"]) + 1,
            )
        except BaseException:
            self._unlock()
            raise
        self.hooks = HookRunner(
            hooks,
            algo=algo,
            run_dir=self.dir,
            total_steps=config.total_steps,
            resumed_from=None if self.resumed is None else int(self.resumed["env_steps"]),
        )
        """The run's hooks: false when there is none, and then no event is made."""
        try:
            self.evaluator = Evaluator(
                agent_factory,
                agent_args,
                config.env,
                n_episodes=config.eval_episodes,
                max_steps=env_spaces(config.env).max_episode_steps,
                seed=eval_seed(config.seed),
            )
        except BaseException as error:
            self.logger.close()  # no file left open by a run that could not start
            self._unlock()
            if isinstance(error, KeyboardInterrupt):
                checkpoint = None if self.resumed is None else int(self.resumed["env_steps"])
                raise RunInterrupted(algo, self.dir, checkpoint, every=config.checkpoint_every) from error
            raise
        self._next_eval = config.eval_every if self.resumed is None else int(self.resumed["next_eval"])
        self._collector_args: tuple[Any, ...] | None = None
        self._batcher: Collector | None = None
        self._agent_info: DictTensor | None = None
        self._last_checkpoint = 0 if self.resumed is None else int(self.resumed["env_steps"])
        self.checkpointed: int | None = None if self.resumed is None else self._last_checkpoint
        """The env steps of the last checkpoint ``--resume`` can continue from (None: none yet)."""
        self.finished: int | None = None
        """The env steps at which the run finished, once ``finish`` saved its final checkpoint (None before)."""
        self.last_eval: EvalResult | None = None
        self.episode_return: float | None = None
        self._new_return: float | None = None  # a training return not logged yet
        self._evaluating: dict[str, torch.Tensor] = {}  # the weights of the running evaluation, for the hooks
        self.setup_s = 0.0

    def begin(self) -> None:
        """Mark the end of the set-up (worker processes started, first reset done).

        ``wall_s`` and ``sps`` count from here; the set-up time is reported
        apart, as ``setup_s``.
        """
        now = time.monotonic()
        self.setup_s = now - self._started
        self._started = now

    def collector(self, device: torch.device, n_envs: int, n_timesteps: int, **options: Any) -> Collector:
        """The batcher that collects for training: ``n_envs`` environments of ``config.env`` in all.

        They are split over ``config.n_processes`` workers, seeded with the
        run's seed, each running the run's agent; ``options`` go to
        ``MultiprocessBatcher`` (``mode="stream"``, ``n_slots``). With
        ``env_backend="torch"``, a CUDA ``device`` and no ``options``, the
        environments run on that GPU instead, in this process: one
        ``LocalBatcher`` whose agent, environments and batches are all
        there. The run keeps it as ``batcher`` and closes it with itself
        (``close``).
        """
        config = self.config
        self._collector_args = (device, n_envs, n_timesteps, options)
        env_factory, env_args = collection_env(config)
        seed = config.seed if self.segment == 0 else derive_seed(config.seed, f"segment {self.segment}")
        if config.env_backend == "torch" and device.type == "cuda" and not options:
            self._batcher = LocalBatcher(
                self.agent_factory,
                self.agent_args,
                env_factory,
                env_args | {"device": device},
                n_envs=n_envs,
                n_timesteps=n_timesteps,
                seed=seed,
                device=device,
            )
            return self._batcher
        self._batcher = MultiprocessBatcher(
            self.agent_factory,
            self.agent_args,
            env_factory,
            env_args,
            n_envs=n_envs // config.n_processes,
            n_timesteps=n_timesteps,
            n_processes=config.n_processes,
            seed=seed,
            device=device,
            **options,
        )
        return self._batcher

    @property
    def batcher(self) -> Collector:
        """The collection batcher ``collector`` made, or the one ``checkpoint`` made since.

        Raises:
            RuntimeError: before ``collector``.
        """
        if self._batcher is None:
            raise RuntimeError("Run.batcher: call collector() first")
        return self._batcher

    def start(
        self, model: torch.nn.Module, *, agent_info: DictTensor | None = None, execute: bool = False
    ) -> None:
        """Start the collection: the batcher gets the model's weights and is reset, then ``begin()``.

        Call it after ``restore`` (which loads the weights the workers get),
        right before the training loop.

        Args:
            model: the model whose weights the workers act with.
            agent_info: the batcher's ``agent_info`` for ``reset`` (and for the
                resets of ``checkpoint``); None passes none.
            execute: start collecting the first batch (``execute()``), for
                the algorithms that collect while they learn.
        """
        self._agent_info = agent_info
        self._reset(model)
        self.begin()
        if execute:
            self.batcher.execute()

    def _reset(self, model: torch.nn.Module) -> None:
        """The batcher gets the model's weights and is reset (with ``start``'s ``agent_info``)."""
        self.batcher.update(self.weights(model))
        if self._agent_info is None:
            self.batcher.reset()
        else:
            self.batcher.reset(agent_info=self._agent_info)

    # ------------------------------------------------------------- checkpoints

    def restore(self, *generators: torch.Generator, **objects: Any) -> int:
        """Load a resumed run's checkpoint; return its env steps (0 for a new run, which loads nothing).

        Call it right after ``collector()``, before ``start()``: ``checkpoint``
        saves at that point.

        Args:
            *generators: the explicit generators whose states the checkpoint's
                ``rng`` holds, in the order they were given to ``rng_state``.
            **objects: modules, optimisers, scalers... loaded from the stored
                state of the same name; None values are skipped.

        Raises:
            CannotResume: if a stored state does not fit its object (the run's
                config.json was edited, or the agent's code changed).
        """
        if self.resumed is None:
            return 0
        for name, obj in objects.items():
            if obj is not None:
                self._check_fits(obj, name)
        set_rng_state(self.resumed["rng"], *generators)
        return int(self.resumed["env_steps"])

    def _check_fits(self, obj: Any, name: str) -> None:
        """Load the resumed checkpoint's state ``name`` into ``obj``, or raise ``CannotResume``."""
        assert self.resumed is not None
        try:
            obj.load_state_dict(self.resumed[name])
        except (KeyError, RuntimeError, ValueError) as error:  # an edited config.json, another agent
            raise CannotResume(
                f"{self.algo}: config.resume {str(self.dir)!r}: its {CHECKPOINT_NAME} does not fit the "
                f"{name} that {str(self.dir / 'config.json')!r} describes "
                f"({type(error).__name__}: {_shortened(' '.join(str(error).split()), 300)})"
            ) from error

    def checkpoint_due(self, env_steps: int) -> bool:
        """Whether a checkpoint is due after ``env_steps`` (every ``checkpoint_every``, never at the end).

        A run a hook stopped (``stopped``) is at its end: none is due.
        """
        every = self.config.checkpoint_every
        return (
            every > 0
            and env_steps < self.config.total_steps
            and env_steps // every > self._last_checkpoint // every
            and not self.stopped
        )

    @property
    def stopped(self) -> bool:
        """Whether a hook asked the run to stop (``TrainingEvent.stop``): the training loop ends then."""
        return self.hooks.stop_reason is not None

    def checkpoint(
        self,
        env_steps: int,
        model: torch.nn.Module,
        generators: Sequence[torch.Generator] = (),
        *,
        execute: bool = False,
        **state: Any,
    ) -> None:
        """Restart the collection and save a checkpoint that ``--resume`` continues from bit-identically.

        ``batcher`` is closed and replaced, in place, by a new one seeded from
        the run's seed and the checkpoint's number; the checkpoint is saved,
        and the new batcher gets the model's weights and is reset (with the
        ``agent_info`` given to ``start``) and started with ``execute``, as a
        resumed run's is by ``start`` after ``restore``. The caller forgets the
        partial episodes of the old batcher (and the batch it had in flight).

        Args:
            env_steps: the env steps trained so far.
            model: the model (``model`` in the checkpoint).
            generators: the explicit generators of the learner; their states,
                with the global ones, are saved as ``rng`` (``rng_state``).
            execute: start collecting the first batch (``execute()``), for
                the algorithms that collect while they learn.
            **state: everything else the algorithm needs to continue: the
                optimiser, counters, a replay buffer.

        Raises:
            RuntimeError: before ``collector``.
        """
        if self._collector_args is None:
            raise RuntimeError("Run.checkpoint: call collector() first")
        if (
            result := self.evaluator.wait()
        ) is not None:  # logged before the checkpoint: a resumed run has it
            self._log_eval(result, model)
        self.batcher.close()
        self.segment += 1
        device, n_envs, n_timesteps, options = self._collector_args
        self.collector(device, n_envs, n_timesteps, **options)
        self._save(env_steps, model, rng=rng_state(*generators), **state)
        self._reset(model)
        if execute:
            self.batcher.execute()

    def _training_s(self) -> float:
        """The training time of the whole run so far: this process's since ``begin()``, and a resumed run's before."""
        return self._wall_before + time.monotonic() - self._started

    def _save(self, env_steps: int, model: torch.nn.Module, *, finished: bool = False, **state: Any) -> None:
        self._last_checkpoint = env_steps
        save_checkpoint(
            self.logger.checkpoint_path,
            model=model,
            env_steps=env_steps,
            segment=self.segment,
            next_eval=self._next_eval,
            wall_s=self._training_s(),
            **({"finished": True} if finished else {}),
            **state,
        )
        if finished:
            self.finished = env_steps
        else:
            self.checkpointed = env_steps

    def add_returns(self, *episodes: EpisodeReturns) -> None:
        """Take the mean return of the training episodes that finished since the last call, across ``episodes``.

        It is shown on the progress line and logged (``train_return_mean``) at
        the next ``step``; when no episode finished, the last mean stays shown
        (a mean of exactly 0.0 is a mean like any other).
        """
        finished = [r for e in episodes for r in e.finished]
        for e in episodes:
            e.finished = []
        if finished:
            self.episode_return = self._new_return = sum(finished) / len(finished)

    def weights(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The model's state dict on the CPU (what batchers and the evaluator load)."""
        return cpu_weights(model)

    def step(self, env_steps: int, model: torch.nn.Module, **scalars: float) -> None:
        """Log ``scalars`` at ``env_steps``, collect a finished evaluation, start the next one when due.

        The hooks are called with the finished evaluation ("evaluation"
        event), then with the iteration ("iteration" event), each before its
        row is written; a stop they ask for shows in ``stopped``.

        Raises:
            TrainingDiverged: when a loss (``loss`` or a name ending in
                ``_loss``) or the training return is NaN or infinite, once
                its row is written (no evaluation is started with it).
        """
        if self._new_return is not None:
            scalars = {"train_return_mean": self._new_return, **scalars}
            self._new_return = None
        not_finite = diverged(scalars)
        if (result := self.evaluator.poll()) is not None:
            self._log_eval(result, model)
        if env_steps >= self._next_eval and not not_finite:
            weights = self._for_evaluation(model)
            if self.evaluator.start(weights, env_steps):
                self._next_eval = env_steps + self.config.eval_every
                self._evaluating = weights
        since = time.monotonic() - self._started
        sps = (env_steps - self._steps_before) / max(since, 1e-9)  # the steps this process trained
        row = {"env_steps": env_steps, "wall_s": self._wall_before + since, "sps": sps, **scalars}
        if self.hooks:
            row |= self.hooks.iteration(env_steps, row, model)
        self.logger.log(env_steps, **row)
        if not_finite:  # the row that shows them is written first
            raise TrainingDiverged(self.algo, self.dir, env_steps, {key: row[key] for key in not_finite})
        shown = {} if self.episode_return is None else {"return": self.episode_return}
        if self.last_eval is not None:
            shown["eval"] = self.last_eval.mean
        self.logger.progress(env_steps, **shown)

    def _for_evaluation(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The model's weights for the evaluator; with hooks, a copy (CPU weights share the model's storage)."""
        weights = self.weights(model)
        if self.hooks:
            weights = {key: value.clone() for key, value in weights.items()}
        return weights

    def _log_eval(self, result: EvalResult, model: torch.nn.Module, *, final: bool = False) -> None:
        """Log an evaluation's row, after the hooks' "evaluation" event (the weights it played in it)."""
        self.last_eval = result
        row: dict[str, float] = {
            "env_steps": result.env_steps,
            "eval_return_mean": result.mean,
            "eval_return_std": result.std,
        }
        if self.hooks:
            row |= self.hooks.evaluation(result, self._evaluating, row, model, final=final)
        self.logger.log(result.env_steps, **row)

    def finish(self, model: torch.nn.Module, env_steps: int, **checkpoint: Any) -> dict[str, Any]:
        """Final evaluation, checkpoint, plot and JSON; returns the results.

        Args:
            model: the trained model (its weights are evaluated and saved).
            env_steps: the env steps trained.
            **checkpoint: more state for the checkpoint (optimiser, counters...).

        Returns:
            ``{"algo", "env", "eval_return_mean", "eval_return_std", "env_steps",
            "wall_s", "setup_s", "total_s", "stopped_early", "stop_reason",
            "run_dir"}``. ``wall_s`` is the training time, from ``begin()`` to
            the end of the training loop (the final evaluation not counted;
            a resumed run adds the training time before its checkpoint);
            ``setup_s`` the time before ``begin()``, from the run's
            construction (starting the worker processes); ``total_s`` the
            whole run, from its construction to the end of ``finish`` (the
            final evaluation, checkpoint and plot included; a resumed run
            adds the training time before its checkpoint, as to ``wall_s``).
            ``stopped_early`` says whether a hook asked the run to stop while
            it trained (``env_steps`` is then where it stopped),
            ``stop_reason`` why (None when none asked).
        """
        wall = self._training_s()  # the final evaluation is not counted
        self.hooks.finishing()  # a stop asked from now on changes nothing
        result = self.evaluator.wait()
        if result is not None and result.env_steps == env_steps:
            final = result  # started at the last step, with these weights: the final evaluation already
        else:
            if result is not None:
                self._log_eval(result, model)
            self._evaluating = self._for_evaluation(model)
            final = self.evaluator.evaluate(self._evaluating, env_steps)
        self._log_eval(final, model, final=True)
        self._save(env_steps, model, finished=True, **checkpoint)
        self.logger.close()
        curves = ["eval_return_mean"] + (["train_return_mean"] if self.episode_return is not None else [])
        plot = self.logger.plot(curves, x="env_steps")
        total = self._wall_before + time.monotonic() - self._created
        stop_reason = self.hooks.stop_reason
        results: dict[str, Any] = {
            "algo": self.algo,
            "env": self.config.env,
            "eval_return_mean": final.mean,
            "eval_return_std": final.std,
            "env_steps": env_steps,
            "wall_s": round(wall, 3),
            "setup_s": round(self.setup_s, 3),
            "total_s": round(total, 3),
            "stopped_early": stop_reason is not None,
            "stop_reason": stop_reason,
            "run_dir": str(self.dir),
        }
        stopped = (
            ""
            if stop_reason is None
            else f"stopped early at {env_steps} of {self.config.total_steps} env steps: {stop_reason}\n"
        )
        n = len(final.returns)
        logdir = shlex.quote(str(self.dir))  # a command to paste, spaces and all
        print(
            f"{self.algo} on {self.config.env}: final greedy return {final.mean:.1f} +- {final.std:.1f} "
            f"over {n} episode{'s' if n != 1 else ''} after {env_steps} env steps "
            f"(training {wall:.1f} s, set-up {self.setup_s:.1f} s, total {total:.1f} s)\n"
            f"{stopped}"
            f"run directory: {self.dir} (progress.csv, TensorBoard: tensorboard --logdir {logdir}, "
            f"checkpoint {self.logger.checkpoint_path.name}, plot {plot.name})"
        )
        if self.config.json is not None:  # after the summary, which a failure here would lose
            Path(self.config.json).write_text(json.dumps(results, indent=2) + "\n")
        return results

    def close(self) -> None:
        """Close the collection batcher, stop the evaluator, close the logger and free the run directory.

        Safe to call twice.
        """
        try:
            if self._batcher is not None:
                self._batcher.close()
        finally:
            try:
                self.evaluator.close()
            finally:
                try:
                    self.logger.close()
                finally:
                    self._unlock()

    def _unlock(self) -> None:
        """Remove the run directory's lock (``lock_run``), once."""
        if self._lock is not None:
            self._lock.unlink(missing_ok=True)
            self._lock = None

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close the run; a ``KeyboardInterrupt`` (Ctrl-C) comes out as ``RunInterrupted``, naming the run."""
        try:
            self.close()
        finally:
            if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, RunInterrupted):
                raise RunInterrupted(
                    self.algo,
                    self.dir,
                    self.checkpointed,
                    every=self.config.checkpoint_every,
                    finished=self.finished,
                ) from exc


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (or SIGTERM, from ``rlstruct train``): where it is and how to continue it.

    A ``KeyboardInterrupt``, so code that catches one catches this too.
    ``rlstruct train`` reports it in one line on standard error.

    Attributes:
        algo: the algorithm's name.
        run_dir: the run's directory.
        checkpoint: the env steps of the last checkpoint ``--resume`` can
            continue from, or None when there is none.
        every: the run's ``checkpoint_every`` (0: no checkpoint before the
            end), which the message names when there is no checkpoint.
        finished: the env steps at which the run finished, when it was
            interrupted after saving its final checkpoint (its plot or JSON
            file may be missing); None before. There is nothing to continue
            then: the message says how to evaluate and plot the run instead.
    """

    def __init__(
        self, algo: str, run_dir: Path, checkpoint: int | None, *, every: int = 0, finished: int | None = None
    ) -> None:
        self.algo, self.run_dir, self.checkpoint = algo, run_dir, checkpoint
        self.every, self.finished = every, finished
        quoted = shlex.quote(str(run_dir))  # the commands below can be pasted, spaces and all
        if finished is not None:
            then = (
                f"the run had finished, at {finished} env steps, and saved its final checkpoint: "
                f"rlstruct eval {quoted} plays it, rlstruct plot {quoted} draws its curves"
            )
        elif checkpoint is None and every:
            then = (
                f"no checkpoint to continue from: the first was due at {every} env steps (--checkpoint-every)"
            )
        elif checkpoint is None:
            then = "no checkpoint to continue from (--checkpoint-every N saves them)"
        else:
            then = (
                f"its last checkpoint, at {checkpoint} env steps, continues with: "
                f"rlstruct train {algo} --resume {quoted}"
            )
        super().__init__(f"interrupted; run directory {run_dir}: {then}")


def _shortened(text: str, limit: int) -> str:
    """``text``, cut at the last space before ``limit`` characters and marked "..." when longer."""
    return text if len(text) <= limit else text[: text.rfind(" ", 0, limit)] + " ..."


def diverged(scalars: Mapping[str, float]) -> list[str]:
    """The scalars that are not finite, when a loss, the entropy or the training return is among them; else none.

    Other metrics may be NaN in a healthy run (``explained_variance`` of a
    target that does not vary), so they alone end nothing. The entropy
    counts: a loss weighs it even at ``ent_coef`` 0 (0 times NaN is NaN).
    ``Run.step`` ends a run on it, and A2C, PPO and IMPALA take no step on
    a batch or minibatch it names.

    Examples:
        >>> diverged({"value_loss": float("nan"), "explained_variance": float("nan")})
        ['explained_variance', 'value_loss']
        >>> diverged({"value_loss": 0.5, "explained_variance": float("nan")})
        []
        >>> diverged({"policy_loss": 0.1, "entropy": float("nan")})
        ['entropy']
    """
    bad = sorted(key for key, value in scalars.items() if not math.isfinite(value))
    if any(key in ("loss", "entropy", "train_return_mean") or key.endswith("_loss") for key in bad):
        return bad
    return []


class TrainingDiverged(FloatingPointError):
    """A run whose logged losses or training return stopped being finite (NaN or infinite).

    Raised by ``Run.step`` once the row holding them is written to
    ``progress.csv``, instead of training on with weights that are no longer
    numbers. ``rlstruct train`` reports it in one line on standard error
    (exit code 1). docs/troubleshooting.md says where NaNs come from.

    Attributes:
        algo: the algorithm's name.
        run_dir: the run's directory.
        env_steps: the env steps of the row that holds them.
        values: the scalars that are not finite, by name.
    """

    def __init__(self, algo: str, run_dir: Path, env_steps: int, values: dict[str, float]) -> None:
        self.algo, self.run_dir, self.env_steps, self.values = algo, run_dir, env_steps, values
        named = ", ".join(f"{key} is {value}" for key, value in values.items())
        super().__init__(
            f"{algo}: training diverged at {env_steps} env steps ({named}); run directory {run_dir} "
            f"(progress.csv holds the rows up to it). The usual causes: NaN or huge rewards or "
            f"observations from the environment, or too large a learning rate (see the docs' Tips "
            f"and troubleshooting)"
        )


class CannotResume(ValueError):
    """A run directory that ``resume`` names but no run can continue.

    It holds no checkpoint yet (the run was stopped before its first
    ``checkpoint_every``), its run finished, or its checkpoint is too old or
    cannot be read (truncated, empty, not a checkpoint). Raised when ``Run``
    is made, before it writes anything or starts a worker; or by
    ``Run.restore``, if a stored state does not fit the object it is loaded
    into (an edited config.json).

    ``rlstruct train`` reports it in one line on standard error (exit status 2).
    """


def lock_run(algo: str, directory: Path) -> Path:
    """Mark ``directory`` as trained by this process: a ``LOCK_NAME`` file holding its pid, made exclusively.

    A lock whose process is gone (killed with SIGKILL, a machine that
    stopped) or is this process (a run it made and did not close) is taken
    over. The caller removes the file when the run ends.

    Raises:
        CannotResume: if another live process holds the lock: two runs would
            write the same progress.csv and checkpoint.
    """
    path = directory / LOCK_NAME
    for _ in range(3):  # a lock taken over may be taken again by another process in between
        try:
            _make_whole(path)
        except FileExistsError:
            holder = _lock_holder(path)
            if holder is not None and holder != os.getpid():
                raise CannotResume(
                    f"{algo}: {str(directory)!r} is being trained by process {holder} (its {LOCK_NAME}); "
                    f"wait for that run to end or stop it (delete {LOCK_NAME} if no such run is going on)"
                ) from None
            path.unlink(missing_ok=True)  # its process is gone: the lock is stale
            continue
        return path
    raise CannotResume(
        f"{algo}: {str(directory)!r}: could not take {LOCK_NAME}, which other processes keep taking"
    )


def _make_whole(path: Path) -> None:
    """Make ``path`` holding this process's id, or raise ``FileExistsError``: never seen empty by another process.

    The id is written to a file of this process's, then linked to ``path``
    (which fails if ``path`` exists); where hard links are not supported,
    ``path`` is made exclusively and written.
    """
    own = path.with_name(f".{path.name}.{os.getpid()}")
    own.write_text(f"{os.getpid()}\n")
    try:
        os.link(own, path)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        with os.fdopen(fd, "w") as file:
            file.write(f"{os.getpid()}\n")
    finally:
        own.unlink(missing_ok=True)


def _lock_holder(path: Path) -> int | None:
    """The live process ``path`` names, or None when it names none (stale, empty, being written)."""
    try:
        pid = int(path.read_text().strip() or "0")
    except (OSError, ValueError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)  # no signal: only whether the process exists
    except ProcessLookupError:
        return None
    except PermissionError:  # another user's process
        return pid
    return pid


def _resumable(algo: str, path: Path, every: int) -> dict[str, Any]:
    """The checkpoint at ``path``, checked to be one a run of ``algo`` (checkpointing ``every``) can continue from."""
    if not path.exists():
        why = (
            f"the run stopped before its first checkpoint, due at {every} env steps (config.checkpoint_every)"
            if every
            else "the run stopped before its end and had no config.checkpoint_every; train it again"
        )
        raise CannotResume(f"{algo}: config.resume {str(path.parent)!r} holds no {path.name} yet: {why}")
    try:
        state: dict[str, Any] = load_checkpoint(path)
    except (ValueError, pickle.UnpicklingError) as error:
        raise CannotResume(
            f"{algo}: config.resume {str(path.parent)!r}: {' '.join(str(error).split())}"
        ) from error
    missing = [key for key in ("segment", "next_eval", "rng") if key not in state]
    if missing:
        raise CannotResume(
            f"{algo}: config.resume {str(path.parent)!r}: its {path.name} lacks {missing}; "
            "it was written by an older version and cannot be continued"
        )
    if state.get("finished", False):
        raise CannotResume(
            f"{algo}: config.resume {str(path.parent)!r}: the run finished at {state['env_steps']} env steps; "
            "there is nothing to continue"
        )
    return state
