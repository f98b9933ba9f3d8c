"""Sweep benchmark (not a test): a whole `run_sweep` against a loopback server, and replay.

Prints, side by side in one run:
* a sweep of N cases on one model behind a loopback OpenAI-compatible server (its own
  process) with fixed latency, at concurrency 1, 4, 16 and 64: wall time, the
  latency-bound ideal ceil(N/c) x latency, and the speed-up over the sequential run
  (concurrency 1: how rulvar runs a sweep);
* cassette replay throughput: the same sweep recorded, then replayed with no provider.

Usage: python bench/sweep_bench.py [--cases 128] [--latency-ms 100] [--replay-cases 2000]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kb.engine.cassette import Cassette  # noqa: E402
from kb.engine.scheduler import Engine, EngineConfig  # noqa: E402
from kb.store.filestore import KnowledgeStore  # noqa: E402
from kb.store.ttl import parse_instant  # noqa: E402
from kb.sweep.run import SweepOptions, run_sweep  # noqa: E402
from kb.sweep.spec import load_spec  # noqa: E402
from tests.fake_openai_main import server_process  # noqa: E402


def write_spec(directory: Path, cases: int, model: str, params: str) -> Path:
    lines = [
        "[sweep]",
        'committer = "bench"',
        "allow_unbounded = true",
        "",
        "[[models]]",
        f'model = "{model}"',
        f"params = {params}",
    ]
    for i in range(cases):
        lines += [
            "",
            "[[cases]]",
            f'name = "case-{i}"',
            f'task_class = "t{i % 4}"',
            f'prompt = "question {i}"',
            f'graders = [{{ kind = "golden", expected = "echo: question {i}" }}]',
        ]
    path = directory / "spec.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def sweep_wall(
    spec_path: Path, store: Path, concurrency: int, cassette: Cassette | None = None
) -> float:
    spec = load_spec(spec_path)
    engine = Engine.build(
        EngineConfig(concurrency=concurrency, per_provider=concurrency), cassette=cassette
    )
    start = time.perf_counter()
    report = run_sweep(
        spec,
        KnowledgeStore(store),
        engine,
        SweepOptions(commit=False),
        observed_at=parse_instant("2026-11-29T02:00:00Z"),
    )
    wall = time.perf_counter() - start
    assert report is not None and all(cell.complete for cell, _ in report.cells), (
        "the benchmark sweep must be complete"
    )
    return wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=128)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--replay-cases", type=int, default=2000)
    args = parser.parse_args()
    latency = args.latency_ms / 1000
    print(
        f"# sweep benchmark\n\nmachine: {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )
    print(
        f"command: python bench/sweep_bench.py --cases {args.cases} --latency-ms "
        f"{args.latency_ms:g} --replay-cases {args.replay_cases}\n"
    )
    print(f"## kb sweep, {args.cases} cases, loopback server with {args.latency_ms:g} ms latency\n")
    print(
        "| concurrency | wall s | latency-bound ideal s | wall / ideal | speed-up vs sequential |"
    )
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp, server_process(latency) as base:
        work = Path(tmp)
        params = f'{{ api_base = "{base}", api_key = "sk-bench" }}'
        spec = write_spec(work, args.cases, "openai:bench", params)
        sweep_wall(spec, work / "s.json", 8)  # warm up imports and connections
        sequential = None
        for concurrency in (1, 4, 16, 64):
            wall = sweep_wall(spec, work / "s.json", concurrency)
            sequential = sequential or wall
            ideal = math.ceil(args.cases / concurrency) * latency
            print(
                f"| {concurrency} | {wall:.2f} | {ideal:.2f} | {wall / ideal:.2f}x "
                f"| {sequential / wall:.1f}x |"
            )
    print(f"\n## cassette replay, {args.replay_cases} calls (scripted model, no latency)\n")
    print("| run | wall s | calls/s |\n|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        spec = write_spec(work, args.replay_cases, "scripted:bench", '{ default = "x" }')
        cassette = work / "c.jsonl"
        live = sweep_wall(spec, work / "s.json", 16, Cassette(cassette, "record"))

        replay = sweep_wall(spec, work / "s.json", 16, Cassette(cassette, "replay"))
        print(
            f"| live (scripted through litellm), recording | {live:.2f} "
            f"| {args.replay_cases / live:.0f} |"
        )
        print(f"| replay from the cassette | {replay:.2f} | {args.replay_cases / replay:.0f} |")


if __name__ == "__main__":
    main()
