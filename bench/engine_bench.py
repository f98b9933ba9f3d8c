"""Engine benchmark (not a test): wall time vs the latency-bound ideal, overhead vs bare litellm.

Against a loopback OpenAI-compatible server (its own process) with fixed latency,
prints side by side:
* 400 calls at concurrency 16 through kb's engine: wall time and its ratio to the
  latency-bound ideal ceil(400/16) x latency (goal <= 1.25x), and the same 400 calls
  through bare ``litellm.acompletion`` with the same concurrency (the baseline);
* a sequential run (the rulvar posture) for scale;
* per-call overhead: kb's engine vs bare litellm on a zero-latency server, calls in
  sequence (goal < 10 % of a bare litellm call).

Usage: python bench/engine_bench.py [--calls 400] [--concurrency 16] [--latency-ms 100]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kb.engine.adapter import load_litellm  # noqa: E402
from kb.engine.budget import SpendEnvelope  # noqa: E402
from kb.engine.requests import ModelSpec, build_request  # noqa: E402
from kb.engine.scheduler import Engine, EngineConfig, PlannedRun  # noqa: E402
from tests.fake_openai_main import server_process  # noqa: E402


def kb_wall(base: str, calls: int, concurrency: int) -> float:
    spec = ModelSpec("openai:bench", params={"api_base": base, "api_key": "sk-bench"})
    runs = [
        PlannedRun(f"r{i}", "target", spec, build_request(spec, f"prompt {i}"))
        for i in range(calls)
    ]
    engine = Engine(EngineConfig(concurrency=concurrency, per_provider=concurrency))
    start = time.perf_counter()
    results = engine.run(runs, SpendEnvelope(cap=None))
    wall = time.perf_counter() - start
    assert all(r.status == "ok" for r in results), {r.status for r in results}
    return wall


def bare_wall(base: str, calls: int, concurrency: int) -> float:
    litellm = load_litellm()

    async def main() -> float:
        limit = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with limit:
                await litellm.acompletion(
                    model="openai/bench",
                    api_base=base,
                    api_key="sk-bench",
                    messages=[{"role": "user", "content": f"prompt {i}"}],
                    num_retries=0,
                    max_retries=0,
                )

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(calls)))
        wall = time.perf_counter() - start
        await litellm.close_litellm_async_clients()
        return wall

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--overhead-calls", type=int, default=200)
    args = parser.parse_args()
    latency = args.latency_ms / 1000
    ideal = math.ceil(args.calls / args.concurrency) * latency
    print(
        f"# engine benchmark\n\nmachine: {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )
    print(
        f"command: python bench/engine_bench.py --calls {args.calls} --concurrency "
        f"{args.concurrency} --latency-ms {args.latency_ms:g} --overhead-calls "
        f"{args.overhead_calls}\n"
    )
    load_litellm()
    with server_process(latency) as base:
        kb_wall(base, 20, args.concurrency)  # warm up connections and imports
        ours = kb_wall(base, args.calls, args.concurrency)
        theirs = bare_wall(base, args.calls, args.concurrency)
        sequential = kb_wall(base, min(args.calls, 40), 1) * args.calls / min(args.calls, 40)
    print(
        f"## {args.calls} calls, {args.latency_ms:g} ms server latency, concurrency "
        f"{args.concurrency}\n"
    )
    print("| run | wall s | vs ideal |\n|---|---:|---:|")
    print(
        f"| latency-bound ideal ceil({args.calls}/{args.concurrency}) x {latency:g} s "
        f"| {ideal:.2f} | 1.00x |"
    )
    print(f"| kb engine | {ours:.2f} | {ours / ideal:.2f}x |")
    print(f"| bare litellm.acompletion, same concurrency | {theirs:.2f} | {theirs / ideal:.2f}x |")
    print(
        f"| sequential (rulvar posture), extrapolated from 40 calls | {sequential:.2f} "
        f"| {sequential / ideal:.2f}x |"
    )
    with server_process(0.0) as base:
        kb_wall(base, 20, 1)
        bare_wall(base, 20, 1)
        rounds = 7
        per_round = max(1, args.overhead_calls // rounds)
        ours_samples, bare_samples = [], []
        for _ in range(rounds):  # alternate, so drift on the machine hits both alike
            ours_samples.append(kb_wall(base, per_round, 1) / per_round)
            bare_samples.append(bare_wall(base, per_round, 1) / per_round)
        ours_seq = statistics.median(ours_samples)
        bare_seq = statistics.median(bare_samples)
    print(
        f"\n## per-call cost, zero-latency server, {args.overhead_calls} calls in sequence "
        "(median of 7 alternating rounds)\n"
    )
    print("| path | ms per call |\n|---|---:|")
    print(f"| bare litellm.acompletion | {bare_seq * 1000:.2f} |")
    print(f"| kb engine (plan, envelope, retries wrapper, result) | {ours_seq * 1000:.2f} |")
    print(
        f"| kb overhead | {(ours_seq - bare_seq) * 1000:.2f} "
        f"({(ours_seq / bare_seq - 1) * 100:.1f} % of a bare call) |"
    )


if __name__ == "__main__":
    main()
