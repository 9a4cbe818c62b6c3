"""Tutorial 9: an attention agent over its history, trained by the built-in PPO.

Run it with ``python tutorials/09_attention_history.py`` (CartPole with the
velocities hidden, 200k env steps), ``--env CueMemory-v0`` (remember a cue
over 10 blank steps), or ``--quick`` for a tiny budget. It writes, top to
bottom:

1. an ``Agent`` that asks for the last n steps of its episode
   (``require_history``) and attends from the current observation over
   them: no recurrent state at all;
2. its ``forward_sequence``: the same attention for every step of a stored
   ``[B, T]`` batch in one call, from the windows ``history_windows`` rebuilds
   (exactly those the agent saw while collecting);
3. what PPO needs beside that (``rlstruct.learning.OnPolicyAgent``): the
   log-probability and entropy of its actions (``CategoricalPolicy``), the
   value of the observation reached after each step (``bootstrap_values``,
   from the window ``window_after`` makes) and its running observation
   statistics (``update_obs_norm``);
4. one call: ``ppo.train`` with ``agent=AttentionAgent``. PPO replays an
   agent with a history on whole rows, so its attention is trained on the
   windows it saw.

The returns it reaches on the 2-core machine are in docs/performance.md.
"""

from __future__ import annotations

import argparse

import torch

from rlstruct import Agent, DictTensor, TemporalDictTensor, Trajectories
from rlstruct.algos import ppo
from rlstruct.history import history_windows, window_after
from rlstruct.learning import CategoricalPolicy
from rlstruct.normalize import ObservationNormalizer


class Encoder(torch.nn.Module):
    """The current observation attends over the window of the previous ones."""

    def __init__(self, obs_dim: int, n: int, d: int) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(obs_dim, d)
        self.age = torch.nn.Embedding(n + 1, d)  # 0: now; k: k steps ago
        self.attention = torch.nn.MultiheadAttention(d, num_heads=4, batch_first=True)
        self.out = torch.nn.Sequential(
            torch.nn.LayerNorm(d), torch.nn.Linear(d, d), torch.nn.Tanh()
        )

    def forward(
        self, window: torch.Tensor, lengths: torch.Tensor, now: torch.Tensor
    ) -> torch.Tensor:
        """Features [N, d] from the window [N, n, obs_dim] and now [N, obs_dim].

        The window is left-aligned: its first ``lengths`` entries are real.
        """
        n = window.shape[1]
        j = torch.arange(n, device=window.device)
        # entry j is lengths - j steps old
        ages = (lengths.unsqueeze(1) - j).clamp(min=0)
        past = self.embed(window) + self.age(ages)
        query = (self.embed(now) + self.age.weight[0]).unsqueeze(1)
        tokens = torch.cat([past, query], 1)  # [N, n + 1, d]
        ignore = torch.cat(
            [
                j >= lengths.unsqueeze(1),
                torch.zeros_like(lengths, dtype=torch.bool)[:, None],
            ],
            1,
        )
        attended, _ = self.attention(
            query, tokens, tokens, key_padding_mask=ignore, need_weights=False
        )
        return self.out((query + attended).squeeze(1))  # type: ignore[no-any-return]


class AttentionAgent(CategoricalPolicy, Agent):
    """A policy and a value, each attending over the last ``n`` observations."""

    def __init__(self, obs_dim: int, n_actions: int, n: int = 16, d: int = 64) -> None:
        super().__init__()
        self.n = n
        # buffers: they travel with the weights
        self.obs_norm = ObservationNormalizer((obs_dim,))
        self.actor, self.critic = Encoder(obs_dim, n, d), Encoder(obs_dim, n, d)
        self.policy, self.value = torch.nn.Linear(d, n_actions), torch.nn.Linear(d, 1)
        with torch.no_grad():
            self.policy.weight.mul_(0.01)  # an almost uniform first policy

    def require_history(self) -> int:
        return self.n  # the last n steps of the episode, kept across execute() calls

    def heads(
        self, window: TemporalDictTensor, observation: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [N, k], value [N]) from windows [N, n], observations [N, obs_dim]."""
        past, now = self.obs_norm(window["observation"]), self.obs_norm(observation)
        logits = self.policy(self.actor(past, window.lengths, now))
        return logits, self.value(self.critic(past, window.lengths, now)).squeeze(-1)

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        assert history is not None  # require_history() asks for it
        logits, value = self.heads(history, observation["observation"])
        action, log_prob = self.act(logits, agent_info)  # greedy where z says so
        out = {"action": action, "log_prob": log_prob, "logits": logits, "value": value}
        return DictTensor(out), state

    def windows(
        self, before: TemporalDictTensor | None, observation: TemporalDictTensor
    ) -> TemporalDictTensor:
        """The window of observations before every step of a batch: ``[B * T, n]``."""
        mine = None if before is None else before.get(["observation"])
        return history_windows(
            mine, observation.get(["observation"]), observation["initial_state"], self.n
        )

    def forward_sequence(
        self,
        state: DictTensor,
        observation: TemporalDictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> TemporalDictTensor:
        b, t = observation.n_elems(), observation.n_timesteps()
        logits, value = self.heads(
            self.windows(history, observation), observation["observation"].flatten(0, 1)
        )
        return TemporalDictTensor(
            {"logits": logits.unflatten(0, (b, t)), "value": value.view(b, t)},
            observation.lengths,
        )

    def bootstrap_values(self, batch: Trajectories) -> torch.Tensor:
        """V [B, T] of the observation reached after each step, from its window."""
        steps = batch.trajectories
        # the window before step 0, which the batcher records for agents wanting the
        # last n steps
        before = TemporalDictTensor(
            batch.info.truncate_key("history/"), batch.info["history_length"]
        )
        after = window_after(
            self.windows(before, steps),
            DictTensor({"observation": steps["observation"].flatten(0, 1)}),
        )
        _, value = self.heads(after, steps["next/observation"].flatten(0, 1))
        return value.view(steps.n_elems(), steps.n_timesteps())

    @torch.no_grad()
    def update_obs_norm(self, steps: TemporalDictTensor) -> None:
        """PPO calls it after each update, with the batch that update used."""
        self.obs_norm.update(steps["observation"][steps.mask()])


def main() -> None:
    parser = argparse.ArgumentParser(
        description="An attention agent over its history, trained with PPO."
    )
    parser.add_argument("--env", default="CartPoleNoVel-v1")
    parser.add_argument(
        "--steps", type=int, default=200_000, help="env steps of training"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a tiny budget")
    args = parser.parse_args()
    ppo.train(
        ppo.Config(
            env=args.env,
            agent=AttentionAgent,  # made with obs_dim and n_actions of the env
            total_steps=2_048 if args.quick else args.steps,
            seed=args.seed,
            lr=3e-4,
            n_epochs=10,
            minibatch_size=128,  # 4 whole rows of 32 steps
            eval_every=20_480,
            progress=False,
        )
    )


if __name__ == "__main__":
    main()
