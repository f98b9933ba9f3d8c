"""Store benchmark (not a test): reads and commits against jq, and commits per second.

Prints, side by side in one run:
* wall time of `kb list --json --model X` and of the same filter in jq on generated
  1,000 / 10,000 / 100,000-claim stores (median of repeated runs, taken in turns), and
  their ratio, cold as a plain file and committed in a packed git repository (goals: cold
  kb within 1.5x of jq at 100,000 claims, SPEC 11.4);
* a one-claim commit (`kb note`) on the same stores committed in git, against
  `jq . >/dev/null` reading the file, and kb's peak memory against the file's size
  (goals at 100,000 claims: within 3x of jq, peak RSS within 2x the file);
* commits per second through the rebase loop with 1 and 8 writer processes, in a
  git work tree and as a plain file.

Usage: python bench/store_bench.py [--sizes 1000,10000] [--commits 40] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kb.store.canonical import claims_hash  # noqa: E402
from kb.store.snapshot import Snapshot  # noqa: E402
from kb.store.ttl import claim_expiry  # noqa: E402
from kb.store.writing import render_store  # noqa: E402

MODELS = [f"provider{p}:model-{m}" for p in range(5) for m in range(20)]
TASKS = ["code-edit", "investigation", "synthesis", "extraction", "planning", "judging"]
WORKER = ROOT / "tests" / "workers" / "commit_worker.py"


def generate_store(path: Path, count: int) -> None:
    wire = []
    for i in range(count):
        polarity = "strength" if i % 3 else "weakness"
        observed = f"2026-{1 + i % 11:02d}-{1 + i % 28:02d}T02:00:00.000Z"
        n = 5 + i % 30
        passed = (i * 7) % (n + 1)
        wire.append(
            {
                "id": f"kb-sweep-{observed}/{MODELS[i % len(MODELS)]}/{TASKS[i % len(TASKS)]}/{i}",
                "subject": {
                    "model": MODELS[i % len(MODELS)],
                    **({"effort": "low"} if i % 4 == 0 else {}),
                },
                "taskClass": TASKS[i % len(TASKS)],
                "polarity": polarity,
                "statement": f"sweep passRate {passed / n:.2f} over {n} cases: in the band",
                "class": "eval-measured",
                "status": ["active", "superseded", "archived", "stale"][i % 4],
                "evidence": [
                    {
                        "kind": "eval",
                        "reportId": f"kb-sweep-{observed}",
                        "caseIds": [f"case-{j}" for j in range(min(n, 12))],
                    }
                ],
                "metrics": {
                    "passRate": passed / n,
                    "n": n,
                    "graderId": "eval-suite",
                    "cost": round(0.0001 * (1 + i % 50), 6),
                },
                "confidence": "high" if n >= 20 else "medium",
                "observedAt": observed,
                "expiresAt": claim_expiry("eval-measured", polarity, observed),
                "author": {"kind": "eval-pipeline", "id": "bench"},
            }
        )
    snapshot = Snapshot(version=count, hash=claims_hash(wire), claims=(), wire=tuple(wire))
    path.write_text(render_store(snapshot))


def timed(
    cmd: list[str], repeats: int, env: dict[str, str] | None = None
) -> tuple[float, bytes, int]:
    """Median wall time, the output, and the peak RSS (KiB) of the command.

    Peak memory comes from GNU time: a child forked from this (large) Python
    process would report this process's size as its own peak.
    """
    samples = []
    out = b""
    peak = 0
    for _ in range(repeats):
        start = time.perf_counter()
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, env=env, check=True
        )
        samples.append(time.perf_counter() - start)
        peak = max(peak, int(proc.stderr.decode().strip().splitlines()[-1]))
        out = proc.stdout
    return statistics.median(samples), out, peak


def alternated(
    commands: dict[str, tuple[list[str], dict[str, str] | None]], repeats: int
) -> dict[str, tuple[float, bytes, int]]:
    """:func:`timed` for several commands, run in turns (a busy machine slows them alike)."""
    runs: dict[str, list[tuple[float, bytes, int]]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, (cmd, env) in commands.items():
            runs[name].append(timed(cmd, 1, env))
    return {
        name: (
            statistics.median(took for took, _, _ in found),
            found[-1][1],
            max(peak for _, _, peak in found),
        )
        for name, found in runs.items()
    }


def packed_git_copy(store: Path, work: Path) -> Path:
    """The store committed in a fresh repository and packed (as a clone or ``git gc`` has it)."""
    work.mkdir()
    shutil.copy(store, work / store.name)
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    subprocess.run(["git", "add", store.name], cwd=work, check=True)
    subprocess.run(
        ["git", "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "-m", "s"],
        cwd=work,
        check=True,
    )
    subprocess.run(["git", "gc", "-q"], cwd=work, check=True)
    return work / store.name


def bench_list(sizes: list[int], repeats: int) -> list[str]:
    """kb cold (full validation: a file kb has not read before, KB_NO_CACHE=1), as a plain
    file and committed in git, and warm (bytes kb validated before: the usual case between
    commits) against jq; the commands run in turns."""
    kb = str(Path(sys.executable).parent / "kb")
    jq = shutil.which("jq")
    lines = [
        "| claims | file MB | kb cold | kb cold in git | kb warm | jq filter | cold / jq "
        "| git cold / jq | warm / jq | kb peak RSS | jq peak RSS |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    model = MODELS[7]
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            store = Path(tmp) / "plain" / "rulvar.models.json"
            store.parent.mkdir()
            generate_store(store, size)
            in_git = packed_git_copy(store, Path(tmp) / "git")
            mb = store.stat().st_size / 1e6
            env = dict(os.environ, KB_AS_OF="2026-12-01", XDG_CACHE_HOME=str(Path(tmp) / "c"))
            cold_env = dict(env, KB_NO_CACHE="1")

            def listing(path: Path) -> list[str]:
                return [kb, "--store", str(path), "list", "--json", "--model", model]

            commands: dict[str, tuple[list[str], dict[str, str] | None]] = {
                "cold": (listing(store), cold_env),
                "git": (listing(in_git), cold_env),
                "warm": (listing(store), env),
            }
            if jq is not None:
                jq_filter = f'[.claims[] | select(.subject.model == "{model}")]'
                commands["jq"] = ([jq, jq_filter, str(store)], None)
            found = alternated(commands, repeats)
            cold, kb_out, kb_rss = found["cold"]
            git_cold, warm = found["git"][0], found["warm"][0]
            kb_rss = max(kb_rss, found["git"][2])
            kb_times = f"{cold * 1000:.0f} ms | {git_cold * 1000:.0f} ms | {warm * 1000:.0f} ms"
            if jq is None:
                lines.append(
                    f"| {size:,} | {mb:.1f} | {kb_times} | jq not installed | - | - | - "
                    f"| {kb_rss / 1024:.0f} MiB | - |"
                )
                continue
            theirs, jq_out, jq_rss = found["jq"]
            assert len(json.loads(kb_out)) == len(json.loads(jq_out))
            lines.append(
                f"| {size:,} | {mb:.1f} | {kb_times} | {theirs * 1000:.0f} ms "
                f"| {cold / theirs:.2f}x | {git_cold / theirs:.2f}x | {warm / theirs:.2f}x "
                f"| {kb_rss / 1024:.0f} MiB | {jq_rss / 1024:.0f} MiB |"
            )
    return lines


def bench_one_claim_commit(sizes: list[int], repeats: int) -> list[str]:
    """`kb note` (read under the lock, one claim added, file and git commit written)."""
    kb = str(Path(sys.executable).parent / "kb")
    jq = shutil.which("jq")
    lines = [
        "| claims | file MB | kb note | jq . >/dev/null | note / jq | kb peak RSS | RSS / file |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            store = work / "rulvar.models.json"
            generate_store(store, size)
            subprocess.run(["git", "init", "-q"], cwd=work, check=True)
            subprocess.run(["git", "add", "rulvar.models.json"], cwd=work, check=True)
            subprocess.run(
                ["git", "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "-m", "s"],
                cwd=work,
                check=True,
            )
            size_bytes = store.stat().st_size
            samples, peak = [], 0
            for attempt in range(repeats):
                env = dict(
                    os.environ,
                    KB_AS_OF=f"2026-12-01T00:00:{attempt:02d}Z",
                    KB_NO_CACHE="1",
                    GIT_AUTHOR_NAME="b",
                    GIT_AUTHOR_EMAIL="b@x",
                    GIT_COMMITTER_NAME="b",
                    GIT_COMMITTER_EMAIL="b@x",
                )
                note = [kb, "--store", str(store), "note", "--model", MODELS[3]]
                note += ["--task-class", "planning", "--polarity", "weakness"]
                note += ["--statement", f"bench note {attempt}", "--approver", "bench"]
                note += ["--ruled-out", "prompt", "--evidence", f"journal:bench-{attempt}:1"]
                took, _, rss = timed(note, 1, env)
                samples.append(took)
                peak = max(peak, rss)
            ours = statistics.median(samples)
            theirs = timed([jq, ".", str(store)], repeats)[0] if jq else None
            ratio = f"{ours / theirs:.2f}x" if theirs else "-"
            jq_text = f"{theirs * 1000:.0f} ms" if theirs else "jq not installed"
            lines.append(
                f"| {size:,} | {size_bytes / 1e6:.1f} | {ours * 1000:.0f} ms | {jq_text} "
                f"| {ratio} | {peak / 1024:.0f} MiB | {peak * 1024 / size_bytes:.2f}x |"
            )
    return lines


def bench_commits(commits: int) -> list[str]:
    lines = ["| writers | where | commits | wall s | commits/s |", "|---:|---|---:|---:|---:|"]
    for in_git in (False, True):
        for writers in (1, 8):
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp)
                if in_git:
                    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
                store = work / "rulvar.models.json"
                per = max(1, commits // writers)
                start = time.perf_counter()
                procs = [
                    subprocess.Popen(
                        [sys.executable, str(WORKER), str(store), str(w), str(per), "1000"],
                        stdout=subprocess.DEVNULL,
                    )
                    for w in range(writers)
                ]
                for proc in procs:
                    proc.wait()
                wall = time.perf_counter() - start
                total = per * writers
                where = "git" if in_git else "plain file"
                lines.append(f"| {writers} | {where} | {total} | {wall:.2f} | {total / wall:.1f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--commits", type=int, default=80)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"# store benchmark\n\nmachine: {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )
    print(
        f"command: python bench/store_bench.py --sizes {args.sizes} --commits {args.commits} "
        f"--repeats {args.repeats}\n"
    )
    print("## kb list --json --model X vs jq (median wall time, whole process)\n")
    print("cold: every field validated and the hash recomputed (bytes kb never read);")
    print("warm: bytes kb validated before, parsed without re-validation (kb.store.verified).\n")
    print("\n".join(bench_list(sizes, args.repeats)))
    print("\n## one-claim commit in git (kb note, cold) vs reading the file with jq\n")
    print("\n".join(bench_one_claim_commit(sizes, args.repeats)))
    print("\n## commits per second (rebase loop, one claim per commit, worker start-up included)\n")
    print("\n".join(bench_commits(args.commits)))


if __name__ == "__main__":
    main()
