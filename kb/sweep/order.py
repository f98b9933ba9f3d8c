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
  they are pooled into it in night order (case sums add; the nights list
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

from kb.store.epochs import CellEpoch, EpochsFile, cell_key
from kb.store.snapshot import Snapshot
from kb.store.ttl import stored_instant
from kb.sweep.cells import SweepCell
from kb.sweep.falsify import live_eval_claims
from kb.sweep.sampling import CellEpochNight

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


def pool_older_night(current: CellEpoch, night: CellEpochNight) -> CellEpoch | None:
    """``current`` with an older night's measurements pooled in (``None``: its epoch is gone).

    The older night measured the epoch its plan found (``night.suite.prior``);
    only when that is still the open epoch — same start, same suite, begun no
    later than the night — do its case scores count. A night that began an
    epoch of its own measured none that is still open.
    """
    own = night.epoch.nights[-1]
    if not _measured(current, night) or stored_instant(current.start.observed_at) > stored_instant(
        own.observed_at
    ):
        return None
    return _pooled(current, night, newest=False)


def rebase_epoch(current: CellEpoch | None, night: CellEpochNight) -> CellEpoch:
    """The epoch a night writes when the file may hold other nights since its plan.

    A night commits the epoch it measured; when another night (an older one,
    committed first) pooled into that same epoch meanwhile, that night's cases
    stay: the file's sums plus this night's, the nights in order, and this
    night's detectors and rotation (it is the newest).
    """
    prior = night.suite.prior
    if current is None or prior is None or current == prior or not _measured(current, night):
        return night.epoch
    return _pooled(current, night, newest=True)


def _measured(current: CellEpoch, night: CellEpochNight) -> bool:
    """Whether ``current`` is the epoch ``night`` measured (and continued, not began)."""
    prior = night.suite.prior
    if night.restarted is not None or prior is None:
        return False
    return current.start == prior.start and current.suite == prior.suite


def _pooled(current: CellEpoch, night: CellEpochNight, *, newest: bool) -> CellEpoch:
    """``current`` plus what ``night`` added to the epoch it planned on, nights in order."""
    prior = night.suite.prior
    assert prior is not None
    own = night.epoch.nights[-1]
    if any(n.report_id == own.report_id for n in current.nights):
        return current  # pooled already
    scores = tuple(
        now + after - before
        for now, after, before in zip(current.scores, night.epoch.scores, prior.scores, strict=True)
    )
    counts = tuple(
        now + after - before
        for now, after, before in zip(current.counts, night.epoch.counts, prior.counts, strict=True)
    )
    nights = sorted(
        (*current.nights, own), key=lambda n: (stored_instant(n.observed_at), n.report_id)
    )
    state = night.epoch if newest else current
    return state.model_copy(update={"scores": scores, "counts": counts, "nights": tuple(nights)})


def cells_with_newer(newer: Mapping[CellKey, str]) -> frozenset[str]:
    """The members (keys) that have a cell the store holds a newer night of."""
    return frozenset(member for member, _ in newer)
