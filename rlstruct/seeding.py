"""Seeds of independent random streams derived from one base seed.

A run seeded s needs many seeds: one per environment instance, one per agent
copy, one per evaluation environment. Handing out ``s + i`` makes runs overlap:
instance i + 1 of the run seeded s would be instance i of the run seeded s + 1,
so a sweep over seeds 0-4 would replay the same episodes shifted by one.
``derive_seed`` hashes the base seed with the name of a stream instead: the
batchers give environment instance i the seed ``derive_seed(s, "env") + i``
and the agent of group g ``derive_seed(s, "agent") + g``, and the algorithms'
evaluations start at ``derive_seed(s, "eval")``. Two base seeds give roots
about 2**30 apart on average, so their instances never meet in practice.

Examples:
    >>> from rlstruct.seeding import derive_seed
    >>> derive_seed(0, "env") == derive_seed(0, "env")
    True
    >>> abs(derive_seed(1, "env") - derive_seed(0, "env")) > 1_000
    True
    >>> 0 <= derive_seed(-5, "agent") < 2**31
    True
"""

from __future__ import annotations

import hashlib

__all__ = ["SEEDS", "derive_seed"]

SEEDS = (-(2**63), 2**64 - 1)
"""The seeds ``torch.manual_seed`` and ``torch.Generator.manual_seed`` take, both ends included."""


def derive_seed(seed: int, stream: str) -> int:
    """The root seed of ``stream`` for the base seed ``seed``.

    The result is a hash of both (BLAKE2b, stable across processes, machines
    and Python versions, unlike ``hash``), in ``[0, 2**31)`` so that the root
    plus an index of up to 2**31 still fits the 32-bit seeds of NumPy and of
    the environments.

    Args:
        seed: the base seed, any int (negative values too).
        stream: what the seeds are for, e.g. ``"env"``, ``"agent"`` or ``"eval"``.

    Returns:
        An int in ``[0, 2**31)``.

    Raises:
        TypeError: if ``seed`` is not an int or ``stream`` not a str.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"derive_seed: seed must be an int, got {type(seed).__name__} {seed!r}")
    if not isinstance(stream, str):
        raise TypeError(f"derive_seed: stream must be a str, got {type(stream).__name__} {stream!r}")
    digest = hashlib.blake2b(f"{seed}/{stream}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 2**31
