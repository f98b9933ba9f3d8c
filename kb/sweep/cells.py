"""Cells — one (pool member, task class) of a sweep — and the claims they emit.

A cell emits a claim only when it is **complete**: every planned case was
measured (``n == plannedN``, ``n > 0``), no run exhausted its ceiling, no
target run failed, no judge verdict is missing and the envelope refused
nothing. An incomplete cell says why and touches no prior claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Literal

from kb.engine.requests import ModelSpec
from kb.engine.runs import RunResult
from kb.evals.suite import CaseVerdict
from kb.stats import wilson_interval
from kb.store.models import ModelClaim
from kb.store.ttl import claim_expiry, format_instant

Outcome = Literal["strength", "weakness", "none", "incomplete"]
GRADER_ID = "eval-suite"


@dataclass(frozen=True)
class SweepCell:
    """The verdicts of one member on one task class's cases."""

    member: ModelSpec
    task_class: str
    verdicts: tuple[CaseVerdict, ...]

    @property
    def runs(self) -> list[RunResult]:
        """Target and judge runs of the cell."""
        return [run for v in self.verdicts for run in (v.target, *v.judges)]

    @property
    def planned_n(self) -> int:
        """Cases planned for the cell."""
        return len(self.verdicts)

    @property
    def n(self) -> int:
        """Cases measured: target ok and every judge answered."""
        return sum(1 for v in self.verdicts if v.target.status == "ok" and not v.judge_incomplete)

    @property
    def passed(self) -> int:
        """Cases that passed."""
        return sum(1 for v in self.verdicts if v.passed)

    @property
    def pass_rate(self) -> float:
        """Passed over measured cases (0 when none were measured)."""
        return self.passed / self.n if self.n else 0.0

    @property
    def total_cost_usd(self) -> float:
        """Everything the cell's runs cost, judges included."""
        return sum(run.cost_usd for run in self.runs)

    @property
    def case_names(self) -> list[str]:
        """The cell's case names in plan order."""
        return [v.name for v in self.verdicts]

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
        """Cases whose judge verdict is missing."""
        return sum(1 for v in self.verdicts if v.judge_incomplete)

    @property
    def refused_run_label(self) -> str | None:
        """The first run the envelope refused, if any."""
        return next((run.label for run in self.runs if run.status == "refused"), None)

    @property
    def incomplete_reason(self) -> str | None:
        """Why the cell cannot emit a claim (``None`` when it is complete)."""
        reasons = []
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
        if not reasons and self.planned_n == 0:
            reasons.append("no cases")
        if not reasons and self.n != self.planned_n:  # pragma: no cover - covered by the above
            reasons.append(f"measured {self.n} of {self.planned_n} cases")
        return "; ".join(reasons) or None

    @property
    def complete(self) -> bool:
        """Whether the cell may emit a claim."""
        return self.incomplete_reason is None and self.n > 0

    def outcome(self, strength: float, weakness: float) -> Outcome:
        """The band the cell falls in, or ``incomplete``."""
        if not self.complete:
            return "incomplete"
        if self.pass_rate >= strength:
            return "strength"
        if self.pass_rate <= weakness:
            return "weakness"
        return "none"

    @property
    def wilson95(self) -> tuple[float, float]:
        """Wilson 95 % interval of the pass rate over the measured cases."""
        return wilson_interval(self.passed, self.n)


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def group_cells(members: Sequence[ModelSpec], verdicts: Sequence[CaseVerdict]) -> list[SweepCell]:
    """Cells from aligned (member, verdict) lists, verdicts in plan order.

    Members come in order of first appearance, then task classes likewise.
    """
    groups: dict[tuple[str, str], list[CaseVerdict]] = {}
    specs: dict[str, ModelSpec] = {}
    for member, verdict in zip(members, verdicts, strict=True):
        specs.setdefault(member.key, member)
        groups.setdefault((member.key, verdict.task_class), []).append(verdict)
    return [
        SweepCell(specs[key], task_class, tuple(found))
        for (key, task_class), found in groups.items()
    ]


def to_fixed_2(value: float) -> str:
    """JavaScript ``value.toFixed(2)``: exact binary value, ties away from zero."""
    return str(Decimal(value).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def confidence_for(n: int) -> Literal["high", "medium", "low"]:
    """Sweep confidence: n ≥ 20 high, n ≥ 5 medium, else low."""
    return "high" if n >= 20 else "medium" if n >= 5 else "low"


def claim_id(report_id: str, member: ModelSpec, task_class: str) -> str:
    """``<reportId>/<model>[@<effort>]/<taskClass>``."""
    return f"{report_id}/{member.key}/{task_class}"


def cell_claim(
    cell: SweepCell,
    *,
    strength: float,
    weakness: float,
    report_id: str,
    observed_at: int,
    committer: str,
    canary_fingerprint: str | None = None,
) -> ModelClaim | None:
    """The claim a complete cell emits (``None`` for mid-band or incomplete cells).

    The statement is a template render: nothing a model wrote reaches it.
    """
    outcome = cell.outcome(strength, weakness)
    if outcome not in ("strength", "weakness"):
        return None
    band = "at or above the strength band" if outcome == "strength" else "in the weakness band"
    observed = format_instant(observed_at)
    data = {
        "id": claim_id(report_id, cell.member, cell.task_class),
        "subject": cell.member.subject.to_wire(),
        "taskClass": cell.task_class,
        "polarity": outcome,
        "statement": f"sweep passRate {to_fixed_2(cell.pass_rate)} over {cell.n} "
        f"{cell.task_class} case{_s(cell.n)}: {band}",
        "class": "eval-measured",
        "status": "active",
        "evidence": [{"kind": "eval", "reportId": report_id, "caseIds": cell.case_names}],
        "metrics": {
            "passRate": cell.pass_rate,
            "n": cell.n,
            "graderId": GRADER_ID,
            "cost": cell.total_cost_usd,
        },
        "confidence": confidence_for(cell.n),
        "observedAt": observed,
        "expiresAt": claim_expiry("eval-measured", outcome, observed),
        "author": {"kind": "eval-pipeline", "id": committer},
    }
    if canary_fingerprint is not None:
        data["modelEpoch"] = {"canaryFingerprint": canary_fingerprint}
    return ModelClaim.model_validate(data, strict=True)
