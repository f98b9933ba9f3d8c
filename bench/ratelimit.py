"""Rate-limit benchmark (not a test): one sweep under a provider's limits, through kb and peers.

The work (SPEC 13.5): 2,000 calls (one model × 2,000 cases, each graded by
an exact match) against the loopback rate-limited server
(``tests/fake_ratelimit.py``, its own process): 600 requests and 200,000
tokens per minute per key, token buckets refilled continuously and full at
the start (OpenAI's documented semantics), OpenAI-style ``x-ratelimit-*``
headers on every reply, 429 with ``retry-after`` when a bucket cannot pay.
Each tool runs it from a fresh process with its own answer to rate limits:
kb (pacing per bucket from the headers, AIMD on 429; ``concurrency`` 16),
promptfoo (its adaptive scheduler, ``--max-concurrency`` 16) and inspect_ai
(its adaptive connections, on by default; no fixed ``max_connections``),
in alternating rounds; the buckets are refilled between runs.

Printed per tool: wall time (median over rounds), the ideal, their ratio,
the requests the server saw and the share it answered 429. The ideal is
SPEC 13.5's: calls ÷ R or tokens ÷ T, whichever binds, with the tokens
each tool's requests were counted at (a tool that sends a large
``max_tokens`` pays for it against the tokens limit, as at OpenAI; the peers
are told ``max_tokens`` 16, what the server counts for kb's requests, so
all three send the same work). Because
the bucket starts full, a tool that spends the first minute's burst at once
can finish below the ideal: the floor with the burst is
``(calls − R) ÷ R`` minutes, also printed.

The peers are optional, as in ``bench/peers.py`` (``--inspect-python``,
``--promptfoo``); a missing one is skipped with a line saying how to install it.

With ``--shards N`` (SPEC 14.4) it measures many processes on one key
instead: the same calls over ``N`` ``kb sweep --shard I/N`` processes, each in
its own clone, started together, under four ways of sharing the buckets —
``process`` (none: v4's pacing, the before), ``file`` (the default: one
runtime folder on this machine), ``redis`` (a real ``redis-server`` on
loopback; each shard given its own runtime folder, so they share only Redis:
the cross-host case) — and one process alone beside them. The calls are
spread over 16 task classes of one model (a shard holds whole cells). Goals:
≤ 1 % 429s, wall ≤ 1.15 × the rate-limit ideal, 0 shards failing.

Usage: python bench/ratelimit.py [--rounds 1] [--calls 2000] [--rpm 600] [--tpm 200000]
       [--latency-ms 300] [--inspect-python PY] [--promptfoo PATH]
       python bench/ratelimit.py --shards 4 [--shares one,process,file,redis] [--kb CHECKOUT]
(``--kb``: another checkout's kb, e.g. v4's worktree for the before figures; v4 has no
sharing, so give it ``--shares one,process``)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.peers import (  # noqa: E402
    MISSING,
    OFFLINE,
    between,
    find_promptfoo,
    has_inspect_ai,
    kb_setup,
    milliseconds,
    promptfoo_setup,
)
from tests.fake_openai_main import child_server  # noqa: E402
from tests.redis_server import redis_server  # noqa: E402
from tests.sweep_helpers import one_key_spec  # noqa: E402

INSPECT_TASK = """
from inspect_ai import Task, task, eval
from inspect_ai.dataset import Sample
from inspect_ai.scorer import exact
from inspect_ai.solver import generate

@task
def bench():
    return Task(
        dataset=[Sample(input=f"question {{i}}", target=f"echo: question {{i}}")
                 for i in range({calls})],
        solver=generate(),
        scorer=exact(),
    )

if __name__ == "__main__":
    logs = eval(
        bench(),
        model="openai/bench-0",
        model_args={{"responses_api": False}},
        max_tokens={max_tokens},
        display="none",
        log_level="error",
        log_dir="logs",
    )
    assert all(log.status == "success" for log in logs), [log.status for log in logs]
