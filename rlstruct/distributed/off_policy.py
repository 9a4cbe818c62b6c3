"""Off-policy learning in a scheme: SAC's maths, and replay storages that accumulate across collection rounds.

An on-policy buffer (``MinibatchBuffer``, ``WholeBatchBuffer``) holds one
collected batch and replaces it with the next. An off-policy storage keeps
what every round collected, up to its capacity, and serves a number of
minibatches per round set by its ratio of gradient steps to collected steps:

- ``ReplayStorage``: a uniform ``rlstruct.replay.ReplayBuffer``;
- ``PrioritizedStorage``: a ``rlstruct.replay.PrioritizedReplayBuffer``,
  whose minibatches carry their slots and importance-sampling weights, and
  whose priorities the algorithm's TD errors set after each loss;
- ``HindsightStorage``: a ``rlstruct.replay.HindsightReplayBuffer``, whose
  samples carry goals relabelled with goals achieved later in their episode.

Each gradient worker makes its own storage (``buffer_factory``), fed by its
own collection workers: the replay is held where the gradients are
computed, and decentralised gradient workers each sample their own.

``SAC`` computes the losses of ``rlstruct.learning.soft_actor_critic`` on
any agent that speaks ``SACAgent``. What it trains (``trained``) is more than
the agent the collection workers run: the twin critics and the temperature
too, with the target critics as buffers, so the update worker's optimiser
step, the broadcast weights and the decentralised all-reduce all cover them.
The target critics move after every update (``after_update``), where the
update is applied.

Examples:
    >>> import torch
    >>> from rlstruct import TemporalDictTensor
    >>> from rlstruct.distributed.off_policy import ReplayStorage
    >>> storage = ReplayStorage(100, batch_size=4, gradient_steps=0.5, learning_starts=6, seed=0)
    >>> steps = TemporalDictTensor({"x": torch.arange(8.0).view(2, 4)})
    >>> storage.insert(steps)  # 8 steps held, past learning_starts: 0.5 x 8 gradient steps owed
    >>> [minibatch["x"].shape for minibatch in storage.minibatches()]
    [torch.Size([4]), torch.Size([4]), torch.Size([4]), torch.Size([4])]
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import torch

from rlstruct.agent import Agent
from rlstruct.checks import check_int, check_number, check_seed
from rlstruct.dicttensor import DictTensor
from rlstruct.distributed.algorithms import Hyperparameters
from rlstruct.errors import AgentError, describe
from rlstruct.learning.protocols import check_replayed_outputs
from rlstruct.learning.q_learning import QAgent, check_q_agent, dqn_loss
from rlstruct.learning.soft_actor_critic import SACAgent, TwinQ, check_sac_agent, own_critics, soft_td_target
from rlstruct.replay import HindsightReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer
from rlstruct.replay.hindsight import RewardFn
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = [
    "DQN",
    "SAC",
    "DQNModules",
    "HindsightStorage",
    "PrioritizedStorage",
    "ReplayStorage",
    "SACModules",
    "follow",
    "frozen_copy",
    "stored_steps",
]


class ReplayStorage:
    """A uniform replay as a scheme's buffer: it keeps every inserted step and serves sampled minibatches.

    ``insert`` adds the valid steps of a prepared batch (a
    ``TemporalDictTensor``, as ``SAC.prepare`` gives it) to the replay, made
    on the data's device at the first insert. Once ``learning_starts`` steps
    have been inserted, each insert of n steps owes ``gradient_steps x n``
    gradient steps (a fraction carries over), and ``minibatches`` serves them:
    ``batch_size`` transitions each, drawn uniformly from all that is held.
    Before that, it serves none, and the gradient worker collects again.

    Args:
        capacity: transitions kept (the oldest are overwritten).
        batch_size: transitions per minibatch.
        gradient_steps: gradient steps per inserted step (the update-to-data ratio), above 0.
        learning_starts: steps inserted before the first minibatch, at least 0.
        seed: seeds the sampling; by default drawn from torch's global
            generator (which a gradient worker seeds from the scheme's seed
            and its index).

    Raises:
        ValueError: for a size, ratio or seed out of range (a seed in ``[0, 2**64)``).
        TypeError: for a size or seed that is not an int, a ratio that is not a number.
    """

    def __init__(
        self,
        capacity: int = 1_000_000,
        batch_size: int = 256,
        gradient_steps: float = 1.0,
        learning_starts: int = 1_000,
        seed: int | None = None,
    ) -> None:
        name = type(self).__name__
        self.capacity = check_int(name, "capacity", capacity, 1)
        self.batch_size = check_int(name, "batch_size", batch_size, 1)
        self.gradient_steps = check_number(name, "gradient_steps", gradient_steps, 0.0, low_open=True)
        self.learning_starts = check_int(name, "learning_starts", learning_starts, 0)
        # refused here, not at the first insert
        self.seed = int(torch.randint(0, 2**62, ())) if seed is None else check_seed(name, seed)
        self.replay: ReplayBuffer | HindsightReplayBuffer | None = None
        self.inserted = 0
        """Valid steps inserted so far."""
        self.owed = 0.0
        """Gradient steps owed and not served yet."""

    def _make(self, device: torch.device, generator: torch.Generator) -> ReplayBuffer | HindsightReplayBuffer:
        """The replay, on ``device``: what a subclass changes."""
        return ReplayBuffer(self.capacity, device=device, generator=generator)

    def insert(self, data: TemporalDictTensor) -> None:
        """Add the valid steps of ``data`` ``[B, T]``; owe ``gradient_steps`` per step once past ``learning_starts``.

        Raises:
            TypeError: if ``data`` is not a ``TemporalDictTensor``.
        """
        if not isinstance(data, TemporalDictTensor):
            raise TypeError(
                f"{type(self).__name__}.insert: data must be a TemporalDictTensor, got {describe(data)}: "
                "a replay stores what the off-policy algorithms (SAC, DQN) prepare; PPO and IMPALA take "
                "MinibatchBuffer or WholeBatchBuffer"
            )
        if self.replay is None:
            device = torch.device(data.device or "cpu")
            self.replay = self._make(device, torch.Generator(device).manual_seed(self.seed))
        self.replay.add_trajectories(data)
        n = int(data.lengths.sum())
        self.inserted += n
        if self.inserted >= self.learning_starts:
            self.owed += n * self.gradient_steps

    def minibatches(self) -> Iterator[DictTensor]:
        """The gradient steps owed, each ``batch_size`` transitions sampled uniformly (``[batch_size, ...]``)."""
        while self.owed >= 1 and self.replay is not None:
            self.owed -= 1
            yield self.replay.sample(self.batch_size).rows

    @property
    def filling(self) -> bool:
        """True until ``learning_starts`` steps have been inserted: no minibatch is owed before."""
        return self.inserted < self.learning_starts or self.replay is None

    def __len__(self) -> int:
        """The number of minibatches owed."""
        return math.floor(self.owed) if self.replay is not None else 0


INDEX, WEIGHT = "replay/index", "replay/weight"
"""The keys of a ``PrioritizedStorage`` minibatch's slots (int64 ``[N]``) and weights (float32 ``[N]``)."""


