"""The agents the algorithms train: an actor-critic (A2C, PPO, IMPALA), optionally with memory.

Every agent here reads ``observation`` (cast to float32: the networks are
float32 whatever the environment's dtype), takes z from ``agent_info``
(``greedy``: bool per row, act deterministically; absent means sample), and
draws its randomness from ``self.generator``, so batchers reproduce it.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor
    >>> from rlstruct.learning.actor_critic import ActorCritic
    >>> agent = ActorCritic(obs_dim=4, n_actions=2)
    >>> z = DictTensor({"greedy": torch.tensor([False, True])})
    >>> obs = DictTensor({"observation": torch.zeros(2, 4)})
    >>> out, state = agent(agent.initial_state(z, 2), obs, z)
    >>> sorted(out.keys())
    ['action', 'log_prob', 'logits', 'value']
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import torch

from rlstruct.agent import Agent
from rlstruct.checks import check_int, is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe
from rlstruct.learning.categorical import categorical_entropy
from rlstruct.learning.encoders import encode, encoded_keys, observation_encoder
from rlstruct.learning.parallel import run_in_parallel
from rlstruct.normalize import ObservationNormalizer, ValueNormalizer
from rlstruct.specs import ObservationSpace
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = ["MEMORIES", "ActorCritic", "mlp", "run_memory"]


def mlp(sizes: Sequence[int], activation: type[torch.nn.Module] = torch.nn.Tanh) -> torch.nn.Sequential:
    """Linear layers of the given sizes with ``activation`` between them (none after the last)."""
    layers: list[torch.nn.Module] = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        layers.append(torch.nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(activation())
    return torch.nn.Sequential(*layers)


def greedy_rows(owner: str, agent_info: DictTensor, n: int) -> torch.Tensor | None:
    """``agent_info["greedy"]``, bool ``[n]``: the rows that act greedily; None without the key (or rows).

    Raises:
        TypeError: naming ``owner``, if it is not bool (an int would select by index in ``torch.where``).
    """
    if "greedy" not in agent_info or n == 0:
        return None
    greedy = agent_info["greedy"]
    if greedy.dtype != torch.bool:
        raise TypeError(f"{owner}: agent_info['greedy'] must be bool per row, got {describe(greedy)}")
    return greedy


def _checked_nvec(action_nvec: object) -> list[int]:
    """``ActorCritic``'s ``action_nvec`` as a list of ints, each at least 1.

    Raises:
        TypeError: if it is not a sequence of ints.
        ValueError: if it is empty or a count is below 1.
    """
    if isinstance(action_nvec, (str, bytes)) or not hasattr(action_nvec, "__len__"):
        raise TypeError(
            "ActorCritic: action_nvec must be a sequence of ints, the number of choices of each action "
            f"component ([3, 3] for MultiDiscrete([3 3])), got {describe(action_nvec)}"
        )
    nvec = list(action_nvec)  # type: ignore[call-overload]
    if not all(is_int(n) for n in nvec):
        raise TypeError(f"ActorCritic: action_nvec must be a sequence of ints, got {action_nvec!r}")
    if not nvec or any(n < 1 for n in nvec):
        raise ValueError(
            f"ActorCritic: action_nvec must hold at least one count, each at least 1, got {action_nvec!r}"
        )
    return [int(n) for n in nvec]


class ActorCritic(Agent):
    """A policy head and a value head on float32 observations; discrete, multi-discrete or Gaussian actions.

    Observations: a flat ``observation`` of ``obs_dim`` numbers (any dtype,
    read as float32), or the keys of ``observation_spaces`` (every gymnasium
    space: ``rlstruct.gym_env.observation_spaces``) encoded by an
    ``ObservationEncoder`` (one-hot for discrete keys, a CNN for uint8
    images, all keys joined), or by ``encoder``, your own. Give one of the three.

    Args:
        obs_dim: the size of the flat observation under the key ``observation``.
        n_actions: the number of discrete actions; or None for continuous or
            multi-discrete actions.
        action_low: the lower bounds of continuous actions (one per dimension).
        action_high: the upper bounds of continuous actions.
        hidden: the hidden layer sizes of the policy and of the value network
            (a sequence: ``(64, 64)``, not ``64``).
        recurrent: give the policy and the value each their own recurrent
            memory of ``hidden[0]`` units (separate memories: the value's
            errors do not disturb the policy's), under heads of the remaining
            ``hidden`` sizes. Its state (``h_pi``, ``h_v``, plus ``c_pi``,
            ``c_v`` for an LSTM) is the agent state, which batchers reset
            where an episode begins.
        memory: the recurrent cell, "gru" (the default) or "lstm".
        normalize: normalise observations with running statistics
            (``self.obs_norm``, an ``ObservationNormalizer`` whose buffers
            travel with the weights); the learner updates them. With an
            encoder (or ``observation_spaces``), what is normalised is the
            encoder's output, the features the layers read.
        value_norm: end the value head in a ``ValueNormalizer`` (PopArt):
            its last linear layer learns the value in units of the targets'
            running scale, which the learner updates (``update_value_norm``)
            and trains the value in (``value_scale``). The ``value`` output
            is in returns all the same.
        orthogonal: orthogonal initial weights and zero biases (gains sqrt(2)
            in hidden layers, 0.01 for the policy output, 1 for the value);
            otherwise torch's default, with the policy output scaled by 0.01.
        observation_spaces: the observation's keys and their spaces; a
            single non-image box under ``observation`` is the same as its
            ``obs_dim``.
        encoder: a module that turns the observation (a ``DictTensor`` of N
            rows) into float32 features ``[N, out_dim]``, with the attributes
            ``out_dim`` and ``keys`` (the keys it reads), as
            ``ObservationEncoder`` has; it is trained with the heads.
        action_nvec: multi-discrete actions (a ``MultiDiscrete`` space, or
            ``MultiBinary(n)`` as ``[2] * n``): the number of choices of
            each of the k components. The policy is k independent
            categoricals, one per component, on the consecutive slices of
            one ``logits`` output of ``sum(action_nvec)`` numbers.

    Give exactly one of ``n_actions``, ``action_nvec`` and the bounds
    (``action_low`` with ``action_high``).

    Output keys (per row): ``action`` (int64 ``[]`` for discrete, int64 ``[k]``
    for multi-discrete, each component in ``[0, action_nvec[i])``; float32
    clamped to the bounds for continuous: what the environment gets),
    ``log_prob`` (float32, of the action before clamping; the sum of the
    components' for multi-discrete), ``value`` (float32), and the
    distribution's parameters: ``logits`` [n_actions] or [sum(action_nvec)],
    or ``mean`` [action_dim] (the Gaussian's log standard deviation is the
    parameter ``log_std``, the same for every state). The entropy
    (``action_entropy``) of multi-discrete actions is the sum of the
    components'; a greedy row takes the most likely choice of each component.
    Continuous actions also output ``raw_action`` (before clamping); a
    recurrent agent also outputs its value memory after the step (``h_v``,
    and ``c_v`` for an LSTM), from which ``value_of`` values the observation
    reached.

    A recurrent agent replays whole ``[B, T]`` batches in one call of its
    cells per episode piece (``forward_sequence``), which ``replay_agent``
    uses.

    Raises:
        ValueError: for a non-positive ``obs_dim``/``n_actions``, an empty
            ``action_nvec`` or one with a count below 1, not exactly one of
            ``n_actions``, ``action_nvec`` and the bounds, missing, empty or
            mismatched continuous bounds (a low not below its high), an
            unknown ``memory``, or not exactly one of ``obs_dim``,
            ``observation_spaces`` and ``encoder``.
        TypeError: for an ``n_actions`` that is not an int, an
            ``action_nvec`` that is not a sequence of ints, an int
            ``hidden``, or an ``encoder`` without ``out_dim`` and ``keys``.
    """

    low: torch.Tensor
    high: torch.Tensor

    def __init__(
        self,
        obs_dim: int | None = None,
        n_actions: int | None = None,
        action_low: Sequence[float] | None = None,
        action_high: Sequence[float] | None = None,
        hidden: Sequence[int] = (64, 64),
        recurrent: bool = False,
        memory: str = "gru",
        normalize: bool = False,
        value_norm: bool = False,
        orthogonal: bool = False,
        observation_spaces: Mapping[str, ObservationSpace] | None = None,
        encoder: torch.nn.Module | None = None,
        action_nvec: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        self.encoder, obs_dim = observation_encoder("ActorCritic", obs_dim, observation_spaces, encoder)
        self.in_features = obs_dim
        if not isinstance(memory, str) or memory not in MEMORIES:
            raise ValueError(f"ActorCritic: memory must be one of {sorted(MEMORIES)}, got {memory!r}")
        if isinstance(hidden, int):  # config.json's "hidden": 64 is both layers' size
            raise TypeError(
                f"ActorCritic: hidden must be a sequence of layer sizes such as ({hidden}, {hidden}), "
                f"got the int {hidden}"
            )
        hidden = tuple(hidden)
        if not all(is_int(h) for h in hidden):
            raise TypeError(f"ActorCritic: hidden must be a sequence of int layer sizes, got {hidden!r}")
        if not hidden or any(h < 1 for h in hidden):
            raise ValueError(f"ActorCritic: hidden must be positive sizes, got {hidden!r}")
        hidden = tuple(int(h) for h in hidden)
        for name, bound in (("action_low", action_low), ("action_high", action_high)):
            if bound is not None and (isinstance(bound, (str, bytes)) or not hasattr(bound, "__len__")):
                raise TypeError(
                    f"ActorCritic: {name} must be a sequence of floats, one per action dimension "
                    f"([-2.0] for one), got {describe(bound)}"
                )
        bounds = action_low is not None or action_high is not None
        if (n_actions is not None) + (action_nvec is not None) + bounds > 1:
            raise ValueError(
                "ActorCritic: give one of n_actions (discrete actions), action_nvec (multi-discrete ones) or "
                f"action_low and action_high (continuous ones); got n_actions={n_actions!r}, "
                f"action_nvec={action_nvec!r} and bounds {action_low!r}, {action_high!r}"
            )
        self.action_nvec: list[int] | None = None
        if action_nvec is not None:
            self.action_nvec = _checked_nvec(action_nvec)
            n_out = sum(self.action_nvec)
        elif n_actions is None:
            if (
                action_low is None
                or action_high is None
                or len(action_low) != len(action_high)
                or len(action_low) == 0
            ):
                raise ValueError(
                    "ActorCritic: continuous actions need action_low and action_high of the same, non-zero "
                    f"length, got {action_low!r} and {action_high!r}"
                )
            low = torch.tensor(action_low, dtype=torch.float32)
            high = torch.tensor(action_high, dtype=torch.float32)
            if not bool((low < high).all()):
                raise ValueError(
                    f"ActorCritic: action_low must be below action_high in every dimension, got "
                    f"{action_low!r} and {action_high!r}"
                )
            n_out = len(action_low)
            self.register_buffer("low", low)
            self.register_buffer("high", high)
            self.log_std = torch.nn.Parameter(torch.zeros(n_out))
        else:
            n_out = check_int("ActorCritic", "n_actions", n_actions)
        self.discrete = n_actions is not None or action_nvec is not None  # categorical: one, or k of them
        self._device_generator: torch.Generator | None = None
        self.recurrent = recurrent
        self.memory = memory
        self.obs_norm = ObservationNormalizer((obs_dim,)) if normalize else None
        sizes = [obs_dim, *hidden]
        self.actor_memory: torch.nn.GRU | torch.nn.LSTM | None = None
        self.critic_memory: torch.nn.GRU | torch.nn.LSTM | None = None
        if recurrent:
            cell = MEMORIES[memory]
            self.actor_memory = cell(obs_dim, hidden[0], batch_first=True)
            self.critic_memory = cell(obs_dim, hidden[0], batch_first=True)
            sizes = list(hidden)
        self.actor = mlp([*sizes, n_out])
        self.critic = mlp([*sizes, 1])
        if value_norm:
            self.critic.append(ValueNormalizer())  # after the last linear layer: the value in returns
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

    # ------------------------------------------------------------------ memory

    def _state_keys(self, role: str) -> list[str]:
        return [f"h_{role}", f"c_{role}"] if self.memory == "lstm" else [f"h_{role}"]

    def policy_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters of the policy: its memory, its MLP and ``log_std``, and the encoder's (shared)."""
        parts = [self.encoder, self.actor_memory, self.actor]
        own = [self.log_std] if not self.discrete else []
        return own + [p for part in parts if part is not None for p in part.parameters()]

    def value_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters of the value: its memory and its MLP."""
        parts = [self.critic_memory, self.critic]
        return [p for part in parts if part is not None for p in part.parameters()]

    def clip_grad_norm_(self, max_norm: float) -> None:
        """Rescale the gradients, in place, to a global norm of at most ``max_norm``.

        A recurrent agent's policy and value gradients are rescaled apart
        (each to ``max_norm``): they share no parameter, and through one norm
        a large value error would shrink the policy's step as well, which made
        recurrent training unstable. A feed-forward agent's are rescaled
        together, as usual.
        """
        if self.recurrent:
            torch.nn.utils.clip_grad_norm_(self.policy_parameters(), max_norm)
            torch.nn.utils.clip_grad_norm_(self.value_parameters(), max_norm)
        else:
            torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm)

    @property
    def value_norm(self) -> ValueNormalizer | None:
        """The value head's ``ValueNormalizer`` (its last module), or None without ``value_norm``."""
        last = self.critic[-1]
        return last if isinstance(last, ValueNormalizer) else None

    def value_scale(self) -> torch.Tensor | None:
        """The scale the value is learned in: the ``ValueNormalizer``'s std (a float32 scalar), or None without ``value_norm``.

        Learners divide the value error by it, so that the last linear layer
        is trained in its own units.
        """
        return None if self.value_norm is None else self.value_norm.std.to(torch.float32)

    def update_value_norm(self, target: torch.Tensor) -> None:
        """Move the value's scale towards a batch's value targets (of its real steps), keeping every value the same.

        Learners call it after the update that used the batch. Nothing
        happens without ``value_norm``.
        """
        if self.value_norm is not None:
            last = self.critic[-2]
            assert isinstance(last, torch.nn.Linear)
            self.value_norm.update(target, last)

    @property
    def value_memory(self) -> list[str]:
        """The output keys holding the value memory after a step (``value_of`` needs them); [] if none."""
        return self._state_keys("v") if self.recurrent else []

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        """The memory of ``n`` rows at the start of an episode: zeros.

        Args:
            agent_info: z for those rows (``n`` rows); not read.
            n: the number of rows.

        Returns:
            For a recurrent agent, ``h_pi`` and ``h_v`` (plus ``c_pi`` and
            ``c_v`` for an LSTM), each float32 ``[n, hidden[0]]`` on the
            device of the agent's parameters; for a feed-forward agent an
            empty DictTensor of ``n`` rows.
        """
        if self.actor_memory is None:
            return DictTensor(batch_size=n)
        size, device = self.actor_memory.hidden_size, next(self.actor_memory.parameters()).device
        keys = self._state_keys("pi") + self._state_keys("v")
        return DictTensor({k: torch.zeros(n, size, device=device) for k in keys})

    def _remember(
        self, role: str, x: torch.Tensor, state: DictTensor | Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One step of memory ``role`` ("pi" or "v"): features [N, H] and the new state of that memory."""
        rnn = self.actor_memory if role == "pi" else self.critic_memory
        assert rnn is not None
        keys = self._state_keys(role)
        out, new = rnn(x.unsqueeze(1), _hidden(rnn, [state[k] for k in keys]))
        new = new if isinstance(new, tuple) else (new,)
        return out.squeeze(1), {k: v.squeeze(0) for k, v in zip(keys, new, strict=True)}

    def normalized(self, observation: torch.Tensor | DictTensor | Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Observations of N rows as the networks read them: float32 ``[N, d]``, normalised if ``normalize``.

        ``observation``: the ``observation`` tensor ``[N, ...]`` (flat, read
        as float32), or the observation's keys (a mapping of ``[N, ...]``
        tensors: the ``encoder``'s keys, or ``observation``).
        """
        x = encode(self.encoder, observation, self.in_features, "ActorCritic", self)
        return x if self.obs_norm is None else self.obs_norm(x)

    @property
    def observation_keys(self) -> tuple[str, ...]:
        """The keys of the observation the agent reads (``("observation",)`` without an encoder)."""
        return encoded_keys(self.encoder)

    def _flat(self, steps: TemporalDictTensor, prefix: str = "") -> dict[str, torch.Tensor]:
        """The observation keys (under ``prefix``: "next/" for the reached ones) of ``[B, T]`` steps, ``[B * T, ...]``."""
        return {k: steps[prefix + k].flatten(0, 1) for k in self.observation_keys}

    def features(
        self, observation: torch.Tensor, state: DictTensor | None = None
    ) -> tuple[torch.Tensor, DictTensor]:
        """The input of both heads [N, d] from observations [N, ...], and the new state.

        A recurrent agent has one input per head: use ``forward`` or
        ``forward_sequence`` for it.

        Raises:
            ValueError: for a recurrent agent.
        """
        if self.actor_memory is not None:
            raise ValueError(
                "ActorCritic.features: a recurrent agent has a memory per head; "
                "call forward or forward_sequence instead"
            )
        x = self.normalized(observation)
        return x, DictTensor(batch_size=x.shape[0]) if state is None else state

    def log_prob(self, params: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """log pi(action) [N] from ``logits``/``mean`` [N, k] and the (raw) actions [N] or [N, k].

        Multi-discrete actions [N, k]: the sum of the components' log-probabilities.
        """
        if self.action_nvec is not None:
            parts = params.split(self.action_nvec, -1)
            logp = [p.log_softmax(-1).gather(-1, action[:, i, None]).squeeze(-1) for i, p in enumerate(parts)]
            return torch.stack(logp, -1).sum(-1)
        if self.discrete:
            return params.log_softmax(-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        std = self.log_std.exp()
        z = (action - params) / std
        return (-0.5 * z.pow(2) - self.log_std - 0.9189385332046727).sum(-1)  # log(sqrt(2 pi))

    def entropy(self, params: torch.Tensor) -> torch.Tensor:
        """The entropy of the policy [N] from ``logits``/``mean`` [N, k] (multi-discrete: the parts' sum)."""
        if self.action_nvec is not None:
            parts = params.split(self.action_nvec, -1)
            return torch.stack([categorical_entropy(p) for p in parts], -1).sum(-1)
        if self.discrete:
            return categorical_entropy(params)
        return (self.log_std + 1.4189385332046727).sum().expand(params.shape[0])  # 0.5 + log(sqrt(2 pi))

    @property
    def action_key(self) -> str:
        """The output key of the actions ``log_prob`` is of: "action", or "raw_action" (before clamping)."""
        return "action" if self.discrete else "raw_action"

    @property
    def params_key(self) -> str:
        """The output key of the distribution's parameters: "logits" (discrete) or "mean" (continuous)."""
        return "logits" if self.discrete else "mean"

    def action_log_prob(
        self, output: DictTensor | Mapping[str, torch.Tensor], action: torch.Tensor
    ) -> torch.Tensor:
        """log pi(action) [N] under the policy of N outputs (``logits`` or ``mean``); see ``OnPolicyAgent``."""
        return self.log_prob(output[self.params_key], action)

    def action_entropy(self, output: DictTensor | Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The entropy [N] of the policy of N outputs (``logits`` or ``mean``); see ``OnPolicyAgent``."""
        return self.entropy(output[self.params_key])

    def _generator_on(self, device: torch.device) -> torch.Generator:
        """``self.generator``, or for a model moved to another device a generator there, seeded from it."""
        if device == self.generator.device:
            return self.generator
        if self._device_generator is None or self._device_generator.device != device:
            self._device_generator = torch.Generator(device)
            self._device_generator.manual_seed(self.generator.initial_seed())
        return self._device_generator

    def value_of(
        self,
        observation: torch.Tensor | DictTensor | Mapping[str, torch.Tensor],
        output: DictTensor | None = None,
    ) -> torch.Tensor:
        """V [N] of observations of N rows (as ``normalized`` reads them) reached after the steps whose outputs are ``output``.

        For a recurrent agent, ``output`` must hold the value memory after
        those steps (``h_v``, and ``c_v`` for an LSTM): the reached
        observation is one more step of that memory. A stateless agent needs
        no ``output``.

        Raises:
            ValueError: for a recurrent agent without its memory in ``output``.
        """
        features = self.normalized(observation)
        if self.critic_memory is not None:
            keys = self._state_keys("v")
            if output is None or any(k not in output for k in keys):
                raise ValueError(
                    f"ActorCritic.value_of: a recurrent agent needs its value memory {keys} in output, got "
                    f"{None if output is None else list(output.keys())}"
                )
            features, _ = self._remember("v", features, output)
        value: torch.Tensor = self.critic(features)
        return value.squeeze(-1)

    def values_reached(self, steps: TemporalDictTensor) -> torch.Tensor:
        """V [B, T] of the observation reached after every step of a batch (``next/observation``).

        A recurrent agent's value memory after each step is read from the
        stored outputs (``h_v``, ``c_v``): what bootstraps need.
        """
        memory = {k: steps[k].flatten(0, 1) for k in self.value_memory}
        after = DictTensor(memory) if memory else None
        value = self.value_of(self._flat(steps, "next/"), after)
        return value.view(steps.n_elems(), steps.n_timesteps())

    def bootstrap_values(self, batch: Trajectories) -> torch.Tensor:
        """``values_reached`` of the batch's steps: V ``[B, T]`` of ``next/observation``; see ``OnPolicyAgent``."""
        return self.values_reached(batch.trajectories)

    def _normalizer_input(self, steps: TemporalDictTensor) -> torch.Tensor:
        """What ``obs_norm`` normalises, for the real steps of a batch: ``[N, d]``."""
        mask = steps.mask()
        if self.encoder is None:
            return steps["observation"][mask].flatten(1)
        keys = {k: steps[k][mask] for k in self.observation_keys}
        return encode(self.encoder, keys, self.in_features, "ActorCritic", self)

    @torch.no_grad()
    def update_obs_norm(self, steps: TemporalDictTensor) -> None:
        """Merge the observations (an encoder's features) of a batch's real steps into the running statistics.

        Nothing without ``normalize``.

        Learners call it after the update that used the batch: each update
        trains on the statistics its batch was collected with.
        """
        if self.obs_norm is not None:
            self.obs_norm.update(self._normalizer_input(steps))

    @torch.no_grad()
    def observation_moments(self, steps: TemporalDictTensor) -> dict[str, torch.Tensor] | None:
        """The count, mean and variance of a batch's observations, as ``update_obs_norm`` would merge them.

        None without ``normalize``. A scheme's gradient worker computes them
        where the batch is, and the scheme merges them into its model
        (``merge_observation_moments``) after the update that used the batch.
        """
        if self.obs_norm is None:
            return None
        x = self._normalizer_input(steps).to(torch.float64)
        count = torch.tensor(float(x.shape[0]), dtype=torch.float64)
        return {"count": count, "mean": x.mean(0), "var": x.var(0, unbiased=False)}

    def merge_observation_moments(self, moments: Mapping[str, torch.Tensor]) -> None:
        """Merge ``observation_moments`` of a batch (from anywhere) into the running statistics."""
        if self.obs_norm is not None:
            device = self.obs_norm.mean.device
            self.obs_norm.merge(
                moments["count"].to(device), moments["mean"].to(device), moments["var"].to(device)
            )

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(``logits`` or ``mean`` [N, k], ``value`` [N]) from features [N, d] (a stateless agent's)."""
        return self.actor(x), self.critic(x).squeeze(-1)

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        """Sample an action for each of B rows (the mode where ``agent_info["greedy"]`` is True).

        Actions are drawn with ``self.generator`` (or a generator on the
        parameters' device seeded from it).

        Args:
            state: B rows, the keys of ``initial_state`` (empty for a
                feed-forward agent).
            observation: B rows with the key ``observation`` ``[B, ...]`` (any
                dtype: read as flat float32), on the agent's device.
            agent_info: z of every row; its optional bool key ``greedy`` [B]
                selects the most likely action.
            history: not read.

        Returns:
            ``(output, new_state)``: ``output`` holds the keys listed in the
            class description, each with B rows on the agent's device;
            ``new_state`` the memory after the step (``state`` itself for a
            feed-forward agent).
        """
        x = self.normalized(observation if self.encoder is not None else observation["observation"])
        out: dict[str, torch.Tensor] = {}
        if self.actor_memory is None:
            params, value = self.heads(x)
            new_state = state
        else:
            x_pi, new_pi = self._remember("pi", x, state)
            x_v, new_v = self._remember("v", x, state)
            params, value = self.actor(x_pi), self.critic(x_v).squeeze(-1)
            new_state = DictTensor(new_pi | new_v)
            out.update(new_v)  # what the value of the reached observation needs
        greedy = greedy_rows("ActorCritic", agent_info, x.shape[0])
        generator = self._generator_on(params.device)
        if self.discrete:
            parts = [params] if self.action_nvec is None else params.split(self.action_nvec, -1)
            # one draw per component, each of its own categorical
            sampled = torch.cat([torch.multinomial(p.softmax(-1), 1, generator=generator) for p in parts], -1)
            if greedy is not None:
                best = torch.stack([p.argmax(-1) for p in parts], -1)
                sampled = torch.where(greedy.unsqueeze(-1), best, sampled)
            action = sampled if self.action_nvec is not None else sampled.squeeze(-1)
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
        out["logits" if self.discrete else "mean"] = params
        return DictTensor(out), new_state

    def forward_sequence(
        self,
        state: DictTensor,
        observation: TemporalDictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> TemporalDictTensor | None:
        """Replay a whole ``[B, T]`` batch in one pass, without sampling.

        Returns ``logits`` (or ``mean``) and ``value``, ``[B, T, ...]``: the
        outputs a loss needs (the value memory to bootstrap from is the one
        stored at collection, ``h_v``/``c_v``). Each memory starts from
        ``state`` and restarts from zeros (``initial_state``) at every step
        whose ``initial_state`` key is True, as during collection; it runs as
        one cell call per episode piece (see ``run_memory``).
        """
        b, t = observation.n_elems(), observation.n_timesteps()
        x = self.normalized(self._flat(observation)).view(b, t, -1)
        out: dict[str, torch.Tensor] = {}
        if self.actor_memory is None or self.critic_memory is None:
            params, value = self.heads(x)
        else:
            starts = observation["initial_state"]
            pi, v = self.actor_memory, self.critic_memory
            h_pi, h_v = [state[k] for k in self._state_keys("pi")], [state[k] for k in self._state_keys("v")]
            # the two memories share no parameter: on the CPU they run side by side, forward and backward
            x_pi, x_v = run_in_parallel(
                [lambda x: run_memory(pi, x, h_pi, starts), lambda x: run_memory(v, x, h_v, starts)],
                x,
                [list(pi.parameters()), list(v.parameters())],
            )
            params, value = self.actor(x_pi), self.critic(x_v).squeeze(-1)
        out["value"] = value
        out["logits" if self.discrete else "mean"] = params
        return TemporalDictTensor(out, observation.lengths)


MEMORIES: dict[str, type[torch.nn.GRU] | type[torch.nn.LSTM]] = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM}
"""The recurrent cells ``ActorCritic(memory=...)`` accepts."""


def run_memory(
    rnn: torch.nn.GRU | torch.nn.LSTM,
    x: torch.Tensor,
    state: Sequence[torch.Tensor],
    starts: torch.Tensor,
) -> torch.Tensor:
    """Run a batch-first GRU or LSTM over ``[B, T]`` steps whose state restarts at episode starts.

    Where an episode starts inside a row, the state must restart from zeros,
    which one call over the row cannot do. So each row is cut into its
    episode pieces, the pieces are padded into one ``[S, L]`` batch (S pieces,
    L the longest, at most T) and run in a single call: the cost of a call
    over ``[B, T]`` when no episode starts, and never more steps than T.

    Args:
        rnn: the memory (``batch_first=True``, one layer).
        x: inputs ``[B, T, d]``.
        state: the state before step 0, ``[h]`` (GRU) or ``[h, c]`` (LSTM), each ``[B, H]``.
        starts: ``[B, T]`` bool, True where an episode starts (the state is
            zeros before that step); a start at step 0 drops ``state``.

    Returns:
        The outputs ``[B, T, H]`` (the hidden state after every step).

    Raises:
        TypeError: if ``x`` or ``starts`` is not a tensor, ``starts`` not
            bool, ``state`` not a list of tensors, or a state not of ``x``'s dtype.
        ValueError: if ``x`` is not ``[B, T, d]`` with T >= 1, ``starts``
            not ``[B, T]``, ``state`` not one ``[B, H]`` tensor per part of
            ``rnn``'s state, or ``rnn`` not one ``batch_first`` layer in one direction.

    Examples:
        >>> import torch
        >>> gru = torch.nn.GRU(3, 4, batch_first=True)
        >>> x, h = torch.randn(2, 5, 3), torch.randn(2, 4)
        >>> starts = torch.zeros(2, 5, dtype=torch.bool)
        >>> starts[0, 2] = True  # row 0: a new episode at step 2
        >>> out = run_memory(gru, x, [h], starts)
        >>> torch.allclose(out[0, 2:], gru(x[:1, 2:])[0][0], atol=1e-6)  # restarted from zeros
        True
        >>> torch.allclose(out[1], gru(x[1:], h[1:].unsqueeze(0))[0][0], atol=1e-6)
        True
    """
    _check_memory_inputs(rnn, x, state, starts)
    b, t, _ = x.shape
    keep = (~starts[:, 0]).to(x.dtype).unsqueeze(-1)
    first = [s * keep for s in state]
    if not bool(starts[:, 1:].any()):  # no episode starts inside a row: one call over [B, T]
        return rnn(x, _hidden(rnn, first))[0]  # type: ignore[no-any-return]
    # episode pieces: piece p begins where a row begins or an episode starts
    begins = starts.clone()
    begins[:, 0] = True
    flat_begins = begins.flatten()
    piece = flat_begins.cumsum(0) - 1  # [B*T]: the piece of each step
    begin_at = flat_begins.nonzero().squeeze(1)  # [S]: flat index of each piece's first step
    pos = torch.arange(b * t, device=x.device) - begin_at[piece]  # the step's place in its piece
    padded = x.new_zeros(begin_at.shape[0], int(pos.max()) + 1, x.shape[-1])
    padded[piece, pos] = x.flatten(0, 1)
    # a piece that begins a row carries the row's state in (zeros if an episode starts there too);
    # a piece that begins inside a row starts an episode: zeros
    carried = (begin_at % t == 0).to(x.dtype).unsqueeze(-1)
    init = [f[begin_at // t] * carried for f in first]
    out = rnn(padded, _hidden(rnn, init))[0]
    return out[piece, pos].view(b, t, -1)  # type: ignore[no-any-return]


def _check_memory_inputs(
    rnn: torch.nn.GRU | torch.nn.LSTM, x: torch.Tensor, state: Sequence[torch.Tensor], starts: torch.Tensor
) -> None:
    """Raise naming the argument of ``run_memory`` that is not what it must be (a few attribute reads)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        got = f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise (ValueError if isinstance(x, torch.Tensor) else TypeError)(
            f"run_memory: x must be a tensor [B, T, d], got {got}"
        )
    b, t = x.shape[:2]
    if t == 0:
        raise ValueError(f"run_memory: x must hold at least one step (T >= 1), got shape {tuple(x.shape)}")
    if rnn.num_layers != 1 or not rnn.batch_first or rnn.bidirectional:
        raise ValueError(
            f"run_memory: rnn must be one layer with batch_first=True, one direction, got "
            f"num_layers={rnn.num_layers}, batch_first={rnn.batch_first}, bidirectional={rnn.bidirectional}"
        )
    if not isinstance(starts, torch.Tensor) or starts.dtype != torch.bool:
        got = f"dtype {starts.dtype}" if isinstance(starts, torch.Tensor) else type(starts).__name__
        raise TypeError(f"run_memory: starts must be a bool tensor [B, T], got {got}")
    if starts.shape != (b, t):
        raise ValueError(f"run_memory: starts must be [B, T] = {[b, t]} as x, got {list(starts.shape)}")
    parts = 2 if isinstance(rnn, torch.nn.LSTM) else 1
    if isinstance(state, torch.Tensor) or not isinstance(state, Sequence):
        raise TypeError(
            f"run_memory: state must be a list of {parts} tensor(s) ([h] for a GRU, [h, c] for an LSTM), "
            f"got {type(state).__name__}"
        )
    if len(state) != parts:
        raise ValueError(
            f"run_memory: state must hold {parts} tensor(s) for a {type(rnn).__name__}, got {len(state)}"
        )
    for s in state:
        if not isinstance(s, torch.Tensor) or tuple(s.shape) != (b, rnn.hidden_size):
            what = str(list(s.shape)) if isinstance(s, torch.Tensor) else type(s).__name__
            raise ValueError(f"run_memory: each state must be [B, H] = {[b, rnn.hidden_size]}, got {what}")
        if s.dtype != x.dtype:
            raise TypeError(f"run_memory: each state must have the dtype of x, {x.dtype}, got {s.dtype}")


def _hidden(
    rnn: torch.nn.GRU | torch.nn.LSTM, state: Sequence[torch.Tensor]
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The ``hx`` argument of ``rnn`` from ``[h]`` or ``[h, c]`` ``[N, H]`` (one layer)."""
    if isinstance(rnn, torch.nn.LSTM):
        return state[0].unsqueeze(0), state[1].unsqueeze(0)
    return state[0].unsqueeze(0)
