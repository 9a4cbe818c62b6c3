"""What a scheme's gradient workers compute: an algorithm (maths and optimiser) and a buffer (minibatches).

A scheme separates three things that a single-process training loop does in
one place:

- the **algorithm** turns a collected batch into training data
  (``prepare``: advantages, targets) and a minibatch into a loss
  (``loss``); it owns the model and the optimiser. The gradient workers use
  ``prepare`` and ``loss``; the update worker uses ``optimizer`` and
  ``max_grad_norm``.
- the **buffer** cuts the prepared data into the minibatches of one
  collected batch: several shuffled passes for PPO, the whole batch once
  for IMPALA.
- the scheme (``rlstruct.distributed.Scheme``) decides where each runs.

``PPO`` and ``IMPALA`` compute the losses of the learning layer
(``rlstruct.learning.on_policy``), the same as ``rlstruct.algos.ppo`` and
``rlstruct.algos.impala``, on any agent that speaks
``rlstruct.learning.OnPolicyAgent``: ``ActorCritic`` (recurrent too) or your
own (a memory, attention over a history). Any object with the same
attributes works as an algorithm (see ``Algorithm``).

Examples:
    >>> import torch
    >>> from rlstruct.learning import ActorCritic
    >>> from rlstruct.distributed import PPO, MinibatchBuffer
    >>> algorithm = PPO(ActorCritic(obs_dim=4, n_actions=2), lr=3e-4)
    >>> algorithm.set_parameter("clip", 0.1)
    >>> algorithm.clip, algorithm.optimizer.param_groups[0]["lr"]
    (0.1, 0.0003)
    >>> buffer = MinibatchBuffer(n_epochs=2, minibatch_size=3)
    >>> from rlstruct import DictTensor
    >>> buffer.insert(DictTensor({"x": torch.arange(4)}))
    >>> [mb.n_elems() for mb in buffer.minibatches()]
    [3, 1, 3, 1]
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch

from rlstruct.agent import Agent
from rlstruct.checks import check_seed, is_bool, is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe
from rlstruct.learning.on_policy import (
    add_advantages,
    ppo_data,
    ppo_minibatch_loss,
    rows_per_minibatch,
    vtrace_agent_loss,
)
from rlstruct.learning.protocols import check_on_policy_agent
from rlstruct.seeding import SEEDS
from rlstruct.trajectories import Trajectories

__all__ = [
    "IMPALA",
    "PPO",
    "Algorithm",
    "Buffer",
    "MinibatchBuffer",
    "WholeBatchBuffer",
    "after_update",
    "at_version",
    "target_buffers",
    "trained_module",
]


@runtime_checkable
class Algorithm(Protocol):
    """What a scheme needs of an algorithm.

    Attributes:
        model: the trained ``torch.nn.Module``; it is also the agent the
            collection workers run (made by the scheme's agent factory), so
            its ``state_dict()`` is what they load.
        optimizer: the optimiser of ``model``'s parameters (used where the
            update is applied).
        max_grad_norm: gradients are rescaled to this global norm before each
            update; None for no clipping.

    Optional: ``trained``, a module holding ``model`` and whatever else the
    algorithm trains (an off-policy algorithm's critics and target networks,
    as buffers): its parameters are the gradients sent and the optimiser's,
    its state dict the weights the gradient workers get (the collection
    workers get ``model``'s alone); ``trained_module`` gives ``model``
    without it. And ``after_update()``, called after every optimiser step
    where the step is taken (target networks; see ``after_update``), and
    ``at_version(version)``, called when a gradient worker loads the weights
    of policy ``version`` (see ``at_version``).
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    max_grad_norm: float | None

    def prepare(self, batch: Trajectories) -> Any:
        """Training data from a collected batch (on the model's device)."""
        ...

    def loss(self, minibatch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """The scalar loss of a minibatch (with gradients) and its terms as floats."""
        ...

    def set_parameter(self, name: str, value: float) -> None:
        """Change a hyperparameter during training ("lr" sets the optimiser's)."""
        ...


@runtime_checkable
class Buffer(Protocol):
    """What a scheme needs of a buffer: insert a batch's prepared data, then iterate its minibatches.

    An on-policy buffer replaces what it held; an off-policy storage
    (``rlstruct.distributed.ReplayStorage``) adds to it. A buffer that gives
    no minibatch for a batch (a replay still filling) makes its gradient
    worker collect again.
    """

    def insert(self, data: Any) -> None:
        """Hold ``data`` (what ``Algorithm.prepare`` returned), replacing or adding to what was held."""
        ...

    def minibatches(self) -> Iterator[Any]:
        """The minibatches of the data held, in training order; one gradient step each."""
        ...


def trained_module(algorithm: Algorithm) -> torch.nn.Module:
    """What ``algorithm`` trains: its ``trained`` module if it has one, else its ``model``."""
    trained = getattr(algorithm, "trained", None)
    return trained if isinstance(trained, torch.nn.Module) else algorithm.model


def after_update(algorithm: Algorithm) -> None:
    """Call ``algorithm.after_update()`` if it has one (after each optimiser step, where it is taken)."""
    hook = getattr(algorithm, "after_update", None)
    if callable(hook):
        hook()


def at_version(algorithm: Algorithm, version: int) -> None:
    """Call ``algorithm.at_version(version)`` if it has one (when a gradient worker loads weights of ``version``)."""
    hook = getattr(algorithm, "at_version", None)
    if callable(hook):
        hook(version)


def target_buffers(algorithm: Algorithm) -> list[torch.Tensor] | None:
    """The tensors ``after_update`` moves: the weights of ``trained.target``; None where they are unknown.

    ``[]`` for an algorithm without ``after_update``. For one with it, the
    buffers that stand for parameters in its trained module's ``target``
    (a ``rlstruct.distributed.off_policy.frozen_copy``, as ``SAC`` and
    ``DQN`` keep their target networks: its ``frozen_names``), not its other
    buffers (statistics, an exploration rate), which a target update does not
    move; else None. Rounds of local steps carry these tensors with the
    parameters, and the update worker averages both: every move of a target
    network (a Polyak step or a copy) is linear in the parameters, so when
    the workers took the same steps from the same start, the mean of their
    target networks is the target network that followed the mean of their
    parameters step by step.
    """
    if not callable(getattr(algorithm, "after_update", None)):
        return []
    target = getattr(trained_module(algorithm), "target", None)
    names = getattr(target, "frozen_names", None)
    if not isinstance(target, torch.nn.Module) or names is None:
        return None
    return [target.get_buffer(name) for name in names]


class Hyperparameters:
    """``set_parameter`` for algorithms whose hyperparameters are plain attributes (``PPO``, ``SAC``, ...).

    A subclass lists its hyperparameters in ``names`` and those that are
    fractions in ``fractions``, and calls ``_check_all()`` once they are set.
    Every number must be finite and at least 0; those named in ``fractions``
    at most 1. The constructor and ``set_parameter`` check the same way.
    """

    names: tuple[str, ...]
    fractions: tuple[str, ...] = ()
    optimizer: torch.optim.Optimizer

    def _check(self, where: str, name: str, value: float) -> None:
        """Raise ValueError naming ``name`` if ``value`` is out of its range."""
        high = 1.0 if name in self.fractions else math.inf
        if not (0.0 <= value <= high and math.isfinite(value)):
            bounds = "in [0, 1]" if high == 1.0 else "finite and at least 0"
            raise ValueError(f"{where}: {name} must be {bounds}, got {value!r}")

    def _float(self, name: str, value: object) -> float:
        """``value`` as a float, or a TypeError naming ``name`` if it is not a real number (a bool, a str)."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{type(self).__name__}: {name} must be a float, got {describe(value)}")
        return float(value)

    def _flag(self, name: str, value: object) -> bool:
        """``value`` as a bool if it is one (a NumPy bool too), else a TypeError naming ``name``."""
        if not is_bool(value):
            raise TypeError(f"{type(self).__name__}: {name} must be a bool, got {describe(value)}")
        return bool(value)

    def _check_all(self) -> None:
        for name in self.names:
            self._check(type(self).__name__, name, getattr(self, name))

    def set_parameter(self, name: str, value: float) -> None:
        """Set hyperparameter ``name`` to ``value``; "lr" also sets the optimiser's learning rate.

        Raises:
            ValueError: if ``name`` is not one of the algorithm's hyperparameters,
                or ``value`` is one the constructor refuses (negative, nan,
                infinite, above 1 for a discount or a lambda).
            TypeError: if ``value`` is not a number (a bool for a flag).
        """
        if name not in self.names:
            raise ValueError(
                f"{type(self).__name__}.set_parameter: name must be one of {', '.join(self.names)}; got {name!r}"
            )
        current = getattr(self, name)
        if is_bool(current) != is_bool(value) or not (is_bool(value) or isinstance(value, numbers.Real)):
            raise TypeError(
                f"{type(self).__name__}.set_parameter: {name} must be a {type(current).__name__}, "
                f"got {describe(value)}"
            )
        self._check(f"{type(self).__name__}.set_parameter", name, value)
        setattr(self, name, type(current)(value))
        if name == "lr":
            for group in self.optimizer.param_groups:
                group["lr"] = float(value)


class PPO(Hyperparameters):
    """PPO's maths for a scheme: GAE on each batch, the clipped loss on each minibatch.

    The defaults are those of ``rlstruct.algos.ppo.Config``; the number of
    passes and the minibatch size belong to the buffer (``MinibatchBuffer``).
    The learning rate is constant unless changed with ``set_parameter``
    (``Learner.update_algorithm_parameter``).

    ``prepare`` hands the buffer the batch's valid steps, flattened, for an
    agent without state or history, and its whole rows for one with a memory
    or a history, replayed from their stored state (see
    ``rlstruct.learning.on_policy.ppo_minibatches``).

    Args:
        model: the agent to train, an ``OnPolicyAgent`` such as
            ``ActorCritic`` (its device is the learner's).
        lr: Adam's learning rate.
        gamma: the discount factor.
        gae_lambda: GAE's lambda.
        clip: the clip range of the probability ratio.
        vf_coef: the weight of the value loss.
        ent_coef: the weight of the entropy bonus.
        max_grad_norm: gradients are rescaled to this global norm.

    Raises:
        TypeError: if ``model`` is not an ``Agent`` or lacks what
            ``OnPolicyAgent`` requires (the message names it), or a
            hyperparameter is not a real number (a bool, a str).
        ValueError: if a hyperparameter is negative, nan or infinite, or
            ``gamma`` or ``gae_lambda`` is above 1 (``set_parameter`` too).
    """

    names = ("lr", "gamma", "gae_lambda", "clip", "vf_coef", "ent_coef", "max_grad_norm")
    fractions = ("gamma", "gae_lambda")

    def __init__(
        self,
        model: Agent,
        *,
        lr: float = 1e-3,
        gamma: float = 0.98,
        gae_lambda: float = 0.8,
        clip: float = 0.2,
        vf_coef: float = 0.5,
        ent_coef: float = 0.0,
        max_grad_norm: float = 0.5,
    ) -> None:
        check_on_policy_agent(model, "PPO")
        self.model = model
        self.lr, self.gamma, self.gae_lambda, self.clip = (
            self._float("lr", lr),
            self._float("gamma", gamma),
            self._float("gae_lambda", gae_lambda),
            self._float("clip", clip),
        )
        self.vf_coef, self.ent_coef, self.max_grad_norm = (
            self._float("vf_coef", vf_coef),
            self._float("ent_coef", ent_coef),
            self._float("max_grad_norm", max_grad_norm),
        )
        self._check_all()
        self.optimizer = torch.optim.Adam(model.parameters(), lr=self.lr, eps=1e-5)

    def prepare(self, batch: Trajectories) -> DictTensor | Trajectories:
        """GAE advantages and value targets of ``batch`` ``[B, T]``; its valid steps ``[N]``, or its rows."""
        add_advantages(self.model, batch, self.gamma, self.gae_lambda)
        return ppo_data(self.model, batch)

    def loss(self, minibatch: DictTensor | Trajectories) -> tuple[torch.Tensor, dict[str, float]]:
        """``rlstruct.learning.on_policy.ppo_minibatch_loss`` on a minibatch of steps or rows."""
        return ppo_minibatch_loss(
            self.model, minibatch, clip=self.clip, vf_coef=self.vf_coef, ent_coef=self.ent_coef
        )


class IMPALA(Hyperparameters):
    """IMPALA's maths for a scheme: the V-trace actor-critic loss on whole trajectories.

    The defaults are those of ``rlstruct.algos.impala.Config``. Use it with
    ``WholeBatchBuffer`` (one gradient step per collected batch) and
    asynchronous collection. An agent with a memory or a history is
    replayed from the state stored with each row.

    Args:
        model: the agent to train, an ``OnPolicyAgent`` such as ``ActorCritic``.
        lr: RMSprop's learning rate.
        gamma: the discount factor.
        reward_scale: rewards are multiplied by this in the loss.
        rho_bar: V-trace's clip of the ratios weighting the TD errors.
        c_bar: V-trace's clip of the ratios of the traces.
        vf_coef: the weight of the value loss.
        ent_coef: the weight of the entropy bonus.
        max_grad_norm: gradients are rescaled to this global norm.
        normalize_advantages: normalise the policy-gradient advantages of each batch.

    Raises:
        TypeError: if ``model`` is not an ``Agent`` or lacks what
            ``OnPolicyAgent`` requires (the message names it), a
            hyperparameter is not a real number (a bool, a str), or
            ``normalize_advantages`` not a bool.
        ValueError: if a hyperparameter is negative, nan or infinite, or
            ``gamma`` is above 1 (``set_parameter`` too).
    """

    names = (
        "lr",
        "gamma",
        "reward_scale",
        "rho_bar",
        "c_bar",
        "vf_coef",
        "ent_coef",
        "max_grad_norm",
        "normalize_advantages",
    )
    fractions = ("gamma",)

    def __init__(
        self,
        model: Agent,
        *,
        lr: float = 1e-3,
        gamma: float = 0.99,
        reward_scale: float = 0.1,
        rho_bar: float = 1.0,
        c_bar: float = 1.0,
        vf_coef: float = 0.5,
        ent_coef: float = 0.0,
        max_grad_norm: float = 0.5,
        normalize_advantages: bool = True,
    ) -> None:
        check_on_policy_agent(model, "IMPALA")
        self.model = model
        self.lr, self.gamma, self.reward_scale = (
            self._float("lr", lr),
            self._float("gamma", gamma),
            self._float("reward_scale", reward_scale),
        )
        self.rho_bar, self.c_bar = self._float("rho_bar", rho_bar), self._float("c_bar", c_bar)
        self.vf_coef, self.ent_coef, self.max_grad_norm = (
            self._float("vf_coef", vf_coef),
            self._float("ent_coef", ent_coef),
            self._float("max_grad_norm", max_grad_norm),
        )
        self.normalize_advantages = self._flag("normalize_advantages", normalize_advantages)
        self._check_all()
        self.optimizer = torch.optim.RMSprop(model.parameters(), lr=self.lr, alpha=0.99, eps=1e-5)

    def prepare(self, batch: Trajectories) -> Trajectories:
        """The trajectories as they are: V-trace is computed in the loss, with the current model."""
        return batch

    def loss(self, minibatch: Trajectories) -> tuple[torch.Tensor, dict[str, float]]:
        """``rlstruct.learning.on_policy.vtrace_agent_loss`` on trajectories ``[B, T]``."""
        return vtrace_agent_loss(
            self.model,
            minibatch,
            gamma=self.gamma,
            reward_scale=self.reward_scale,
            rho_bar=self.rho_bar,
            c_bar=self.c_bar,
            vf_coef=self.vf_coef,
            ent_coef=self.ent_coef,
            normalize=self.normalize_advantages,
        )


class MinibatchBuffer:
    """Steps ``[N]``, or whole rows, served as ``n_epochs`` shuffled passes of minibatches (PPO).

    Args:
        n_epochs: passes over each inserted batch.
        minibatch_size: steps per minibatch (the last of a pass may be
            smaller); for rows (``Trajectories`` of T steps),
            ``max(1, minibatch_size // T)`` rows per minibatch.
        seed: seeds the shuffling; by default drawn from torch's global
            generator (which a gradient worker seeds from the scheme's seed
            and its index, so every worker shuffles differently).

    Raises:
        ValueError: if ``n_epochs`` or ``minibatch_size`` is not a positive int,
            or ``seed`` is outside torch's seeds ``[-2**63, 2**64)``.
        TypeError: if ``seed`` is not an int or None.
    """

    def __init__(self, n_epochs: int = 4, minibatch_size: int = 256, seed: int | None = None) -> None:
        for name, value in (("n_epochs", n_epochs), ("minibatch_size", minibatch_size)):
            if not is_int(value) or value <= 0:  # a NumPy int is an int
                raise ValueError(f"MinibatchBuffer: {name} must be a positive int, got {value!r}")
        self.n_epochs, self.minibatch_size = int(n_epochs), int(minibatch_size)
        if seed is None:
            seed = int(torch.randint(0, 2**62, ()).item())
        else:  # as an int: torch's generator refuses a NumPy int
            seed = check_seed("MinibatchBuffer", seed, SEEDS[0])
        self._generator = torch.Generator().manual_seed(seed)
        self._data: DictTensor | Trajectories | None = None

    def insert(self, data: DictTensor | Trajectories) -> None:
        """Hold ``data``: a ``DictTensor`` of N steps, or ``Trajectories`` whose rows are served whole (any device)."""
        if not isinstance(data, (DictTensor, Trajectories)):
            raise TypeError(
                f"MinibatchBuffer.insert: data must be a DictTensor or Trajectories, got {describe(data)}"
            )
        self._data = data

    def _size(self, data: DictTensor | Trajectories) -> int:
        if isinstance(data, Trajectories):
            return rows_per_minibatch(self.minibatch_size, data.trajectories.n_timesteps())
        return self.minibatch_size

    def minibatches(self) -> Iterator[DictTensor | Trajectories]:
        """``n_epochs x ceil(N / size)`` minibatches of ``size`` steps or rows; each pass in a new random order."""
        data = self._data
        if data is None:
            return
        n, size = data.n_elems(), self._size(data)
        for _ in range(self.n_epochs):
            order = torch.randperm(n, generator=self._generator).to(data.device or "cpu")
            for start in range(0, n, size):
                yield data[order[start : start + size]]

    def __len__(self) -> int:
        """The number of minibatches of the data held."""
        if self._data is None:
            return 0
        return self.n_epochs * math.ceil(self._data.n_elems() / self._size(self._data))


class WholeBatchBuffer:
    """The whole inserted batch as one minibatch, ``n_passes`` times (IMPALA: one step per batch).

    Args:
        n_passes: gradient steps per inserted batch.

    Raises:
        ValueError: if ``n_passes`` is not a positive int.
    """

    def __init__(self, n_passes: int = 1) -> None:
        if not is_int(n_passes) or n_passes <= 0:  # a NumPy int is an int
            raise ValueError(f"WholeBatchBuffer: n_passes must be a positive int, got {n_passes!r}")
        self.n_passes = int(n_passes)
        self._data: Any = None

    def insert(self, data: Any) -> None:
        """Hold ``data`` (any prepared batch)."""
        self._data = data

    def minibatches(self) -> Iterator[Any]:
        """The data held, ``n_passes`` times."""
        if self._data is not None:
            for _ in range(self.n_passes):
                yield self._data
