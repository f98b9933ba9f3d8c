"""The checkpoint as a terminal table: cells, arms, pass rates, costs, verdicts."""

from __future__ import annotations

from kb.checkpoint.arms import Arm, CheckpointReport, StartRungCell
from kb.checkpoint.rules import PROFILE, START_RUNG
from kb.money import usd
from kb.store.canonical import to_fixed_2


def checkpoint_table(report: CheckpointReport) -> str:
    """The terminal table: cells, arms, pass rates, costs, verdicts, contamination."""

    def arm_text(arm: Arm) -> str:
        tail = f"  CONTAMINATED: {arm.contamination}" if arm.contamination else ""
        return f"{to_fixed_2(arm.pass_rate)} {usd(arm.cost_usd)}{tail}"

    def verdict(cell: StartRungCell) -> str:
        if cell.passed is None:
            return "n/a (no recommendation)"
        return (
            "pass" if cell.passed else f"FAIL: {START_RUNG.failure(cell.treatment, cell.baseline)}"
        )

    lines = [
        "criterion 1: start rung (baseline = default tier, treatment = recommended tier)",
        f"  {'ladder':<14} {'task class':<22} {'tiers':<7} {'baseline':<18} "
        f"{'treatment':<18} verdict",
    ]
    for c in report.cells:
        tiers = (
            f"{c.default_tier}->{c.recommended_tier}"
            if c.recommended_tier is not None
            else f"{c.default_tier}"
        )
        lines.append(
            f"  {c.ladder:<14} {c.task_class:<22} {tiers:<7} "
            f"{arm_text(c.baseline):<18} {arm_text(c.treatment):<18} {verdict(c)}"
        )
    lines.append(
        f"  pooled: baseline {arm_text(report.pooled_baseline)}, treatment "
        f"{arm_text(report.pooled_treatment)}"
    )
    if report.criterion1:
        lines.append("  criterion 1: holds")
    else:
        lines.append(f"  criterion 1: does not hold ({report.criterion1_failure})")
    lines.append("criterion 2: profile choice (informed = card in the orchestrator's prompt)")
    for arm in (report.informed, report.blind):
        invalid = f", {arm.invalid_choices} invalid choices" if arm.invalid_choices else ""
        lines.append(f"  {arm.name:<9} {arm_text(arm)}{invalid}")
    if report.criterion2:
        lines.append("  criterion 2: holds")
    else:
        lines.append(
            f"  criterion 2: does not hold ({PROFILE.failure(report.informed, report.blind)})"
        )
    lines.append(f"spent {usd(report.spent_usd)}")
    lines.append(f"checkpoint: {'PASSED' if report.passed else 'NOT PASSED'}")
    return "\n".join(lines)
