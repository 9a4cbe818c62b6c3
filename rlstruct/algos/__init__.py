"""Algorithms built from rlstruct's public pieces, one readable module each.

Each module has a ``Config`` dataclass (a docstring under every field), a
``train(config) -> dict`` function and a ``main(argv)`` command line, also
reached through ``rlstruct train ALGO``.
"""

ALGORITHMS = ("a2c", "dqn", "impala", "ppo", "sac")
"""The algorithms ``rlstruct train`` knows, each a module ``rlstruct.algos.<name>``."""
