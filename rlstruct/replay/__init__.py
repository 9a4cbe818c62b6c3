"""Replay buffers on DictTensor storage: uniform, prioritized, hindsight relabelling and sequences.

A replay buffer keeps the last ``capacity`` transitions, one row per
transition, in one preallocated tensor per key (a ring buffer: once full, each
add overwrites the oldest rows). The first add (or ``specs=``) fixes the keys,
per-row shapes and dtypes; every later add must match them exactly, since
values are never cast. Transitions usually come from a batcher:
``add_trajectories`` keeps the valid steps of a ``TemporalDictTensor``
(``masked_flatten``), so that a row holds ``observation``, ``action``,
``next/reward``, ``next/observation``, ``next/terminated``, ... of one step.

Every transition buffer's ``sample`` returns a ``ReplaySample``: the rows,
their slots and their importance-sampling weights (all ones unless the
sampling is prioritized), so that one learner reads any of them the same way.

- ``ReplayBuffer``: uniform sampling with replacement.
- ``PrioritizedReplayBuffer``: proportional prioritized replay (Schaul et al.,
  2016) on a ``SumTree`` (``rlstruct.replay.sumtree``), with importance-sampling weights.
- ``HindsightReplayBuffer``: goal-conditioned transitions whose desired goal is
  replaced, at sample time, by a goal achieved later in the same episode, with
  the reward recomputed (Andrychowicz et al., 2017).
- ``SequenceReplayBuffer``: whole chunks of T steps (rows of a batcher's
  batch) with the agent's state at their start, for agents with memory, with
  R2D2's burn-in (Kapturowski et al., 2019); ``sample`` returns a
  ``SequenceSample`` that ``replay_agent`` replays, and
  ``sequence_priorities`` gives a chunk's priority from its TD errors.

Storage lives on the buffer's ``device``: adds copy rows there from wherever
they are (that is what ``device`` asks for), and samples are new tensors on it,
never views of the storage. A row's keys lie side by side in one block of
memory, each key a view into it, so sampling a row reads one stretch of memory
rather than one per key.

Sharing between processes: with ``shared=True`` (CPU only) the storage, the
write position and size, and the priorities live in shared memory, so a buffer
handed to a spawned process (as an argument of ``multiprocessing.Process`` or
``torch.multiprocessing.spawn``) writes into the storage the parent samples
from. The concurrency rule is: every call that reads or writes the buffer
(``add``, ``sample``, ``update_priorities``, ``state_dict``,
``load_state_dict``) holds the buffer's lock, a ``multiprocessing`` lock shared
by all the processes; so any number of processes may add and sample, one call
at a time. A call that cannot take the lock within ``timeout`` seconds raises
``TimeoutError`` (a process that died while holding it leaves it taken). The
storage must exist before the buffer is handed over (pass ``specs=`` or add a
first batch). Each process keeps its own copy of the random generator, and the
lock can only travel when a process is started, not through a queue. A
non-shared buffer can be pickled too, but the other process then gets a copy.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor, ReplayBuffer
    >>> buffer = ReplayBuffer(100, generator=torch.Generator().manual_seed(0))
    >>> buffer.add(DictTensor({"observation": torch.randn(8, 3), "action": torch.arange(8)}))
    >>> len(buffer), buffer.capacity
    (8, 100)
    >>> rows, indices, weights = buffer.sample(32)
    >>> rows["observation"].shape, rows["action"].dtype, weights.dtype
    (torch.Size([32, 3]), torch.int64, torch.float32)
"""

from rlstruct.replay.hindsight import HindsightReplayBuffer, RewardFn
from rlstruct.replay.prioritized import PrioritizedReplayBuffer
from rlstruct.replay.sequence import SequenceReplayBuffer, SequenceSample, sequence_priorities
from rlstruct.replay.sumtree import SumTree
from rlstruct.replay.uniform import ReplayBuffer, ReplaySample

__all__ = [
    "HindsightReplayBuffer",
    "PrioritizedReplayBuffer",
    "ReplayBuffer",
    "ReplaySample",
    "RewardFn",
    "SequenceReplayBuffer",
    "SequenceSample",
    "SumTree",
    "sequence_priorities",
]
