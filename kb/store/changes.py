"""What a night changed in belief, read from its report: what CI must hear of.

Read from a :class:`ReportFile` alone (what a sweep's ``--json`` prints and
``kb report`` reads back), so tonight's failing line and a past night's
heatmap agree:

* a **falsified** claim: a held claim (active or stale) the sweep archived
  with reason ``falsified`` — a change detector's alarm, or the gate's
  verdict against it — in a cell whose claim did not supersede a prior
  tonight. A cell that renewed its belief (its new claim superseded the
  newest prior of its polarity) archives any other prior of that polarity
  ``falsified`` as a duplicate; the store never holds a live strength and
  weakness for one subject (:mod:`kb.sweep.falsify`), so those are the same
  belief, not a changed one. A sweep supersedes only within a polarity, so
  a supersession is never a falsification here (``kb diff`` also reads a
  supersession by the other polarity as one: :mod:`kb.store.diff`).
* an **exact drift**: a member whose canary status is ``drift`` — its exact
  fingerprint (rulvar's) differs from the recorded one with every probe ok.
  Nothing else a canary says (``incomplete``, ``unstable``, ``rebaselined``,
  or a distribution shift of a sensitive tier) counts.
* an **alarm cell**: a cell whose change detector alarmed tonight (its
  epoch's ``alarm``), or whose held claim was falsified tonight.

A retired claim is matched to its cell by its id, ``<report>/<subject>/<task
class>`` (:func:`kb.sweep.cells.claim_id`), the cell of the longest match
winning. Pure functions; no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kb.store.records import CellRecord, ReportFile, RetiredRecord

CellKey = tuple[str, str]
"""(subject key, task class)."""


@dataclass(frozen=True)
class Falsified:
    """A held claim the night falsified, and the cell that did it (``None``: not found)."""

    claim_id: str
    cell: CellRecord | None

    @property
    def alarm(self) -> Literal["down", "up"] | None:
        """The change detector that alarmed in the cell tonight (``None``: the gate decided)."""
        epoch = self.cell.epoch if self.cell is not None else None
        return epoch.alarm if epoch is not None else None

    def describe(self) -> str:
        """``scripted:m · extraction (the change detector saw a drop)``."""
        if self.cell is None:
            return self.claim_id
        how = {
            "down": "the change detector saw a drop",
            "up": "the change detector saw a rise",
            None: "the gate archived it falsified",
        }[self.alarm]
        return f"{self.cell.subject_key} · {self.cell.task_class} ({how})"


def cell_of(claim_id: str, cells: Sequence[CellRecord]) -> CellRecord | None:
    """The cell a sweep claim id names (the longest ``/<subject>/<task class>`` ending)."""
    found = [cell for cell in cells if claim_id.endswith(f"/{cell.subject_key}/{cell.task_class}")]
    return max(found, key=lambda c: len(c.subject_key) + len(c.task_class), default=None)


def falsified_claims(report: ReportFile) -> list[Falsified]:
    """The held claims the night falsified, in the report's order (see the module doc)."""
    renewed = {r.by for r in report.retired if r.action == "superseded" and r.by is not None}
    found = []
    for entry in report.retired:
        if not _falsified(entry):
            continue
        cell = cell_of(entry.claim_id, report.cells)
        if cell is not None and cell.claim_id is not None and cell.claim_id in renewed:
            continue  # a duplicate of the belief the cell renewed
        found.append(Falsified(entry.claim_id, cell))
    return found


def _falsified(entry: RetiredRecord) -> bool:
    return entry.action == "archived" and entry.reason == "falsified"


def exact_drifts(report: ReportFile) -> list[str]:
    """The members whose exact canary fingerprint drifted tonight (status ``drift``)."""
    return [c.subject_key for c in report.canary if c.status == "drift"]


@dataclass(frozen=True)
class CellAlarm:
    """Why a heatmap cell is marked: its detector alarmed, or its held claim was falsified."""

    direction: Literal["down", "up"] | None
    """The detector that alarmed (``None``: the gate falsified the claim, no detector)."""
    falsified: tuple[str, ...]
    """The held claims of the cell falsified tonight."""

    @property
    def badge(self) -> str:
        """``ALARM ▼ drop``, ``ALARM ▲ rise`` or ``ALARM · falsified``."""
        return {
            "down": "ALARM ▼ drop",
            "up": "ALARM ▲ rise",
            None: "ALARM · falsified",
        }[self.direction]

    @property
    def explanation(self) -> str:
        """One sentence for a tooltip or a screen reader."""
        said = {
            "down": "the change detector saw a drop tonight",
            "up": "the change detector saw a rise tonight",
            None: "the gate falsified the held claim tonight",
        }[self.direction]
        count = len(self.falsified)
        if count and self.direction is not None:
            said += f"; {count} held claim{'s' if count != 1 else ''} retired"
        elif self.direction is not None:
            said += "; a new epoch began"
        return said


def cell_alarms(report: ReportFile) -> dict[CellKey, CellAlarm]:
    """The night's alarm cells by (subject key, task class)."""
    falsified: dict[CellKey, list[str]] = {}
    for found in falsified_claims(report):
        if found.cell is not None:
            key = (found.cell.subject_key, found.cell.task_class)
            falsified.setdefault(key, []).append(found.claim_id)
    alarms = {}
    for cell in report.cells:
        key = (cell.subject_key, cell.task_class)
        direction = cell.epoch.alarm if cell.epoch is not None else None
        if direction is not None or key in falsified:
            alarms[key] = CellAlarm(direction, tuple(falsified.get(key, ())))
    return alarms


def falsified_line(found: Sequence[Falsified], shown: int = 3) -> str:
    """The failing line's part for falsified claims (the first ``shown`` named)."""
    count = len(found)
    named = ", ".join(f.describe() for f in found[:shown])
    more = f", and {count - shown} more" if count > shown else ""
    return f"{count} held claim{'s' if count != 1 else ''} falsified: {named}{more}"


def drift_reason(drifted: Sequence[str]) -> str:
    """The failing line's part for exact canary drifts."""
    count = len(drifted)
    return f"drift in {count} model{'s' if count != 1 else ''} ({', '.join(drifted)})"
