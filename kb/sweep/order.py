"""Nights in order: a night never decides over a newer one (SPEC 13.1).

Sequentially kb refuses to sweep an instant older than the live claims it
would retire (:func:`kb.sweep.plan.prepare_sweep`). Two nights that run at
the same time — last night's failed CI job re-run while tonight's cron runs
— both pass that check; the older one may then commit second, onto a store
that already holds the newer night. The rebase loop applies the same
judgement cell by cell:

* a cell whose store holds a newer night (a live claim observed after this
  night, or an epoch that pooled a later night) gets **no claim and no
  retirement** from this night: its report says which newer night stood;
* its measurements still count where the epoch it measured is still open:
  they are pooled into it in night order by the epochs file's three-way
  merge (:func:`kb.store.epochs.merge_cell`: case sums add; the nights list
  stays sorted by instant; the detectors and the rotation stay as the newer
  night left them). If the newer night began a new epoch, this night's runs
  stay evidence only;
* its canary is not applied (no flips, no baseline): an older fingerprint
  would otherwise flip or re-baseline the newer night's claims.

Pure functions of the plan, the measurement and the store as the rebase loop
read it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kb.store.epochs import EpochsFile, cell_key
from kb.store.snapshot import Snapshot
from kb.store.ttl import stored_instant
from kb.sweep.cells import SweepCell
from kb.sweep.falsify import live_eval_claims

CellKey = tuple[str, str]
"""(member key, task class)."""


def newer_nights(
    cells: Sequence[SweepCell], observed_at: int, snapshot: Snapshot, epochs: EpochsFile | None
) -> dict[CellKey, str]:
    """Each cell the store holds a night newer than ``observed_at`` of, with that night's id."""
    live = live_eval_claims(snapshot)
    found: dict[CellKey, str] = {}
    for cell in cells:
        key = (cell.member.key, cell.task_class)
        claims = live.get((cell.member.ref, cell.member.effort, cell.task_class), [])
        later = [c for _, c in claims if stored_instant(c.observed_at) > observed_at]
        if later:
            newest = max(later, key=lambda c: stored_instant(c.observed_at))
            found[key] = newest.id.split("/", 1)[0]
            continue
        epoch = epochs.cells.get(cell_key(*key)) if epochs is not None else None
        if epoch is not None and stored_instant(epoch.last_night) > observed_at:
            found[key] = epoch.nights[-1].report_id
    return found


def cells_with_newer(newer: Mapping[CellKey, str]) -> frozenset[str]:
    """The members (keys) that have a cell the store holds a newer night of."""
    return frozenset(member for member, _ in newer)
