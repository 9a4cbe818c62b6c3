"""Sampling from array-stepped environments: torch CartPole in the batchers, against gymnasium's and EnvPool's.

Every row drives CartPole-v1 with the same policy, an MLP 4-64-64-2 with
categorical sampling by Gumbel-max (argmax of the logits plus Gumbel noise
from the agent's generator: the same distribution as ``torch.multinomial``,
with nothing that waits for a GPU), one call per step for all environments
of a process, and stores what a batcher stores: observations, actions and
the ``next/`` keys in ``[B, 64]`` buffers. It reports real transitions per
second; the repeats are interleaved (one measurement of every row per
repeat) and the median is reported.

CPU rows (``torch.set_num_threads(1)`` everywhere):

- gymnasium's own array-stepped ``CartPoleVectorEnv``
  (``make_vec("CartPole-v1", vectorization_mode="vector_entry_point")``),
  1,024 environments, and ``SyncVectorEnv`` of 64 ``CartPole`` objects, one
  process each (the step after an episode ended only resets it there: not
  counted);
- EnvPool's C++ CartPole-v1, 1,024 environments stepped synchronously on one
  thread per core, when ``envpool`` is installed;
- the floors: ``TorchCartPole`` and the policy in a bare loop with the same
  stores, in one process (1,024 rows) and in two at once (2 x 1,024);
- ``LocalBatcher`` on one ``TorchCartPole`` of 1,024 rows against the first
  floor (target 0.85), ``MultiprocessBatcher`` 2 x 1,024 against the second
  (target 0.85) and against 1.0M steps/s (target 1.0);
- ``LocalBatcher`` on ``GymVectorEnv`` (gymnasium's ``SyncVectorEnv`` of 64
  objects) against ``SyncVectorEnv(64)`` driven directly.

CUDA rows, when a GPU is present: the floor (a bare torch loop on the GPU,
the same steps and stores) and ``LocalBatcher`` with the environment, the
policy and the storage on the GPU, at 4,096, 65,536 and 262,144
environments; the target at 65,536 is 0.8 of the floor and 50M steps/s.

``--plot PATH`` draws the steps/s rows as bars, a panel for the CPU and one
for the GPU; ``--from-json`` draws them from earlier ``--json`` files (the
CPU rows of one machine and the CUDA rows of another) without measuring.

Usage:
    python benchmarks/vectorized.py [--quick] [--repeats N] [--json PATH] [--plot PATH] [--cuda-only]
    python benchmarks/vectorized.py --from-json CPU_JSON CUDA_JSON --plot PATH
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from _common import Row, parse_args, report
from sampling import EnvPoolVector, batcher_rate, interleaved, plot, read_rows, vector_env_rate

from rlstruct import Agent, DictTensor, LocalBatcher, MultiprocessBatcher, TemporalDictTensor
from rlstruct.torch_envs import TorchCartPole, make_torch_env

T = 64


class GumbelMLPAgent(Agent):
    """The policy of every row: an MLP 4-64-64-2 on ``device``, sampled by Gumbel-max."""

    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        torch.manual_seed(0)
        self.device = torch.device(device)
        self.generator = torch.Generator(self.device)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, 2),
        ).to(self.device)

    def act(self, observation: torch.Tensor) -> torch.Tensor:
        logits = self.net(observation)
        uniform = torch.rand(logits.shape, generator=self.generator, device=self.device)
        return (logits - torch.log(-torch.log(uniform.clamp(min=1e-12)))).argmax(-1)

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        return DictTensor({"action": self.act(observation["observation"])}), state


def torch_floor(n_envs: int, steps: int, device: str = "cpu") -> float:
    """Seconds for ``steps`` steps of a ``TorchCartPole`` of ``n_envs`` rows and the policy, stored as a batcher does."""
    env = TorchCartPole(n_envs, seed=0, device=device)
    agent = GumbelMLPAgent(device)
    agent.seed(0)
    observation = env.reset(DictTensor(batch_size=n_envs), auto_reset=True)
    keys = list(observation.keys())

    def buffer(value: torch.Tensor) -> torch.Tensor:
        return torch.zeros((n_envs, T, *value.shape[1:]), dtype=value.dtype, device=env.device)

    stored = {k: buffer(observation[k]) for k in keys}
    reached_stored = {k: buffer(observation[k]) for k in keys}
    actions = torch.zeros((n_envs, T), dtype=torch.int64, device=env.device)
    sync = torch.cuda.synchronize if env.device.type == "cuda" else lambda: None
    sync()
    start = time.perf_counter()
    with torch.no_grad():
        for step in range(steps):
            t = step % T
            action = agent.act(observation["observation"])
            reached, following = env.step(DictTensor({"action": action}))
            torch._foreach_copy_(
                [stored[k][:, t] for k in keys] + [reached_stored[k][:, t] for k in keys] + [actions[:, t]],
                [observation[k] for k in keys] + [reached[k] for k in keys] + [action],
            )
            observation = following
    sync()
    return time.perf_counter() - start


def _floor_process(n_envs: int, steps: int, go: Any, out: Any) -> None:
    torch.set_num_threads(1)
    torch_floor(n_envs, 2)  # warm
    go.wait()
    out.put(torch_floor(n_envs, steps))


def floor_rate(n_processes: int, n_envs: int, transitions: int) -> float:
    """Transitions per second of ``n_processes`` processes running ``torch_floor`` at once."""
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    steps = max(T, transitions // (n_processes * n_envs))
    processes = [
        ctx.Process(target=_floor_process, args=(n_envs, steps, go, out)) for _ in range(n_processes)
    ]
    for process in processes:
        process.start()
    go.set()
    elapsed = max(out.get(timeout=600) for _ in processes)
    for process in processes:
        process.join()
    return n_processes * n_envs * steps / elapsed


def started(batcher: Any) -> Any:
    batcher.reset()
    batcher.execute()
    batcher.get()
    return batcher


def cpu_rows(transitions: int, repeats: int) -> list[Row]:
    from rlstruct import GymVectorEnv

    weights = GumbelMLPAgent().state_dict()
    cartpole = {"env": "CartPole-v1"}
    native = gym.make_vec("CartPole-v1", num_envs=1024, vectorization_mode="vector_entry_point")
    sync64 = gym.make_vec("CartPole-v1", num_envs=64, vectorization_mode="sync")
    local = started(
        LocalBatcher(
            GumbelMLPAgent, {}, make_torch_env, cartpole, n_envs=1024, n_timesteps=T, weights=weights
        )
    )
    multi = started(
        MultiprocessBatcher(
            GumbelMLPAgent,
            {},
            make_torch_env,
            cartpole,
            n_envs=1024,
            n_timesteps=T,
            n_processes=2,
            weights=weights,
        )
    )
    vector = started(
        LocalBatcher(
            GumbelMLPAgent,
            {},
            GymVectorEnv,
            {"env": "CartPole-v1", "vectorization_mode": "sync"},
            n_envs=64,
            n_timesteps=T,
            weights=weights,
        )
    )
    envpool = (
        EnvPoolVector(1024, len(os.sched_getaffinity(0))) if importlib.util.find_spec("envpool") else None
    )
    measures = {
        "native": lambda: vector_env_rate(native, GumbelMLPAgent(), transitions),  # type: ignore[arg-type]
        "sync64": lambda: vector_env_rate(sync64, GumbelMLPAgent(), transitions // 4),  # type: ignore[arg-type]
        "floor1": lambda: 1024 * max(T, transitions // 1024) / torch_floor(1024, max(T, transitions // 1024)),
        "local": lambda: batcher_rate(local, transitions),
        "floor2": lambda: floor_rate(2, 1024, 2 * transitions),
        "multi": lambda: batcher_rate(multi, 2 * transitions),
        "vector": lambda: batcher_rate(vector, transitions // 4),
    }
    if envpool is not None:
        measures["envpool"] = lambda: vector_env_rate(envpool, GumbelMLPAgent(), transitions)  # type: ignore[arg-type]
    try:
        rates = interleaved(measures, repeats)
    finally:
        for closing in (local, multi, vector, native, sync64, envpool):
            if closing is not None:
                closing.close()
    rows = [
        Row(
            "gymnasium CartPoleVectorEnv(1024), 1 process", rates["native"], "steps/s", higher_is_better=True
        ),
        Row("gymnasium SyncVectorEnv(64), 1 process", rates["sync64"], "steps/s", higher_is_better=True),
    ]
    if envpool is not None:
        rows.append(Row("EnvPool(1024), sync", rates["envpool"], "steps/s", higher_is_better=True))
    rows += [
        Row("floor: TorchCartPole 1 x 1024 + policy", rates["floor1"], "steps/s", higher_is_better=True),
        Row(
            "LocalBatcher TorchCartPole 1024 vs its floor",
            rates["local"],
            "steps/s",
            rates["floor1"],
            0.85,
            True,
        ),
        Row("floor: TorchCartPole 2 x 1024 + policy", rates["floor2"], "steps/s", higher_is_better=True),
        Row(
            "Multiprocess TorchCartPole 2 x 1024 vs its floor",
            rates["multi"],
            "steps/s",
            rates["floor2"],
            0.85,
            True,
        ),
        Row("Multiprocess TorchCartPole 2 x 1024 vs 1.0M/s", rates["multi"], "steps/s", 1.0e6, 1.0, True),
    ]
    if envpool is not None:
        rows.append(
            Row(
                "Multiprocess TorchCartPole 2 x 1024 vs EnvPool",
                rates["multi"],
                "steps/s",
                rates["envpool"],
                higher_is_better=True,
            )
        )
    rows.append(
        Row(
            "LocalBatcher GymVectorEnv sync 64 vs SyncVectorEnv(64)",
            rates["vector"],
            "steps/s",
            rates["sync64"],
            higher_is_better=True,
        )
    )
    return rows


def cuda_rows(repeats: int, quick: bool) -> list[Row]:
    rows = []
    sizes = (4096, 65536) if quick else (4096, 65536, 262144)
    for n_envs in sizes:
        steps = (
            4 * T if quick else max(4 * T, min(2048, 2**27 // n_envs) // T * T)
        )  # 134M transitions at most
        batcher = started(
            LocalBatcher(
                GumbelMLPAgent,
                {"device": "cuda"},
                make_torch_env,
                {"env": "CartPole-v1", "device": "cuda"},
                n_envs=n_envs,
                n_timesteps=T,
                device="cuda",
                weights=GumbelMLPAgent("cuda").state_dict(),
            )
        )

        def batched(batcher: Any = batcher, steps: int = steps) -> float:
            """The batcher's rate, the clock stopped once the GPU has done every step queued."""
            batches = max(1, steps // T)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(batches):
                batcher.execute()
                batcher.get()
            torch.cuda.synchronize()
            return batcher.n_elems() * T * batches / (time.perf_counter() - start)

        def floor(n_envs: int = n_envs, steps: int = steps) -> float:
            return n_envs * steps / torch_floor(n_envs, steps, "cuda")

        try:
            floor(n_envs, T)  # warm: the first CUDA calls of each size build their kernels and plans
            batched(batcher, T)
            rates = interleaved({"floor": floor, "local": batched}, repeats)
        finally:
            batcher.close()
        name = f"{n_envs:,}"
        target = 0.8 if n_envs == 65536 else None
        rows += [
            Row(
                f"cuda floor: TorchCartPole {name} + policy", rates["floor"], "steps/s", higher_is_better=True
            ),
            Row(
                f"cuda LocalBatcher TorchCartPole {name} vs its floor",
                rates["local"],
                "steps/s",
                rates["floor"],
                target,
                True,
            ),
        ]
        if n_envs == 65536:
            rows.append(
                Row(
                    f"cuda LocalBatcher TorchCartPole {name} vs 50M/s",
                    rates["local"],
                    "steps/s",
                    5.0e7,
                    1.0,
                    True,
                )
            )
    return rows


def _options(parser: Any) -> None:
    parser.add_argument(
        "--cuda-only", action="store_true", help="only the CUDA rows (on a machine with a GPU)"
    )
    parser.add_argument("--plot", type=Path, metavar="PATH", help="also draw the steps/s rows into PATH")
    parser.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="draw --plot from the rows of earlier --json files (the CPU's and a GPU's) instead of measuring",
    )


