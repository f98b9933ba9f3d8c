"""Sweep reports: the ``--json`` object, the human summary, and the HTML heatmap.

Views return strings; printing is the CLI's job.
"""

from __future__ import annotations

import html
from typing import Any

from kb.store.canonical import to_fixed_2
from kb.store.models import claim_to_wire
from kb.store.ttl import format_instant
from kb.sweep.cells import SweepCell
from kb.sweep.pool import PoolMember
from kb.sweep.run import SweepPlan, SweepReport


def _money(value: float | None) -> str:
    return "unbounded" if value is None else f"${value:.4f}"


def plan_text(plan: SweepPlan, *, list_runs: bool = False) -> str:
    """The pre-flight block: report id, pool with origins, worst-case spend (and runs)."""
    shard = f" (shard {plan.shard[0]}/{plan.shard[1]})" if plan.shard else ""
    lines = [f"sweep {plan.report_id} at {format_instant(plan.observed_at)}{shard}", "pool:"]
    lines += [
        f"  {member.spec.key}  ({member.origin})"
        + (f"  SKIPPED: {member.skipped}" if member.skipped else "")
        for member in plan.pool
    ]
    cap = plan.spec.budgets.max_total_usd
    lines.append(
        f"planned: {len(plan.target_runs)} target runs, up to {plan.judge_runs_max} judge runs, "
        f"{plan.canary_probes} canary probes"
    )
    forecast = plan.forecast
    line = f"worst-case authorized spend: ${forecast.worst_usd:.4f} (cap {_money(cap)})"
    if forecast.exceeds:
        line += f": EXCEEDS the cap, {forecast.refused} of {forecast.runs} runs would be refused"
    lines.append(line)
    if list_runs:
        lines.append("runs:")
        canary = plan.spec.canary
        if canary is not None:
            from kb.canary import plan_probes

            probes = plan_probes(
                plan.members, canary.prompts, canary.repeats, plan.spec.budgets.canary_usd
            )
            lines += [f"  {run.label}  ceiling {_money(run.ceiling_usd)}" for run in probes]
        lines += [f"  {run.label}  ceiling {_money(run.ceiling_usd)}" for run in plan.target_runs]
        if plan.judge_runs_max:
            lines.append(
                f"  (+ up to {plan.judge_runs_max} judge runs, one per judge grader "
                f"of each target run that settles ok, ceiling "
                f"{_money(plan.spec.budgets.judge_usd)})"
            )
    return "\n".join(lines)


def cell_json(cell: SweepCell, outcome: str, claim_id: str | None) -> dict[str, Any]:
    """One ``cells[]`` entry (camelCase; optional keys only when they apply)."""
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


def report_json(report: SweepReport) -> dict[str, Any]:
    """The ``--json`` report."""
    plan = report.plan
    gate = plan.spec.gate
    body: dict[str, Any] = {
        "reportId": plan.report_id,
        "observedAt": format_instant(plan.observed_at),
        "gate": {"kind": gate.kind, "tolerance": gate.tolerance},
        "pool": [pool_json(member) for member in plan.pool],
        "worstCaseUsd": plan.worst_case_usd,
        "spentUsd": report.spent_usd,
        "cells": [
            cell_json(cell, cell.outcome(gate), claim.id if claim else None)
            for cell, claim in report.cells
        ],
        "claims": [claim_to_wire(claim) for claim in report.claims],
        "retired": [r.to_json() for r in report.retired],
        "canary": report.canary,
    }
    if report.committed_version is not None:
        body["committedVersion"] = report.committed_version
    return body


def _count(cell: SweepCell) -> str:
    """``7/8 of 8`` cases passed of measured of planned; with repeats, the flaky count too."""
    if cell.repeats == 1:
        return f"{int(cell.passed)}/{cell.n} of {cell.planned_n}"
    flaky = sum(1 for case in cell.cases if case.stability == "flaky")
    return f"{cell.n} of {cell.planned_n} cases x{cell.repeats}, {flaky} flaky"


def incomplete_summary(report: SweepReport) -> str | None:
    """The failing line of a sweep with incomplete cells (``None``: every cell complete)."""
    broken = [cell for cell, _ in report.cells if not cell.complete]
    if not broken:
        return None
    first = broken[0]
    cause = first.incomplete_reason or "nothing measured"
    if first.first_error:
        cause += f"; first error: {first.first_error}"
    committed = (
        f"the {len(report.cells) - len(broken)} complete cells are committed (store "
        f"v{report.committed_version})"
        if report.committed_version is not None
        else "nothing was committed"
    )
    return (
        f"{len(broken)} of {len(report.cells)} cells incomplete, e.g. {first.member.key} "
        f"{first.task_class}: {cause}; {committed}"
    )


