"""Cells — one (pool member, task class) of a sweep — and the claims they emit.

A cell emits a claim only when it is **complete**: every planned case was
measured on every repeat (``n > 0``; a case left unscored is out of ``n``), no run exhausted
its ceiling, no target run failed, no judge run is missing, at most 5 % of
its cases are unscored (left out of ``n``, never a fail) and the envelope
refused nothing. An incomplete cell says why and touches no prior
claim. Which claim a complete cell earns is the gate's decision
(:mod:`kb.sweep.gate`).

With ``repeats = K`` each case runs K times; its score is its pass fraction
and it is labelled ``stable-pass``, ``flaky`` or ``stable-fail``. ``n`` is
always the number of distinct cases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from kb.engine.requests import ModelSpec
from kb.engine.runs import RunResult
from kb.evals.graders import verdict_data
from kb.evals.suite import CaseVerdict
from kb.schema import utf16_length
from kb.store.canonical import to_fixed_2
from kb.store.epochs import cell_key
from kb.store.manifests import EpochManifest
from kb.store.models import (
    STATEMENT_MAX_UTF16,
    Author,
    EvalEvidence,
    Evidence,
    Metrics,
    ModelClaim,
    ModelEpoch,
    subject_wire,
)
from kb.store.ttl import claim_expiry, format_instant
from kb.sweep.gate import CellEstimate, GatePolicy
from kb.sweep.health import Suspicion
from kb.sweep.sampling import CellEpochNight
from kb.textwidth import shorten

Outcome = Literal["strength", "weakness", "none", "incomplete"]
Stability = Literal["stable-pass", "flaky", "stable-fail", "unmeasured"]
GRADER_ID = "eval-suite"
UNSCORED_SHARE = 0.05
"""A cell with more unscored cases than this share is judge-incomplete (SPEC 14.5); at
or below it the unscored cases are left out of ``n``, never counted as fails."""


@dataclass(frozen=True)
class CaseOutcome:
    """One case of a cell across its repeats."""

    name: str
    verdicts: tuple[CaseVerdict, ...]

    @property
    def measured(self) -> bool:
        """Every repeat was measured (target ok, judges answered)."""
        return all(v.measured for v in self.verdicts)

    @property
    def unscored(self) -> bool:
        """Unmeasured only because a verdict could not be read (or a panel tied)."""
        return not self.measured and all(v.unscored or v.measured for v in self.verdicts)

    @property
    def passes(self) -> int:
        """Repeats that passed."""
        return sum(1 for v in self.verdicts if v.passed)

    @property
    def score(self) -> float:
        """The pass fraction over the repeats."""
        return self.passes / len(self.verdicts) if self.verdicts else 0.0

    @property
    def stability(self) -> Stability:
        """``stable-pass`` (every repeat passed), ``stable-fail`` (none) or ``flaky``.

        ``unmeasured`` when some repeat has no verdict (the target failed, a
        judge did not answer, or its verdict is unscored): it neither passed
        nor failed.
        """
        if not self.measured:
            return "unmeasured"
        if self.passes == len(self.verdicts):
            return "stable-pass"
        return "stable-fail" if self.passes == 0 else "flaky"


@dataclass(frozen=True)
class SweepCell:
    """The verdicts of one member on one task class's cases (every repeat, in plan order)."""

    member: ModelSpec
    task_class: str
    verdicts: tuple[CaseVerdict, ...]
    repeats: int = 1
    interval: tuple[float, float] | None = None
    """The 95 % interval, when computed for all cells at once (else computed on use)."""
    suspicion: Suspicion | None = None
    """Why the answers look like an outage, not a model (:mod:`kb.sweep.health`)."""
    epoch: CellEpochNight | None = None
    """The cell's epoch after tonight (interval gate): what the gate decides on."""

    @property
    def suspect(self) -> str | None:
        """Why the answers look like an outage (``None``: they look like a model's)."""
        return self.suspicion.reason if self.suspicion is not None else None

    @cached_property
    def cases(self) -> tuple[CaseOutcome, ...]:
        """The cell's cases in plan order, each with its repeats."""
        grouped: dict[str, list[CaseVerdict]] = {}
        for verdict in self.verdicts:
            grouped.setdefault(verdict.name, []).append(verdict)
        return tuple(CaseOutcome(name, tuple(found)) for name, found in grouped.items())

    @property
    def runs(self) -> list[RunResult]:
        """Target and judge runs of the cell."""
        return [run for v in self.verdicts for run in (v.target, *v.judges)]

    @property
    def planned_n(self) -> int:
        """Distinct cases planned for the cell."""
        return len(self.cases)

    @property
    def n(self) -> int:
        """Distinct cases measured on every repeat."""
        return sum(1 for case in self.cases if case.measured)

    @property
    def passed(self) -> float:
        """The sum of measured cases' scores (a whole number with one run per case)."""
        passes = sum(case.passes for case in self.cases if case.measured)
        return passes if self.repeats == 1 else passes / self.repeats

    @property
    def estimate(self) -> CellEstimate:
        """What the gate decides on: the epoch's pooled cases, else tonight's measured cases.

        An incomplete cell's is tonight's: its night is not part of its epoch (the sampler
        discards it), so the epoch's estimate after it is no measurement at all.
        """
        if self.epoch is not None and self.complete:
            return CellEstimate(self.epoch.successes, self.epoch.n)
        return CellEstimate(self.passed, self.n, self.interval)

    @property
    def pass_rate(self) -> float:
        """Mean case score over measured cases (0 when none were measured)."""
        if not self.n:
            return 0.0
        passes = sum(case.passes for case in self.cases if case.measured)
        return passes / (self.n * self.repeats)  # one division: exact for K = 1

    @property
    def total_cost_usd(self) -> float:
        """Everything the cell's runs cost, judges included."""
        return sum(run.cost_usd for run in self.runs)

    @property
    def case_names(self) -> list[str]:
        """The cell's case names in plan order."""
        return [case.name for case in self.cases]

    @property
    def unpriced_runs(self) -> int:
        """Runs whose cost nobody knew (counted as $0: the cell's cost is unknown)."""
        return sum(1 for run in self.runs if run.price_source == "unpriced")

    @property
    def exhausted_runs(self) -> int:
        """Runs (target or judge) that cost more than their ceiling."""
        return sum(1 for run in self.runs if run.status == "exhausted")

    @property
    def non_ok_runs(self) -> int:
        """Target runs that failed or were cancelled."""
        return sum(1 for v in self.verdicts if v.target.status in ("error", "cancelled"))

    @property
    def judge_incomplete_runs(self) -> int:
        """Case runs whose judge run did not settle ok."""
        return sum(1 for v in self.verdicts if v.judge_incomplete)

    @property
    def unscored_n(self) -> int:
        """Distinct cases left unscored (a judge's reply unreadable, a panel's tie)."""
        return sum(1 for case in self.cases if case.unscored)

    @property
    def too_unscored(self) -> bool:
        """More than :data:`UNSCORED_SHARE` of the cases are unscored: judge-incomplete."""
        return self.unscored_n > UNSCORED_SHARE * self.planned_n

    @property
    def refused_run_label(self) -> str | None:
        """The first run the envelope refused, if any."""
        return next((run.label for run in self.runs if run.status == "refused"), None)

    @property
    def first_error(self) -> str | None:
        """The first provider error of the cell's runs (secrets already cut).

        Else, for a cell whose judge answered without a verdict, what it said.
        """
        found = next((run.error for run in self.runs if run.status == "error" and run.error), None)
        if found is not None:
            return found
        for verdict in self.verdicts:
            if not verdict.unscored:
                continue
            for run, model in zip(verdict.judges, verdict.judge_models, strict=True):
                if run.status == "ok" and verdict_data(run.output or "") is None:
                    said = shorten(" ".join((run.output or "").split()), 80)
                    return f"judge {model.key} replied {said!r}, not {{passed, reason}} JSON"
        return None

    @property
    def incomplete_reason(self) -> str | None:
        """Why the cell cannot emit a claim (``None`` when it is complete)."""
        reasons = [self.suspect] if self.suspect else []
        if self.refused_run_label is not None:
            refused = sum(1 for run in self.runs if run.status == "refused")
            reasons.append(
                f"the spend envelope refused {refused} run{_s(refused)} "
                f"(first: {self.refused_run_label})"
            )
        if self.exhausted_runs:
            reasons.append(
                f"{self.exhausted_runs} run{_s(self.exhausted_runs)} exceeded the per-run ceiling"
            )
        if self.non_ok_runs:
            reasons.append(
                f"{self.non_ok_runs} target run{_s(self.non_ok_runs)} failed at the provider"
            )
        if self.judge_incomplete_runs:
            reasons.append(
                f"{self.judge_incomplete_runs} judge verdict"
                f"{_s(self.judge_incomplete_runs)} missing"
            )
        if self.too_unscored:
            reasons.append(
                f"{self.unscored_n} of {self.planned_n} cases unscored (a judge's reply that "
                f"is not {{passed, reason}}, or a panel's tie; more than "
                f"{UNSCORED_SHARE:.0%} is judge-incomplete)"
            )
        if not reasons and self.planned_n == 0:
            reasons.append("no cases")
        measured = self.n + self.unscored_n
        if not reasons and measured != self.planned_n:  # pragma: no cover - covered above
            reasons.append(f"measured {self.n} of {self.planned_n} cases")
        return "; ".join(reasons) or None

    @property
    def complete(self) -> bool:
        """Whether the cell may emit a claim."""
        return self.incomplete_reason is None and self.n > 0

    def outcome(self, gate: GatePolicy) -> Outcome:
        """The claim the gate grants the cell, ``none``, or ``incomplete``."""
        if not self.complete:
            return "incomplete"
        band = gate.band(self.estimate)
        if self.epoch is not None and band == self.epoch.blocked:
            return "none"  # the claim the detector retired tonight is not re-earned tonight
        return band

    @property
    def wilson95(self) -> tuple[float, float]:
        """The 95 % interval the interval gate uses (cases as the unit of sampling)."""
        return self.estimate.interval


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def group_cells(
    members: Sequence[ModelSpec], verdicts: Sequence[CaseVerdict], repeats: int = 1
) -> list[SweepCell]:
    """Cells from aligned (member, verdict) lists, verdicts in plan order.

    Members come in order of first appearance, then task classes likewise.
    """
    groups: dict[tuple[str, str], list[CaseVerdict]] = {}
    specs: dict[str, ModelSpec] = {}
    for member, verdict in zip(members, verdicts, strict=True):
        specs.setdefault(member.key, member)
        groups.setdefault((member.key, verdict.task_class), []).append(verdict)
    return [
        SweepCell(specs[key], task_class, tuple(found), repeats)
        for (key, task_class), found in groups.items()
    ]


