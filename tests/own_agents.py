"""Agents a user writes for the built-in learners, as docs/agents.md says: none of them comes from the package.

The first ones speak ``rlstruct.learning.OnPolicyAgent`` (A2C, PPO, IMPALA):
its step outputs ``action``, ``log_prob`` and ``value`` (and what the policy
needs again: ``logits``), and it gives the log-probability and entropy of
stored actions and the values that bootstrap the returns. ``QAgent`` speaks
DQN's protocol (``q_values`` and ``epsilon``), ``GaussianActor`` SAC's
(``sample``, ``action_dim``, ``uniform``, its own ``make_critics``), both
written without the package's mixins. Worker processes import this module
by name (the tests put its folder on ``sys.path``).
"""

from __future__ import annotations

import itertools
import math

import torch

from rlstruct import Agent, DictTensor, TemporalDictTensor, Trajectories
from rlstruct.history import history_windows, window_after
from rlstruct.learning.soft_actor_critic import SquashedGaussianPolicy


def categorical(logits: torch.Tensor, agent_info: DictTensor, generator: torch.Generator) -> torch.Tensor:
    """A sampled action per row, the most likely one where ``agent_info["greedy"]`` is True."""
    action = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
    if "greedy" in agent_info:
        action = torch.where(agent_info["greedy"], logits.argmax(-1), action)
    return action


class CategoricalPolicy:
    """The methods of ``OnPolicyAgent`` for a policy whose outputs hold ``logits``."""

    action_key = "action"

    def action_log_prob(self, output: DictTensor, action: torch.Tensor) -> torch.Tensor:
        return output["logits"].log_softmax(-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)

    def action_entropy(self, output: DictTensor) -> torch.Tensor:
        log_p = output["logits"].log_softmax(-1)
        return -(log_p.exp() * log_p).sum(-1)


class MlpAgent(CategoricalPolicy, Agent):
    """No state: two small networks on the flat observation; z ``task`` (an int per row) is added to it."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 32) -> None:
        super().__init__()
        self.policy = torch.nn.Sequential(
            torch.nn.Linear(obs_dim, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, n_actions)
        )
        self.critic = torch.nn.Sequential(
            torch.nn.Linear(obs_dim, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
        )

    def inputs(self, observation: torch.Tensor, agent_info: DictTensor) -> torch.Tensor:
        x = observation.to(torch.float32)
        return x + agent_info["task"].unsqueeze(-1) if "task" in agent_info else x

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        x = self.inputs(observation["observation"], agent_info)
        logits, value = self.policy(x), self.critic(x).squeeze(-1)
        action = categorical(logits, agent_info, self.generator)
        out = {"action": action, "logits": logits, "value": value}
        out["log_prob"] = self.action_log_prob(DictTensor(out), action)
        return DictTensor(out), state

    def bootstrap_values(self, batch: Trajectories) -> torch.Tensor:
        steps = batch.trajectories
        z = batch.info.truncate_key("agent_info/")
        task = z["task"].unsqueeze(1).expand(-1, steps.n_timesteps()) if "task" in z else None
        x = steps["next/observation"].to(torch.float32)
        if task is not None:
            x = x + task.unsqueeze(-1)
        return self.critic(x).squeeze(-1)  # type: ignore[no-any-return]


class GruAgent(CategoricalPolicy, Agent):
    """A memory (one GRU cell shared by the policy and the value) replayed step by step: no ``forward_sequence``."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 16) -> None:
        super().__init__()
        self.cell = torch.nn.GRUCell(obs_dim, hidden)
        self.policy, self.critic = torch.nn.Linear(hidden, n_actions), torch.nn.Linear(hidden, 1)

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        return DictTensor({"h": torch.zeros(n, self.cell.hidden_size)})

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        h = self.cell(observation["observation"].to(torch.float32), state["h"])
        logits, value = self.policy(h), self.critic(h).squeeze(-1)
        action = categorical(logits, agent_info, self.generator)
        out = {"action": action, "logits": logits, "value": value, "h_after": h}
        out["log_prob"] = self.action_log_prob(DictTensor(out), action)
        return DictTensor(out), DictTensor({"h": h})

    def bootstrap_values(self, batch: Trajectories) -> torch.Tensor:
        """One more step of the memory stored after each step (``h_after``), on the reached observation."""
        steps = batch.trajectories
        h = self.cell(
            steps["next/observation"].flatten(0, 1).to(torch.float32), steps["h_after"].flatten(0, 1)
        )
        return self.critic(h).view(steps.n_elems(), steps.n_timesteps())  # type: ignore[no-any-return]