def summary_text(report: SweepReport) -> str:
    """The human summary: cells, claims, retirements, commit, spend."""
    gate = report.plan.spec.gate
    lines = ["cells:"]
    for cell, _claim in report.cells:
        outcome = cell.outcome(gate)
        low, high = cell.wilson95
        line = (
            f"  {cell.member.key:<28} {cell.task_class:<22} {_count(cell)}  passRate "
            f"{to_fixed_2(cell.pass_rate)} [{to_fixed_2(low)}, {to_fixed_2(high)}]  "
            f"${cell.total_cost_usd:.4f}  {outcome}"
        )
        if cell.incomplete_reason:
            line += f" ({cell.incomplete_reason})"
        lines.append(line)
        if cell.first_error:
            lines.append(f"    first error: {cell.first_error}")
    lines.append(f"claims: {len(report.claims)}")
    lines += [f"  + {claim.id}: {claim.statement}" for claim in report.claims]
    lines.append(f"retired: {len(report.retired)}")
    for retired in report.retired:
        how = f"superseded by {retired.by}" if retired.by else f"archived ({retired.reason})"
        lines.append(f"  - {retired.claim_id}: {how}")
    for entry in report.canary:
        lines.append(f"canary {entry['model']}: {entry['status']}")
    if report.committed_version is not None:
        git = f" [git {report.git_commit[:12]}]" if report.git_commit else ""
        lines.append(f"committed: store v{report.committed_version}{git}")
    elif report.claims or report.retired:
        lines.append("not committed")
    else:
        lines.append("nothing to commit")
    lines.append(
        f"spend: ${report.spent_usd:.4f} debited; worst case authorized "
        f"{_money(report.plan.worst_case_usd)}"
    )
    return "\n".join(lines)


_OUTCOME_COLOURS = {
    "strength": "#1a7f37",
    "weakness": "#cf222e",
    "none": "#6e7781",
    "incomplete": "#9a6700",
}


def _heat(rate: float) -> str:
    """Red (0) through amber to green (1), as an HSL background."""
    return f"hsl({round(rate * 120)}, 70%, 85%)"


def report_html(report: SweepReport) -> str:
    """One self-contained HTML page (no scripts, no fetches): the model × task-class heatmap."""
    plan = report.plan
    thresholds = plan.spec.thresholds
    gate = plan.spec.gate
    esc = html.escape
    classes = list(dict.fromkeys(cell.task_class for cell, _ in report.cells))
    members = list(dict.fromkeys(cell.member.key for cell, _ in report.cells))
    by_key = {(cell.member.key, cell.task_class): (cell, claim) for cell, claim in report.cells}
    rows = []
    for member in members:
        tds = [f'<th scope="row">{esc(member)}</th>']
        for task_class in classes:
            found = by_key.get((member, task_class))
            if found is None:
                tds.append('<td class="empty">–</td>')
                continue
            cell, claim = found
            outcome = cell.outcome(gate)
            low, high = cell.wilson95
            why = (
                f'<div class="why">{esc(cell.incomplete_reason)}</div>'
                if (cell.incomplete_reason)
                else ""
            )
            claim_line = f'<div class="claim">{esc(claim.id)}</div>' if claim else ""
            tds.append(
                f'<td style="background:{_heat(cell.pass_rate) if cell.n else "#eee"}" '
                f'data-outcome="{outcome}">'
                f'<div class="rate">{cell.pass_rate:.2f}</div>'
                f"<div>n={cell.n}/{cell.planned_n} · 95% [{low:.2f}, {high:.2f}]</div>"
                f"<div>${cell.total_cost_usd:.4f}</div>"
                f'<div class="outcome" style="color:{_OUTCOME_COLOURS[outcome]}">{outcome}</div>'
                f"{why}{claim_line}</td>"
            )
        rows.append("<tr>" + "".join(tds) + "</tr>")
    header = "".join(f'<th scope="col">{esc(c)}</th>' for c in classes)
    pool = "".join(f"<li><code>{esc(m.spec.key)}</code> — {esc(m.origin)}</li>" for m in plan.pool)
    retired = (
        "".join(
            f"<li><code>{esc(r.claim_id)}</code> — "
            + (
                f"superseded by <code>{esc(r.by)}</code>"
                if r.by
                else f"archived ({esc(r.reason or '')})"
            )
            + "</li>"
            for r in report.retired
        )
        or "<li>none</li>"
    )
    canary = "".join(
        f"<li><code>{esc(str(e['model']))}</code> — {esc(str(e['status']))}, fingerprint "
        f"<code>{esc(str(e['fingerprint'])[:16])}</code></li>"
        for e in report.canary
    )
    canary_block = f"<h2>Canary</h2><ul>{canary}</ul>" if report.canary else ""
    committed = (
        f"store v{report.committed_version}"
        if report.committed_version is not None
        else "not committed"
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>kb sweep {esc(plan.report_id)}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #1f2328; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #d0d7de; padding: .5em .8em; vertical-align: top; }}
td .rate {{ font-size: 1.4em; font-weight: 600; }}
td .outcome {{ font-weight: 600; text-transform: uppercase; font-size: .85em; }}
td .why, td .claim {{ font-size: .8em; color: #57606a; max-width: 22em; }}
</style></head><body>
<h1>kb sweep <code>{esc(plan.report_id)}</code></h1>
<p>observed {esc(format_instant(plan.observed_at))} · thresholds strength ≥ {thresholds.strength},
weakness ≤ {thresholds.weakness} · spent ${report.spent_usd:.4f} of worst case
{esc(_money(plan.worst_case_usd))} · {esc(committed)}</p>
<h2>Pass rate by model and task class</h2>
<table id="heatmap"><thead><tr><th>model</th>{header}</tr></thead>
<tbody>{"".join(rows)}</tbody></table>
<h2>Pool</h2><ul>{pool}</ul>
<h2>Retired</h2><ul>{retired}</ul>
{canary_block}
</body></html>
"""
