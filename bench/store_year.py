"""A simulated year of nightly sweeps (not a test): does the store stay fast with compaction?

Each night one commit re-measures every cell (``--cells``, default 200): each
cell's claim from the night before is superseded by a new one, and the
night's evidence file is committed beside the store, exactly as a committing
``kb sweep`` does (through ``KnowledgeStore.commit_with_rebase``, in a real git
repository, commit dates set to the simulated night). Every 7th night
``kb compact --keep-days 30`` runs (``kb.store.compaction.compact``). Reads are cold
(``KB_NO_CACHE=1``), as on a fresh CI machine.

Prints, per month, the store file's size and the median commit time, and
the ratio of the last month to the second (goal: both within 1.5x).

Usage: python bench/store_year.py [--nights 365] [--cells 200] [--no-compaction]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kb.store.compaction import compact  # noqa: E402
from kb.store.evidence import evidence_stem  # noqa: E402
from kb.store.filestore import Change, CommitContext, KnowledgeStore  # noqa: E402
from kb.store.models import claim_from_wire  # noqa: E402
from kb.store.ops import AddClaim, EvalCommitterGate, Op, SupersedeClaim  # noqa: E402
from kb.store.ttl import claim_expiry, format_instant  # noqa: E402

TASKS = ["code-edit", "investigation", "synthesis", "extraction", "planning", "judging"]
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
NIGHT_MS = 86_400_000


def cell_subject(cell: int) -> tuple[str, str]:
    return f"provider{cell % 7}:model-{cell // len(TASKS)}", TASKS[cell % len(TASKS)]


def night_claim(night: int, cell: int, observed: str, report_id: str) -> dict[str, object]:
    model, task = cell_subject(cell)
    n = 40
    passed = 30 + (night * 7 + cell) % 11
    polarity = "strength" if passed >= 34 else "weakness"
    return {
        "id": f"{report_id}/{model}/{task}",
        "subject": {"model": model},
        "taskClass": task,
        "polarity": polarity,
        "statement": f"sweep passRate {passed / n:.2f} over {n} {task} cases",
        "class": "eval-measured",
        "status": "active",
        "evidence": [
            {"kind": "eval", "reportId": report_id, "caseIds": [f"c{i}" for i in range(8)]}
        ],
        "metrics": {"passRate": passed / n, "n": n, "graderId": "eval-suite", "cost": 0.0123},
        "confidence": "high",
        "observedAt": observed,
        "expiresAt": claim_expiry("eval-measured", polarity, observed),
        "author": {"kind": "eval-pipeline", "id": "nightly"},
    }


def evidence_files(report_id: str, observed: str, cells: int) -> dict[str, bytes]:
    runs = "".join(
        json.dumps({"cell": c, "case": f"c{i}", "passed": (c + i) % 3 > 0, "output": "x" * 80})
        + "\n"
        for c in range(cells)
        for i in range(3)
    )
    stem = evidence_stem(report_id)
    return {
        f"kb-evidence/{stem}.jsonl": runs.encode(),
        f"kb-evidence/{stem}.report.json": json.dumps(
            {"reportId": report_id, "observedAt": observed}
        ).encode(),
    }


def simulate(nights: int, cells: int, compaction: bool) -> list[tuple[int, float, int, int]]:
    """(night, commit seconds, file bytes, claims in the file) for every night."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=work, check=True)
        os.environ.update(
            KB_NO_CACHE="1",
            GIT_AUTHOR_NAME="bench",
            GIT_AUTHOR_EMAIL="bench@example.com",
            GIT_COMMITTER_NAME="bench",
            GIT_COMMITTER_EMAIL="bench@example.com",
        )
        store = KnowledgeStore(work / "rulvar.models.json")
        store.initialize(CommitContext("init", "bench"))
        previous: dict[int, str] = {}
        for night in range(nights):
            at_ms = START_MS + night * NIGHT_MS + 2 * 3_600_000
            os.environ["GIT_COMMITTER_DATE"] = os.environ["GIT_AUTHOR_DATE"] = (
                f"@{at_ms // 1000} +0000"
            )
            observed = format_instant(at_ms)
            report_id = f"kb-sweep-{observed}"
            gate = EvalCommitterGate("nightly", report_id)
            ops: list[Op] = []
            for cell in range(cells):
                claim = claim_from_wire(night_claim(night, cell, observed, report_id))
                prior = previous.get(cell)
                ops.append(SupersedeClaim(prior, claim, gate) if prior else AddClaim(claim, gate))
                previous[cell] = claim.id
            change = Change(tuple(ops), evidence_files(report_id, observed, cells))
            context = CommitContext("sweep", "nightly", label=report_id, report_id=report_id)
            start = time.perf_counter()
            store.commit_with_rebase(lambda _, change=change: change, context)
            took = time.perf_counter() - start
            if compaction and night % 7 == 6:
                compact(store, 30, at_ms + 3_600_000, "bench")
            size = store.path.stat().st_size
            rows.append((night, took, size, len(store.read())))
            if night % 30 == 29:
                print(
                    f"  night {night + 1}: {size / 1e6:.1f} MB, {rows[-1][3]:,} claims, "
                    f"commit {took:.2f} s",
                    file=sys.stderr,
                    flush=True,
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--no-compaction", action="store_true")
    args = parser.parse_args()
    compaction = not args.no_compaction
    title = "a year of nightly sweeps" + ("" if compaction else ", without compaction")
    print(
        f"# {title}\n\nmachine: {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}\ncommand: python bench/store_year.py --nights "
        f"{args.nights} --cells {args.cells}{'' if compaction else ' --no-compaction'}\n"
    )
    wall = time.perf_counter()
    rows = simulate(args.nights, args.cells, compaction)
    how = "weekly kb compact --keep-days 30" if compaction else "no compaction"
    print(
        f"{args.cells} cells a night, {how}; cold reads (KB_NO_CACHE=1); "
        f"{time.perf_counter() - wall:.0f} s in all\n"
    )
    print("| month | nights | claims at end | file MB at end | median commit s |")
    print("|---:|---:|---:|---:|---:|")
    months = [rows[i : i + 30] for i in range(0, len(rows), 30)]
    for number, month in enumerate(months, 1):
        print(
            f"| {number} | {len(month)} | {month[-1][3]:,} | {month[-1][2] / 1e6:.2f} "
            f"| {statistics.median(r[1] for r in month):.3f} |"
        )
    if len(rows) >= 90:
        second, last = rows[30:60], rows[-30:]
        size_ratio = last[-1][2] / second[-1][2]
        time_ratio = statistics.median(r[1] for r in last) / statistics.median(r[1] for r in second)
        print(
            f"\nlast 30 nights / second month: file size {size_ratio:.2f}x, "
            f"median commit time {time_ratio:.2f}x (goal: both <= 1.5x)"
        )


if __name__ == "__main__":
    main()
