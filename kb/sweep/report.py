"""The sweep's report as data (a :class:`ReportFile`), and its plan as text and JSON.

:func:`sweep_report` builds the report once per commit attempt from the plan,
the measurement and the ops the commit applies; the evidence report file
and ``--json`` are that same object (``--json`` with its runs). Views of a
report (the summary, the markdown, the HTML) read the :class:`ReportFile`
and live in :mod:`kb.views`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from kb.engine.phases import Phase
from kb.money import usd, usd_or_unbounded
from kb.store.models import claim_to_wire
from kb.store.ops import Op
from kb.store.records import (
    CaseStability,
    CellRecord,
    EpochRecord,
    PoolRecord,
    PriorStands,
    ReportFile,
)
from kb.store.snapshot import ClaimEntry, Snapshot
from kb.store.ttl import format_instant
from kb.store.wire import cut_texts
from kb.sweep.canary import CanaryResult
from kb.sweep.cells import SweepCell
from kb.sweep.evidence import EvidenceContext
from kb.sweep.falsify import Retirement, live_eval_claims, retirements
from kb.sweep.gate import CellEstimate, GatePolicy
from kb.sweep.measure import Measurement
from kb.sweep.plan import SweepPlan
from kb.sweep.pool import PoolMember
from kb.sweep.sensitive import LABEL_MARK as SENSITIVE_MARK
from kb.sweep.sensitive import READING_MARK
from kb.textwidth import fit


def cell_record(
    cell: SweepCell,
    gate: GatePolicy,
    claim_id: str | None,
    stands: Sequence[ClaimEntry] = (),
    newer_night: str | None = None,
) -> CellRecord:
    """One ``cells[]`` entry.

    ``stands``: earlier claims of the cell that this sweep left in place (the
    interval gate's hysteresis, or an incomplete cell). ``newer_night``: the
    newer night the store held, which this night decided nothing over.
    """
    refused = cell.refused_run_label
    return CellRecord(
        model=cell.member.ref,
        effort=cell.member.effort,
        task_class=cell.task_class,
        pass_rate=cell.pass_rate,
        n=cell.n,
        planned_n=cell.planned_n,
        total_cost_usd=None if cell.unpriced_runs else cell.total_cost_usd,
        case_names=tuple(cell.case_names),
        unpriced_runs=cell.unpriced_runs or None,
        exhausted_runs=cell.exhausted_runs or None,
        non_ok_runs=cell.non_ok_runs or None,
        judge_incomplete_runs=cell.judge_incomplete_runs or None,
        unscored_n=cell.unscored_n or None,
        envelope_exhausted=True if refused is not None else None,
        refused_run_label=refused,
        incomplete_reason=cell.incomplete_reason,
        suspect=cell.suspect,
        first_error=cell.first_error,
        # a cell a newer night decided shows tonight's rate: the interval is tonight's too
        wilson95=(
            cell.wilson95
            if newer_night is None
            else CellEstimate(cell.passed, cell.n, cell.interval).interval
        ),
        repeats=cell.repeats if cell.repeats > 1 else None,
        cases=_stabilities(cell) if cell.repeats > 1 else None,
        outcome=cell.outcome(gate),
        claim_id=claim_id,
        prior_stands=(
            tuple(PriorStands(claim_id=c.id, polarity=c.polarity, status=c.status) for c in stands)
            or None
        ),
        # a newer night's epoch is the cell's now: this night's own view of it would mislead
        epoch=epoch_record(cell) if cell.complete and newer_night is None else None,
        newer_night=newer_night,
    )


def _cell_records(
    plan: SweepPlan,
    measurement: Measurement,
    retired: Sequence[Retirement],
    newer: Mapping[tuple[str, str], str],
    snapshot: Snapshot | None,
) -> tuple[CellRecord, ...]:
    """The report's cells: the ones a stopped invocation committed, then tonight's."""
    live = live_eval_claims(snapshot if snapshot is not None else plan.snapshot)
    gone = {r.claim_id for r in retired}

    def stands(cell: SweepCell) -> list[ClaimEntry]:
        key = (cell.member.ref, cell.member.effort, cell.task_class)
        return [claim for _, claim in live.get(key, []) if claim.id not in gone]

    done = plan.resume.done if plan.resume is not None else ()
    tonight = (
        cell_record(
            cell,
            plan.spec.gate,
            claim.id if claim else None,
            stands(cell),
            newer.get((cell.member.key, cell.task_class)),
        )
        for cell, claim in measurement.cells
    )
    return (*done, *tonight)


def _stabilities(cell: SweepCell) -> tuple[CaseStability, ...]:
    """Each case's repeats: stable-pass, flaky or stable-fail."""
    return tuple(
        CaseStability(
            name=case.name, passes=case.passes, runs=len(case.verdicts), stability=case.stability
        )
        for case in cell.cases
    )


def epoch_record(cell: SweepCell) -> EpochRecord | None:
    """The cell's ``epoch`` entry (``None``: no epoch, the point gate)."""
    night = cell.epoch
    if night is None:
        return None
    epoch = night.epoch
    return EpochRecord(
        reason=epoch.start.reason,
        started_at=epoch.start.observed_at,
        started_in=epoch.start.report_id,
        nights=len(epoch.nights),
        n=epoch.n,
        pass_rate=cell.estimate.pass_rate,
        down=round(epoch.down, 3),
        up=round(epoch.up, 3),
        alarm=night.alarm,
        pool=night.pool,
        ran=night.ran,
        why=night.why,
    )


def pool_record(member: PoolMember) -> PoolRecord:
    """One ``pool[]`` entry: who, why, and whether it was measured."""
    return PoolRecord(
        model=member.spec.key,
        origin=member.origin,
        measured=member.measured,
        skipped=member.skipped,
    )


def sweep_report(
    plan: SweepPlan,
    measurement: Measurement,
    ops: Sequence[Op],
    canary: Sequence[CanaryResult],
    committed_version: int | None,
    newer: Mapping[tuple[str, str], str] | None = None,
    snapshot: Snapshot | None = None,
) -> ReportFile:
    """The report of ``measurement`` once ``ops`` are committed (``None``: not committed).

    ``newer``: cells the store held a newer night of (their report ids): this
    night decided nothing there (:mod:`kb.sweep.order`). ``snapshot``: the
    store the change is decided against (the plan's by default), whose live
    claims are the ones that stand.
    """
    retired = retirements(ops)
    carried = plan.resume.committed if plan.resume is not None else None
    report = ReportFile(
        report_id=plan.report_id,
        observed_at=format_instant(plan.observed_at),
        gate=plan.spec.gate.record(),
        pool=tuple(pool_record(member) for member in plan.pool),
        worst_case_usd=plan.worst_case_usd,
        spent_usd=measurement.spent_usd,
        cells=_cell_records(plan, measurement, retired, newer or {}, snapshot),
        claims=(
            *(carried.claims if carried is not None else ()),
            *(claim_to_wire(claim) for _, claim in measurement.cells if claim),
        ),
        retired=(
            *(carried.retired if carried is not None else ()),
            *(r.to_record() for r in retired),
        ),
        canary=tuple(c.to_record() for c in canary),
        committed_version=committed_version,
        reused_runs=measurement.reused or None,
    )
    # reasons quote replies and provider errors: cut every model's and judge's secrets
    context = EvidenceContext.of([*(member.spec for member in plan.pool), *plan.judge_models])
    return cut_texts(report, context.cut)


# -- the plan ---------------------------------------------------------------------------------


def _phase_lines(phase: Phase) -> list[str]:
    lines = [f"  {run.label}  ceiling {usd_or_unbounded(run.ceiling_usd)}" for run in phase.runs]
    if phase.later:
        lines.append(
            f"  (+ up to {phase.later} {phase.later_what}, ceiling "
            f"{usd_or_unbounded(phase.later_ceiling_usd)})"
        )
    return lines


def plan_text(plan: SweepPlan, *, list_runs: bool = False) -> str:
    """The pre-flight block: report id, pool with origins, worst-case spend (and runs)."""
    shard = f" (shard {plan.shard[0]}/{plan.shard[1]})" if plan.shard else ""
    lines = [f"sweep {plan.report_id} at {format_instant(plan.observed_at)}{shard}", "pool:"]
    lines += [
        f"  {member.spec.key}  ({member.origin})"
        + (f"  SKIPPED: {member.skipped}" if member.skipped else "")
        for member in plan.pool
    ]
    job = plan.job
    judges = job.phase("judges").later
    judge_text = f", up to {judges} judge runs" if judges else ""
    worst = " (the worst case)" if plan.suites and plan.spec.sweep.sampling != "full" else ""
    canary = job.phase("canary").runs
    tiered = [run for run in canary if run.label.startswith(SENSITIVE_MARK)]
    readings = sum(1 for run in tiered if READING_MARK in run.label)
    sampled = len(tiered)
    tier = f" + {sampled - readings} sensitive-tier samples" if sampled - readings else ""
    tier += f" + {readings} logprob readings" if readings else ""
    lines.append(
        f"planned{worst}: {len(job.phase('targets').runs)} target runs{judge_text}, "
        f"{len(canary) - sampled} canary probes{tier}"
    )
    if plan.suites:
        lines.append(epochs_line(plan))
    forecast = job.forecast
    cap = plan.spec.budgets.max_total_usd
    line = f"worst-case authorized spend: {usd(forecast.worst_usd)} (cap {usd_or_unbounded(cap)})"
    if forecast.exceeds:
        line += f": EXCEEDS the cap, {forecast.refused} of {forecast.runs} runs would be refused"
    lines.append(line)
    if list_runs:
        lines.append("runs:")
        for phase in job.phases:
            lines += _phase_lines(phase)
    return fit("\n".join(lines))


def epochs_line(plan: SweepPlan) -> str:
    """How many cells go on with an epoch tonight, and why the others start one."""
    from kb.sweep.sampling import EPOCH_REASONS

    reasons = Counter(suite.restart for suite in plan.suites if suite.restart is not None)
    going_on = sum(1 for suite in plan.suites if suite.restart is None)
    starting = ", ".join(
        f"{count} ({EPOCH_REASONS[reason]})" for reason, count in sorted(reasons.items())
    )
    text = f"epochs: {going_on} of {len(plan.suites)} cells go on"
    if starting:
        text += f", new: {starting}"
    if plan.spec.sweep.sampling == "adaptive":
        runs = sum(first_pass_runs(plan).values())
        text += (
            f"\nfirst pass: {runs} target runs (then 5 more at a time where a detector is "
            "suspicious or a new epoch's interval is not yet clear, up to each pool; up to "
            "half a pool after an alarm)"
        )
    return text


def first_pass_runs(plan: SweepPlan) -> dict[tuple[str, str], int]:
    """Target runs each epoch cell's first pass makes tonight (cases × repeats)."""
    from kb.sweep.nightly import nightly_rule
    from kb.sweep.sampling import first_pass

    repeats = plan.spec.sweep.repeats
    found = first_pass(plan.suites, plan.spec.sweep.sampling, nightly_rule(plan.spec))
    return {key: cases * repeats for key, cases in found.items()}


def plan_json(plan: SweepPlan) -> dict[str, Any]:
    """``--dry-run --json``: every run the sweep would make, with its rendered prompt."""
    forecast = plan.job.forecast
    first = first_pass_runs(plan) if plan.suites else {}
    return {
        "reportId": plan.report_id,
        "observedAt": format_instant(plan.observed_at),
        "pool": [pool_record(member).to_wire() for member in plan.pool],
        "worstCaseUsd": forecast.worst_usd,
        "capUsd": plan.spec.budgets.max_total_usd,
        "refusedRuns": forecast.refused,
        "epochs": [
            {
                "model": suite.member.key,
                "taskClass": suite.task_class,
                "restart": suite.restart,
                "firstPassRuns": first.get(suite.key, 0),
            }
            for suite in plan.suites
        ],
        "runs": [
            {
                "label": run.label,
                "model": run.spec.key,
                "ceilingUsd": run.ceiling_usd,
                "messages": [dict(message) for message in run.request.messages],
            }
            for run in plan.job.phase("targets").runs
        ],
        "judgeRunsMax": plan.job.phase("judges").later,
        "canaryProbes": len(plan.job.phase("canary").runs),
    }
