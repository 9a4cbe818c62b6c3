"""Agents with memory: replaying a recurrent agent over [B, T] batches, and recurrent PPO's env steps/s.

Rows:

- Sequence replay of a GRU actor-critic (``ActorCritic(obs_dim=4, n_actions=2,
  hidden=(64, 64), recurrent=True)``: a GRU(4, 64) and a Linear(64, 64)-Tanh-
  Linear head for the policy, the same for the value), forward and backward
  (loss: the sum of the logits and the values) over a [B=8, T=32] batch of
  CartPole-v1 collected by a ``LocalBatcher``: ``rlstruct.replay_agent``
  against the same two GRUs and heads written in plain torch and called
  directly over the same observations from the same initial state (one GRU
  after the other, where the agent runs its two side by side on two threads:
  ``rlstruct.learning.run_in_parallel``).
  Milliseconds per call (lower is better):

  a. no episode starts inside a row (a collected batch whose in-row episode
     starts are cleared): one GRU call per memory (``forward_sequence``).
     Target: <= 1.1x the plain model.
  b. the collected batch as it is, with episode starts inside rows (the
     memories restart there: ``run_memory`` cuts the rows into episode
     pieces, padded into one call). No target; the plain model, which cannot
     restart, is the yardstick.
  c. the step-by-step fallback: the agent with ``forward_sequence`` disabled,
     replayed one ``forward`` per step. No target.

- Recurrent PPO on CartPoleNoVel-v1 (CartPole-v1 observing only the cart
  position and the pole angle, registered by rlstruct): env steps per second over a fixed
  budget (``env_steps / wall_s`` of ``rlstruct.algos.ppo.train``, set-up and
  evaluation excluded), PPO's defaults with ``recurrent=True,
  normalize=True``. Baseline: sb3-contrib's ``RecurrentPPO`` with RL
  Baselines3 Zoo's settings for the same task (``MlpLstmPolicy``, 8 envs x 32
  steps, one minibatch of 256, 20 epochs, observations normalised by
  ``VecNormalize``), its ``learn`` call timed. Target: >= 2x (higher is
  better). A second row, without a target, gives rlstruct's rate with LSTM
  memories (``--memory lstm``), the cell sb3-contrib's policy has. The runs
  take turns (rlstruct GRU, sb3-contrib, rlstruct LSTM), ``--repeats`` times
  (default 3; it also sets the replay rows' repeats), and the medians are
  reported.

The PPO rows have their baseline when ``sb3_contrib`` is installed (it is not
a dependency); without it they have none. ``--quick`` (for CI) runs a
tiny replay budget and 1,024 env steps of rlstruct alone.

    python benchmarks/memory.py --json memory.json
"""

from __future__ import annotations

import dataclasses
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import Budget, Row, compare, parse_args, report

import rlstruct
from rlstruct.learning.actor_critic import ActorCritic
from rlstruct.trajectories import Trajectories

ENV_NO_VEL = "CartPoleNoVel-v1"
AGENT_ARGS: dict[str, Any] = {"obs_dim": 4, "n_actions": 2, "hidden": (64, 64), "recurrent": True}
B, T = 8, 32
PPO_STEPS = 20_000


# ------------------------------------------------------------------ sequence replay