class PrioritizedStorage(ReplayStorage):
    """``ReplayStorage`` on a ``PrioritizedReplayBuffer``: transitions drawn by priority (Schaul et al. 2016).

    Each minibatch carries two more keys: ``"replay/index"``, the rows'
    slots (int64 ``[N]``), and ``"replay/weight"``, their importance-sampling
    weights (float32 ``[N]``, in ``(0, 1]``). The algorithm weighs its loss
    with them and sets its ``priorities`` to ``(slots, |TD error|)`` (``DQN``
    and ``SAC`` do); the gradient worker gives them to ``update_priorities``
    after the loss, before the next minibatch is drawn. A minibatch whose
    priorities never came back is an error at the next draw: an algorithm
    that cannot give them cannot use this storage.

    Args:
        capacity: transitions kept.
        alpha: the priority exponent, at least 0.
        beta: the importance-sampling exponent at the start, in [0, 1].
        beta_steps: inserted steps over which ``beta`` grows linearly to 1;
            None keeps it at ``beta``.
        batch_size: as ``ReplayStorage``'s.
        gradient_steps: as ``ReplayStorage``'s.
        learning_starts: as ``ReplayStorage``'s.
        seed: as ``ReplayStorage``'s.

    Raises:
        ValueError: for a size, ratio or exponent out of range.
    """

    def __init__(
        self,
        capacity: int = 1_000_000,
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_steps: int | None = None,
        batch_size: int = 256,
        gradient_steps: float = 1.0,
        learning_starts: int = 1_000,
        seed: int | None = None,
    ) -> None:
        super().__init__(capacity, batch_size, gradient_steps, learning_starts, seed)
        self.alpha = check_number("PrioritizedStorage", "alpha", alpha, 0.0)
        self.beta = check_number("PrioritizedStorage", "beta", beta, 0.0, 1.0)
        self.beta_steps = (
            None if beta_steps is None else check_int("PrioritizedStorage", "beta_steps", beta_steps, 1)
        )
        self._awaited = False

    def _make(self, device: torch.device, generator: torch.Generator) -> PrioritizedReplayBuffer:
        return PrioritizedReplayBuffer(
            self.capacity, alpha=self.alpha, beta=self.beta, device=device, generator=generator
        )

    def current_beta(self) -> float:
        """The importance-sampling exponent of the next draw: ``beta``, grown towards 1 over ``beta_steps``."""
        if self.beta_steps is None:
            return self.beta
        return min(1.0, self.beta + (1.0 - self.beta) * self.inserted / self.beta_steps)

    def minibatches(self) -> Iterator[DictTensor]:
        """As ``ReplayStorage.minibatches``, drawn by priority, with ``"replay/index"`` and ``"replay/weight"``.

        Raises:
            ValueError: at a draw, if the previous minibatch's priorities
                were not given back (``update_priorities``).
        """
        replay = cast(PrioritizedReplayBuffer, self.replay)
        while self.owed >= 1 and replay is not None:
            if self._awaited:
                raise ValueError(
                    "PrioritizedStorage: the last minibatch's priorities never came back; its algorithm "
                    "must set priorities = (minibatch['replay/index'], |TD error|) in its loss (DQN and "
                    "SAC do), and give_priorities must run after it before the next draw"
                )
            self.owed -= 1
            rows, indices, weights = replay.sample(self.batch_size, self.current_beta())
            self._awaited = True
            yield DictTensor({**dict(rows.items()), INDEX: indices, WEIGHT: weights})

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Set the priorities of the last minibatch's rows (``indices`` from its ``"replay/index"``)."""
        cast(PrioritizedReplayBuffer, self.replay).update_priorities(indices, priorities)
        self._awaited = False


