"""Tutorial 9: an attention agent over its history learns tasks that need memory.

Run it with ``python tutorials/09_attention_history.py`` (CartPole with the
velocities hidden, 200k env steps), ``--env CueMemory-v0`` (remember a cue
over 10 blank steps), or ``--quick`` for a tiny budget. It writes, top to
bottom:

1. an ``Agent`` that asks for the last n steps of its episode
   (``require_history``) and attends from the current observation over
   them: no recurrent state at all;
2. its ``forward_sequence``: the same attention for every step of a stored
   ``[B, T]`` batch in one call, from the windows ``history_windows`` rebuilds
   (exactly those the agent saw while collecting, across episode starts and
   ``execute()`` calls);
3. the value of the observation reached after each step, from the window
   ``window_after`` makes (the bootstrap where an episode was truncated or a
   row ends);
4. PPO on whole rows: clipped surrogate, value loss, running observation
   statistics that travel with the weights, and a greedy evaluation.

On the 2-core machine (seed 0) it ends at a greedy return of 500.0 on
CartPoleNoVel-v1 after 199,936 env steps (500 at every evaluation from 123k
on), and at 1.0, the optimum, on CueMemory-v0 after 49,920.
"""

from __future__ import annotations

import argparse

import torch

from rlstruct import (
    Agent,
    DictTensor,
    GymEnv,
    MultiprocessBatcher,
    TemporalDictTensor,
    Trajectories,
    gae,
    replay_agent,
)
from rlstruct.algos.evaluation import Evaluator, env_spaces
from rlstruct.history import history_windows, window_after
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


class AttentionAgent(Agent):
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
        action = torch.multinomial(
            logits.softmax(-1), 1, generator=self.generator
        ).squeeze(-1)
        if "greedy" in agent_info:  # evaluation
            action = torch.where(agent_info["greedy"], logits.argmax(-1), action)
        log_prob = logits.log_softmax(-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        return DictTensor(
            {"action": action, "log_prob": log_prob, "logits": logits, "value": value}
        ), state

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


def bootstrap(agent: AttentionAgent, batch: Trajectories) -> torch.Tensor:
    """V of the observation reached after each step [B, T], from the window after it."""
    steps = batch.trajectories
    # the window before step 0, which the batcher records for agents wanting the last
    # n steps
    before = TemporalDictTensor(
        batch.info.truncate_key("history/"), batch.info["history_length"]
    )
    windows = agent.windows(before, steps)
    after = window_after(
        windows, DictTensor({"observation": steps["observation"].flatten(0, 1)})
    )
    _, value = agent.heads(after, steps["next/observation"].flatten(0, 1))
    return value.view(steps.n_elems(), steps.n_timesteps())


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
    total = 2_048 if args.quick else args.steps
    n_envs, n_steps, epochs, rows_per_minibatch = 8, 32, 10, 4
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    spaces = env_spaces(args.env)
    agent_args = {"obs_dim": spaces.obs_dim, "n_actions": spaces.n_actions}
    learner = AttentionAgent(**agent_args)  # type: ignore[arg-type]
    optimizer = torch.optim.Adam(learner.parameters(), lr=3e-4, eps=1e-5)
    batcher = MultiprocessBatcher(
        AttentionAgent,
        agent_args,
        GymEnv,
        {"env": args.env},
        n_envs=n_envs // 2,
        n_timesteps=n_steps,
        n_processes=2,
        seed=args.seed,
        weights=learner.state_dict(),
    )
    evaluator = Evaluator(
        AttentionAgent,
        agent_args,
        args.env,
        n_episodes=10,
        max_steps=spaces.max_episode_steps,
        seed=10**6,
    )
    env_steps = 0
    with batcher, evaluator:
        batcher.reset()
        while env_steps + n_envs * n_steps <= total:
            batcher.execute()
            batch = batcher.get()
            steps = batch.trajectories
            env_steps += n_envs * n_steps
            with torch.no_grad():
                advantage = gae(
                    steps["next/reward"],
                    value=steps["value"],
                    next_value=bootstrap(learner, batch),
                    terminated=steps["next/terminated"],
                    done=steps["next/done"],
                    gamma=0.98,
                    lam=0.8,
                )
                target = advantage + steps["value"]
            fraction = 1.0 - env_steps / total  # the learning rate decays linearly to 0
            for group in optimizer.param_groups:
                group["lr"] = 3e-4 * fraction
            for _ in range(epochs):
                for rows in torch.randperm(n_envs).split(rows_per_minibatch):
                    # forward_sequence: one call
                    out = replay_agent(learner, batch[rows])
                    log_prob = (
                        out["logits"]
                        .log_softmax(-1)
                        .gather(-1, steps["action"][rows].unsqueeze(-1))
                        .squeeze(-1)
                    )
                    ratio = (log_prob - steps["log_prob"][rows]).exp()
                    adv = advantage[rows]
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                    clip = 0.2 * fraction
                    policy_loss = -torch.min(
                        ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv
                    ).mean()
                    value_loss = 0.5 * (out["value"] - target[rows]).pow(2).mean()
                    optimizer.zero_grad()
                    (policy_loss + 0.5 * value_loss).backward()
                    torch.nn.utils.clip_grad_norm_(learner.parameters(), 0.5)
                    optimizer.step()
            # after the update that used the old ones
            learner.obs_norm.update(steps["observation"].flatten(0, 1))
            batcher.update(learner.state_dict())
            # greedy evaluations run alongside training
            if (done := evaluator.poll()) is not None:
                print(
                    f"greedy return {done.mean:.1f} "
                    f"with the weights of {done.env_steps} env steps"
                )
            if args.quick or env_steps % 20_480 == 0:
                print(
                    f"{env_steps} env steps: policy loss {policy_loss.item():.3f}, "
                    f"value loss {value_loss.item():.3f}"
                )
                # does nothing if one is running
                evaluator.start(learner.state_dict(), env_steps)
        result = evaluator.evaluate(learner.state_dict(), env_steps)
    print(
        f"{args.env}: final greedy return {result.mean:.1f} "
        f"over {len(result.returns)} episodes after {env_steps} env steps"
    )


if __name__ == "__main__":
    main()
