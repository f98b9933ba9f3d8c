"""One night's evidence when its shards commit it (SPEC 14.4).

Shards of a night (``--shard I/N`` with one pinned ``--observed-at``) share
one report id, so one pair of evidence files: ``<report>.jsonl`` and
``<report>.report.json``. A shard that starts after another committed joins
its cells through ``--resume`` (:mod:`kb.sweep.resume`). Shards that run at
once do not see each other until one's push loses the race and its commit
is made again on the remote tip — where the night's evidence files already
hold the other shard's cells. Written as planned, they would replace them:
the store would keep every shard's claims and only the last shard's
evidence.

So at each attempt of its commit a sweep joins the night's evidence it
finds in the work tree (the tip it commits on): every cell recorded there
that tonight did not measure stays, with its runs, before tonight's — the
same file a sequential run of the shards makes. The other sections join
by their keys (claims and retirements by claim id, canaries by model, the
pool by model); the other shards' canary runs join with their canaries. The
spend adds up
(each invocation's figure counts only its own calls, a resumed one's too).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kb.errors import ConfigError
from kb.store.evidence import evidence_paths, report_runs
from kb.store.records import ReportFile, RunRecord, parse_report
from kb.store.runs_file import in_case_order


def recorded_night(directory: Path, report_id: str) -> tuple[ReportFile, list[RunRecord]] | None:
    """The night's evidence as the work tree holds it now (``None``: none, or unreadable)."""
    _, report_path = evidence_paths(directory, report_id)
    if not report_path.is_file():
        return None
    try:
        report = parse_report(report_path.read_bytes(), str(report_path))
        if report.report_id != report_id:
            return None
        return report, report_runs(directory, report)
    except (ConfigError, OSError):
        return None  # a file kb cannot read is replaced as before, never joined half


def cell_of(run: RunRecord) -> str:
    """The subject whose cell a run belongs to: a judge run, the answer's it judged."""
    return run.judged or run.subject_key if run.kind == "judge" else run.subject_key


def join_recorded(
    recorded: tuple[ReportFile, Sequence[RunRecord]] | None,
    report: ReportFile,
    runs: Sequence[RunRecord],
) -> tuple[ReportFile, list[RunRecord]]:
    """Tonight's ``report`` and ``runs`` with the recorded night's other cells joined in."""
    if recorded is None:
        return report, list(runs)
    found, found_runs = recorded
    ours = {(c.subject_key, c.task_class) for c in report.cells}
    joined = tuple(c for c in found.cells if (c.subject_key, c.task_class) not in ours)
    if not joined:
        return report, list(runs)
    keys = {(c.subject_key, c.task_class) for c in joined}
    canaries = {(c.model, c.effort) for c in report.canary}
    extra = [
        run
        for run in found_runs
        if (run.kind == "canary" and (run.model, run.effort) not in canaries)
        or (
            run.kind != "canary"
            and run.task_class is not None
            and (cell_of(run), run.task_class) in keys
        )
    ]
    # each invocation's spend counts only its own calls (a resumed one too): they add up
    spent = found.spent_usd + report.spent_usd
    disjoint = len(joined) == len(found.cells)
    claim_ids = {str(claim.get("id")) for claim in report.claims}
    retired_ids = {r.claim_id for r in report.retired}
    pooled = {p.model for p in report.pool}
    worst = (
        None
        if found.worst_case_usd is None or report.worst_case_usd is None
        else found.worst_case_usd + report.worst_case_usd
    )
    reused = (found.reused_runs or 0) + (report.reused_runs or 0)
    update = {
        "cells": (*joined, *report.cells),
        "claims": (
            *(c for c in found.claims if str(c.get("id")) not in claim_ids),
            *report.claims,
        ),
        "retired": (*(r for r in found.retired if r.claim_id not in retired_ids), *report.retired),
        "canary": (
            *(c for c in found.canary if (c.model, c.effort) not in canaries),
            *report.canary,
        ),
        "pool": (*(p for p in found.pool if p.model not in pooled), *report.pool),
        "spent_usd": spent,
        "worst_case_usd": worst if disjoint else report.worst_case_usd,
        "reused_runs": reused or report.reused_runs,
    }
    return report.model_copy(update=update), in_case_order([*extra, *runs])