def confidence_for(n: int) -> Literal["high", "medium", "low"]:
    """Sweep confidence: n ≥ 20 high, n ≥ 5 medium, else low."""
    return "high" if n >= 20 else "medium" if n >= 5 else "low"


def claim_id(report_id: str, member: ModelSpec, task_class: str) -> str:
    """``<reportId>/<model>[@<effort>]/<taskClass>``."""
    return f"{report_id}/{member.key}/{task_class}"


def claim_statement(cell: SweepCell, outcome: Outcome, gate: GatePolicy) -> str:
    """The claim's statement: a template render, never text a model wrote.

    The point gate renders rulvar's sentence byte for byte; the interval gate
    also names the interval and the bar it cleared, dropped only when a long
    task class would push the statement past 200 characters.
    """
    estimate = cell.estimate
    cases = f"{estimate.n} {cell.task_class} case{_s(estimate.n)}"
    if cell.repeats > 1:
        cases += f" x{cell.repeats} repeats"
    if cell.epoch is not None:
        cases += f" and {cell.epoch.nights} night{_s(cell.epoch.nights)}"
    head = f"sweep passRate {to_fixed_2(estimate.pass_rate)} over {cases}"
    if gate.kind == "point":
        band = "at or above the strength band" if outcome == "strength" else "in the weakness band"
        return f"{head}: {band}"
    low, high = cell.wilson95
    if outcome == "strength":
        bar = f"lower bound >= {to_fixed_2(gate.strength_floor)}"
    else:
        bar = f"upper bound <= {to_fixed_2(gate.weakness_ceiling)}"
    full = f"{head}: {outcome} (95% interval {to_fixed_2(low)}-{to_fixed_2(high)}, {bar})"
    return full if utf16_length(full) <= STATEMENT_MAX_UTF16 else f"{head}: {outcome}"


