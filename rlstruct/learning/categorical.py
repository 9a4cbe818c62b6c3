"""A categorical policy over ``logits``: the action-side half of ``OnPolicyAgent``, ready to mix into your agent.

An agent whose step outputs ``logits`` (float ``[B, n_actions]``) inherits
``action_key``, ``action_log_prob`` and ``action_entropy`` from
``CategoricalPolicy`` and draws its actions with ``act``; what is left to
write is the network and ``bootstrap_values`` (see docs/agents.md).

Examples:
    >>> import torch
    >>> from rlstruct import Agent, DictTensor
    >>> from rlstruct.learning.categorical import CategoricalPolicy
    >>> class Policy(CategoricalPolicy, Agent):
    ...     def __init__(self) -> None:
    ...         super().__init__()
    ...         self.net = torch.nn.Linear(4, 2)
    ...     def forward(self, state, observation, agent_info, history=None):
    ...         logits = self.net(observation["observation"])
    ...         action, log_prob = self.act(logits, agent_info)
    ...         value = torch.zeros(logits.shape[0])
    ...         return DictTensor({"action": action, "log_prob": log_prob, "logits": logits, "value": value}), state
    >>> agent = Policy()
    >>> _ = torch.nn.init.zeros_(agent.net.bias)  # zero observations: equal logits
    >>> out, _ = agent(DictTensor(batch_size=3), DictTensor({"observation": torch.zeros(3, 4)}), DictTensor(batch_size=3))
    >>> torch.allclose(agent.action_log_prob(out, out["action"]), out["log_prob"])
    True
    >>> agent.action_entropy(out)  # log 2 each
    tensor([0.6931, 0.6931, 0.6931], grad_fn=<NegBackward0>)
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from rlstruct.dicttensor import DictTensor

__all__ = ["CategoricalPolicy", "categorical_entropy"]


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    """The entropy ``[N]`` of ``softmax(logits)`` (``logits`` float ``[N, k]``), in ``logits``' dtype and device.

    A logit of ``-inf`` (a masked action) counts 0, as its probability is 0,
    where ``p * log p`` would give NaN; its gradient is finite too.

    Examples:
        >>> categorical_entropy(torch.tensor([[0.0, 0.0, float("-inf")]]))  # log 2
        tensor([0.6931])
    """
    log_p = logits.log_softmax(-1)
    return -(log_p.exp() * log_p.clamp(min=torch.finfo(log_p.dtype).min)).sum(-1)


class CategoricalPolicy:
    """``action_key``, ``action_log_prob``, ``action_entropy`` and ``act`` for outputs holding ``logits``.

    Mix it in before ``rlstruct.Agent`` (``class MyAgent(CategoricalPolicy,
    Agent)``): ``act`` draws from the agent's ``generator``, as batchers
    expect for reproducible runs (on another device, such as a GPU learner's,
    from a generator there seeded from it).
    """

    action_key = "action"
    """The actions are stored under ``action`` (int64 ``[B]``)."""

    generator: torch.Generator

    def act(self, logits: torch.Tensor, agent_info: DictTensor) -> tuple[torch.Tensor, torch.Tensor]:
        """An action per row drawn from ``softmax(logits)``, and its log-probability.

        Rows whose ``agent_info["greedy"]`` is True (evaluations) take the
        most likely action instead.

        Args:
            logits: float ``[B, n_actions]``, on the agent's device.
            agent_info: z of the B rows; its optional bool key ``greedy`` ``[B]``.

        Returns:
            ``(action, log_prob)``: int64 ``[B]`` and ``[B]`` of the logits' dtype.
        """
        action = torch.multinomial(
            logits.softmax(-1), 1, generator=self._generator_on(logits.device)
        ).squeeze(-1)
        if "greedy" in agent_info and logits.shape[0] > 0:
            action = torch.where(agent_info["greedy"], logits.argmax(-1), action)
        log_prob = logits.log_softmax(-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        return action, log_prob

    def _generator_on(self, device: torch.device) -> torch.Generator:
        """``self.generator``, or for an agent moved to another device a generator there, seeded from it."""
        if device == self.generator.device:
            return self.generator
        cached: torch.Generator | None = getattr(self, "_device_generator", None)
        if cached is None or cached.device != device:
            cached = torch.Generator(device)
            cached.manual_seed(self.generator.initial_seed())
            self._device_generator = cached
        return cached

    def action_log_prob(
        self, output: DictTensor | Mapping[str, torch.Tensor], action: torch.Tensor
    ) -> torch.Tensor:
        """log pi(action) ``[N]`` under ``output["logits"]`` ``[N, n_actions]``."""
        return output["logits"].log_softmax(-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)

    def action_entropy(self, output: DictTensor | Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The entropy ``[N]`` of ``softmax(output["logits"])`` (``categorical_entropy``: masked actions count 0)."""
        return categorical_entropy(output["logits"])