"""


MAX_TOKENS = 16
"""What the peers are told to ask for (promptfoo asks 1,024 unless told): the server counts
16 for a request that names none, as kb's do, so every tool's calls cost the same tokens."""


@dataclass(frozen=True)
class Run:
    """One tool's run as the server saw it."""

    wall_s: float
    requests: int
    limited: int
    tokens: float
    ok: bool


def limited_server(rpm: float, tpm: float, latency_s: float) -> AbstractContextManager[str]:
    """The rate-limited server in its own process; yields its base URL."""
    return child_server(
        "tests.fake_ratelimit", "--rpm", str(rpm), "--tpm", str(tpm), "--latency", str(latency_s)
    )


def _server(base: str, method: str, path: str) -> dict[str, float]:
    request = urllib.request.Request(
        f"{base}{path}", method=method, data=b"" if method == "POST" else None
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        found: dict[str, float] = json.loads(reply.read())
        return found


def one_run(base: str, command: list[str], cwd: Path, env: dict[str, str]) -> Run:
    """Refill the buckets, run the tool once, and read what the server saw."""
    _server(base, "POST", "/reset")
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    seen = _server(base, "GET", "/stats")
    if done.returncode not in (0, 1):
        print(f"  {command[:3]} exited {done.returncode}: {done.stderr[-600:]}", file=sys.stderr)
    return Run(
        wall,
        int(seen["requests"]),
        int(seen["limited"]),
        float(seen["tokens"]),
        done.returncode == 0,
    )


def inspect_setup(work: Path, calls: int, python: str) -> list[str] | None:
    if not has_inspect_ai(python):
        return None
    work.mkdir(parents=True)
    (work / "task.py").write_text(INSPECT_TASK.format(calls=calls, max_tokens=MAX_TOKENS))
    return [python, "task.py"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=between(1, 20), default=1, help="alternating rounds (1)")
    parser.add_argument("--calls", type=between(1, 100_000), default=2000, help="calls (2000)")
    parser.add_argument("--rpm", type=between(1, 10**7), default=600, help="requests/min (600)")
    parser.add_argument("--tpm", type=between(1, 10**9), default=200_000, help="tokens/min")
    parser.add_argument(
        "--latency-ms", type=milliseconds, default=300.0, help="the server's latency (300)"
    )
    parser.add_argument("--concurrency", type=between(1, 1000), default=16)
    parser.add_argument("--inspect-python", default=None)
    parser.add_argument("--promptfoo", default=None)
    parser.add_argument("--shards", type=between(1, 64), default=None, help="many processes")
    parser.add_argument("--shares", default=",".join(SHARES), help="which sharing to measure")
    parser.add_argument(
        "--kb", type=Path, default=ROOT, help="the checkout whose kb the shards run (--shards)"
    )
    args = parser.parse_args()
    if args.shards is not None:
        shares = [name.strip() for name in args.shares.split(",") if name.strip()]
        if not shares or any(name not in SHARES for name in shares):
            parser.error(f"--shares: a comma-separated list of {', '.join(SHARES)}")
        shards_main(args, shares)
        return
    if args.inspect_python is not None and not has_inspect_ai(args.inspect_python):
        parser.error(f"--inspect-python {args.inspect_python}: not a Python with inspect_ai")
    if args.promptfoo is not None and find_promptfoo(args.promptfoo) is None:
        parser.error(f"--promptfoo {args.promptfoo}: no such executable")
    env = {**os.environ, **OFFLINE, "PYTHONPATH": str(ROOT)}
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {platform.system()} {platform.release()}"
    )
    print(f"command: python bench/ratelimit.py {' '.join(sys.argv[1:])}".rstrip())
    with (
        limited_server(args.rpm, args.tpm, args.latency_ms / 1000) as base,
        tempfile.TemporaryDirectory() as tmp,
    ):
        where = Path(tmp)
        env["OPENAI_BASE_URL"] = f"{base}/v1"
        tools: dict[str, tuple[list[str], Path] | None] = {}
        kb_dir = where / "kb"
        tools["kb"] = (
            kb_setup(kb_dir, f"{base}/v1", 1, args.calls, args.concurrency),
            kb_dir,
        )
        pf = promptfoo_setup(
            where / "promptfoo",
            f"{base}/v1",
            1,
            args.calls,
            args.concurrency,
            find_promptfoo(args.promptfoo),
        )
        if pf:  # promptfoo asks max_tokens 1024 by default: the limiter would count it
            config_file = where / "promptfoo" / "promptfooconfig.json"
            config = json.loads(config_file.read_text())
            for provider in config["providers"]:
                provider["config"]["max_tokens"] = MAX_TOKENS
            config_file.write_text(json.dumps(config))
        tools["promptfoo"] = (pf, where / "promptfoo") if pf else None
        py = args.inspect_python or sys.executable
        ins = inspect_setup(where / "inspect_ai", args.calls, py)
        tools["inspect_ai"] = (ins, where / "inspect_ai") if ins else None
        for name, tool in tools.items():
            if tool is None:
                print(f"skipped {name}: not installed here; {MISSING[name]}")
        ready = {name: tool for name, tool in tools.items() if tool is not None}
        found: dict[str, list[Run]] = {name: [] for name in ready}
        for round_number in range(args.rounds):
            for name, (command, cwd) in ready.items():
                run = one_run(base, command, cwd, env)
                found[name].append(run)
                print(
                    f"round {round_number + 1} {name}: {run.wall_s:.1f} s, "
                    f"{run.requests} requests, {run.limited} answered 429"
                    + ("" if run.ok else " (the tool reported failures)"),
                    flush=True,
                )
    calls_ideal = args.calls / args.rpm * 60.0
    burst_floor = max(0.0, args.calls - args.rpm) / args.rpm * 60.0
    print()
    print(
        f"{args.calls} calls under {args.rpm} RPM / {args.tpm:,} TPM, "
        f"{args.latency_ms:.0f} ms a call; ideal by requests {calls_ideal:.1f} s "
        f"(with the first minute's burst: {burst_floor:.1f} s)"
    )
    print()
    print("| tool | wall s | ideal s | wall / ideal | requests | 429s | 429 share | kb vs |")
    print("|---|---|---|---|---|---|---|---|")
    kb_wall = statistics.median(r.wall_s for r in found["kb"]) if "kb" in found else None
    for name, runs in found.items():
        wall = statistics.median(r.wall_s for r in runs)
        requests = statistics.median(r.requests for r in runs)
        limited = statistics.median(r.limited for r in runs)
        tokens = statistics.median(r.tokens for r in runs)
        ideal = max(calls_ideal, tokens / args.tpm * 60.0)
        versus = f"{kb_wall / wall:.2f}x" if kb_wall is not None and name != "kb" else ""
        print(
            f"| {name} | {wall:.1f} | {ideal:.1f} | {wall / ideal:.2f} | {requests:.0f} | "
            f"{limited:.0f} | {limited / max(requests, 1):.2%} | {versus} |"
        )