def give_priorities(algorithm: Any, buffer: object) -> None:
    """Hand the priorities of ``algorithm``'s last loss to ``buffer``, if both speak of them.

    An algorithm sets ``priorities`` to ``(slots, values)`` when its
    minibatch came with ``"replay/index"``; a buffer with
    ``update_priorities`` (``PrioritizedStorage``) takes them. They are
    taken once.
    """
    priorities = getattr(algorithm, "priorities", None)
    update = getattr(buffer, "update_priorities", None)
    if priorities is not None and callable(update):
        update(*priorities)
        algorithm.priorities = None


class HindsightStorage(ReplayStorage):
    """``ReplayStorage`` on a ``HindsightReplayBuffer``: minibatches with goals relabelled (Andrychowicz et al. 2017).

    The prepared batches must hold the goal keys (``achieved_goal``,
    ``desired_goal`` and their ``next/`` versions), the reward and
    ``next/done``, which delimits the episodes (and so does each row's end:
    a row that ends mid-episode takes its future goals from its own steps).

    Args:
        reward_fn: ``reward_fn(achieved_goal, desired_goal) -> reward``,
            batched, as ``HindsightReplayBuffer``'s; picklable (a module-level
            function) to reach remote gradient workers.
        capacity: transitions kept.
        strategy: ``"future"`` or ``"final"``.
        k: relabelled goals per real goal.
        batch_size: as ``ReplayStorage``'s.
        gradient_steps: as ``ReplayStorage``'s.
        learning_starts: as ``ReplayStorage``'s.
        seed: as ``ReplayStorage``'s.
    """

    def __init__(
        self,
        reward_fn: RewardFn,
        capacity: int = 1_000_000,
        *,
        strategy: str = "future",
        k: int = 4,
        batch_size: int = 256,
        gradient_steps: float = 1.0,
        learning_starts: int = 1_000,
        seed: int | None = None,
    ) -> None:
        super().__init__(capacity, batch_size, gradient_steps, learning_starts, seed)
        if not callable(reward_fn):
            raise TypeError(f"HindsightStorage: reward_fn must be callable, got {describe(reward_fn)}")
        self.reward_fn, self.strategy, self.k = reward_fn, strategy, k
        HindsightReplayBuffer(1, reward_fn, strategy=strategy, k=k)  # checks strategy and k now

    def _make(self, device: torch.device, generator: torch.Generator) -> HindsightReplayBuffer:
        return HindsightReplayBuffer(
            self.capacity,
            self.reward_fn,
            strategy=self.strategy,
            k=self.k,
            device=device,
            generator=generator,
        )


