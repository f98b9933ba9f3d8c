"""The epochs file beside the store: each cell's pooled evidence, tracked in git.

``rulvar.models.epochs.json`` holds, per cell (``model[@effort]|taskClass``),
the epoch the interval gate decides on (see :mod:`kb.sweep.epochs` for the
rule): the suite fingerprint it measures, when and why it began, the nights
it pooled (each with the cases that night ran), per case the sum of its
scores and the nights that measured it (aligned with the suite's sorted case
names), the two change detectors, their reference level and the rotation
cursor. A sweep writes it in the same commit as its claims; ``kb show``
prints a claim's epoch from it; ``kb compact`` keeps the evidence an open
epoch still pools; the merge driver merges it cell by cell (a cell both
branches measured keeps the side that measured it later).

Why a tracked file and not a value derived from the evidence: an epoch's
detectors are a running statistic of every night in rotation order; a file
that says what they are is reviewable in a pull request, cheap to read, and
stays right when evidence is compacted or lives outside the work tree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from kb.atomicfile import write_atomic
from kb.sidefile import SideFormat
from kb.store.merge import read_sides
from kb.store.wire import WireModel

EPOCHS = SideFormat("epochs")
EPOCHS_FORMAT = EPOCHS.current
EpochReason = Literal["first", "suite", "drift", "alarm", "manual", "resync"]


SUITE_GRADER = "eval-suite"


def suite_grader_id(suite: str) -> str:
    """``eval-suite@<first 16 hex of the suite fingerprint>``: a changed test is a new grader."""
    return f"{SUITE_GRADER}@{suite[:16]}"


def cell_key(subject_key: str, task_class: str) -> str:
    """How the epochs file names a cell."""
    return f"{subject_key}|{task_class}"


class EpochStart(WireModel):
    """When an epoch began, and why."""

    report_id: str = Field(alias="reportId")
    observed_at: str = Field(alias="observedAt")
    reason: EpochReason
    """``first`` measurement, ``suite`` changed, canary ``drift``, detector ``alarm``,
    or ``manual`` (``kb sweep --new-epoch``)."""


class EpochNight(WireModel):
    """One night the epoch pooled: its report and the cases it ran."""

    report_id: str = Field(alias="reportId")
    observed_at: str = Field(alias="observedAt")
    cases: tuple[str, ...]
    passes: float | None = None
    """The sum of the night's case scores (its pass total): the nightly rule reads its
    level from it (``sampling = "adaptive"``). Absent in files v3's rule wrote."""

    @model_validator(mode="after")
    def _passes(self) -> EpochNight:
        if self.passes is not None and not (
            math.isfinite(self.passes) and 0 <= self.passes <= len(self.cases)
        ):
            raise ValueError("passes must be between 0 and the night's cases")
        return self


