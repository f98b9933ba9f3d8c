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


@dataclass(frozen=True)
class SweepOps:
    """The commit a sweep makes, and what it retires."""

    ops: list[Op]
    retired: list[Retirement]


def _priors(snapshot: Snapshot, cell: SweepCell) -> list[tuple[int, ModelClaim]]:
    return [
        (index, claim)
        for index, claim in enumerate(snapshot.claims)
        if claim.claim_class == "eval-measured"
        and claim.status in ("active", "stale")
        and claim.model == cell.member.ref
        and claim.effort == cell.member.effort
        and claim.task_class == cell.task_class
    ]


def sweep_ops(
    snapshot: Snapshot,
    cells: Sequence[tuple[SweepCell, ModelClaim | None]],
    gate: EvalCommitterGate,
) -> SweepOps:
    """The ops for one sweep against ``snapshot`` (recomputed on every CAS retry)."""
    ops: list[Op] = []
    retired: list[Retirement] = []
    for cell, claim in cells:
        if not cell.complete:
            continue
        priors = _priors(snapshot, cell)
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
                retired.append(Retirement(replaced.id, "superseded", by=claim.id))
            else:
                ops.append(AddClaim(claim, gate))
        for _, prior in priors:
            if prior is not replaced:
                ops.append(ArchiveClaim(prior.id, "falsified"))
                retired.append(Retirement(prior.id, "archived", reason="falsified"))
    return SweepOps(ops, retired)