def frozen_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``module`` whose parameters are buffers: a target network.

    It computes what ``module`` computes, with its own tensors; they are in
    its state dict (so they travel with the weights a scheme broadcasts) and
    out of ``parameters()`` (so out of the gradients and the optimiser).
    ``follow`` moves them towards the module's parameters. Their names, the
    module's parameters' names, are the copy's ``frozen_names``.
    """
    frozen = copy.deepcopy(module)
    names = [name for name, _ in module.named_parameters()]
    for submodule in frozen.modules():
        for name, p in list(submodule.named_parameters(recurse=False)):
            delattr(submodule, name)
            submodule.register_buffer(name, p.detach().clone())
    frozen.__dict__["frozen_names"] = tuple(names)  # the buffers standing for parameters (target_buffers)
    return frozen


def follow(target: torch.nn.Module, module: torch.nn.Module, tau: float) -> None:
    """Move ``target`` (``frozen_copy(module)``) ``tau`` of the way to ``module``'s parameters, in place."""
    names = [name for name, _ in module.named_parameters()]
    with torch.no_grad():
        torch._foreach_lerp_([target.get_buffer(n) for n in names], list(module.parameters()), tau)


class SACModules(torch.nn.Module):
    """What a scheme's ``SAC`` trains: the actor, the twin critics and the log temperature, with the target critics.

    The target critics (``target``, a ``frozen_copy`` of the critics) are
    buffers, not parameters: they are in the state dict the update worker
    broadcasts, and out of the gradients and the optimiser.

    Args:
        actor: the agent (an ``SACAgent``).
        critic: the twin critics: ``critic(observation, unit_action)`` is ``[2, N]``.
        init_alpha: the temperature at the start.
    """

    def __init__(self, actor: Agent, critic: torch.nn.Module, init_alpha: float) -> None:
        super().__init__()
        self.actor = actor
        self.critic = critic
        self.log_alpha = torch.nn.Parameter(torch.tensor(math.log(init_alpha), device=_device(actor)))
        self.target = frozen_copy(critic)


class DQNModules(torch.nn.Module):
    """What a scheme's ``DQN`` trains: the agent, with its target network (``frozen_copy``) as buffers."""

    def __init__(self, model: Agent) -> None:
        super().__init__()
        self.model = model
        self.target = frozen_copy(model)


def _device(module: torch.nn.Module) -> torch.device:
    return next(iter(module.parameters())).device


def default_critics(actor: Agent, hidden: Sequence[int]) -> torch.nn.Module:
    """The twin critics for ``actor``: its ``make_critics()``, else a ``TwinQ`` on what it reads.

    A ``TwinQ`` is built for an actor with an ``encoder`` (a copy of it: the
    critics read the observation as the actor does) or, without one, a first
    layer whose ``in_features`` is the flat observation's size (as
    ``SquashedGaussianActor``'s ``body``).

    Raises:
        AgentError: (a TypeError) if ``make_critics()`` gives no module.
        TypeError: if neither applies (give ``SAC`` its ``critics``).
    """
    made = own_critics(actor, "SAC")
    if made is not None:
        return made
    action_dim = cast(SACAgent, actor).action_dim
    encoder = getattr(actor, "encoder", None)
    if isinstance(encoder, torch.nn.Module):
        return TwinQ(action_dim=action_dim, hidden=hidden, encoder=copy.deepcopy(encoder))
    first = next((m for m in actor.modules() if isinstance(m, torch.nn.Linear)), None)
    if encoder is None and first is not None:
        return TwinQ(obs_dim=first.in_features, action_dim=action_dim, hidden=hidden)
    raise TypeError(
        f"SAC: cannot tell what {type(actor).__name__} reads to build its critics; give SAC critics= "
        "(a function making the twin critics) or the agent a make_critics()"
    )