class CellEpoch(WireModel):
    """One cell's open epoch."""

    suite: str
    """The fingerprint of the cell's cases (a changed test is a new epoch, not a drift)."""
    start: EpochStart
    nights: tuple[EpochNight, ...]
    cases: tuple[str, ...]
    """The suite's case names, sorted: ``scores`` and ``counts`` align with them."""
    scores: tuple[float, ...]
    counts: tuple[int, ...]
    down: float = 0.0
    """The drop detector."""
    up: float = 0.0
    """The rise detector."""
    cursor: int = 0
    """Where the next night's rotation starts."""
    level: float | None = None
    """The detectors' reference: under v3's rule the epoch's estimate the night it first
    covered its pool; under the nightly rule the level the last night's detectors read."""
    paired: float | None = None
    """The nightly rule's case-paired drop detector (absent: v3's rule wrote the file; read
    as 0)."""

    @model_validator(mode="after")
    def _aligned(self) -> CellEpoch:
        if not (len(self.cases) == len(self.scores) == len(self.counts)):
            raise ValueError("cases, scores and counts must have the same length")
        if list(self.cases) != sorted(set(self.cases)):
            raise ValueError("cases must be distinct and sorted")
        if any(c < 0 for c in self.counts) or any(
            not (0 <= s <= c) for s, c in zip(self.scores, self.counts, strict=True)
        ):
            raise ValueError("each score must be between 0 and its count")
        detectors = (self.down, self.up, self.paired or 0.0)
        if not all(math.isfinite(v) and v >= 0 for v in detectors):
            raise ValueError("the detectors must be finite and nonnegative")
        if self.level is not None and not 0 <= self.level <= 1:
            raise ValueError("level must be between 0 and 1")
        if not self.nights:
            raise ValueError("an epoch has at least one night")
        if not 0 <= self.cursor < max(len(self.cases), 1):
            raise ValueError(f"cursor must be from 0 to {max(len(self.cases) - 1, 0)}")
        known = set(self.cases)
        strays = sorted({c for night in self.nights for c in night.cases if c not in known})
        if strays:
            raise ValueError(f"nights name cases the epoch does not hold: {', '.join(strays[:3])}")
        if re.fullmatch(r"[0-9a-f]{64}", self.suite) is None:
            raise ValueError("suite must be 64 hex digits (a sha256)")
        return self

    @property
    def n(self) -> int:
        """Distinct cases the epoch measured."""
        return sum(1 for count in self.counts if count > 0)

    @property
    def successes(self) -> float:
        """The sum of each measured case's mean score."""
        # fsum: with one night the mean is the plain pass fraction, to the last bit
        return math.fsum(s / c for s, c in zip(self.scores, self.counts, strict=True) if c > 0)

    @property
    def last_night(self) -> str:
        """When the epoch last pooled a night."""
        return self.nights[-1].observed_at if self.nights else self.start.observed_at

    @property
    def reports(self) -> tuple[str, ...]:
        """Every report whose evidence the epoch pools."""
        return tuple(night.report_id for night in self.nights)


class EpochsFile(WireModel):
    """The whole file."""

    format: int = EPOCHS_FORMAT
    cells: dict[str, CellEpoch] = Field(default_factory=dict)

    @field_validator("cells")
    @classmethod
    def _keys(cls, cells: dict[str, CellEpoch]) -> dict[str, CellEpoch]:
        for key in cells:
            member, bar, task_class = key.rpartition("|")
            if not (bar and member and task_class):
                raise ValueError(f"cell {key!r} is not 'model|task class'")
        return cells

    def render(self) -> bytes:
        """Deterministic JSON: cells sorted, two-space indent, trailing newline."""
        from kb.store.canonical import js_stringify

        wire = self.to_wire()
        wire["cells"] = {key: wire["cells"][key] for key in sorted(wire["cells"])}
        return (js_stringify(wire, indent=2) + "\n").encode("utf-8")


def parse_epochs(data: bytes | None, source: str) -> EpochsFile:
    """The epochs file's bytes (``None``: no file yet, no epochs)."""
    if data is None:
        return EpochsFile()
    return EPOCHS.load_as(data, source, EpochsFile)


def read_epochs(path: Path) -> EpochsFile:
    """The epochs file at ``path`` (empty when absent)."""
    return parse_epochs(EPOCHS.read_bytes(path), str(path))


@dataclass(frozen=True)
class EpochsAt:
    """The epochs file and where it lives (what a sweep's commit rewrites)."""

    path: Path
    file: EpochsFile
    attributes: Mapping[str, bytes] = field(default_factory=dict)
    """Files to write beside it (the ``.gitattributes`` that routes it to kb's driver)."""

    @classmethod
    def read(cls, path: Path) -> EpochsAt:
        """The file at ``path`` (empty when absent)."""
        return cls(path, read_epochs(path))


def merge_epochs(base: EpochsFile, ours: EpochsFile, theirs: EpochsFile) -> EpochsFile:
    """Cell by cell, :func:`merge_cell`: both sides' nights are kept, never one side's view."""
    cells = dict(ours.cells)
    for key in sorted(set(base.cells) | set(theirs.cells) | set(ours.cells)):
        merged = merge_cell(base.cells.get(key), ours.cells.get(key), theirs.cells.get(key))
        if merged is None:
            cells.pop(key, None)
        else:
            cells[key] = merged
    return EpochsFile(format=EPOCHS_FORMAT, cells=cells)