def draw(rows: list[dict[str, Any]], path: Path) -> Path:
    """The steps/s rows as bars: a panel for the CPU rows, one for the CUDA rows."""
    gpu = (("cuda ", "CartPole-v1 on one GPU, all on the GPU"),)
    return plot(rows, path, gpu, first="CartPole-v1 on the CPU, one thread per process")


def main() -> None:
    args, budget = parse_args(__doc__, default_repeats=3, extra=_options)
    if args.from_json is not None:
        if args.plot is None:
            sys.exit("vectorized.py: --from-json JSON needs --plot PATH (the image to draw)")
        try:
            print(f"wrote {draw([row for path in args.from_json for row in read_rows(path)], args.plot)}")
        except (OSError, ValueError) as error:
            sys.exit(f"vectorized.py: {error}")
        return
    torch.set_num_threads(1)
    repeats = 1 if args.quick else budget.repeats
    rows = [] if args.cuda_only else cpu_rows(16384 if args.quick else 1 << 21, repeats)
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        print(f"CUDA rows on {name}")
        rows += cuda_rows(repeats, args.quick)
    report(args, rows, value_label="steps/s", baseline_label="baseline")
    if args.plot is not None:
        print(f"wrote {draw([row.to_json() for row in rows], args.plot)}")


if __name__ == "__main__":
    main()