class SAC(Hyperparameters):
    """SAC's maths for a scheme: transitions stored whole, one loss for the critics, the actor and the temperature.

    The defaults are those of ``rlstruct.algos.sac.Config``. Use it with a
    ``ReplayStorage``, a ``PrioritizedStorage`` (the critics' loss weighs
    each row; its priority is the twins' mean |TD error|) or a
    ``HindsightStorage``. ``prepare`` checks the
    agent's outputs and keeps, of each collected step, what the losses read;
    ``loss`` is the sum of the three losses of ``SACLearner.step``, whose
    parameters are disjoint, so one optimiser step (Adam over all of
    ``trained``) is their three steps, unless ``max_grad_norm`` clips their
    joint norm. Unlike ``rlstruct train sac``, the
    actor's loss reads the critics of the same step, before their update,
    and the agent acts from the start (no uniform warm-up: the storage's
    ``learning_starts`` only delays learning).

    Args:
        model: the agent to train, an ``SACAgent`` such as ``SquashedGaussianActor``.
        lr: Adam's learning rate, for all.
        gamma: the discount factor.
        tau: the Polyak rate of the target critics, after each update.
        init_alpha: the temperature at the start.
        target_entropy: the entropy the temperature aims at; None: ``-action_dim``.
        hidden: the hidden layers of the default critics.
        critics: makes the twin critics; None: ``default_critics``.
        max_grad_norm: gradients rescaled to this global norm; None (SAC's default) for none.

    Raises:
        TypeError: if ``model`` lacks what ``SACAgent`` requires, or a
            hyperparameter is not a real number (a bool, a str).
        ValueError: for a hyperparameter out of range.
    """

    names = ("lr", "gamma", "tau")
    fractions = ("gamma", "tau")

    def __init__(
        self,
        model: Agent,
        *,
        lr: float = 1e-3,
        gamma: float = 0.99,
        tau: float = 0.005,
        init_alpha: float = 1.0,
        target_entropy: float | None = None,
        hidden: Sequence[int] = (256, 256),
        critics: Callable[[], torch.nn.Module] | None = None,
        max_grad_norm: float | None = None,
    ) -> None:
        check_sac_agent(model, "SAC")
        check_stateless(model, "SAC")
        self.model = model
        self.lr, self.gamma, self.tau = (
            self._float("lr", lr),
            self._float("gamma", gamma),
            self._float("tau", tau),
        )
        self._check_all()
        check_number("SAC", "init_alpha", init_alpha, 0.0, low_open=True)
        if target_entropy is not None:
            check_number("SAC", "target_entropy", target_entropy, -math.inf)
        if max_grad_norm is not None:
            check_number("SAC", "max_grad_norm", max_grad_norm, 0.0, low_open=True)
        device = _device(model)
        made = default_critics(model, hidden) if critics is None else critics()
        if not isinstance(made, torch.nn.Module):
            raise TypeError(f"SAC: critics() must return a torch.nn.Module, got {describe(made)}")
        critic = made.to(device)
        self.trained = SACModules(model, critic, init_alpha)
        self.policy = cast(SACAgent, model)
        self.target_entropy = (
            -float(self.policy.action_dim) if target_entropy is None else float(target_entropy)
        )
        self.max_grad_norm = max_grad_norm
        self.keys: tuple[str, ...] = tuple(getattr(model, "observation_keys", ("observation",)))
        self.generator = torch.Generator(device).manual_seed(int(torch.randint(0, 2**62, ())))
        self.optimizer = torch.optim.Adam(self.trained.parameters(), lr=self.lr)
        self._checked = False
        self.priorities: tuple[torch.Tensor, torch.Tensor] | None = None
        """The last loss's ``(slots, |TD error|)`` when its minibatch came from a ``PrioritizedStorage``."""

    def prepare(self, batch: Trajectories) -> TemporalDictTensor:
        """The steps of ``batch`` ``[B, T]`` with what the losses read (and ``next/done``, ``*_goal`` if there)."""
        if not self._checked:
            check_replayed_outputs(self.model, batch, "SAC", ("action", "unit_action"))
            self._checked = True
        return stored_steps(batch, self.keys, "unit_action")

    def loss(self, minibatch: DictTensor) -> tuple[torch.Tensor, dict[str, float]]:
        """The critics' loss, the actor's and the temperature's, summed, on sampled transitions ``[N]``."""
        t = self.trained
        observation = {k: minibatch[k] for k in self.keys}
        reached = {k: minibatch[f"next/{k}"] for k in self.keys}
        alpha = t.log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_log_prob = self.policy.sample(reached, self.generator)
            target = soft_td_target(
                minibatch["next/reward"],
                minibatch["next/terminated"],
                t.target(reached, next_action),
                next_log_prob,
                alpha,
                self.gamma,
            )
        q = t.critic(observation, minibatch["unit_action"])
        error = q - target
        squared = error.pow(2) * minibatch[WEIGHT] if WEIGHT in minibatch else error.pow(2)
        critic_loss = 0.5 * squared.mean(1).sum()
        if INDEX in minibatch:  # for a PrioritizedStorage: the mean |TD error| of the twins
            self.priorities = (minibatch[INDEX], error.detach().abs().mean(0))
        action, log_prob = self.policy.sample(observation, self.generator)
        t.critic.requires_grad_(False)
        try:  # the actor's loss reaches the action, not the critics
            q_pi = t.critic(observation, action).min(0).values
        finally:
            t.critic.requires_grad_(True)
        actor_loss = (alpha * log_prob - q_pi).mean()
        alpha_loss = -t.log_alpha * (log_prob.detach().mean() + self.target_entropy)
        stats = {
            "critic_loss": float(critic_loss.detach()),
            "actor_loss": float(actor_loss.detach()),
            "alpha": float(alpha),
            "entropy": -float(log_prob.detach().mean()),
            "q": float(q.detach().mean()),
        }
        return critic_loss + actor_loss + alpha_loss, stats

    def after_update(self) -> None:
        """Move the target critics ``tau`` of the way to the critics (after each optimiser step)."""
        follow(self.trained.target, self.trained.critic, self.tau)


