"""The ``rlstruct`` command: ``rlstruct train ALGO --env ENV_ID [options]``.

``rlstruct --help`` and ``rlstruct train --help`` print the usage;
``rlstruct train ALGO --help`` lists the options of ALGO, one per field of
its ``Config``. An environment id gymnasium cannot make ends the command with
one line naming the likely fix (exit status 2).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from rlstruct.algos import ALGORITHMS
from rlstruct.algos.evaluation import UnknownEnvironment

__all__ = ["main"]

USAGE = (
    f"usage: rlstruct train {{{','.join(ALGORITHMS)}}} --env ENV_ID [options]  (--help after ALGO for them)"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (None: ``sys.argv[1:]``); returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]) or args[:2] in (["train", "-h"], ["train", "--help"]):
        print(USAGE)
        return 0
    if len(args) < 2 or args[0] != "train" or args[1] not in ALGORITHMS:
        print(USAGE, file=sys.stderr)
        if len(args) >= 2 and args[0] == "train":
            print(
                f"rlstruct: unknown algorithm {args[1]!r}; choose one of {', '.join(ALGORITHMS)}",
                file=sys.stderr,
            )
        return 2
    module = importlib.import_module(f"rlstruct.algos.{args[1]}")
    try:
        module.main(args[2:])
    except UnknownEnvironment as error:
        print(f"rlstruct: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
