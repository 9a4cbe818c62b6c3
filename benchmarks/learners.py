"""The learners on what users bring: an agent with memory in a scheme, and discrete observations (POPGym).

Rows (final greedy return over 10 episodes, seed 0, with the evaluation
seeds ``rlstruct train`` uses; each target is a threshold the row's ratio to
it must reach):

- **scheme, memory, in process**: a recurrent ``ActorCritic`` (a GRU per
  head, hidden 64, orthogonal initialisation, running observation
  statistics: what ``rlstruct train ppo --env CartPoleNoVel-v1`` builds) on ``CartPoleNoVel-v1``
  trained by a synchronous, centralised ``Scheme`` in this process
  (``distributed.PPO`` with PPO's defaults, ``MinibatchBuffer(n_epochs=20,
  minibatch_size=256)``: one minibatch of 8 whole rows of 32 steps, 8
  environments), the learning rate and clip range annealed to 0 as
  ``ppo.train`` anneals them, for 100k env steps. Target: >= 475.
- **scheme, memory, 2 Ray collection workers**: the same scheme with two
  remote collection workers of 4 environments each (8 in all), on a local Ray
  instance. No target: it shows the scheme runs there.
- **POPGym RepeatPreviousEasy**: ``rlstruct train ppo --env
  popgym:popgym-RepeatPreviousEasy-v0 --recurrent --total-steps 100000`` (no
  setting for this id: the defaults any id gets), and the env steps at which
  its greedy evaluation (every 10,240 env steps) first reaches 0.95 (the
  maximum is 1.0), against sb3-contrib's ``RecurrentPPO`` with its defaults
  (``MlpLstmPolicy``, one environment, observations one-hot as
  Stable-Baselines3 encodes a Discrete space) evaluated the same way at the
  same env steps. Target: a final return >= 0.95.

sb3-contrib and popgym are not dependencies: without popgym the POPGym rows
are skipped, without sb3-contrib they have no baseline. ``--quick`` (for CI)
runs 1,024 env steps of the in-process scheme and 2,048 of POPGym, without
the Ray and sb3-contrib runs.

    python benchmarks/learners.py --json learners.json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import tempfile
from pathlib import Path
from typing import Any

import torch
from _common import Row, evaluations, first_reaching, parse_args, report

from rlstruct import GymEnv
from rlstruct.algos import ppo
from rlstruct.algos.evaluation import Evaluator, env_spaces, eval_seed
from rlstruct.distributed import PPO, Collection, Learner, MinibatchBuffer, Scheme
from rlstruct.learning import ActorCritic

NO_VEL = "CartPoleNoVel-v1"
POPGYM = "popgym:popgym-RepeatPreviousEasy-v0"
EVAL_EVERY = 10_240


def scheme_return(total: int, remote_workers: int, seed: int = 0) -> float:
    """The final greedy return of a recurrent ActorCritic trained by a synchronous, centralised scheme."""
    spaces = env_spaces(NO_VEL)
    agent_args = {
        "obs_dim": spaces.obs_dim,
        "n_actions": spaces.n_actions,
        "hidden": (64, 64),
        "recurrent": True,
        "normalize": True,
        "orthogonal": True,
    }
    defaults = ppo.Config()
    collection = Collection(
        n_envs=8 // max(1, remote_workers), n_steps=32, remote_workers=remote_workers, worker_cpus=0.5
    )
    scheme = Scheme(
        ActorCritic,
        agent_args,
        GymEnv,
        {"env": NO_VEL},
        PPO,
        functools.partial(
            MinibatchBuffer, n_epochs=defaults.n_epochs, minibatch_size=defaults.minibatch_size
        ),
        collection=collection,
        seed=seed,
    )
    with Learner(scheme, total, progress=False) as learner:
        while not learner.done():
            learner.step()
            progress = max(0.0, 1.0 - learner.env_steps / total)  # annealed as ppo.train anneals
            learner.update_algorithm_parameter("lr", defaults.lr * progress)
            learner.update_algorithm_parameter("clip", defaults.clip * progress)
        weights = scheme.weights()
    with Evaluator(
        ActorCritic,
        agent_args,
        NO_VEL,
        n_episodes=10,
        max_steps=spaces.max_episode_steps,
        seed=eval_seed(seed),
    ) as evaluator:
        return evaluator.evaluate(weights, total).mean


def rlstruct_popgym(total: int, root: Path) -> tuple[float, list[tuple[int, float]]]:
    """``rlstruct train ppo --env POPGYM --recurrent``: the final return and every evaluation."""
    with contextlib.redirect_stdout(io.StringIO()):
        results = ppo.train(
            ppo.Config(
                env=POPGYM,
                recurrent=True,
                total_steps=total,
                eval_every=EVAL_EVERY,
                run_dir=str(root),
                progress=False,
            )
        )
    return float(results["eval_return_mean"]), evaluations(results["run_dir"])


def sb3_popgym(total: int) -> list[tuple[int, float]]:
    """sb3-contrib's RecurrentPPO with its defaults: the greedy return of 10 episodes every EVAL_EVERY steps."""
    import gymnasium as gym
    import numpy as np
    import popgym  # noqa: F401  (registers the ids)
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback

    def evaluate(model: Any) -> float:
        returns = []
        for episode in range(10):
            env = gym.make(POPGYM.split(":")[1])
            obs, _ = env.reset(seed=eval_seed(0) + episode)
            state, start, done, total_reward = None, np.ones((1,), dtype=bool), False, 0.0
            while not done:
                action, state = model.predict(obs, state=state, episode_start=start, deterministic=True)
                obs, reward, terminated, truncated, _ = env.step(int(action))
                total_reward += float(reward)
                done, start = terminated or truncated, np.zeros((1,), dtype=bool)
            env.close()
            returns.append(total_reward)
        return sum(returns) / len(returns)

    curve: list[tuple[int, float]] = []

    class Every(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % EVAL_EVERY == 0:
                curve.append((self.num_timesteps, evaluate(self.model)))
            return True

    model = RecurrentPPO("MlpLstmPolicy", POPGYM.split(":")[1], seed=0, device="cpu")
    model.learn(total, callback=Every())
    curve.append((total, evaluate(model)))
    return curve


def main() -> None:
    def extra(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--skip-ray", action="store_true", help="leave out the Ray row")

    args, _ = parse_args(__doc__, extra=extra)
    torch.set_num_threads(1)
    rows: list[Row] = []
    total = 1_024 if args.quick else 100_000
    rows.append(
        Row("scheme, memory, in process: return", scheme_return(total, 0), "return", 475.0, 1.0, True)
    )
    if not (args.quick or args.skip_ray):
        import ray

        ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False)
        try:
            rows.append(
                Row("scheme, memory, 2 Ray collection workers: return", scheme_return(total, 2), "return")
            )
        finally:
            ray.shutdown()
    if importlib.util.find_spec("popgym") is not None:
        popgym_total = 2_048 if args.quick else 100_000
        with tempfile.TemporaryDirectory() as root:
            final, ours = rlstruct_popgym(popgym_total, Path(root))
        rows.append(Row("POPGym RepeatPreviousEasy: final return", final, "return", 0.95, 1.0, True))
        theirs = None
        if not args.quick and importlib.util.find_spec("sb3_contrib") is not None:
            theirs = first_reaching(sb3_popgym(popgym_total), 0.95)
        reached = first_reaching(ours, 0.95)
        rows.append(
            Row(
                "POPGym RepeatPreviousEasy: env steps to 0.95"
                + ("" if reached is not None else " (not reached)"),
                float(reached if reached is not None else popgym_total),
                "env steps",
                None if theirs is None else float(theirs),
            )
        )
    report(args, rows, value_label="rlstruct", baseline_label="threshold / sb3-contrib")


if __name__ == "__main__":
    main()