class PlainRecurrentActorCritic(torch.nn.Module):
    """The agent's networks written in plain torch: a GRU and an MLP head for the policy, the same for the value."""

    def __init__(self, obs_dim: int = 4, hidden: int = 64, n_actions: int = 2) -> None:
        super().__init__()
        self.gru_pi = torch.nn.GRU(obs_dim, hidden, batch_first=True)
        self.gru_v = torch.nn.GRU(obs_dim, hidden, batch_first=True)
        self.pi = torch.nn.Sequential(
            torch.nn.Linear(hidden, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, n_actions)
        )
        self.v = torch.nn.Sequential(
            torch.nn.Linear(hidden, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
        )

    def copy_from(self, agent: ActorCritic) -> PlainRecurrentActorCritic:
        assert agent.actor_memory is not None and agent.critic_memory is not None
        self.gru_pi.load_state_dict(agent.actor_memory.state_dict())
        self.gru_v.load_state_dict(agent.critic_memory.state_dict())
        self.pi.load_state_dict(agent.actor.state_dict())
        self.v.load_state_dict(agent.critic.state_dict())
        return self

    def forward(
        self, obs: torch.Tensor, h_pi: torch.Tensor, h_v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [B, T, n_actions] and values [B, T] from observations [B, T, d] and states [B, H]."""
        x_pi, _ = self.gru_pi(obs, h_pi.unsqueeze(0))
        x_v, _ = self.gru_v(obs, h_v.unsqueeze(0))
        return self.pi(x_pi), self.v(x_v).squeeze(-1)


class StepByStep(ActorCritic):
    """The same agent without its one-call replay: ``replay_agent`` falls back to ``forward`` per step."""

    def forward_sequence(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        return None


def collected_batches(agent: ActorCritic, n: int) -> list[Trajectories]:
    """The first ``n`` [8, 32] batches a ``LocalBatcher`` collects on CartPole-v1 with ``agent``'s weights."""
    batcher = rlstruct.LocalBatcher(
        ActorCritic, AGENT_ARGS, rlstruct.GymEnv, {"env": "CartPole-v1"}, n_envs=B, n_timesteps=T
    )
    batcher.update(agent.state_dict())
    batcher.reset()
    batches = []
    for _ in range(n):
        batcher.execute()
        batch = batcher.get()
        batches.append(batch)
    return batches


def without_inner_starts(batch: Trajectories) -> Trajectories:
    """``batch`` with no episode starting inside a row (``initial_state`` False except at t = 0)."""
    steps = batch.trajectories.clone()
    flags = steps["initial_state"].clone()
    flags[:, 1:] = False
    steps.set("initial_state", flags)
    next_flags = steps["next/initial_state"].clone()  # the flags of steps t + 1
    next_flags[:, :-1] = False
    steps.set("next/initial_state", next_flags)
    return Trajectories(batch.info, steps)


def replay_rows(budget: Budget) -> list[Row]:
    torch.manual_seed(0)
    agent = ActorCritic(**AGENT_ARGS)
    fallback = StepByStep(**AGENT_ARGS)
    fallback.load_state_dict(agent.state_dict())
    plain = PlainRecurrentActorCritic().copy_from(agent)

    # a later batch: the rows start mid-episode, from the memories' stored (non-zero) states
    batches = collected_batches(agent, 3)
    inner = batches[-1]
    starts = inner.trajectories["initial_state"]
    assert bool(starts[:, 1:].any()), "the collected batch should have episode starts inside its rows"
    whole = without_inner_starts(inner)
    obs = inner.trajectories["observation"]
    h_pi, h_v = inner.info["agent_state/h_pi"], inner.info["agent_state/h_v"]
    h_pi = h_pi * (~starts[:, 0]).unsqueeze(-1)  # a row that begins an episode begins from zeros
    h_v = h_v * (~starts[:, 0]).unsqueeze(-1)

    def replay(model: ActorCritic, batch: Trajectories) -> Any:
        def call() -> None:
            model.zero_grad(set_to_none=True)
            out = rlstruct.replay_agent(model, batch)
            (out["logits"].sum() + out["value"].sum()).backward()

        return call

    def baseline() -> None:
        plain.zero_grad(set_to_none=True)
        logits, value = plain(obs, h_pi, h_v)
        (logits.sum() + value.sum()).backward()

    # the one-call replay of (a) computes what the plain model computes; the fallback what (b) computes
    with torch.no_grad():
        out = rlstruct.replay_agent(agent, whole)
        logits, value = plain(obs, h_pi, h_v)
        torch.testing.assert_close(out["logits"], logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out["value"], value, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            rlstruct.replay_agent(agent, inner)["value"],
            rlstruct.replay_agent(fallback, inner)["value"],
            atol=1e-5,
            rtol=1e-5,
        )

    n_pieces = int(starts[:, 1:].sum()) + B
    t_whole, t_inner, t_steps, t_plain = compare(
        [replay(agent, whole), replay(agent, inner), replay(fallback, inner), baseline], budget
    )
    ms = 1e3
    return [
        Row(
            "GRU replay [8, 32], fwd+bwd: no episode start inside a row, ms",
            t_whole * ms,
            "ms",
            t_plain * ms,
            1.1,
        ),
        Row(
            f"GRU replay [8, 32], fwd+bwd: {n_pieces} episode pieces (real batch), ms",
            t_inner * ms,
            "ms",
            t_plain * ms,
        ),
        Row(
            "GRU replay [8, 32], fwd+bwd: step by step (no forward_sequence), ms",
            t_steps * ms,
            "ms",
            t_plain * ms,
        ),
    ]


# ------------------------------------------------------------------ recurrent PPO


def rlstruct_ppo_rate(steps: int, root: Path, memory: str = "gru") -> float:
    """Env steps per second of recurrent PPO (set-up before training and evaluation not counted)."""
    from rlstruct.algos import ppo

    config = ppo.Config(
        env=ENV_NO_VEL,
        total_steps=steps,
        recurrent=True,
        memory=memory,
        normalize=True,
        n_processes=2,
        eval_every=10 * steps,
        eval_episodes=1,  # the final evaluation is not timed; keep it short
        run_dir=str(root),
        progress=False,
    )
    results = ppo.train(config)
    return float(results["env_steps"] / results["wall_s"])


def sb3_ppo_rate(steps: int) -> float:
    """Env steps per second of sb3-contrib's RecurrentPPO with RL Zoo's CartPoleNoVel-v1 settings (``learn`` timed)."""
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    def linear(value: float) -> Any:
        return lambda progress: progress * value

    env = VecNormalize(
        make_vec_env(ENV_NO_VEL, n_envs=8, seed=0), norm_obs=True, norm_reward=False, gamma=0.98
    )
    model = RecurrentPPO(
        "MlpLstmPolicy", env, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8,
        learning_rate=linear(1e-3), clip_range=linear(0.2), ent_coef=0.0, seed=0, device="cpu",
        policy_kwargs={
            "ortho_init": False, "activation_fn": torch.nn.ReLU, "lstm_hidden_size": 64,
            "enable_critic_lstm": True, "net_arch": {"pi": [64], "vf": [64]},
        },
    )  # fmt: skip
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - start
    env.close()
    return model.num_timesteps / wall


def ppo_rows(steps: int, repeats: int, with_sb3: bool) -> list[Row]:
    """Recurrent PPO with a GRU (rlstruct's default, the row with the target) and with an LSTM (sb3-contrib's)."""
    rates: dict[str, list[float]] = {"gru": [], "lstm": []}
    base: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):  # in turn, so that the machine's drifts hit all alike
            rates["gru"].append(rlstruct_ppo_rate(steps, Path(tmp), "gru"))
            if with_sb3:
                base.append(sb3_ppo_rate(steps))
            rates["lstm"].append(rlstruct_ppo_rate(steps, Path(tmp), "lstm"))
    for memory, values in rates.items():
        print(
            f"recurrent PPO env steps/s in run order: rlstruct {memory} {[round(r) for r in values]}", end=""
        )
        pairs = [f"{r:.2f}" for r in np.divide(values, base)] if base else []
        print(f", sb3-contrib {[round(r) for r in base]}, ratios {pairs}" if base else "")
    baseline = statistics.median(base) if base else None
    name = f"recurrent PPO {ENV_NO_VEL}, {steps} env steps, env steps/s"
    return [
        Row(f"{name}: GRU memories", statistics.median(rates["gru"]), "steps/s", baseline, 2.0, True),
        Row(f"{name}: LSTM memories", statistics.median(rates["lstm"]), "steps/s", baseline, None, True),
    ]


def main() -> None:
    args, budget = parse_args(__doc__)
    torch.set_num_threads(1)
    np.seterr(all="ignore")
    with_sb3 = importlib.util.find_spec("sb3_contrib") is not None and not args.quick
    # a call takes about 10 ms: loops of at least 50 ms (several calls) steady the medians on a busy machine
    rows = replay_rows(budget if args.quick else dataclasses.replace(budget, min_time=0.05))
    repeats = args.repeats or (1 if args.quick else 3)
    rows += ppo_rows(1_024 if args.quick else PPO_STEPS, repeats, with_sb3)
    report(args, rows, value_label="rlstruct", baseline_label="baseline")


if __name__ == "__main__":
    main()
