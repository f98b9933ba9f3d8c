"""Falsification that actually retires beliefs (beyond rulvar).

For every complete cell, the prior active or stale eval-measured claims on
the same subject — model, effort and task class — are retired in the same
commit as the new measurement:

* the newest prior of the new claim's polarity is **superseded** by it;
* every other prior (all of them when the cell emitted no claim, or the
  opposite polarity) is **archived** with reason ``falsified``.

Incomplete cells touch nothing. After any number of nightly sweeps a
subject has at most one active eval claim, never an active strength beside
an active weakness, and the 8-claims cap is never approached by sweeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kb.schema import LIVE_STATUSES
from kb.store.models import ModelClaim
from kb.store.ops import AddClaim, ArchiveClaim, EvalCommitterGate, Op, SupersedeClaim
from kb.store.snapshot import Snapshot
from kb.store.ttl import parse_instant
from kb.sweep.cells import SweepCell


@dataclass(frozen=True)
class Retirement:
    """A prior claim the sweep retired."""

    claim_id: str
    action: str
    """``superseded`` or ``archived``."""
    by: str | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, str]:
        """The report's ``retired[]`` entry."""
        entry = {"claimId": self.claim_id, "action": self.action}
        if self.by:
            entry["by"] = self.by
        if self.reason:
            entry["reason"] = self.reason
        return entry


def retirements(ops: Sequence[Op]) -> list[Retirement]:
    """What a committed batch of sweep ops retired, in op order."""
    found = []
    for op in ops:
        if isinstance(op, SupersedeClaim):
            found.append(Retirement(op.claim_id, "superseded", by=op.by.id))
        elif isinstance(op, ArchiveClaim):
            found.append(Retirement(op.claim_id, "archived", reason=op.reason))
    return found


PriorKey = tuple[str, str | None, str]
"""(model, effort, task class): whose prior claims a cell retires."""


def live_eval_claims(snapshot: Snapshot) -> dict[PriorKey, list[tuple[int, ModelClaim]]]:
    """Active or stale eval-measured claims by (model, effort, task class), in file order."""
    found: dict[PriorKey, list[tuple[int, ModelClaim]]] = {}
    for index, claim in enumerate(snapshot.claims):
        if claim.claim_class == "eval-measured" and claim.status in LIVE_STATUSES:
            key = (claim.model, claim.effort, claim.task_class)
            found.setdefault(key, []).append((index, claim))
    return found


def sweep_ops(
    snapshot: Snapshot,
    cells: Sequence[tuple[SweepCell, ModelClaim | None]],
    gate: EvalCommitterGate,
) -> list[Op]:
    """The ops for one sweep against ``snapshot`` (a pure function; rerun on every CAS retry)."""
    live = live_eval_claims(snapshot)
    ops: list[Op] = []
    for cell, claim in cells:
        if not cell.complete:
            continue
        priors = live.get((cell.member.ref, cell.member.effort, cell.task_class), [])
        replaced: ModelClaim | None = None
        if claim is not None:
            same = [
                (parse_instant(p.observed_at), i, p)
                for i, p in priors
                if p.polarity == claim.polarity
            ]
            if same:
                replaced = max(same, key=lambda item: (item[0], item[1]))[2]
                ops.append(SupersedeClaim(replaced.id, claim, gate))
            else:
                ops.append(AddClaim(claim, gate))
        ops += [ArchiveClaim(p.id, "falsified") for _, p in priors if p is not replaced]
    return ops
