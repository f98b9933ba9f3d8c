"""The checkpoint as text: the plan (``--dry-run``) and the report's terminal table."""

from __future__ import annotations

from collections import Counter

from kb.checkpoint.arms import Arm, CheckpointReport, Controls, Decision, Estimate, StartRungCell
from kb.checkpoint.rules import PROFILE, START_RUNG, interval_text, signed_2
from kb.checkpoint.run import CheckpointPlan
from kb.money import usd, usd_or_unbounded
from kb.paired import PairedDifference
from kb.store.canonical import to_fixed_2
from kb.textwidth import WIDTH, fit, fits, table_lines


def plan_text(plan: CheckpointPlan) -> str:
    """What the checkpoint would run, arm by arm, and its worst-case spend (no call made)."""
    arms = Counter(key[2] for key, _ in plan.pairs)
    lines = [f"checkpoint {plan.spec.path.name}: planned runs"]
    runs = ", ".join(f"{arms[a]} {a}" for a in ("baseline", "treatment", "strongest") if arms[a])
    # The spec refuses cases no ladder serves, so a plan without a cell is not expected.
    lines.append(
        f"  criterion 1: {runs} target runs (cells: {len(plan.layout)})"
        if runs
        else "  criterion 1: no target run (no cell: no case of a task class a ladder serves)"
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
    return _text(lines)


def _glue(text: str) -> str:
    """``text`` kept on one line when its line wraps (:func:`kb.textwidth.wrapped`)."""
    return text.replace(" ", "\xa0")


def _text(lines: list[str]) -> str:
    """The lines within 80 columns, each wrapped under its own indent."""
    return fit("\n".join(lines)).replace("\xa0", " ")


def _interval(diff: PairedDifference) -> str:
    return (
        f"{signed_2(diff.difference)} {_glue(interval_text(diff))} "
        f"({_glue(f'{diff.method}, n {diff.n}')})"
    )


def _decision(decision: Decision, *, sequential: bool = False) -> str:
    """A verdict and why; ``sequential``: decided by the confidence sequence, so labelled."""
    text = f"{decision.verdict}: {decision.reason}"
    if decision.difference is not None:
        shown = interval_text(decision.difference)
        text = text.replace(shown, _glue(shown))
    if sequential and decision.difference is not None:
        text += " " + _glue(f"(confidence sequence, n {decision.difference.n})")
    if decision.verdict == "inconclusive" and decision.cases_to_decide is not None:
        if sequential:  # the estimate is a fixed-n one: a confidence sequence needs more
            text += (
                f"; a fixed-n run would need about {decision.cases_to_decide} more cases "
                "(without --sequential) if the arms are equal"
            )
        else:
            text += (
                f"; about {decision.cases_to_decide} more cases would decide if the arms are "
                "equal (80 % power)"
            )
    return text


def _percent(estimate: Estimate | None) -> str:
    if estimate is None:
        return "n/a"
    return _glue(f"{estimate.value:.0%} [{estimate.low:.0%}, {estimate.high:.0%}]")


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


def _arm_cell(arm: Arm) -> str:
    return f"{to_fixed_2(arm.pass_rate)} {usd(arm.cost_usd)}" + (" !" if arm.contamination else "")


def cell_lines(report: CheckpointReport) -> list[str]:
    """Criterion 1's cells: flat when every row fits 80 columns, else grouped by ladder.

    The grouped layout (as ``kb matrix`` falls back to) puts each ladder on a
    line of its own, its task classes under it, and each cell's verdict (and
    any contaminated arm, marked ``!`` in its column) on the lines below its row.
    """
    rulvar = report.options.rule == "rulvar"
    sequential = report.sequential is not None

    def verdict(cell: StartRungCell) -> str:
        decision = cell.decision(report.options.margin)
        if decision is None:
            return "n/a (no recommendation)"
        if rulvar:
            failure = START_RUNG.failure(cell.treatment, cell.baseline)
            return "pass" if cell.passed else f"FAIL: {failure}"
        if sequential and decision.difference is not None:
            # A fixed-n interval read after rounds of peeking is not valid: the pooled
            # confidence sequence decided; the cell shows its point difference only.
            diff = decision.difference
            return (
                f"treatment - baseline {signed_2(diff.difference)} (n {diff.n}); "
                "the pooled confidence sequence decides"
            )
        return _decision(decision)

    def tiers(cell: StartRungCell) -> str:
        if cell.recommended_tier is None:
            return f"{cell.default_tier}"
        return f"{cell.default_tier}->{cell.recommended_tier}"

    def details(cell: StartRungCell) -> list[str]:
        return [
            f"{arm.name} CONTAMINATED: {arm.contamination}"
            for arm in (cell.baseline, cell.treatment)
            if arm.contamination
        ]

    cells = report.cells
    header = ["ladder", "task class", "tiers", "baseline", "treatment", "verdict"]
    flat = table_lines(
        [header]
        + [
            [c.ladder, c.task_class, tiers(c), _arm_cell(c.baseline), _arm_cell(c.treatment)]
            + [verdict(c)]
            for c in cells
        ]
    )
    lines = ["  " + line for line in flat[:1]]
    for cell, line in zip(cells, flat[1:], strict=True):
        lines += ["  " + line] + [f"    {detail}" for detail in details(cell)]
    if fits(lines, WIDTH):
        return lines
    grouped = table_lines(
        [["ladder / task class", "tiers", "baseline", "treatment"]]
        + [
            ["  " + c.task_class, tiers(c), _arm_cell(c.baseline), _arm_cell(c.treatment)]
            for c in cells
        ]
    )
    lines, ladder = ["  " + grouped[0]], None
    for cell, row in zip(cells, grouped[1:], strict=True):
        if cell.ladder != ladder:
            lines.append(f"  {cell.ladder}")
            ladder = cell.ladder
        lines += ["  " + row] + [f"      {text}" for text in [*details(cell), verdict(cell)]]
    return lines


def checkpoint_table(report: CheckpointReport) -> str:
    """The terminal table: cells, arms, pass rates, costs, verdicts, controls, contamination.

    Within 80 columns like every kb table (:mod:`kb.textwidth`): the cells
    regroup by ladder when a flat row would not fit, prose lines wrap.
    """
    rulvar = report.options.rule == "rulvar"
    sequential = report.sequential is not None

    def arm_text(arm: Arm) -> str:
        tail = f"  CONTAMINATED: {arm.contamination}" if arm.contamination else ""
        return _glue(f"{to_fixed_2(arm.pass_rate)} {usd(arm.cost_usd)}") + tail

    lines = [
        "criterion 1: start rung (baseline = default tier, treatment = recommended tier)",
        *cell_lines(report),
    ]
    strongest = report.pooled_strongest
    if any(cell.recommended_tier is not None for cell in report.cells):
        lines.append(
            f"  pooled: baseline {arm_text(report.pooled_baseline)}, treatment "
            f"{arm_text(report.pooled_treatment)}"
            + (f", always-strongest {arm_text(strongest)}" if strongest is not None else "")
        )
    else:  # the pooled arms are the recommended cells': empty, not 0.00 at $0
        lines.append("  pooled: no cell has a recommendation, so no arm to pool")
    c1 = report.criterion1
    if c1.difference is not None:
        ratio = f", cost\xa0{c1.cost_ratio:.2f}x" if c1.cost_ratio is not None else ""
        lines.append(f"  pooled treatment - baseline {_interval(c1.difference)}{ratio}")
    controls = report.controls
    if controls is not None:
        lines += controls_lines(controls)
    lines += [f"  health: {note}" for note in report.asked_again]
    lines.append(f"  criterion 1: {_decision(c1, sequential=sequential)}")
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
        ratio = (
            f", chosen profiles cost\xa0{c2.cost_ratio:.2f}x" if c2.cost_ratio is not None else ""
        )
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
    return _text(lines)