# -- many processes, one key (SPEC 14.4) --------------------------------------------------------

SHARES = ("one", "process", "file", "redis")
CLASSES = 16
OBSERVED_AT = "2026-11-29T02:00:00Z"


def shard_spec(base: str, calls: int, concurrency: int) -> str:
    """One model on one key, ``calls`` cases spread over :data:`CLASSES` task classes."""
    sweep = [
        'committer = "bench"',
        "allow_unbounded = true",
        'sampling = "full"',
        "max_cases = 100000",
        f"concurrency = {concurrency}",
        f"per_provider = {concurrency}",
    ]
    return one_key_spec(base, calls, CLASSES, model="openai:bench-0", price=(1.0, 2.0), sweep=sweep)


@dataclass(frozen=True)
class ShardsRun:
    """One night over many processes, as the server and the processes saw it."""

    wall_s: float
    requests: int
    limited: int
    failed: int
    """Processes that exited other than 0."""


def shards_run(
    base: str, where: Path, shards: int, share: str, redis_url: str | None, env: dict[str, str]
) -> ShardsRun:
    """Refill the buckets, start every shard at once, wait for all, read the server."""
    _server(base, "POST", "/reset")
    count = 1 if share == "one" else shards
    processes = []
    start = time.perf_counter()
    for index in range(1, count + 1):
        clone = where / f"{share}-{index}"
        own = {**env, "XDG_RUNTIME_DIR": str(where / f"run-{share}-{index}")}
        if share == "process":
            own["KB_RATE_LIMITS"] = "process"
        elif share == "file":
            own["KB_RATE_LIMITS"] = f"file:{where / f'shared-{share}'}"
        elif share == "redis":
            assert redis_url is not None
            own["KB_RATE_LIMITS"] = redis_url
        command = [
            sys.executable,
            "-m",
            "kb",
            "sweep",
            "spec.toml",
            "--no-commit",
            "--quiet",
            "--no-evidence",
            "--observed-at",
            OBSERVED_AT,
        ]
        if count > 1:
            command += ["--shard", f"{index}/{count}"]
        processes.append(
            subprocess.Popen(
                command,
                cwd=clone,
                env=own,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    failed = 0
    for process in processes:
        _, stderr = process.communicate()
        if process.returncode != 0:
            failed += 1
            print(
                f"  a {share} shard exited {process.returncode}: {stderr[-400:]}", file=sys.stderr
            )
    wall = time.perf_counter() - start
    seen = _server(base, "GET", "/stats")
    return ShardsRun(wall, int(seen["requests"]), int(seen["limited"]), failed)


def shards_main(args: argparse.Namespace, shares: list[str]) -> None:
    env = {**os.environ, **OFFLINE, "PYTHONPATH": str(args.kb), "OPENAI_API_KEY": "sk-bench-key"}
    env.pop("KB_RATE_LIMITS", None)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {platform.system()} {platform.release()}"
    )
    print(f"command: python bench/ratelimit.py {' '.join(sys.argv[1:])}".rstrip())
    found: dict[str, list[ShardsRun]] = {share: [] for share in shares}
    with (
        limited_server(args.rpm, args.tpm, args.latency_ms / 1000) as base,
        redis_server() as redis_url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        where = Path(tmp)
        text = shard_spec(f"{base}/v1", args.calls, args.concurrency)
        for share in shares:
            for index in range(1, (1 if share == "one" else args.shards) + 1):
                clone = where / f"{share}-{index}"
                clone.mkdir()
                subprocess.run(["git", "init", "-q"], cwd=clone, check=True)
                subprocess.run(
                    [sys.executable, "-m", "kb", "init"],
                    cwd=clone,
                    env=env,
                    check=True,
                    capture_output=True,
                )
                (clone / "spec.toml").write_text(text)
        for round_number in range(args.rounds):
            for share in shares:
                run = shards_run(base, where, args.shards, share, redis_url, env)
                found[share].append(run)
                print(
                    f"round {round_number + 1} {share}: {run.wall_s:.1f} s, {run.requests} "
                    f"requests, {run.limited} answered 429, {run.failed} processes failed",
                    flush=True,
                )
    ideal = args.calls / args.rpm * 60.0
    burst_floor = max(0.0, args.calls - args.rpm) / args.rpm * 60.0
    print()
    print(
        f"{args.calls} calls under {args.rpm} RPM on one key, {args.latency_ms:.0f} ms a call, "
        f"{args.shards} shards; ideal by requests {ideal:.1f} s (with the first minute's "
        f"burst: {burst_floor:.1f} s)"
    )
    print()
    print(
        "| sharing | processes | wall s | wall / ideal (goal ≤ 1.15) | requests | "
        "429 share (goal ≤ 1 %) | processes failing (goal 0) |"
    )
    print("|---|---|---|---|---|---|---|")
    for share, runs in found.items():
        wall = statistics.median(r.wall_s for r in runs)
        requests = statistics.median(r.requests for r in runs)
        limited = statistics.median(r.limited for r in runs)
        failed = max(r.failed for r in runs)
        count = 1 if share == "one" else args.shards
        print(
            f"| {share} | {count} | {wall:.1f} | {wall / ideal:.2f} | {requests:.0f} | "
            f"{limited / max(requests, 1):.2%} | {failed} |"
        )


if __name__ == "__main__":
    main()
