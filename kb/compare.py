"""Two models, the cases both measured: which is better, by how much, at what cost (SPEC 13.3).

A claim says how one model does on a task class; a routing decision asks how
two compare ("is the cheaper model as good as the dear one on extraction?").
Answering that from two absolute claims throws away what makes the question
cheap: both models ran the *same* cases, so the cases' difficulty cancels
and only the cases where they disagree carry information. This module pairs
them.

**The unit.** Within a cell (model × task class), a model's score on a case
is the mean over its repeats and its nights in the **current epoch** — what
the epochs file holds (:mod:`kb.store.epochs`). Two models are compared on the
cases both measured in their current epochs, and only those (an older epoch
measured a model that may since have changed).

**The pair.** ``a`` is the cheaper model per case when both costs are known
and differ (so the reading answers the routing question: is the cheaper one
as good?), else the first by name; the difference is ``a − b``. Its interval
is Newcombe's paired score interval for 0/1 scores and a paired bootstrap
over cases for fractional ones (:mod:`kb.paired`), Bonferroni-adjusted over
the pairs shown for the task class, seeded from the two suite fingerprints
so the same evidence prints the same bytes.

**Cost and latency** are the index's (:mod:`kb.evidence_index`): read once
per command, on the cell's type; no comparison rescans a night's runs.
"""

from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from kb.errors import ConfigError
from kb.evidence_index import ArmCosts, CellEvidence, EvidenceIndex, RunsOf
from kb.paired import (
    DifferenceReading,
    PairedDifference,
    PairedScores,
    Reading,
    bonferroni_z,
    paired_difference,
    read_difference,
    seed_from,
)
from kb.schema import DEFAULT_MARGIN

__all__ = [
    "ArmCosts",
    "CellCost",
    "ClassComparison",
    "PairComparison",
    "RunsOf",
    "check_compare_filters",
    "class_costs",
    "compare_models",
    "compare_pair",
]


@dataclass(frozen=True)
class DiscordantCase:
    """A shared case the two models scored differently."""

    case: str
    a: float
    b: float


@dataclass(frozen=True)
class PairComparison:
    """Model ``a`` against model ``b`` on one task class's shared cases."""

    task_class: str
    a: str
    b: str
    difference: PairedDifference
    reading: DifferenceReading
    rate_a: float
    rate_b: float
    """Each model's mean score over the shared cases."""
    costs_a: ArmCosts
    costs_b: ArmCosts
    discordant: tuple[DiscordantCase, ...]
    margin: float = DEFAULT_MARGIN
    """How much worse still reads non-inferior."""

    @property
    def n(self) -> int:
        """Shared cases."""
        return self.difference.n

    @property
    def cost_ratio(self) -> float | None:
        """``a``'s cost per case over ``b``'s (``None``: either unknown, or ``b`` free)."""
        a, b = self.costs_a.cost_per_case, self.costs_b.cost_per_case
        return a / b if a is not None and b else None


@dataclass(frozen=True)
class ClassComparison:
    """Every pair shown for one task class, under one Bonferroni correction."""

    task_class: str
    margin: float
    z: float
    pairs: tuple[PairComparison, ...]
    unshared: tuple[tuple[str, str], ...] = ()
    """Pairs asked for that have no case in common (nothing to compare)."""
    family: int = 0
    """How many pairs the correction covers: this class's (``--family class``, the default)
    or every class's shown (``--family all``); 0: this class's."""
    family_all: bool = False


def compare_pair(
    a: CellEvidence, b: CellEvidence, *, z: float, margin: float
) -> PairComparison | None:
    """``a`` against ``b`` on their shared cases (``None``: no case in common).

    Cases are taken in name order and the bootstrap is seeded from the sorted
    suite fingerprints, so swapping ``a`` and ``b`` negates the interval exactly.
    """
    shared = sorted(set(a.scores) & set(b.scores))
    if not shared:
        return None
    scores = PairedScores.of([a.scores[c] for c in shared], [b.scores[c] for c in shared])
    seed = seed_from(*sorted((a.epoch.suite, b.epoch.suite)))
    difference = paired_difference(scores, z=z, seed=seed)
    return PairComparison(
        task_class=a.task_class,
        a=a.subject,
        b=b.subject,
        difference=difference,
        reading=read_difference(difference, margin),
        rate_a=math.fsum(a.scores[c] for c in shared) / len(shared),
        rate_b=math.fsum(b.scores[c] for c in shared) / len(shared),
        costs_a=a.costs(shared),
        costs_b=b.costs(shared),
        discordant=tuple(
            DiscordantCase(c, a.scores[c], b.scores[c])
            for c in shared
            if a.scores[c] != b.scores[c]
        ),
        margin=margin,
    )


def _cheaper_first(a: CellEvidence, b: CellEvidence) -> tuple[CellEvidence, CellEvidence]:
    shared = sorted(set(a.scores) & set(b.scores))
    cost_a = a.costs(shared).cost_per_case
    cost_b = b.costs(shared).cost_per_case
    if cost_a is not None and cost_b is not None and cost_b < cost_a:
        return b, a
    return a, b


def wanted_pairs(subjects: Sequence[str], named: Sequence[str]) -> list[tuple[str, str]]:
    """Which pairs to show: every pair, the pairs among ``named``, or one named model's pairs.

    ``subjects`` are sorted; a named subject the task class did not measure
    is simply absent from it.
    """
    present = [s for s in named if s in subjects]
    if not named:
        return list(itertools.combinations(subjects, 2))
    if len(named) == 1:
        return [(present[0], s) for s in subjects if s != present[0]] if present else []
    return list(itertools.combinations(sorted(present), 2))


