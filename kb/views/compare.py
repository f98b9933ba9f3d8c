"""``kb compare``: the paired table as text, inert markdown and JSON (:mod:`kb.compare`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kb.compare import ArmCosts, ClassComparison, PairComparison
from kb.markdown import code_span, table_code
from kb.money import usd_per_case
from kb.paired import Reading, margin_text
from kb.store.canonical import to_fixed_2
from kb.textwidth import WIDTH, wrapped

DISCORDANT_SHOWN = 12
"""Discordant cases named per side in text and markdown (``--json`` lists them all)."""


def _signed(value: float) -> str:
    text = to_fixed_2(value)
    return text if text.startswith("-") else f"+{text}"


def interval_text(pair: PairComparison) -> str:
    """``-0.02 [-0.09, +0.04]``: the difference ``a − b`` and its interval."""
    d = pair.difference
    return f"{_signed(d.difference)} [{_signed(d.low)}, {_signed(d.high)}]"


def reading_text(pair: PairComparison) -> str:
    """The reading in words, with what qualifies it."""
    found, margin = pair.reading, margin_text(pair.margin)
    if found.reading is Reading.NON_INFERIOR:
        return f"non-inferior{', lower' if found.lower else ''} (within {margin})"
    if found.reading is Reading.INCONCLUSIVE:
        could = (
            f"these {pair.n} cases could detect a difference of "
            f"{to_fixed_2(found.detectable)} (80% power)"
            if found.detectable is not None
            else f"{pair.n} cases cannot detect a difference"
        )
        return f"inconclusive: {could}"
    return str(found.reading)


def _cost(costs: ArmCosts) -> str:
    return (
        f"{usd_per_case(costs.cost_per_case)}/case"
        if costs.cost_per_case is not None
        else "cost unknown"
    )


def _latency(costs: ArmCosts) -> str:
    if costs.p50_ms is None or costs.p90_ms is None:
        return "latency unknown"
    return f"p50 {costs.p50_ms:.0f} / p90 {costs.p90_ms:.0f} ms"


def _ratio(pair: PairComparison) -> str:
    ratio = pair.cost_ratio
    return f" ({ratio:.2f}x)" if ratio is not None else ""


def _discordant_sides(
    pair: PairComparison, name: Callable[[str], str] = str, limit: int = DISCORDANT_SHOWN
) -> tuple[str, str]:
    def listed(cases: Sequence[str]) -> str:
        shown = ", ".join(name(c) for c in cases[:limit])
        return shown + (f" and {len(cases) - limit} more" if len(cases) > limit else "")

    higher_a = [c.case for c in pair.discordant if c.a > c.b]
    higher_b = [c.case for c in pair.discordant if c.b > c.a]
    return listed(higher_a), listed(higher_b)


def compare_text(found: Sequence[ClassComparison], width: int = WIDTH) -> str:
    """One block per task class: each pair's difference, reading, cost, latency, discordance."""
    if not found:
        return (
            "nothing to compare: no task class has two models measured in their current "
            'epochs (kb sweep with gate = "interval" measures them)'
        )
    lines: list[str] = []
    for group in found:
        count = len(group.pairs)
        lines.append(
            f"{group.task_class}: {count} pair{'s' if count != 1 else ''}, margin "
            f"{margin_text(group.margin)}, {family_text(group)}"
        )
        for pair in group.pairs:
            lines.append(f"  {pair.a} vs {pair.b}  n={pair.n} shared cases")
            lines += wrapped(
                f"difference {interval_text(pair)}  {reading_text(pair)}",
                indent="    ",
                width=width,
            )
            lines += wrapped(
                f"pass rate {to_fixed_2(pair.rate_a)} vs {to_fixed_2(pair.rate_b)}; "
                f"{_cost(pair.costs_a)} vs {_cost(pair.costs_b)}{_ratio(pair)}; "
                f"{_latency(pair.costs_a)} vs {_latency(pair.costs_b)}",
                indent="    ",
                width=width,
            )
            higher_a, higher_b = _discordant_sides(pair)
            if not pair.discordant:
                lines.append("    discordant: none (every shared case scored the same)")
            else:
                lines += wrapped(
                    f"discordant ({len(pair.discordant)}): {pair.a} higher on "
                    f"{higher_a or 'none'}; {pair.b} higher on {higher_b or 'none'}",
                    indent="    ",
                    more="      ",
                    width=width,
                )
        for x, y in group.unshared:
            lines.append(f"  {x} vs {y}: no case measured by both in their current epochs")
        lines.append("")
    lines += wrapped(
        "difference: first model minus second, on the cases both measured in their current "
        "epochs (the cheaper model first when both costs are known). better: the interval is "
        "above 0; non-inferior: its lower end is within the margin (lower: all of it below 0); "
        "worse: all of it below 0; inconclusive: none of these, and more cases would tell. "
        "p50/p90: latency from kb's send to the answer, including kb's own queueing and "
        "pacing (not the provider's time alone).",
        width=width,
    )
    return "\n".join(lines)


