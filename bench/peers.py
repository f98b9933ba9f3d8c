"""Peers benchmark (not a test): the same sweep through kb, inspect_ai and promptfoo.

The work (SPEC 12.5): 4 models × 120 cases = 480 calls against one loopback
OpenAI-compatible server (its own process, 0.1 s latency per call), at
concurrency 16, every answer graded by an exact match. Each tool runs it
from a fresh process, in alternating rounds (kb, inspect_ai, promptfoo, kb,
…), so a machine that gets busier mid-run slows all of them alike. Printed:
each tool's median wall time and CPU (user + system of the whole process
tree), the latency-bound ideal (ceil(480 / 16) × 0.1 s), and kb's ratios to
each peer; then the fixed start-up: the same tools on 1 model × 4 cases, and
a bare ``import litellm``.

Beside the peers run two scripts that do nothing but import litellm, make the
same calls at the same concurrency and compare the answers: "litellm alone"
imports litellm as it comes, "litellm alone, kb's import" the way kb does
(the collector paused, then frozen). The second is the floor: a tool that
calls through litellm does all that and more, so a goal below it cannot be
met by anything built on litellm (kb beats the first: its import is cheaper).

The peers are optional: ``--inspect-python`` names a Python with inspect_ai
installed (default: this one), ``--promptfoo`` a promptfoo executable
(default: ``promptfoo`` on PATH, else ``node_modules/.bin/promptfoo``). A
peer that is not there is skipped with a line saying how to install it; one
named on the command line that is not there is an error.

Usage: python bench/peers.py [--rounds 3] [--cases 120] [--models 4] [--latency-ms 100]
       [--concurrency 16] [--inspect-python PY] [--promptfoo PATH] [--kb-workers 0,2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fake_openai_main import server_process  # noqa: E402

OFFLINE = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "PROMPTFOO_DISABLE_TELEMETRY": "1",
    "PROMPTFOO_DISABLE_UPDATE": "1",
    "PROMPTFOO_DISABLE_REMOTE_GENERATION": "1",
    "INSPECT_DISABLE_TELEMETRY": "1",
    "OPENAI_API_KEY": "sk-bench-not-a-key",
}


PRICE = (0.15, 0.60)
"""kb's declared price per million tokens (input, output) for the bench models, as a user
declares one for a model litellm's table does not know. Not zero: a reply priced at
zero sends litellm looking for why (its zero-cost diagnostic, ~1.6 ms of CPU a call
measured here), a path a priced model never takes."""


@dataclass(frozen=True)
class Timing:
    wall_s: float
    cpu_s: float


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> Timing:
    """One fresh process tree: its wall time and the CPU it and its children used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):  # kb exits 1 when a cell is incomplete; none should be
        raise SystemExit(f"{command[:3]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(wall, cpu)


# -- kb ---------------------------------------------------------------------------------------


def kb_setup(work: Path, base: str, models: int, cases: int, concurrency: int) -> list[str]:
    work.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    subprocess.run([sys.executable, "-m", "kb", "init"], cwd=work, check=True, capture_output=True)
    lines = [
        "[sweep]",
        'committer = "bench"',
        "allow_unbounded = true",
        'sampling = "full"',
        f"concurrency = {concurrency}",
        f"per_provider = {concurrency}",
    ]
    for m in range(models):
        lines += [
            "",
            "[[models]]",
            f'model = "openai:bench-{m}"',
            f'params = {{ api_base = "{base}", api_key_env = "OPENAI_API_KEY", '
            f"price = {{ input_per_mtok = {PRICE[0]}, output_per_mtok = {PRICE[1]} }} }}",
        ]
    for i in range(cases):
        lines += [
            "",
            "[[cases]]",
            f'name = "case-{i}"',
            'task_class = "bench"',
            f'prompt = "question {i}"',
            f'graders = [{{ kind = "golden", expected = "echo: question {i}" }}]',
        ]
    (work / "spec.toml").write_text("\n".join(lines) + "\n")
    return [
        sys.executable,
        "-m",
        "kb",
        "sweep",
        "spec.toml",
        "--no-commit",
        "--quiet",
        "--no-evidence",
        "--observed-at",
        "2026-11-29T02:00:00Z",
    ]


# -- litellm alone: the floor of any tool built on it -------------------------------------------

LITELLM_ALONE = """
import asyncio, gc, sys

PAUSED = {paused}
if PAUSED:  # kb's import: the cyclic collector paused, what the import built frozen
    gc.disable()
import litellm
if PAUSED:
    gc.freeze()
    gc.enable()
litellm.suppress_debug_info = True


async def main():
    limit = asyncio.Semaphore({concurrency})

    async def one(m, i):
        async with limit:
            reply = await litellm.acompletion(
                model=f"openai/bench-{{m}}",
                api_base="{base}",
                api_key="sk-bench-not-a-key",
                messages=[{{"role": "user", "content": f"question {{i}}"}}],
                num_retries=0,
                max_retries=0,
                input_cost_per_token={input_cost},
                output_cost_per_token={output_cost},
            )
            return reply.choices[0].message.content == f"echo: question {{i}}"

    graded = await asyncio.gather(*(one(m, i) for m in range({models}) for i in range({cases})))
    assert all(graded), graded.count(False)


asyncio.run(main())
"""


def litellm_alone_setup(
    work: Path, base: str, models: int, cases: int, concurrency: int, *, paused: bool
) -> list[str]:
    """A script that only imports litellm, makes the calls and compares the answers.

    No spec, store, plan, journal or report. ``paused`` imports litellm the
    way kb does (the collector paused, then frozen): that one is the floor
    under any tool that makes these calls through litellm. Without it, it is
    litellm as it comes, which kb's cheaper import beats.
    """
    work.mkdir(parents=True)
    (work / "alone.py").write_text(
        LITELLM_ALONE.format(
            paused=paused,
            concurrency=concurrency,
            base=base,
            models=models,
            cases=cases,
            input_cost=PRICE[0] / 1e6,
            output_cost=PRICE[1] / 1e6,
        )
    )
    return [sys.executable, "alone.py"]


# -- inspect_ai -------------------------------------------------------------------------------

INSPECT_TASK = """
from inspect_ai import Task, task, eval
from inspect_ai.dataset import Sample
from inspect_ai.scorer import exact
from inspect_ai.solver import generate

CASES = {cases}

@task
def bench():
    return Task(
        dataset=[
            Sample(input=f"question {{i}}", target=f"echo: question {{i}}") for i in range(CASES)
        ],
        solver=generate(),
        scorer=exact(),
    )

if __name__ == "__main__":
    logs = eval(
        bench(),
        model=[f"openai/bench-{{m}}" for m in range({models})],
        model_args={{"responses_api": False}},  # the chat completions endpoint, as the others
        max_connections={concurrency},
        display="none",
        log_level="error",
        log_dir="logs",
    )
    assert all(log.status == "success" for log in logs), [log.status for log in logs]
"""


def has_inspect_ai(python: str) -> bool:
    try:
        probe = subprocess.run([python, "-c", "import inspect_ai"], capture_output=True)
    except OSError:  # no such Python
        return False
    return probe.returncode == 0


def inspect_setup(
    work: Path, base: str, models: int, cases: int, concurrency: int, python: str
) -> list[str] | None:
    if not has_inspect_ai(python):
        return None
    work.mkdir(parents=True)
    (work / "task.py").write_text(
        INSPECT_TASK.format(cases=cases, models=models, concurrency=concurrency)
    )
    return [python, "task.py"]


# -- promptfoo --------------------------------------------------------------------------------


def promptfoo_setup(
    work: Path, base: str, models: int, cases: int, concurrency: int, binary: str | None
) -> list[str] | None:
    if binary is None:
        return None
    work.mkdir(parents=True)
    config = {
        "prompts": ["question {{i}}"],
        "providers": [
            {"id": f"openai:chat:bench-{m}", "config": {"apiBaseUrl": base}} for m in range(models)
        ],
        "tests": [
            {"vars": {"i": i}, "assert": [{"type": "equals", "value": f"echo: question {i}"}]}
            for i in range(cases)
        ],
    }
    (work / "promptfooconfig.json").write_text(json.dumps(config))
    return [
        binary,
        "eval",
        "-c",
        "promptfooconfig.json",
        "--max-concurrency",
        str(concurrency),
        "--no-cache",
        "--no-write",
        "--no-table",
        "--no-progress-bar",
    ]


def find_promptfoo(given: str | None) -> str | None:
    if given:
        return shutil.which(given)  # an executable file, by path or on PATH
    local = ROOT / "node_modules" / ".bin" / "promptfoo"
    return shutil.which("promptfoo") or (str(local) if local.exists() else None)


# -- the run ----------------------------------------------------------------------------------


def medians(found: list[Timing]) -> Timing:
    return Timing(
        statistics.median(t.wall_s for t in found), statistics.median(t.cpu_s for t in found)
    )


def between(low: int, high: int):
    def whole(text: str) -> int:
        if not text.strip().isdigit() or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(
                f"must be a whole number from {low} to {high}, got {text!r}"
            )
        return int(text)

    return whole


def milliseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 60_000:
        raise argparse.ArgumentTypeError(f"must be milliseconds from 0 to 60000, got {text!r}")
    return value


def worker_counts(text: str) -> list[str]:
    counts = [part.strip() for part in text.split(",")]
    if not all(c.isdigit() and int(c) <= 64 for c in counts) or len(set(counts)) < len(counts):
        raise argparse.ArgumentTypeError(
            f"must be distinct KB_WORKERS values 0-64, comma-separated: {text!r}"
        )
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--rounds", type=between(1, 100), default=3, help="alternating rounds, medians printed (3)"
    )
    parser.add_argument(
        "--cases", type=between(1, 10_000), default=120, help="cases per model (120)"
    )
    parser.add_argument("--models", type=between(1, 64), default=4, help="models (4)")
    parser.add_argument(
        "--latency-ms", type=milliseconds, default=100.0, help="the server's latency per call (100)"
    )
    parser.add_argument(
        "--concurrency", type=between(1, 1000), default=16, help="calls in flight, every tool (16)"
    )
    parser.add_argument(
        "--inspect-python", default=None, help="a Python with inspect_ai (default: this one)"
    )
    parser.add_argument(
        "--promptfoo",
        default=None,
        help="a promptfoo executable (default: promptfoo on PATH, else node_modules/.bin)",
    )
    parser.add_argument(
        "--kb-workers",
        type=worker_counts,
        default=["0", "2"],
        help="KB_WORKERS values to run kb with, the first for the ratios (0,2)",
    )
    args = parser.parse_args()
    if args.inspect_python is not None and not has_inspect_ai(args.inspect_python):
        parser.error(f"--inspect-python {args.inspect_python}: not a Python with inspect_ai")
    if args.promptfoo is not None and find_promptfoo(args.promptfoo) is None:
        parser.error(f"--promptfoo {args.promptfoo}: no such executable")
    args.inspect_python = args.inspect_python or sys.executable
    calls = args.models * args.cases
    ideal = math.ceil(calls / args.concurrency) * args.latency_ms / 1000
    env = {**os.environ, **OFFLINE, "PYTHONPATH": str(ROOT)}
    promptfoo = find_promptfoo(args.promptfoo)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {platform.system()} {platform.release()}"
    )
    print(f"command: python bench/peers.py {' '.join(sys.argv[1:])}".rstrip())
    with server_process(args.latency_ms / 1000) as base, tempfile.TemporaryDirectory() as tmp:
        env["OPENAI_BASE_URL"] = base

        def line_up(models: int, cases: int, where: Path) -> dict[str, Runnable | None]:
            """Every tool set up for ``models`` x ``cases``: kb's variants first, then peers."""
            kb_dir = where / "kb"
            kb_command = kb_setup(kb_dir, base, models, cases, args.concurrency)
            lined: dict[str, Runnable | None] = {
                variant_name(count): Runnable(kb_command, kb_dir, {**env, "KB_WORKERS": count})
                for count in args.kb_workers
            }
            peers = {
                "inspect_ai": inspect_setup(
                    where / "inspect_ai", base, models, cases, args.concurrency, args.inspect_python
                ),
                "promptfoo": promptfoo_setup(
                    where / "promptfoo", base, models, cases, args.concurrency, promptfoo
                ),
            }
            for name, command in peers.items():
                lined[name] = Runnable(command, where / name, env) if command else None
            for name, paused in ALONE.items():
                folder = where / ("alone-paused" if paused else "alone")
                command = litellm_alone_setup(
                    folder, base, models, cases, args.concurrency, paused=paused
                )
                lined[name] = Runnable(command, folder, env)
            return lined

        night = line_up(args.models, args.cases, Path(tmp) / "night")
        for name, runnable in night.items():
            if runnable is None:
                print(f"skipped {name}: not installed here; {MISSING[name]}")
        found = alternate(night, args.rounds)
        small = alternate(line_up(1, 4, Path(tmp) / "small"), args.rounds)
        bare = [
            timed([sys.executable, "-c", "import litellm"], Path(tmp), env)
            for _ in range(args.rounds)
        ]
    default = variant_name(args.kb_workers[0])
    print()
    print(
        f"### {counted(args.models, 'model')} × {counted(args.cases, 'case')} = "
        f"{counted(calls, 'call')}, {args.latency_ms:g} ms latency, concurrency "
        f"{args.concurrency} (median of {counted(args.rounds, 'alternating round')})"
    )
    print()
    print(f"Ratios: {default} against each.")
    print()
    print("| tool | wall s | CPU s | wall / ideal | kb wall / tool wall | kb CPU / tool CPU |")
    print("|---|---:|---:|---:|---:|---:|")
    kb = medians(found[default])
    for name, timings in found.items():
        m = medians(timings)
        print(
            f"| {name} | {m.wall_s:.2f} | {m.cpu_s:.2f} | {m.wall_s / ideal:.2f}x | "
            f"{kb.wall_s / m.wall_s:.2f}x | {kb.cpu_s / m.cpu_s:.2f}x |"
        )
    print(f"| ideal (latency-bound) | {ideal:.2f} | — | 1.00x | — | — |")
    floor = medians(found["litellm alone, kb's import"]).wall_s
    print()
    print(
        f"The floor through litellm (litellm alone, kb's import): {floor:.2f} s; "
        f"kb is {kb.wall_s / floor:.2f}x it."
        + (" Below 1.00x is noise between runs: take more rounds." if kb.wall_s < floor else "")
    )
    for name, share in (("promptfoo", 0.8), ("inspect_ai", 0.5)):
        if name in found:
            goal = share * medians(found[name]).wall_s
            print(
                f"Goal {share:g}x {name}: {goal:.2f} s, "
                f"{'below' if goal < floor else 'above'} the floor."
            )
    print()
    print(f"### the fixed start-up: the same tools on 1 model × 4 cases (median of {args.rounds})")
    print()
    print("| tool | wall s | CPU s (all processes) | kb CPU / tool CPU |")
    print("|---|---:|---:|---:|")
    kb_small = medians(small[default])
    for name, timings in small.items():
        m = medians(timings)
        print(f"| {name} | {m.wall_s:.2f} | {m.cpu_s:.2f} | {kb_small.cpu_s / m.cpu_s:.2f}x |")
    b = medians(bare)
    print(f"| `python -c 'import litellm'` alone | {b.wall_s:.2f} | {b.cpu_s:.2f} | — |")


@dataclass(frozen=True)
class Runnable:
    """One tool's command, where it runs and with what environment."""

    command: list[str]
    cwd: Path
    env: dict[str, str]


ALONE = {"litellm alone": False, "litellm alone, kb's import": True}
"""The floor rows: litellm imported as is, and as kb imports it."""

MISSING = {
    "inspect_ai": "pip install inspect_ai (or pass --inspect-python PYTHON)",
    "promptfoo": "npm install promptfoo (or pass --promptfoo PATH)",
}


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def variant_name(count: str) -> str:
    if count == "0":
        return "kb (in-process)"
    return f"kb ({count} worker{'s' if count != '1' else ''})"


def alternate(tools: dict[str, Runnable | None], rounds: int) -> dict[str, list[Timing]]:
    """A warm-up of each (caches, compiled bytecode), then ``rounds`` rounds in turn."""
    ready = {name: tool for name, tool in tools.items() if tool is not None}
    for tool in ready.values():
        timed(tool.command, tool.cwd, tool.env)
    found: dict[str, list[Timing]] = {name: [] for name in ready}
    for _ in range(rounds):
        for name, tool in ready.items():
            found[name].append(timed(tool.command, tool.cwd, tool.env))
    return found


if __name__ == "__main__":
    main()