class WindowAgent(CategoricalPolicy, Agent):
    """No state, a history: the mean of the last ``n`` observations beside the current one."""

    def __init__(self, obs_dim: int, n_actions: int, n: int = 4, hidden: int = 16) -> None:
        super().__init__()
        self.n = n
        self.body = torch.nn.Sequential(torch.nn.Linear(2 * obs_dim, hidden), torch.nn.Tanh())
        self.policy, self.critic = torch.nn.Linear(hidden, n_actions), torch.nn.Linear(hidden, 1)

    def require_history(self) -> int:
        return self.n

    def heads(self, window: TemporalDictTensor, now: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        past = window["observation"].to(torch.float32) * window.mask().unsqueeze(-1)
        mean = past.sum(1) / window.lengths.clamp(min=1).unsqueeze(-1)
        x = self.body(torch.cat([now.to(torch.float32), mean], -1))
        return self.policy(x), self.critic(x).squeeze(-1)

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        if history is None:
            raise ValueError("WindowAgent needs its history")
        logits, value = self.heads(history, observation["observation"])
        action = categorical(logits, agent_info, self.generator)
        out = {"action": action, "logits": logits, "value": value}
        out["log_prob"] = self.action_log_prob(DictTensor(out), action)
        return DictTensor(out), state

    def bootstrap_values(self, batch: Trajectories) -> torch.Tensor:
        """V of the reached observation, with the window after each step."""
        steps = batch.trajectories
        before = TemporalDictTensor(batch.info.truncate_key("history/"), batch.info["history_length"])
        windows = history_windows(
            before.get(["observation"]), steps.get(["observation"]), steps["initial_state"], self.n
        )
        after = window_after(windows, DictTensor({"observation": steps["observation"].flatten(0, 1)}))
        _, value = self.heads(after, steps["next/observation"].flatten(0, 1))
        return value.view(steps.n_elems(), steps.n_timesteps())


class NoBootstrapAgent(MlpAgent):
    """Everything but ``bootstrap_values``: no on-policy learner can train it."""

    bootstrap_values = None  # type: ignore[assignment]


class NoValueAgent(MlpAgent):
    """Outputs no ``value``: refused at the first batch."""

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        out, new_state = super().forward(state, observation, agent_info, history)
        return out.get(["action", "log_prob", "logits"]), new_state


class EditedOutputAgent(MlpAgent):
    """``MlpAgent`` whose output goes through ``edit``: the base of the slips below."""

    def edit(self, out: DictTensor) -> dict[str, torch.Tensor]:
        return dict(out.items())

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        out, new_state = super().forward(state, observation, agent_info, history)
        return DictTensor(self.edit(out)), new_state


class ColumnValueAgent(EditedOutputAgent):
    """Outputs its value as a column ``[B, 1]`` (the critic's output unsqueezed): refused at the first batch."""

    def edit(self, out: DictTensor) -> dict[str, torch.Tensor]:
        return {**dict(out.items()), "value": out["value"].unsqueeze(-1)}


class DoubleLogProbAgent(EditedOutputAgent):
    """Outputs its log-probabilities in float64: refused at the first batch."""

    def edit(self, out: DictTensor) -> dict[str, torch.Tensor]:
        return {**dict(out.items()), "log_prob": out["log_prob"].double()}


class FlatBootstrapAgent(MlpAgent):
    """``bootstrap_values`` flattened to ``[B * T]``: refused at the first batch."""

    def bootstrap_values(self, batch: Trajectories) -> torch.Tensor:
        return super().bootstrap_values(batch).flatten()


class ColumnEntropyAgent(MlpAgent):
    """``action_entropy`` as a column ``[N, 1]``: refused by PPO, naming the method."""

    def action_entropy(self, output: DictTensor) -> torch.Tensor:
        return super().action_entropy(output).unsqueeze(-1)


class OutputOnlyAgent(MlpAgent):
    """``forward`` returns its output alone, without the new state."""

    def forward(  # type: ignore[override]
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> DictTensor:
        return super().forward(state, observation, agent_info, history)[0]


def relu_mlp(sizes: list[int]) -> torch.nn.Sequential:
    """Linear layers with a ReLU after each but the last."""
    layers: list[torch.nn.Module] = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        layers.append(torch.nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class QAgent(Agent):
    """DQN's protocol by hand: Q-values of a ReLU MLP, epsilon-greedy with the buffer ``epsilon``.

    Built as DQN's ``QNetwork`` without the dueling head is (the same layers in
    the same order, the same draws), so that DQN trains it bit for bit as it
    trains its own network.
    """

    epsilon: torch.Tensor

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 32) -> None:
        super().__init__()
        self.register_buffer("epsilon", torch.tensor(1.0))
        self.body = torch.nn.Sequential(relu_mlp([obs_dim, hidden, hidden]), torch.nn.ReLU())
        self.head = torch.nn.Linear(hidden, n_actions)

    def q_values(self, observation: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.head(self.body(observation["observation"].to(torch.float32).flatten(1)))  # type: ignore[no-any-return]

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        q = self.q_values(observation)
        n = q.shape[0]
        explore = torch.rand(n, generator=self.generator) < self.epsilon
        if "greedy" in agent_info:
            explore &= ~agent_info["greedy"]
        random = torch.randint(q.shape[1], (n,), generator=self.generator)
        return DictTensor({"action": torch.where(explore, random, q.argmax(1))}), state


class QAgentWithState(QAgent):
    """A ``QAgent`` that keeps a state: DQN replays single transitions, so it refuses it at the first batch."""

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        return DictTensor({"h": torch.zeros(n, 2)})


class WindowQAgent(QAgent):
    """A ``QAgent`` that asks for a history: refused before any run starts."""

    def require_history(self) -> int:
        return 4


class TwinCritics(torch.nn.Module):
    """Two plain critics ``Q(s, a)`` side by side: ``forward`` gives ``[2, N]``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int) -> None:
        super().__init__()
        self.pair = torch.nn.ModuleList(relu_mlp([obs_dim + action_dim, hidden, hidden, 1]) for _ in range(2))

    def forward(self, observation: dict[str, torch.Tensor], unit_action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([observation["observation"].to(torch.float32), unit_action], -1)
        return torch.stack([q(x).squeeze(-1) for q in self.pair])


class GaussianActor(Agent):
    """SAC's protocol by hand: a tanh-squashed Gaussian, uniform while ``uniform`` is set, and its own critics."""

    uniform: torch.Tensor

    def __init__(
        self, obs_dim: int, action_low: list[float], action_high: list[float], hidden: int = 32
    ) -> None:
        super().__init__()
        self.action_dim = len(action_low)
        self.obs_dim, self.hidden = obs_dim, hidden
        low, high = torch.tensor(action_low), torch.tensor(action_high)
        self.register_buffer("center", (high + low) / 2)
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("uniform", torch.tensor(False))
        self.net = relu_mlp([obs_dim, hidden, hidden, 2 * self.action_dim])

    def make_critics(self) -> TwinCritics:
        return TwinCritics(self.obs_dim, self.action_dim, self.hidden)

    def gaussian(self, observation: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net(observation["observation"].to(torch.float32)).chunk(2, -1)
        return mean, log_std.clamp(-5.0, 2.0)

    def sample(
        self, observation: dict[str, torch.Tensor], generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.gaussian(observation)
        u = mean + log_std.exp() * torch.randn(mean.shape, generator=generator)
        normal = -0.5 * ((u - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)
        log_prob = (normal - torch.log(1 - u.tanh().pow(2) + 1e-6)).sum(-1)
        return u.tanh(), log_prob

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        if bool(self.uniform):
            unit = torch.rand(observation.n_elems(), self.action_dim, generator=self.generator) * 2 - 1
        else:
            unit, _ = self.sample(observation, self.generator)  # type: ignore[arg-type]
        if "greedy" in agent_info:
            mean, _ = self.gaussian(observation)  # type: ignore[arg-type]
            unit = torch.where(agent_info["greedy"].unsqueeze(-1), mean.tanh(), unit)
        return DictTensor({"action": self.center + self.scale * unit, "unit_action": unit}), state


class MixinActor(SquashedGaussianPolicy, Agent):
    """SAC's protocol from the package's half: only ``distribution`` written; the learner's ``TwinQ`` critics."""

    def __init__(
        self, obs_dim: int, action_low: list[float], action_high: list[float], hidden: int = 32
    ) -> None:
        super().__init__(action_low, action_high)
        self.net = relu_mlp([obs_dim, hidden, 2 * self.action_dim])

    def distribution(self, observation: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net(observation["observation"].to(torch.float32)).chunk(2, -1)
        return mean, log_std.clamp(-5.0, 2.0)


class GaussianActorWithState(GaussianActor):
    """A ``GaussianActor`` that keeps a state: SAC replays single transitions, so it refuses it at the first batch."""

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        return DictTensor({"h": torch.zeros(n, 2)})


class NotACritic(GaussianActor):
    """Its ``make_critics`` returns no module: SAC refuses it by name."""

    def make_critics(self) -> TwinCritics:
        return "two critics"  # type: ignore[return-value]
