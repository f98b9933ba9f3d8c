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

from pydantic import Field, ValidationError, field_validator, model_validator

from kb.atomicfile import write_atomic
from kb.errors import ConfigError, MergeConflict
from kb.schema import validation_issues
from kb.sidefile import SideFormat
from kb.store.merge import leave_textual_conflict
from kb.store.records import WireModel

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
    value = EPOCHS.load(data, source)
    try:
        return EpochsFile.model_validate(value)
    except ValidationError as exc:
        raise ConfigError(source, validation_issues("", exc)) from None


def read_epochs(path: Path) -> EpochsFile:
    """The epochs file at ``path`` (empty when absent)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return EpochsFile()
    except IsADirectoryError:
        raise ConfigError(str(path), "is a directory, not kb's epochs file") from None
    return parse_epochs(data, str(path))


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
    """Cell by cell: a side that changed a cell since the base wins; both: the later night.

    An epoch is one side's measurements; mixing two sides' pooled scores would
    count cases twice, so a cell both branches measured keeps the epoch that
    measured it later (the other side's nights stay in its evidence).
    """
    cells = dict(ours.cells)
    for key in sorted(set(base.cells) | set(theirs.cells)):
        before, after, mine = base.cells.get(key), theirs.cells.get(key), cells.get(key)
        if after == before or after == mine:
            continue
        if mine == before or mine is None:
            if after is None:
                cells.pop(key, None)
            else:
                cells[key] = after
            continue
        if after is not None and (after.last_night, after.start.report_id) > (
            mine.last_night,
            mine.start.report_id,
        ):
            cells[key] = after
    return EpochsFile(format=EPOCHS_FORMAT, cells=cells)


def merge_epochs_files(base: Path, ours: Path, theirs: Path, name: str) -> int:
    """Git's merge driver for the epochs file: merge into ``ours`` in place.

    Returns how many cells came from theirs. A side that cannot be read
    leaves git's textual merge and raises :class:`MergeConflict`.
    """
    sides = []
    for path in (base, ours, theirs):
        try:
            sides.append(read_epochs(path) if path.stat().st_size else EpochsFile())
        except ConfigError as exc:
            leave_textual_conflict(base, ours, theirs, name)
            raise MergeConflict(name, f"cannot be read: {exc.issues[0]}") from None
    was, mine, other = sides
    merged = merge_epochs(was, mine, other)
    taken = sum(1 for key, cell in merged.cells.items() if cell != mine.cells.get(key)) + sum(
        1 for key in mine.cells if key not in merged.cells
    )
    write_atomic(ours, merged.render())
    return taken
