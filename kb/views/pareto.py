"""``kb matrix --pareto``: per task class, cost per case against pass rate, and the frontier.

A routing decision trades money for quality; the frontier is the set of models
worth routing to for some budget. A point estimate makes a frontier out of
noise (0.91 at $0.004 "beats" 0.90 at $0.003 on thirty cases), so here a
model leaves the frontier only when another one is shown to be as good for no
more money, on the cases both measured:

* ``Y`` **dominates** ``X`` when ``Y``'s cost per case is known and at most
  ``X``'s, and the paired comparison of ``Y`` against ``X`` (their shared
  cases, Bonferroni over the class's pairs, :func:`kb.compare.compare_pair`)
  reads ``better`` — or reads ``non-inferior`` within the margin and ``Y`` is
  strictly cheaper;
* a model whose cost is unknown (no evidence files, an unpriced run) is
  neither dominated nor dominating: it is shown, marked, and left on the
  frontier, because "unknown" is not "cheap";
* when several models dominate ``X``, the cheapest is named.

The pass rate, its interval and the cost are the cell's own
(:class:`kb.evidence_index.CellEvidence`): this view computes no interval.
It is the worked example of a new decision view (``docs/maintainers/views.md``):
one module here and one option on one command.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from kb.compare import PairComparison, compare_pair
from kb.evidence_index import CellEvidence, EvidenceIndex
from kb.markdown import table_code
from kb.money import usd_per_case
from kb.paired import Reading, bonferroni_z, margin_text
from kb.schema import DEFAULT_MARGIN
from kb.store.canonical import to_fixed_2
from kb.textwidth import table_lines, wrapped
from kb.views.compare import interval_text


@dataclass(frozen=True)
class ParetoPoint:
    """One model on one task class: where it sits, and what (if anything) dominates it."""

    cell: CellEvidence
    dominated_by: str | None = None
    """The cheapest model shown to be as good for no more money (``None``: on the frontier)."""
    versus: PairComparison | None = None
    """That model against this one on their shared cases."""
    dominator_cost: float | None = None
    """That model's cost per case."""

    @property
    def on_frontier(self) -> bool:
        """No model was shown to be as good for no more money."""
        return self.dominated_by is None


@dataclass(frozen=True)
class ParetoClass:
    """One task class's models, cheapest first (unknown costs last)."""

    task_class: str
    margin: float
    z: float
    points: tuple[ParetoPoint, ...]


def _cost(cell: CellEvidence) -> float | None:
    return cell.cost.cost_per_case


def _dominates(pair: PairComparison | None, cost_y: float, cost_x: float) -> bool:
    """``pair`` is ``Y`` against ``X``: as good for no more money."""
    if pair is None:
        return False
    reading = pair.reading.reading
    return reading is Reading.BETTER or (reading is Reading.NON_INFERIOR and cost_y < cost_x)


def pareto_classes(
    index: EvidenceIndex, *, task_class: str | None = None, margin: float = DEFAULT_MARGIN
) -> list[ParetoClass]:
    """Each task class's cost against pass rate, and its frontier (see the module)."""
    found = []
    for name, cells in sorted(index.cells.items()):
        if task_class is not None and name != task_class:
            continue
        subjects = sorted(cells)
        z = bonferroni_z(max(len(list(itertools.combinations(subjects, 2))), 1))
        points = []
        for x in subjects:
            cost_x = _cost(cells[x])
            best: tuple[float, str, PairComparison] | None = None
            for y in subjects:
                cost_y = _cost(cells[y])
                if y == x or cost_x is None or cost_y is None or cost_y > cost_x:
                    continue
                pair = compare_pair(cells[y], cells[x], z=z, margin=margin)
                if pair is not None and _dominates(pair, cost_y, cost_x):
                    if best is None or (cost_y, y) < best[:2]:
                        best = (cost_y, y, pair)
            points.append(
                ParetoPoint(cells[x], best[1], best[2], best[0]) if best else ParetoPoint(cells[x])
            )
        points.sort(key=lambda p: (_cost(p.cell) is None, _cost(p.cell) or 0.0, p.cell.subject))
        found.append(ParetoClass(name, margin, z, tuple(points)))
    return found


def _how(point: ParetoPoint) -> str:
    """Why ``point`` is off the frontier, in words (it has a ``versus``)."""
    assert point.versus is not None and point.dominated_by is not None
    cost_y, cost_x = point.dominator_cost, _cost(point.cell)
    reading = point.versus.reading.reading
    if reading is Reading.BETTER:
        price = "at the same price" if cost_y == cost_x else "for less"
        how = f"better {price}"
    else:
        how = "as good for less"
    return f"{point.dominated_by} is {how}"


