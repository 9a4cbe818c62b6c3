"""Round-trip cost of hand-off primitives between two processes, to choose the batchers' protocol.

A worker process echoes a token back through a pipe, a pair of semaphores, or a
shared flag polled with ``sched_yield``; the median round trip per primitive is
reported. docs/performance.md ("Hand-off") gives the figures and the choice they support.

Usage:
    python benchmarks/handoff.py [--quick] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
from multiprocessing.connection import Connection
from typing import Any

from _common import Row, parse_args, report


def echo_pipe(conn: Connection) -> None:
    while (token := conn.recv()) is not None:
        conn.send(token)


def echo_semaphore(ping: Any, pong: Any) -> None:
    while True:
        ping.acquire()
        pong.release()


def echo_flag(flag: Any) -> None:
    while True:
        while flag[0] == 0:
            os.sched_yield()
        if flag[0] == 2:
            return
        flag[0] = 0


def time_round_trips(round_trip: Any, n: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean round trip over ``n`` calls, in microseconds."""
    round_trip()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            round_trip()
        samples.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(samples)


def main() -> None:
    args, budget = parse_args(__doc__, default_repeats=7)
    n = 100 if args.quick else 2000
    ctx = mp.get_context("spawn")
    rows = []

    here, there = ctx.Pipe()
    worker = ctx.Process(target=echo_pipe, args=(there,), daemon=True)
    worker.start()

    def pipe() -> None:
        here.send(1)
        here.recv()

    rows.append(Row("pipe round trip", time_round_trips(pipe, n, budget.repeats), "us"))
    here.send(None)
    worker.join(5)

    ping, pong = ctx.Semaphore(0), ctx.Semaphore(0)
    worker = ctx.Process(target=echo_semaphore, args=(ping, pong), daemon=True)
    worker.start()

    def semaphore() -> None:
        ping.release()
        pong.acquire()

    rows.append(Row("semaphore round trip", time_round_trips(semaphore, n, budget.repeats), "us"))
    worker.terminate()
    worker.join(5)

    flag: Any = ctx.RawArray("i", 1)
    worker = ctx.Process(target=echo_flag, args=(flag,), daemon=True)
    worker.start()

    def shared_flag() -> None:
        flag[0] = 1
        while flag[0] != 0:
            os.sched_yield()

    rows.append(
        Row("shared flag + sched_yield round trip", time_round_trips(shared_flag, n, budget.repeats), "us")
    )
    flag[0] = 2
    worker.join(5)
    print(f"median of {budget.repeats} repeats of {n} round trips, 2 processes\n")
    report(args, rows)


if __name__ == "__main__":
    main()
