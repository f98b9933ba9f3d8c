"""The report as data: the ``--json`` body a sweep prints and its evidence report file holds.

camelCase keys; optional keys appear only when they apply. Kept apart from
:mod:`kb.sweep.report` (text and summaries) so the sweep's commit can write
the evidence report file with the very body ``--json`` prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kb.store.models import ModelClaim, claim_to_wire
from kb.store.snapshot import ClaimEntry
from kb.store.ttl import format_instant
from kb.sweep.cells import SweepCell
from kb.sweep.falsify import Retirement, live_eval_claims
from kb.sweep.pool import PoolMember

if TYPE_CHECKING:
    from kb.sweep.run import SweepPlan


def cell_json(
    cell: SweepCell, outcome: str, claim_id: str | None, stands: Sequence[ClaimEntry] = ()
) -> dict[str, Any]:
    """One ``cells[]`` entry (camelCase; optional keys only when they apply).

    ``stands``: earlier claims of the cell that this sweep left in place (the
    interval gate's hysteresis, or an incomplete cell).
    """
    entry: dict[str, Any] = cell.member.subject.to_wire()
    entry.update(
        taskClass=cell.task_class,
        passRate=cell.pass_rate,
        n=cell.n,
        plannedN=cell.planned_n,
        totalCostUsd=cell.total_cost_usd,
        caseNames=cell.case_names,
    )
    if cell.exhausted_runs:
        entry["exhaustedRuns"] = cell.exhausted_runs
    if cell.non_ok_runs:
        entry["nonOkRuns"] = cell.non_ok_runs
    if cell.judge_incomplete_runs:
        entry["judgeIncompleteRuns"] = cell.judge_incomplete_runs
    if cell.refused_run_label is not None:
        entry["envelopeExhausted"] = True
        entry["refusedRunLabel"] = cell.refused_run_label
    if cell.incomplete_reason is not None:
        entry["incompleteReason"] = cell.incomplete_reason
    if cell.first_error is not None:
        entry["firstError"] = cell.first_error
    entry["wilson95"] = list(cell.wilson95)
    if cell.repeats > 1:
        entry["repeats"] = cell.repeats
        entry["cases"] = [
            {
                "name": case.name,
                "passes": case.passes,
                "runs": len(case.verdicts),
                "stability": case.stability,
            }
            for case in cell.cases
        ]
    entry["outcome"] = outcome
    if claim_id is not None:
        entry["claimId"] = claim_id
    if stands:
        entry["priorStands"] = [
            {"claimId": claim.id, "polarity": claim.polarity, "status": claim.status}
            for claim in stands
        ]
    return entry


def pool_json(member: PoolMember) -> dict[str, Any]:
    """One ``pool[]`` entry: who, why, and whether it was measured."""
    entry: dict[str, Any] = {
        "model": member.spec.key,
        "origin": member.origin,
        "measured": member.measured,
    }
    if member.skipped:
        entry["skipped"] = member.skipped
    return entry


def report_body(
    plan: SweepPlan,
    cells: Sequence[tuple[SweepCell, ModelClaim | None]],
    *,
    retired: Sequence[Retirement],
    canary: Sequence[Mapping[str, Any]],
    spent_usd: float,
    committed_version: int | None,
) -> dict[str, Any]:
    """The report without its runs: what ``--json`` prints and the evidence report file holds."""
    gate = plan.spec.gate
    live = live_eval_claims(plan.snapshot)
    gone = {r.claim_id for r in retired}

    def stands(cell: SweepCell) -> list[ClaimEntry]:
        key = (cell.member.ref, cell.member.effort, cell.task_class)
        return [claim for _, claim in live.get(key, []) if claim.id not in gone]

    body: dict[str, Any] = {
        "reportId": plan.report_id,
        "observedAt": format_instant(plan.observed_at),
        "gate": {
            "kind": gate.kind,
            "tolerance": gate.tolerance,
            "strength": gate.strength,
            "weakness": gate.weakness,
        },
        "pool": [pool_json(member) for member in plan.pool],
        "worstCaseUsd": plan.worst_case_usd,
        "spentUsd": spent_usd,
        "cells": [
            cell_json(cell, cell.outcome(gate), claim.id if claim else None, stands(cell))
            for cell, claim in cells
        ],
        "claims": [claim_to_wire(claim) for _, claim in cells if claim is not None],
        "retired": [r.to_json() for r in retired],
        "canary": list(canary),
    }
    if committed_version is not None:
        body["committedVersion"] = committed_version
    return body