def _row(point: ParetoPoint) -> list[str]:
    cell = point.cell
    low, high = cell.interval
    cost = _cost(cell)
    return [
        cell.subject,
        usd_per_case(cost) if cost is not None else "unknown",
        f"{to_fixed_2(cell.pass_rate)} [{to_fixed_2(low)}, {to_fixed_2(high)}]",
        str(cell.n),
        "yes" if point.on_frontier else "no",
    ]


_HEADER = ["model", "$/case", "pass rate [95%]", "n", "frontier"]


def _rule(found: ParetoClass) -> str:
    pairs = _pair_count(found)
    return (
        f"off the frontier: another model is non-inferior within "
        f"{margin_text(found.margin)} and strictly cheaper, or better at no higher price; "
        f"paired on shared cases, z {found.z:.2f} (Bonferroni over {pairs} "
        f"pair{'s' if pairs != 1 else ''})"
    )


def _pair_count(found: ParetoClass) -> int:
    count = len(found.points)
    return max(count * (count - 1) // 2, 1)


def _reason(point: ParetoPoint) -> str:
    """``mid — cheap is as good for less (non-inferior, −0.01 [−0.03, +0.02] on 300 cases)``."""
    assert point.versus is not None
    versus = point.versus
    return (
        f"{point.cell.subject} — {_how(point)} ({versus.reading.reading.value}, "
        f"{interval_text(versus)} on {versus.n} cases)"
    )


def _all_unknown(found: ParetoClass) -> bool:
    return all(_cost(p.cell) is None for p in found.points)


_NO_COST = (
    "no cost is known for any model here (no evidence files, or unpriced runs), "
    "so no frontier can be drawn: every model stays on it"
)


def pareto_text(classes: list[ParetoClass]) -> str:
    """Per task class: a heading, the rule, an aligned table cheapest first, then the reasons."""
    if not classes:
        return "no current epoch measured anything yet (kb sweep SPEC)"
    blocks = []
    for found in classes:
        lines = [f"{found.task_class}: cost per case against pass rate, cheapest first"]
        lines += wrapped(_NO_COST if _all_unknown(found) else _rule(found), "  ")
        lines += table_lines([_HEADER, *(_row(p) for p in found.points)], right=frozenset({1, 3}))
        for point in found.points:
            if point.versus is not None:
                lines += wrapped(_reason(point), "  ", "      ")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def pareto_markdown(classes: list[ParetoClass]) -> str:
    """One GFM table per task class (names inert), its rule above and its reasons below."""
    if not classes:
        return "No current epoch measured anything yet.\n"
    parts = []
    for found in classes:
        parts.append(f"### {table_code(found.task_class)}\n")
        rule = _NO_COST if _all_unknown(found) else _rule(found)
        parts.append(rule[0].upper() + rule[1:] + ".\n")
        parts.append("| " + " | ".join(_HEADER) + " |")
        parts.append("|---|---:|---|---:|---|")
        for point in found.points:
            row = _row(point)
            row[0] = table_code(row[0])
            parts.append("| " + " | ".join(row) + " |")
        reasons = [p for p in found.points if p.versus is not None]
        if reasons:
            parts.append("")
        for point in reasons:
            assert point.versus is not None and point.dominated_by is not None
            how = _how(point).replace(point.dominated_by, table_code(point.dominated_by), 1)
            parts.append(
                f"- {table_code(point.cell.subject)}: {how} "
                f"({point.versus.reading.reading.value}, {interval_text(point.versus)} "
                f"on {point.versus.n} cases)"
            )
        parts.append("")
    return "\n".join(parts) + "\n"


def _point_json(point: ParetoPoint) -> dict[str, Any]:
    cell = point.cell
    item: dict[str, Any] = {
        "model": cell.subject,
        "costPerCase": _cost(cell),
        "passRate": cell.pass_rate,
        "wilson95": list(cell.interval),
        "n": cell.n,
        "onFrontier": point.on_frontier,
        "dominatedBy": point.dominated_by,
    }
    if point.versus is not None:
        item["versus"] = {
            "reading": point.versus.reading.reading.value,
            "difference": point.versus.difference.difference,
            "interval": [point.versus.difference.low, point.versus.difference.high],
            "sharedCases": point.versus.n,
        }
    return item


def pareto_json(classes: list[ParetoClass], margin: float) -> dict[str, Any]:
    """The rule's numbers once, then per class its z and every point with the reading behind it."""
    return {
        "margin": margin,
        "classes": [
            {
                "taskClass": found.task_class,
                "z": found.z,
                "pairs": _pair_count(found),
                "costKnown": not _all_unknown(found),
                "points": [_point_json(p) for p in found.points],
            }
            for found in classes
        ],
    }
