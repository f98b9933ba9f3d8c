"""Sweep reports as text: the plan block, the ``--json`` object, the human summary.

Views return strings; printing is the CLI's job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kb.canary import STATUS_WORDS
from kb.store.canonical import to_fixed_2
from kb.store.ttl import format_instant
from kb.sweep.html import subject_key_of
from kb.sweep.report_json import pool_json, report_body
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
    judges = f", up to {plan.judge_runs_max} judge runs" if plan.judge_runs_max else ""
    lines.append(
        f"planned: {len(plan.target_runs)} target runs{judges}, {plan.canary_probes} canary probes"
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


def plan_json(plan: SweepPlan) -> dict[str, Any]:
    """``--dry-run --json``: every run the sweep would make, with its rendered prompt."""
    forecast = plan.forecast
    return {
        "reportId": plan.report_id,
        "observedAt": format_instant(plan.observed_at),
        "pool": [pool_json(member) for member in plan.pool],
        "worstCaseUsd": forecast.worst_usd,
        "capUsd": plan.spec.budgets.max_total_usd,
        "refusedRuns": forecast.refused,
        "runs": [
            {
                "label": run.label,
                "model": run.spec.key,
                "ceilingUsd": run.ceiling_usd,
                "messages": [dict(message) for message in run.request.messages],
            }
            for run in plan.target_runs
        ],
        "judgeRunsMax": plan.judge_runs_max,
        "canaryProbes": plan.canary_probes,
    }


def report_json(report: SweepReport) -> dict[str, Any]:
    """The ``--json`` report: the report body and every run's evidence record."""
    body = report_body(
        report.plan,
        report.cells,
        retired=report.retired,
        canary=report.canary,
        spent_usd=report.spent_usd,
        committed_version=report.committed_version,
    )
    body["runs"] = report.runs
    return body


def _count(cell: Mapping[str, Any]) -> str:
    """``7/8 of 8`` cases passed of measured of planned; with repeats, the flaky count too."""
    n, planned = int(cell["n"]), int(cell["plannedN"])
    if n == 0:
        return f"no result (0 of {planned} measured)"
    if "repeats" not in cell:
        return f"{round(float(cell['passRate']) * n)}/{n} of {planned}"
    flaky = sum(1 for case in cell.get("cases", []) if case["stability"] == "flaky")
    return f"{n} of {planned} cases x{cell['repeats']}, {flaky} flaky"


def incomplete_summary(body: Mapping[str, Any]) -> str | None:
    """The failing line of a report with incomplete cells (``None``: every cell complete)."""
    cells = body["cells"]
    broken = [cell for cell in cells if cell["outcome"] == "incomplete"]
    if not broken:
        return None
    first = broken[0]
    cause = first.get("incompleteReason") or "nothing measured"
    if first.get("firstError"):
        cause += f"; first error: {first['firstError']}"
    committed = (
        f"the {len(cells) - len(broken)} complete cells are committed (store "
        f"v{body['committedVersion']})"
        if "committedVersion" in body
        else "nothing was committed"
    )
    return (
        f"{len(broken)} of {len(cells)} cells incomplete, e.g. {subject_key_of(first)} "
        f"{first['taskClass']}: {cause}; {committed}"
    )


def summary_text(body: Mapping[str, Any], git_commit: str | None = None) -> str:
    """The human summary of a report body: cells, claims, retirements, commit, spend."""
    lines = ["cells:"]
    for cell in body["cells"]:
        low, high = cell["wilson95"]
        rate = (
            f"passRate {to_fixed_2(cell['passRate'])} [{to_fixed_2(low)}, {to_fixed_2(high)}]  "
            if int(cell["n"])
            else ""
        )
        line = (
            f"  {subject_key_of(cell):<28} {cell['taskClass']:<22} {_count(cell)}  {rate}"
            f"${float(cell['totalCostUsd']):.4f}  {cell['outcome']}"
        )
        if cell.get("incompleteReason"):
            line += f" ({cell['incompleteReason']})"
        for prior in cell.get("priorStands", []):
            line += f"; prior {prior['polarity']} stands: {prior['claimId']}"
        lines.append(line)
        if cell.get("firstError"):
            lines.append(f"    first error: {cell['firstError']}")
    claims, retired = body["claims"], body["retired"]
    lines.append(f"claims: {len(claims)}")
    lines += [f"  + {claim['id']}: {claim['statement']}" for claim in claims]
    lines.append(f"retired: {len(retired)}")
    for entry in retired:
        how = (
            f"superseded by {entry['by']}"
            if entry.get("by")
            else f"archived ({entry.get('reason')})"
        )
        lines.append(f"  - {entry['claimId']}: {how}")
    for entry in body.get("canary", []):
        flipped = f", {len(entry['flipped'])} claims flipped stale" if entry.get("flipped") else ""
        words = STATUS_WORDS.get(str(entry["status"]), str(entry["status"]))
        lines.append(f"canary {subject_key_of(entry)}: {words}{flipped}")
    if "committedVersion" in body:
        git = f" [git {git_commit[:12]}]" if git_commit else ""
        lines.append(f"committed: store v{body['committedVersion']}{git}")
    elif claims or retired:
        lines.append("not committed")
    else:
        lines.append("nothing to commit")
    lines.append(
        f"spend: ${float(body['spentUsd']):.4f} debited; worst case authorized "
        f"{_money(body.get('worstCaseUsd'))}"
    )
    return "\n".join(lines)


def sweep_markdown(body: Mapping[str, Any], store_changes: str | None) -> str:
    """``kb sweep --summary``: the cells as a table, then what the commit changed.

    ``store_changes`` is ``kb diff --markdown`` of the sweep's own commit
    (``None`` when nothing was committed).
    """
    lines = [
        f"## kb sweep `{body['reportId']}`",
        "",
        f"Observed {body['observedAt']}; spent ${float(body['spentUsd']):.4f}.",
        "",
        "| model | task class | pass rate | 95% interval | n | outcome |",
        "|---|---|---:|---|---:|---|",
    ]
    for cell in body["cells"]:
        low, high = cell["wilson95"]
        outcome = str(cell["outcome"])
        if outcome == "incomplete":
            outcome += f": {cell.get('incompleteReason', '')}".replace("|", "\\|")
        lines.append(
            f"| {subject_key_of(cell)} | {cell['taskClass']} | {to_fixed_2(cell['passRate'])} | "
            f"{to_fixed_2(low)}–{to_fixed_2(high)} | {cell['n']}/{cell['plannedN']} | {outcome} |"
        )
    lines.append("")
    lines.append(store_changes if store_changes is not None else "Nothing was committed.\n")
    return "\n".join(lines)