def epoch_manifest(cell: SweepCell) -> EpochManifest | None:
    """The manifest a claim of ``cell`` cites (``None``: a one-night epoch, or no epoch).

    See :mod:`kb.store.manifests`: the claim's size stays bounded however
    many nights its epoch pooled.
    """
    if cell.epoch is None or len(cell.epoch.epoch.nights) < 2:
        return None
    epoch = cell.epoch.epoch
    return EpochManifest(
        cell=cell_key(cell.member.key, cell.task_class),
        suite=epoch.suite,
        start=epoch.start,
        nights=epoch.nights,
    )


def claim_evidence_entries(cell: SweepCell, report_id: str) -> list[Evidence]:
    """The manifest of the cell's epoch (when it pooled several nights), then tonight."""
    tonight = EvalEvidence(kind="eval", reportId=report_id, caseIds=list(cell.case_names))
    if cell.epoch is None:
        return [tonight]
    manifest = epoch_manifest(cell)
    if manifest is None:
        (night,) = cell.epoch.epoch.nights
        return [EvalEvidence(kind="eval", reportId=night.report_id, caseIds=list(night.cases))]
    ran = next((n.cases for n in manifest.nights if n.report_id == report_id), None)
    if ran is not None:  # the cases as the epoch recorded them, as a one-night epoch cites them
        tonight = EvalEvidence(kind="eval", reportId=report_id, caseIds=list(ran))
    return [EvalEvidence(kind="eval", reportId=manifest.ref, caseIds=[]), tonight]


