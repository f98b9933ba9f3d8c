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
from kb.money import usd
from kb.paired import Reading, bonferroni_z
from kb.schema import DEFAULT_MARGIN
from kb.store.canonical import to_fixed_2
from kb.textwidth import table_lines


@dataclass(frozen=True)
class ParetoPoint:
    """One model on one task class: where it sits, and what (if anything) dominates it."""

    cell: CellEvidence
    dominated_by: str | None = None
    """The cheapest model shown to be as good for no more money (``None``: on the frontier)."""
    versus: PairComparison | None = None
    """That model against this one on their shared cases."""

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
                ParetoPoint(cells[x], best[1], best[2]) if best else ParetoPoint(cells[x])
            )
        points.sort(key=lambda p: (_cost(p.cell) is None, _cost(p.cell) or 0.0, p.cell.subject))
        found.append(ParetoClass(name, margin, z, tuple(points)))
    return found


def _where(point: ParetoPoint) -> str:
    if point.dominated_by is None:
        return "frontier" if _cost(point.cell) is not None else "frontier (cost unknown)"
    assert point.versus is not None
    how = "better" if point.versus.reading.reading is Reading.BETTER else "as good"
    return f"dominated: {point.dominated_by} is {how} for less"


def _row(point: ParetoPoint) -> list[str]:
    cell = point.cell
    low, high = cell.interval
    cost = _cost(cell)
    return [
        cell.subject,
        usd(cost) if cost is not None else "unknown",
        f"{to_fixed_2(cell.pass_rate)} [{to_fixed_2(low)}, {to_fixed_2(high)}]",
        str(cell.n),
        _where(point),
    ]


_HEADER = ["model", "$/case", "pass rate [95%]", "n", "frontier"]


def pareto_text(classes: list[ParetoClass]) -> str:
    """One aligned table per task class, cheapest first."""
    if not classes:
        return "no current epoch measured anything yet (kb sweep SPEC)"
    blocks = []
    for found in classes:
        rows = [_HEADER, *(_row(p) for p in found.points)]
        head = (
            f"{found.task_class}: cost per case against pass rate (dominated: another model "
            f"as good, paired within {to_fixed_2(found.margin)}, for no more money)"
        )
        blocks.append("\n".join([head, *table_lines(rows, right=frozenset({1, 3}))]))
    return "\n\n".join(blocks)


def pareto_markdown(classes: list[ParetoClass]) -> str:
    """One GFM table per task class (names inert)."""
    if not classes:
        return "No current epoch measured anything yet.\n"
    parts = []
    for found in classes:
        parts.append(f"### {table_code(found.task_class)}\n")
        parts.append("| " + " | ".join(_HEADER) + " |")
        parts.append("|---|---:|---|---:|---|")
        for point in found.points:
            row = _row(point)
            row[0] = table_code(row[0])
            row[4] = row[4].replace(
                point.dominated_by or "\0", table_code(point.dominated_by or "")
            )
            parts.append("| " + " | ".join(row) + " |")
        parts.append("")
    return "\n".join(parts) + "\n"


def pareto_json(classes: list[ParetoClass]) -> list[dict[str, Any]]:
    """Every point with its numbers; ``dominatedBy`` with the paired reading behind it."""
    items: list[dict[str, Any]] = []
    for found in classes:
        for point in found.points:
            cell = point.cell
            item: dict[str, Any] = {
                "taskClass": found.task_class,
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
                    "margin": found.margin,
                }
            items.append(item)
    return items