class DQN(Hyperparameters):
    """DQN's maths for a scheme: transitions stored whole, the Huber loss against (double) Q targets.

    The defaults are those of ``rlstruct.algos.dqn.Config``. Use it with a
    ``ReplayStorage``, a ``PrioritizedStorage`` (the loss weighs each row
    with its importance-sampling weight and gives back its |TD error| as its
    priority) or a ``HindsightStorage`` on a goal task. The target network is a
    ``frozen_copy`` of the agent in ``trained``: every
    ``target_update_every`` updates (counted where they are applied) it
    moves ``tau`` of the way to the agent (1.0: a copy). The agent's
    ``epsilon`` is a hyperparameter:
    ``Learner.update_algorithm_parameter("epsilon", value)`` sets it
    everywhere, and it reaches the collection workers with the weights.

    Args:
        model: the agent to train, a ``QAgent`` such as ``QNetwork``.
        lr: Adam's learning rate.
        gamma: the discount factor.
        double: double-Q targets.
        tau: how far the target network moves at each of its updates.
        target_update_every: updates between two moves of the target network.
        epsilon: the exploration rate the agent starts with.
        max_grad_norm: gradients rescaled to this global norm.

    Raises:
        TypeError: if ``model`` lacks what ``QAgent`` requires, a
            hyperparameter is not a real number (a bool, a str), or
            ``double`` not a bool.
        ValueError: for a hyperparameter out of range.
    """

    names = ("lr", "gamma", "tau", "epsilon", "max_grad_norm")
    fractions = ("gamma", "tau", "epsilon")

    def __init__(
        self,
        model: Agent,
        *,
        lr: float = 5e-4,
        gamma: float = 0.99,
        double: bool = True,
        tau: float = 1.0,
        target_update_every: int = 100,
        epsilon: float = 1.0,
        max_grad_norm: float = 10.0,
    ) -> None:
        check_q_agent(model, "DQN")
        check_stateless(model, "DQN")
        self.model = model
        self.q_agent = cast(QAgent, model)
        self.lr, self.gamma, self.tau = (
            self._float("lr", lr),
            self._float("gamma", gamma),
            self._float("tau", tau),
        )
        self.epsilon, self.max_grad_norm = (
            self._float("epsilon", epsilon),
            self._float("max_grad_norm", max_grad_norm),
        )
        self._check_all()
        self.double = self._flag("double", double)
        self.target_update_every = check_int("DQN", "target_update_every", target_update_every, 1)
        self.q_agent.epsilon.fill_(self.epsilon)
        self.trained = DQNModules(model)
        self.keys: tuple[str, ...] = tuple(getattr(model, "observation_keys", ("observation",)))
        self.optimizer = torch.optim.Adam(model.parameters(), lr=self.lr)
        self.updates = 0
        self._checked = False
        self.priorities: tuple[torch.Tensor, torch.Tensor] | None = None
        """The last loss's ``(slots, |TD error|)`` when its minibatch came from a ``PrioritizedStorage``."""

    def prepare(self, batch: Trajectories) -> TemporalDictTensor:
        """The steps of ``batch`` ``[B, T]`` with what the loss reads (and ``next/done``, ``*_goal`` if there)."""
        if not self._checked:
            check_replayed_outputs(self.model, batch, "DQN", ("action",))
            self._checked = True
        return stored_steps(batch, self.keys, "action")

    def loss(self, minibatch: DictTensor) -> tuple[torch.Tensor, dict[str, float]]:
        """``rlstruct.learning.q_learning.dqn_loss`` on sampled transitions ``[N]``."""
        if WEIGHT in minibatch:
            weights = minibatch[WEIGHT]
        else:
            weights = torch.ones(minibatch.n_elems(), device=minibatch["action"].device)
        target = cast(QAgent, self.trained.target)
        rows = dict(minibatch.items())
        loss, q, y = dqn_loss(self.q_agent, target, rows, self.keys, weights, self.gamma, self.double)
        td = (q - y).detach().abs()
        if INDEX in minibatch:  # for a PrioritizedStorage
            self.priorities = (minibatch[INDEX], td)
        return loss, {
            "loss": float(loss.detach()),
            "q_mean": float(q.detach().mean()),
            "td_abs": float(td.mean()),
        }

    def after_update(self) -> None:
        """Count the update; every ``target_update_every``-th moves the target network ``tau`` of the way."""
        self.updates += 1
        if self.updates % self.target_update_every == 0:
            follow(self.trained.target, self.model, self.tau)

    def at_version(self, version: int) -> None:
        """Count the updates from ``version``, the policy version of the weights a gradient worker loaded.

        Every copy then moves its target network at the same updates, even
        after rounds of local steps in which the workers took different
        numbers of steps.
        """
        self.updates = version

    def set_parameter(self, name: str, value: float) -> None:
        """As ``PPO.set_parameter``; ``epsilon`` also fills the agent's buffer (the collection workers' rate)."""
        super().set_parameter(name, value)
        if name == "epsilon":
            self.q_agent.epsilon.fill_(self.epsilon)