def cell_claim(
    cell: SweepCell,
    *,
    gate: GatePolicy,
    report_id: str,
    observed_at: int,
    committer: str,
    canary_fingerprint: str | None = None,
) -> ModelClaim | None:
    """The claim a complete cell emits (``None`` for mid-band or incomplete cells)."""
    outcome = cell.outcome(gate)
    if outcome not in ("strength", "weakness"):
        return None
    observed = format_instant(observed_at)
    estimate = cell.estimate
    evidence = claim_evidence_entries(cell, report_id)
    metrics = Metrics(
        passRate=estimate.pass_rate if cell.epoch is not None else cell.pass_rate,
        n=estimate.n,
        graderId=cell.epoch.grader_id if cell.epoch is not None else GRADER_ID,
    )
    if not cell.unpriced_runs:
        # An unpriced run makes the cell's cost unknown: say nothing rather than $0.
        metrics["cost"] = cell.total_cost_usd
    return ModelClaim(
        id=claim_id(report_id, cell.member, cell.task_class),
        subject=subject_wire(cell.member.subject),
        task_class=cell.task_class,
        polarity=outcome,
        statement=claim_statement(cell, outcome, gate),
        claim_class="eval-measured",
        status="active",
        evidence=evidence,
        metrics=metrics,
        confidence=confidence_for(estimate.n),
        observed_at=observed,
        expires_at=claim_expiry("eval-measured", outcome, observed),
        model_epoch=(
            ModelEpoch(canaryFingerprint=canary_fingerprint)
            if canary_fingerprint is not None
            else None
        ),
        author=Author(kind="eval-pipeline", id=committer),
    )
