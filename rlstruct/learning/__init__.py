"""The learning layer: what every learner shares, below the training scripts and the schemes.

- ``actor_critic``: ``ActorCritic``, the agent A2C, PPO and IMPALA build, and
  its memory helper ``run_memory``;
- ``parallel``: ``run_in_parallel``, modules that share no parameter (the
  two memories of an actor-critic) run side by side on CPU threads, forward
  and backward, with the numbers of running them one after the other;
- ``encoders``: ``ObservationEncoder``, the features of observations of
  every gymnasium space (one-hot, joined keys, a CNN for images);
- ``metrics``: the returns of finished episodes and how well a value fits;
- ``protocols``: ``OnPolicyAgent``, what A2C, PPO and IMPALA need of an
  agent, and its checks; ``categorical``: ``CategoricalPolicy``, its action
  side for agents that output ``logits``;
- ``q_learning``: ``QAgent``, what DQN needs of an agent, its
  epsilon-greedy half ``EpsilonGreedyPolicy``, the ``QNetwork`` DQN builds and
  the double-Q loss; ``recurrent_q``: the same with a memory (R2D2-style:
  ``RecurrentQNetwork``, n-step targets and the loss on replayed chunks);
  ``soft_actor_critic``: ``SACAgent``, what SAC needs, its
  squashed-Gaussian half ``SquashedGaussianPolicy``, the networks SAC builds
  and its gradient step; ``recurrent_sac``: the same with memories (the
  GRU actor and critics, the step on replayed chunks);
- ``losses``: the losses as functions of tensors; ``on_policy``: the same
  on an agent (GAE targets, PPO's minibatch loss, V-trace).

``rlstruct.algos`` (the readable training scripts) and
``rlstruct.distributed`` (the Ray schemes) both build on this layer, never on
each other.
"""

from rlstruct.learning.actor_critic import MEMORIES, ActorCritic, mlp, run_memory
from rlstruct.learning.categorical import CategoricalPolicy
from rlstruct.learning.encoders import ObservationEncoder
from rlstruct.learning.metrics import EpisodeReturns, explained_variance
from rlstruct.learning.parallel import run_in_parallel
from rlstruct.learning.protocols import OnPolicyAgent, check_on_policy_agent

__all__ = [
    "MEMORIES",
    "ActorCritic",
    "CategoricalPolicy",
    "EpisodeReturns",
    "ObservationEncoder",
    "OnPolicyAgent",
    "check_on_policy_agent",
    "explained_variance",
    "mlp",
    "run_in_parallel",
    "run_memory",
]