def merge_cell(
    base: CellEpoch | None,
    ours: CellEpoch | None,
    theirs: CellEpoch | None,
    *,
    rebasing: bool = False,
) -> CellEpoch | None:
    """Three-way merge of one cell's epoch, night by night (by report id).

    Two writers that measured the same cell from ``base`` — two clones pushing
    nights, two branches merged, a night rebased onto a store that moved —
    each hold the nights they pooled since ``base``. The merge keeps every one
    of them, as if the nights had been committed one after another in the
    order of their instants:

    * both continued one epoch: its case sums are ``ours + theirs − base``, its
      nights both sides', its detectors and rotation those of the side with
      the later night;
    * one side began an epoch on purpose (an alarm, a drift, a changed suite,
      ``--new-epoch``) while the other continued ``base``: the new epoch
      stands; the other's nights join it when they came after its start (and
      measured the same cases), else they stay in the old epoch (evidence, as
      in a sequential history);
    * two first measurements (each writer knew of no epoch) are one epoch,
      begun by the earlier; a first measurement never replaces an epoch, its
      nights join it;
    * two deliberate restarts: the later one stands.

    ``rebasing``: ``ours`` is a night being committed onto ``theirs`` (the
    store as it is): a restart of ours that is older than a night theirs
    added displaces nothing and pools nothing — a night never decides over a
    newer one (:mod:`kb.sweep.order`); its runs stay evidence.
    """
    if theirs == base or theirs == ours:
        return _in_order(base, ours) if rebasing and ours is not None else ours
    if ours == base:
        return theirs
    if ours is None or theirs is None:
        return ours if theirs is None else theirs  # one side dropped the epoch: keep the data
    if _continues(ours, base) and _continues(theirs, base):
        first = min((ours, theirs), key=lambda e: (_instant(e.start), e.start.report_id))
        other = theirs if first is ours else ours
        return _pooled(_later(ours, theirs), first, other, base)
    if _same(ours, theirs):
        return _later(ours, theirs)  # one epoch begun apart: nothing to add up safely
    keep, other = _standing(base, ours, theirs, rebasing)
    if _deliberate(other, base) or not _poolable(keep, other, base):
        return keep
    return _pooled(keep, keep, other, base if _continues(other, base) else None)


def _in_order(base: CellEpoch | None, ours: CellEpoch) -> CellEpoch:
    """Tonight's epoch, its nights in order.

    A night older than the base's newest joins it without its detectors and
    rotation (those stay the newer night's).
    """
    if base is None or not _continues(ours, base):
        return ours
    added = _added(ours, base)
    if any(_instant(night) < _instant(base.start) for night in added):
        return base  # an epoch that began after the night never pools it: evidence only
    if all(_instant(night) >= _instant(base.nights[-1]) for night in added):
        return ours
    return _pooled(base, base, ours, base)


def _same(one: CellEpoch, two: CellEpoch) -> bool:
    """One epoch (the same start and suite), however many nights each side holds."""
    return one.start == two.start and one.suite == two.suite


def _continues(epoch: CellEpoch, base: CellEpoch | None) -> bool:
    """``epoch`` is ``base`` with more nights: the same cases, every night of ``base``.

    (Not the same start: two first nights merged begin at the earlier one, and an epoch
    that pooled an earlier night than its start still holds every night it held.)
    """
    return (
        base is not None
        and epoch.suite == base.suite
        and epoch.cases == base.cases
        and set(base.reports) <= set(epoch.reports)
    )


def _deliberate(epoch: CellEpoch, base: CellEpoch | None) -> bool:
    """The epoch began since ``base`` on purpose (not a first measurement)."""
    return not _continues(epoch, base) and epoch.start.reason != "first"


def _instant(night: EpochNight | EpochStart) -> int:
    from kb.store.ttl import stored_instant

    return stored_instant(night.observed_at)


def _added(epoch: CellEpoch, base: CellEpoch | None) -> list[EpochNight]:
    """The nights ``epoch`` holds that ``base`` did not (what its writer added)."""
    known = set(base.reports) if base is not None and _continues(epoch, base) else set()
    return [night for night in epoch.nights if night.report_id not in known]