def compare_markdown(found: Sequence[ClassComparison]) -> str:
    """The table for a pull request or a wiki; every name is inert (:mod:`kb.markdown`)."""
    if not found:
        return "Nothing to compare: no task class has two models measured.\n"
    out: list[str] = []
    for group in found:
        out += [
            f"### {code_span(group.task_class)} (margin {margin_text(group.margin)})",
            "",
            "| a | b | n | a − b [95% interval] | reading | $/case a | $/case b "
            "| p90 a (incl. kb's queueing) | p90 b (incl. kb's queueing) "
            "| a higher on | b higher on |",
            "|---|---|---:|---|---|---:|---:|---:|---:|---|---|",
        ]
        for pair in group.pairs:
            higher_a, higher_b = _discordant_sides(pair, table_code)
            out.append(
                f"| {table_code(pair.a)} | {table_code(pair.b)} | {pair.n} "
                f"| {interval_text(pair)} | {reading_text(pair)} "
                f"| {_money_cell(pair.costs_a)} | {_money_cell(pair.costs_b)} "
                f"| {_ms_cell(pair.costs_a)} | {_ms_cell(pair.costs_b)} "
                f"| {higher_a or '—'} | {higher_b or '—'} |"
            )
        out.append("")
    every = bool(found) and found[0].family_all
    out.append(
        "a − b on the cases both measured in their current epochs; intervals Bonferroni-"
        + (
            f"adjusted over all {found[0].family} pairs shown: the whole table holds 95 % of the "
            "time."
            if every
            else "adjusted over the pairs of each task class: each class's lines hold 95 % of "
            "the time, not the whole table (--family all)."
        )
    )
    return "\n".join(out) + "\n"


def _money_cell(costs: ArmCosts) -> str:
    return usd_per_case(costs.cost_per_case) if costs.cost_per_case is not None else "—"


def _ms_cell(costs: ArmCosts) -> str:
    return f"{costs.p90_ms:.0f} ms" if costs.p90_ms is not None else "—"


def _costs_json(costs: ArmCosts) -> dict[str, Any]:
    return {
        "costPerCaseUsd": costs.cost_per_case,
        "p50Ms": costs.p50_ms,
        "p90Ms": costs.p90_ms,
        "okRuns": costs.ok_runs,
    }


def family_text(group: ClassComparison) -> str:
    """What the class's 95 % holds for: its own pairs, or every pair shown (``--family all``)."""
    size = group.family or len(group.pairs)
    z = f"z {group.z:.2f}"
    if group.family_all:
        return f"95% intervals holding together over all {size} pairs shown (Bonferroni, {z})"
    if size > 1:
        return f"95% intervals per class (Bonferroni over {size} pairs, {z})"
    return "95% interval"


def compare_json(found: Sequence[ClassComparison]) -> list[dict[str, Any]]:
    """The ``--json`` form: every pair with every number, every discordant case."""
    return [
        {
            "taskClass": group.task_class,
            "margin": group.margin,
            "z": group.z,
            "family": {"scope": "all" if group.family_all else "class", "pairs": group.family},
            "pairs": [
                {
                    "a": pair.a,
                    "b": pair.b,
                    "n": pair.n,
                    "difference": pair.difference.difference,
                    "interval": [pair.difference.low, pair.difference.high],
                    "method": pair.difference.method,
                    "reading": str(pair.reading.reading),
                    "lower": pair.reading.lower,
                    "detectable": pair.reading.detectable,
                    "passRate": {"a": pair.rate_a, "b": pair.rate_b},
                    "costs": {"a": _costs_json(pair.costs_a), "b": _costs_json(pair.costs_b)},
                    "costRatio": pair.cost_ratio,
                    "discordant": [{"case": c.case, "a": c.a, "b": c.b} for c in pair.discordant],
                }
                for pair in group.pairs
            ],
            "unshared": [list(p) for p in group.unshared],
        }
        for group in found
    ]
