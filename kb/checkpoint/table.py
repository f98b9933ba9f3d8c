"""The checkpoint as text: the plan (``--dry-run``) and the report's terminal table."""

from __future__ import annotations

from collections import Counter

from kb.checkpoint.arms import Arm, CheckpointReport, Controls, Decision, Estimate, StartRungCell
from kb.checkpoint.rules import PROFILE, START_RUNG
from kb.checkpoint.run import CheckpointPlan
from kb.money import usd, usd_or_unbounded
from kb.paired import PairedDifference
from kb.store.canonical import to_fixed_2


def plan_text(plan: CheckpointPlan) -> str:
    """What the checkpoint would run, arm by arm, and its worst-case spend (no call made)."""
    arms = Counter(key[2] for key, _ in plan.pairs)
    lines = [f"checkpoint {plan.spec.path.name}: planned runs"]
    lines.append(
        "  criterion 1: "
        + ", ".join(f"{arms[a]} {a}" for a in ("baseline", "treatment", "strongest") if arms[a])
        + f" target runs (cells: {len(plan.layout)})"
    )
    for cell in plan.layout:
        tiers = ", ".join(f"{arm} tier {tier}" for arm, tier in cell.arms)
        lines.append(f"    {cell.ladder.name} / {cell.task_class}: {tiers}")
    for phase in plan.job.phases:
        if phase.name == "targets":
            continue
        size = len(phase.runs) + phase.later
        bound = "up to " if phase.later else ""
        lines.append(f"  {phase.name}: {bound}{size} runs")
    forecast = plan.job.forecast
    line = (
        f"worst-case authorized spend: {usd(forecast.worst_usd)} "
        f"(cap {usd_or_unbounded(plan.spec.budgets.max_total_usd)})"
    )
    if forecast.exceeds:
        line += f": EXCEEDS the cap, {forecast.refused} of {forecast.runs} runs would be refused"
    lines.append(line)
    return "\n".join(lines)


def _interval(diff: PairedDifference) -> str:
    return f"{diff.difference:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}] ({diff.method}, n {diff.n})"


def _decision(decision: Decision) -> str:
    text = f"{decision.verdict}: {decision.reason}"
    if decision.verdict == "inconclusive" and decision.cases_to_decide is not None:
        text += f"; {decision.cases_to_decide} more cases would decide"
    return text


def _percent(estimate: Estimate | None) -> str:
    if estimate is None:
        return "n/a"
    return f"{estimate.value:.0%} [{estimate.low:.0%}, {estimate.high:.0%}]"


def controls_lines(controls: Controls) -> list[str]:
    """The controls, each figure with its interval."""
    lines = [
        f"  controls (n {controls.n}; always-strongest passes "
        f"{to_fixed_2(controls.strongest_rate)}):",
        f"    quality retained vs always-strongest {_percent(controls.quality_retained)}",
        f"    cost saved vs always-strongest {_percent(controls.cost_saved_vs_strongest)}, "
        f"vs the start tier {_percent(controls.cost_saved_vs_start)}",
    ]
    if controls.versus_mix is None:
        lines.append(f"    cost-matched random mix: none ({controls.mix_unavailable})")
    else:
        lines.append(
            f"    cost-matched random mix ({controls.mix_share:.0%} strongest) passes "
            f"{to_fixed_2(controls.mix_rate or 0.0)}; treatment - mix "
            f"{_interval(controls.versus_mix)}"
        )
    return lines


def checkpoint_table(report: CheckpointReport) -> str:
    """The terminal table: cells, arms, pass rates, costs, verdicts, controls, contamination."""
    rulvar = report.options.rule == "rulvar"
    margin = report.options.margin

    def arm_text(arm: Arm) -> str:
        tail = f"  CONTAMINATED: {arm.contamination}" if arm.contamination else ""
        return f"{to_fixed_2(arm.pass_rate)} {usd(arm.cost_usd)}{tail}"

    def verdict(cell: StartRungCell) -> str:
        decision = cell.decision(margin)
        if decision is None:
            return "n/a (no recommendation)"
        if rulvar:
            failure = START_RUNG.failure(cell.treatment, cell.baseline)
            return "pass" if cell.passed else f"FAIL: {failure}"
        return _decision(decision)

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
    strongest = report.pooled_strongest
    lines.append(
        f"  pooled: baseline {arm_text(report.pooled_baseline)}, treatment "
        f"{arm_text(report.pooled_treatment)}"
        + (f", always-strongest {arm_text(strongest)}" if strongest is not None else "")
    )
    c1 = report.criterion1
    if c1.difference is not None:
        ratio = f", cost {c1.cost_ratio:.2f}x" if c1.cost_ratio is not None else ""
        lines.append(f"  pooled treatment - baseline {_interval(c1.difference)}{ratio}")
    controls = report.controls
    if controls is not None:
        lines += controls_lines(controls)
    lines.append(f"  criterion 1: {_decision(c1)}")
    rule1 = (
        "holds"
        if report.criterion1_rulvar
        else f"does not hold ({report.criterion1_rulvar_failure})"
    )
    lines.append(f"  criterion 1 by rulvar's point rule: {rule1}")
    lines.append("criterion 2: profile choice (informed = card in the orchestrator's prompt)")
    for arm in (report.informed, report.blind):
        invalid = f", {arm.invalid_choices} invalid choices" if arm.invalid_choices else ""
        routing = sum(run.cost_usd for run in arm.extra_runs)
        lines.append(f"  {arm.name:<9} {arm_text(arm)} (orchestrator {usd(routing)}){invalid}")
    c2 = report.criterion2
    if c2.difference is not None:
        ratio = f", chosen profiles cost {c2.cost_ratio:.2f}x" if c2.cost_ratio is not None else ""
        lines.append(f"  informed - blind {_interval(c2.difference)}{ratio}")
    lines.append(f"  criterion 2: {_decision(c2)}")
    rule2 = (
        "holds"
        if report.criterion2_rulvar
        else f"does not hold ({PROFILE.failure(report.informed, report.blind)})"
    )
    lines.append(f"  criterion 2 by rulvar's point rule: {rule2}")
    if report.sequential is not None:
        seq = report.sequential
        lines.append(
            f"sequential: {seq.rounds} round{'s' if seq.rounds != 1 else ''} of "
            f"{seq.design.round_size}, {seq.cases} of "
            f"{seq.cases_planned} cases, {seq.calls} of {seq.calls_planned} calls "
            f"({seq.calls_saved} saved)"
        )
    lines.append(f"spent {usd(report.spent_usd)}")
    other = (
        f"by intervals: {report.interval_verdict}"
        if rulvar
        else f"by rulvar's point rule: {'passed' if report.rulvar_passed else 'not passed'}"
    )
    lines.append(f"({other})")
    lines.append(f"checkpoint: {report.verdict.upper()}")
    return "\n".join(lines)
