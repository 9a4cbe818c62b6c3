"""The agents the algorithms train: an actor-critic (A2C, PPO, IMPALA) with an optional GRU.

Every agent here reads ``observation`` (cast to float32: the networks are
float32 whatever the environment's dtype), takes z from ``agent_info``
(``greedy``: bool per row, act deterministically; absent means sample), and
draws its randomness from ``self.generator``, so batchers reproduce it.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor
    >>> from rlstruct.algos.policies import ActorCritic
    >>> agent = ActorCritic(obs_dim=4, n_actions=2)
    >>> z = DictTensor({"greedy": torch.tensor([False, True])})
    >>> obs = DictTensor({"observation": torch.zeros(2, 4)})
    >>> out, state = agent(agent.initial_state(z, 2), obs, z)
    >>> sorted(out.keys())
    ['action', 'log_prob', 'logits', 'value']
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

from rlstruct.agent import Agent
from rlstruct.dicttensor import DictTensor
from rlstruct.temporal import TemporalDictTensor

__all__ = ["ActorCritic", "mlp"]


def mlp(sizes: Sequence[int], activation: type[torch.nn.Module] = torch.nn.Tanh) -> torch.nn.Sequential:
    """Linear layers of the given sizes with ``activation`` between them (none after the last)."""
    layers: list[torch.nn.Module] = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        layers.append(torch.nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(activation())
    return torch.nn.Sequential(*layers)


def _greedy(agent_info: DictTensor, n: int) -> torch.Tensor | None:
    return agent_info["greedy"] if "greedy" in agent_info and n > 0 else None


class ActorCritic(Agent):
    """A policy head and a value head on float32 observations; discrete or Gaussian actions.

    Args:
        obs_dim: the size of the (flat) observation.
        n_actions: the number of discrete actions; or None for continuous actions.
        action_low: the lower bounds of continuous actions (one per dimension).
        action_high: the upper bounds of continuous actions.
        hidden: the hidden layer sizes of the policy and of the value network.
        recurrent: put a GRU cell of ``hidden[-1]`` units under both heads;
            its state ``h`` is the agent state, which batchers reset where an
            episode begins.
        orthogonal: orthogonal initial weights and zero biases (gains sqrt(2)
            in hidden layers, 0.01 for the policy output, 1 for the value);
            otherwise torch's default, with the policy output scaled by 0.01.

    Output keys (per row): ``action`` (int64 for discrete; float32 clamped to
    the bounds for continuous: what the environment gets), ``log_prob`` (float32,
    of the action before clamping), ``value`` (float32), and the distribution's
    parameters: ``logits`` [n_actions] or ``mean`` [action_dim] (the Gaussian's
    log standard deviation is the parameter ``log_std``, the same for every state).
    Continuous actions also output ``raw_action`` (before clamping); a
    recurrent agent also outputs ``h``, its state after the step.

    Raises:
        ValueError: for a non-positive ``obs_dim``/``n_actions`` or missing or
            mismatched continuous bounds.
    """

    low: torch.Tensor
    high: torch.Tensor

    def __init__(
        self,
        obs_dim: int,
        n_actions: int | None = None,
        action_low: Sequence[float] | None = None,
        action_high: Sequence[float] | None = None,
        hidden: Sequence[int] = (64, 64),
        recurrent: bool = False,
        orthogonal: bool = False,
    ) -> None:
        super().__init__()
        if obs_dim < 1:
            raise ValueError(f"ActorCritic: obs_dim must be positive, got {obs_dim}")
        if n_actions is None:
            if action_low is None or action_high is None or len(action_low) != len(action_high):
                raise ValueError(
                    "ActorCritic: continuous actions need action_low and action_high of the same length, "
                    f"got {action_low!r} and {action_high!r}"
                )
            n_out = len(action_low)
            self.register_buffer("low", torch.tensor(action_low, dtype=torch.float32))
            self.register_buffer("high", torch.tensor(action_high, dtype=torch.float32))
            self.log_std = torch.nn.Parameter(torch.zeros(n_out))
        elif n_actions < 1:
            raise ValueError(f"ActorCritic: n_actions must be positive, got {n_actions}")
        else:
            n_out = n_actions
        self.discrete = n_actions is not None
        self._device_generator: torch.Generator | None = None
        self.recurrent = recurrent
        sizes = [obs_dim, *hidden]
        self.cell = torch.nn.GRUCell(obs_dim, hidden[-1]) if recurrent else None
        if recurrent:
            sizes = [hidden[-1], *hidden]
        self.actor = mlp([*sizes, n_out])
        self.critic = mlp([*sizes, 1])
        last = self.actor[-1]
        assert isinstance(last, torch.nn.Linear)
        if orthogonal:
            # orthogonal weights, zero biases; gains sqrt(2) in the hidden layers, 1 for the value
            # and 0.01 for the policy output (an almost uniform first policy)
            for net, out_gain in ((self.actor, 0.01), (self.critic, 1.0)):
                layers = [m for m in net if isinstance(m, torch.nn.Linear)]
                for i, layer in enumerate(layers):
                    torch.nn.init.orthogonal_(layer.weight, out_gain if i == len(layers) - 1 else 2**0.5)
                    torch.nn.init.zeros_(layer.bias)
        else:
            with torch.no_grad():  # a small last layer: an almost uniform first policy
                last.weight.mul_(0.01)
                last.bias.zero_()

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        if self.cell is None:
            return DictTensor(batch_size=n)
        return DictTensor({"h": torch.zeros(n, self.cell.hidden_size, device=self.cell.weight_hh.device)})

    def features(
        self, observation: torch.Tensor, state: DictTensor | None = None
    ) -> tuple[torch.Tensor, DictTensor]:
        """The input of both heads [N, d] from observations [N, ...], and the new state.

        ``state`` is needed only by a recurrent agent.
        """
        x = observation.to(torch.float32).flatten(1)
        if self.cell is None:
            return x, DictTensor(batch_size=x.shape[0]) if state is None else state
        if state is None:
            raise ValueError("ActorCritic.features: a recurrent agent needs its state, got None")
        h = self.cell(x, state["h"])
        return h, DictTensor({"h": h})

    def log_prob(self, params: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """log pi(action) [N] from ``logits``/``mean`` [N, k] and the (raw) actions [N] or [N, k]."""
        if self.discrete:
            return params.log_softmax(-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        std = self.log_std.exp()
        z = (action - params) / std
        return (-0.5 * z.pow(2) - self.log_std - 0.9189385332046727).sum(-1)  # log(sqrt(2 pi))

    def entropy(self, params: torch.Tensor) -> torch.Tensor:
        """The entropy of the policy [N] from ``logits``/``mean`` [N, k]."""
        if self.discrete:
            log_p = params.log_softmax(-1)
            return -(log_p.exp() * log_p).sum(-1)
        return (self.log_std + 1.4189385332046727).sum().expand(params.shape[0])  # 0.5 + log(sqrt(2 pi))

    def _generator_on(self, device: torch.device) -> torch.Generator:
        """``self.generator``, or for a model moved to another device a generator there, seeded from it."""
        if device == self.generator.device:
            return self.generator
        if self._device_generator is None or self._device_generator.device != device:
            self._device_generator = torch.Generator(device)
            self._device_generator.manual_seed(self.generator.initial_seed())
        return self._device_generator

    def value_of(self, observation: torch.Tensor, output: DictTensor | None = None) -> torch.Tensor:
        """V [N] of observations [N, ...] reached after the steps whose outputs are ``output``.

        For a recurrent agent, ``output["h"]`` (its state after those steps)
        carries the memory; a stateless agent needs no ``output``.
        """
        state = None if self.cell is None or output is None else DictTensor({"h": output["h"]})
        return self.heads(self.features(observation, state)[0])[1]

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(``logits`` or ``mean`` [N, k], ``value`` [N]) from features [N, d]."""
        return self.actor(x), self.critic(x).squeeze(-1)

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        x, new_state = self.features(observation["observation"], state)
        params, value = self.heads(x)
        greedy = _greedy(agent_info, x.shape[0])
        generator = self._generator_on(params.device)
        out: dict[str, torch.Tensor] = {}
        if self.discrete:
            sampled = torch.multinomial(params.softmax(-1), 1, generator=generator).squeeze(-1)
            action = sampled if greedy is None else torch.where(greedy, params.argmax(-1), sampled)
            out["action"] = action
        else:
            noise = torch.randn(params.shape, generator=generator, device=params.device)
            raw = params + self.log_std.exp() * noise
            if greedy is not None:
                raw = torch.where(greedy.unsqueeze(-1), params, raw)
            action = raw
            out["raw_action"] = raw
            out["action"] = torch.maximum(torch.minimum(raw, self.high), self.low)
        out["log_prob"] = self.log_prob(params, action)
        out["value"] = value
        if self.cell is not None:
            out["h"] = x  # the state after this step: what the value of the reached observation needs
        out["logits" if self.discrete else "mean"] = params
        return DictTensor(out), new_state