def _fresh(epoch: CellEpoch, base: CellEpoch | None) -> bool:
    """The epoch began since ``base`` as a first measurement (its writer knew of no epoch)."""
    return not _continues(epoch, base) and epoch.start.reason == "first"


def _standing(
    base: CellEpoch | None, ours: CellEpoch, theirs: CellEpoch, rebasing: bool
) -> tuple[CellEpoch, CellEpoch]:
    """Of two different epochs, the one that stands and the other."""
    for fresh, other in ((ours, theirs), (theirs, ours)):
        if _fresh(fresh, base) and not _fresh(other, base):
            return other, fresh  # a first measurement never replaces an epoch
    if _fresh(ours, base):  # both first measurements: the earlier began the epoch
        earlier = min((ours, theirs), key=lambda e: (_instant(e.start), e.start.report_id))
        return earlier, theirs if earlier is ours else ours
    for restarted, other in ((ours, theirs), (theirs, ours)):
        if _deliberate(restarted, base) and _continues(other, base):
            newest = max((_instant(n) for n in _added(other, base)), default=None)
            older = newest is not None and _instant(restarted.start) < newest
            if rebasing and restarted is ours and older:
                return other, restarted  # tonight is older than a night the store holds
            return restarted, other
    later = max((ours, theirs), key=lambda e: (_instant(e.start), e.start.report_id))
    return later, theirs if later is ours else ours


def _poolable(keep: CellEpoch, other: CellEpoch, base: CellEpoch | None) -> bool:
    """Whether ``other``'s nights can join ``keep``: the same cases, all after its start."""
    if keep.suite != other.suite or keep.cases != other.cases:
        return False
    added = _added(other, base)
    return bool(added) and all(_instant(n) >= _instant(keep.start) for n in added)


def _later(one: CellEpoch, two: CellEpoch) -> CellEpoch:
    """The side with the later night (its detectors and rotation are the newest)."""
    first = (_instant(one.nights[-1]), one.nights[-1].report_id)
    second = (_instant(two.nights[-1]), two.nights[-1].report_id)
    return one if first >= second else two


def _pooled(
    state: CellEpoch, into: CellEpoch, other: CellEpoch, base: CellEpoch | None
) -> CellEpoch:
    """``into`` plus what ``other`` added since ``base`` (case sums, nights in order).

    ``state`` gives the detectors, level and rotation (the start is ``into``'s).
    """
    if base is not None and base.cases != other.cases:
        base = None  # cannot happen when both continue base: its suite fixes its cases
    known = {night.report_id for night in into.nights}
    added = [night for night in _added(other, base) if night.report_id not in known]
    if not added:
        return into
    removed = base
    scores = tuple(
        mine + theirs - (removed.scores[i] if removed is not None else 0.0)
        for i, (mine, theirs) in enumerate(zip(into.scores, other.scores, strict=True))
    )
    counts = tuple(
        mine + theirs - (removed.counts[i] if removed is not None else 0)
        for i, (mine, theirs) in enumerate(zip(into.counts, other.counts, strict=True))
    )
    nights = sorted((*into.nights, *added), key=lambda n: (_instant(n), n.report_id))
    return state.model_copy(
        update={
            "start": into.start,
            "scores": scores,
            "counts": counts,
            "nights": tuple(nights),
        }
    )


def merge_epochs_files(base: Path, ours: Path, theirs: Path, name: str) -> int:
    """Git's merge driver for the epochs file: merge into ``ours`` in place.

    Returns how many cells came from theirs. A side that cannot be read
    leaves git's textual merge and raises :class:`MergeConflict`.
    """
    was, mine, other = read_sides(
        base, ours, theirs, name, lambda p: read_epochs(p) if p.stat().st_size else EpochsFile()
    )
    merged = merge_epochs(was, mine, other)
    taken = sum(1 for key, cell in merged.cells.items() if cell != mine.cells.get(key)) + sum(
        1 for key in mine.cells if key not in merged.cells
    )
    write_atomic(ours, merged.render())
    return taken