def check_stateless(model: Agent, algorithm: str) -> None:
    """Raise unless ``model`` keeps no state: a scheme's off-policy algorithm replays single transitions.

    Raises:
        AgentError: (a TypeError) naming the agent and its state's keys.
    """
    state = model.initial_state(DictTensor(batch_size=1), 1)
    if not state.empty():
        raise AgentError(
            f"{algorithm} in a scheme cannot train {type(model).__name__}: it keeps a state "
            f"{sorted(state.keys())}, and {algorithm} replays single transitions there (rlstruct train "
            f"{algorithm.lower()} --recurrent replays a memory; the schemes' PPO and IMPALA train one too)"
        )


def stored_steps(batch: Trajectories, keys: Sequence[str], action: str) -> TemporalDictTensor:
    """The steps of ``batch`` a replay keeps.

    The observation ``keys`` now and reached, ``action``, the reward and
    ``next/terminated``; and, where the batch has them, ``next/done`` and the
    goal keys (which hindsight relabelling reads).
    """
    steps = batch.trajectories
    kept = [*keys, action, "next/reward", *(f"next/{k}" for k in keys), "next/terminated"]
    extra = ["next/done", "achieved_goal", "desired_goal", "next/achieved_goal", "next/desired_goal"]
    kept += [k for k in extra if k in steps and k not in kept]
    return steps.get(kept)
