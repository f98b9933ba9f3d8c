"""Steps 4–7 of a sweep: spend the money — canary, targets, judges — into cells and claims.

:func:`measure` runs the plan's phases exactly as planned (the canary probes,
the target runs, then the judges the targets' answers call for) under one
spend envelope, groups the verdicts into cells and lets the gate decide each
cell's claim. It never sees the store: runs and graders read nothing and
write nothing there, and what they produced is a :class:`Measurement`,
which the commit step turns into ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from kb.engine.budget import SpendEnvelope, usd
from kb.engine.scheduler import Engine
from kb.evals.suite import CaseVerdict, run_pairs
from kb.stats import wilson_arrays
from kb.store.models import ModelClaim
from kb.store.records import RunRecord
from kb.sweep.canary import CanaryResult, measure_canaries
from kb.sweep.cells import SweepCell, cell_claim, group_cells
from kb.sweep.evidence import EvidenceContext, canary_records, cell_records
from kb.sweep.health import answer_health
from kb.sweep.plan import SweepPlan

MeasuredCell = tuple[SweepCell, ModelClaim | None]


@dataclass(frozen=True)
class Measurement:
    """What the sweep's runs found, before anything is committed."""

    canaries: tuple[CanaryResult, ...]
    cells: tuple[MeasuredCell, ...]
    """Each cell with the claim it earned (``None``: mid-band or incomplete)."""
    runs: tuple[RunRecord, ...]
    """Every run's evidence record: canary probes, then each cell's targets and judges."""
    spent_usd: float
    reused: int = 0
    """Runs served from the journal of a stopped invocation (paid then, not now)."""

    @property
    def measured_any(self) -> bool:
        """At least one cell was measured completely (only then does a sweep commit)."""
        return any(cell.complete for cell, _ in self.cells)

    @property
    def fingerprints(self) -> dict[str, str]:
        """Each member's usable canary fingerprint (all-ok and stable)."""
        return {c.member.key: c.fingerprint for c in self.canaries if c.may_flip}


def measure(plan: SweepPlan, engine: Engine) -> Measurement:
    """Run the plan's phases and decide each cell's claim."""
    spec = plan.spec
    envelope = SpendEnvelope.from_usd(spec.budgets.max_total_usd)
    canaries: list[CanaryResult] = []
    if spec.canary is not None:
        canaries = measure_canaries(
            engine,
            plan.members,
            spec.canary.prompts,
            envelope,
            repeats=spec.canary.repeats,
            probes=plan.job.phase("canary"),
        )
    verdicts = run_pairs(
        engine, plan.pairs, plan.job.phase("targets"), envelope, judge_usd=spec.budgets.judge_usd
    )
    engine.finish()
    fingerprints = {c.member.key: c.fingerprint for c in canaries if c.may_flip}
    cells = measured_cells(plan, verdicts, fingerprints)
    context = EvidenceContext.of([*(m.spec for m in plan.pool), *plan.judge_models])
    runs = canary_records(canaries, context) + [
        record for cell, _ in cells for record in cell_records(cell, context)
    ]
    reused = sum(1 for cell, _ in cells for run in cell.runs if run.reused)
    reused += sum(1 for c in canaries for probe in c.probes for run in probe.runs if run.reused)
    return Measurement(tuple(canaries), tuple(cells), tuple(runs), usd(envelope.debited), reused)


def measured_cells(
    plan: SweepPlan, verdicts: Sequence[CaseVerdict], fingerprints: dict[str, str]
) -> list[MeasuredCell]:
    """Steps 6–7: the cells of the verdicts and the claim each emits.

    Every cell's interval comes from one vectorized call over all cells.
    """
    grouped = group_cells([pair.member for pair in plan.pairs], verdicts, plan.spec.sweep.repeats)
    lows, highs = wilson_arrays(
        np.array([cell.passed for cell in grouped], dtype=np.float64),
        np.array([cell.n for cell in grouped], dtype=np.float64),
    )
    cases = {pair.name: pair.case for pair in plan.pairs}
    cells = [
        replace(
            cell,
            interval=(float(low), float(high)),
            suspect=answer_health(cell.verdicts, cases),
        )
        for cell, low, high in zip(grouped, lows, highs, strict=True)
    ]
    return [
        (
            cell,
            cell_claim(
                cell,
                gate=plan.spec.gate,
                report_id=plan.report_id,
                observed_at=plan.observed_at,
                committer=plan.spec.sweep.committer,
                canary_fingerprint=fingerprints.get(cell.member.key),
            ),
        )
        for cell in cells
    ]