def compare_models(
    index: EvidenceIndex,
    *,
    task_class: str | None = None,
    models: Sequence[str] = (),
    margin: float = DEFAULT_MARGIN,
    every_pair: bool = False,
) -> list[ClassComparison]:
    """Per task class, each pair of models with shared cases, read with its interval.

    ``models`` (subject keys, ``provider:model`` or ``provider:model@effort``)
    keeps the pairs among them; one model: its pairs with every other. The
    intervals are Bonferroni-adjusted over the pairs with shared cases shown
    for that task class (each class's lines hold together 95 % of the time,
    not the whole table), or, ``every_pair``, over every pair shown in every
    class (``--family all``: the whole table 95 % of the time, wider intervals).
    """
    classes = []
    for name, cells in index.cells.items():
        if task_class is not None and name != task_class:
            continue
        pairs = wanted_pairs(sorted(cells), models)
        sharing = [(x, y) for x, y in pairs if set(cells[x].scores) & set(cells[y].scores)]
        if pairs:
            classes.append((name, cells, pairs, sharing))
    everything = sum(len(sharing) for *_, sharing in classes)
    found = []
    for name, cells, pairs, sharing in classes:
        size = everything if every_pair else len(sharing)
        z = bonferroni_z(max(size, 1))
        compared = []
        for x, y in sharing:
            a, b = _cheaper_first(cells[x], cells[y])
            pair = compare_pair(a, b, z=z, margin=margin)
            assert pair is not None  # sharing has cases in common
            compared.append(pair)
        unshared = tuple(p for p in pairs if p not in sharing)
        found.append(
            ClassComparison(name, margin, z, tuple(compared), unshared, size, family_all=every_pair)
        )
    return found


@dataclass(frozen=True)
class CellCost:
    """A cell's cost and latency over its whole current epoch (``kb matrix --cost``)."""

    subject: str
    task_class: str
    pass_rate: float
    n: int
    costs: ArmCosts
    non_inferior_to_best: bool
    """Non-inferior (paired, within the margin) to the class's best measured model."""
    cheapest_non_inferior: bool = False
    """The cheapest model non-inferior to the best (the one to route to, on this evidence)."""
    best: str = ""
    """The class's best measured model."""
    versus_best: PairComparison | None = None
    """This model against the best on their shared cases (``None``: it is the best)."""


def class_costs(
    index: EvidenceIndex,
    *,
    margin: float = DEFAULT_MARGIN,
    subjects: Iterable[str] | None = None,
) -> dict[str, dict[str, CellCost]]:
    """Task class → subject → cost, latency, and whether it may replace the best model.

    The best is the model with the highest mean score in its current epoch
    (on a tie the cheaper, then the first by name).
    Every other model is compared with it on their shared cases (paired,
    Bonferroni over the comparisons of the class); the ones whose reading is
    ``better`` or ``non-inferior`` qualify, the best itself included, and the
    cheapest of them by known cost per case is marked; with no cost known
    (no evidence files) nothing is. ``subjects`` limits the candidates (``kb route``: the rungs).
    """
    allowed = set(subjects) if subjects is not None else None
    found: dict[str, dict[str, CellCost]] = {}
    for name, all_cells in index.cells.items():
        cells = {s: c for s, c in all_cells.items() if allowed is None or s in allowed}
        if not cells:
            continue
        costs = {s: cell.cost for s, cell in cells.items()}

        # the highest mean score; on a tie the cheaper (a known cost first), then by name
        best = min(
            cells,
            key=lambda s: (
                -cells[s].pass_rate,  # noqa: B023 - called at once, in this iteration
                _cost_key(costs[s]),  # noqa: B023
                s,
            ),
        )
        others = [s for s in sorted(cells) if s != best]
        z = bonferroni_z(max(len(others), 1))
        versus = {s: compare_pair(cells[s], cells[best], z=z, margin=margin) for s in others}
        row = {
            s: CellCost(
                s,
                name,
                cell.pass_rate,
                len(cell.scores),
                costs[s],
                non_inferior_to_best=s == best or _as_good(versus[s]),
                best=best,
                versus_best=versus.get(s),
            )
            for s, cell in sorted(cells.items())
        }
        priced = {
            s: cost.costs.cost_per_case
            for s, cost in row.items()
            if cost.non_inferior_to_best and cost.costs.cost_per_case is not None
        }
        if priced:  # the cheapest needs a known cost: with none, nothing is marked
            chosen = min(priced, key=lambda s: (priced[s], s))
            row[chosen] = replace(row[chosen], cheapest_non_inferior=True)
        found[name] = row
    return found


def _cost_key(costs: ArmCosts) -> float:
    return costs.cost_per_case if costs.cost_per_case is not None else math.inf


def _as_good(pair: PairComparison | None) -> bool:
    return pair is not None and pair.reading.reading in (Reading.BETTER, Reading.NON_INFERIOR)


def check_compare_filters(
    index: EvidenceIndex, task_class: str | None, models: Sequence[str]
) -> None:
    """A task class or model no current epoch measured is a ``ConfigError`` naming the known."""
    cells = index.cells
    if task_class is not None and task_class not in cells:
        known = ", ".join(sorted(cells)) or "none yet"
        close = difflib.get_close_matches(task_class, sorted(cells), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            "--task-class", f"no model measured {task_class!r} (measured: {known}){hint}"
        )
    scope = [cells[task_class]] if task_class is not None else list(cells.values())
    subjects = sorted({s for group in scope for s in group})
    missing = [m for m in models if m not in subjects]
    if missing:
        where = f" on {task_class}" if task_class is not None else ""
        raise ConfigError(
            "--model",
            f"{', '.join(missing)}: not measured{where} in a current epoch "
            f"(measured: {', '.join(subjects) or 'none yet'})",
        )
    if len(set(models)) != len(models):
        raise ConfigError("--model", "a model is named twice")
