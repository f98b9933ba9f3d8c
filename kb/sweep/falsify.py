"""Falsification that retires beliefs the evidence turned against (beyond rulvar).

For every complete cell, the prior active or stale eval-measured claims on
the same subject — model, effort and task class — are considered in the
same commit as the new measurement:

* a new claim **supersedes** the newest prior of its polarity; other priors
  of that polarity are archived ``falsified`` (duplicates), and so are the
  priors of the opposite polarity;
* with no new claim, the gate decides (:meth:`GatePolicy.retires`): the point
  gate archives every prior (kb v1, rulvar-style), the interval gate only a
  prior the measurement confidently contradicts (hysteresis) — an uncertain
  night leaves the belief in place.

Under epochs (the interval gate, :mod:`kb.sweep.sampling`) two more rules:

* a detector's **alarm** archives the claim it watched (``falsified``), and
  that polarity is not re-earned the same night;
* **no grandfathered beliefs**: hysteresis protects only a prior whose own
  evidence is this epoch's — its graderId names the cell's current suite,
  it was observed since the epoch began, and its own pass rate and ``n``
  meet the gate for its polarity. Any other prior (another gate, another
  suite, too few cases, or from before a drift or an alarm) is re-decided by
  this complete measurement: renewed, or archived ``stale``.

Incomplete cells touch nothing. So nightly sweeps never pile up claims
against the 8-claims cap, and the store never holds an active strength
beside an active weakness for one subject.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kb.schema import LIVE_STATUSES
from kb.store.models import ModelClaim
from kb.store.ops import AddClaim, ArchiveClaim, EvalCommitterGate, Op, SupersedeClaim
from kb.store.records import RetiredRecord
from kb.store.snapshot import ClaimEntry, Snapshot
from kb.store.ttl import stored_instant
from kb.sweep.cells import SweepCell
from kb.sweep.gate import CellEstimate, GatePolicy
from kb.sweep.sampling import CellEpochNight


@dataclass(frozen=True)
class Retirement:
    """A prior claim the sweep retired."""

    claim_id: str
    action: Literal["superseded", "archived"]
    by: str | None = None
    reason: str | None = None

    def to_record(self) -> RetiredRecord:
        """The report's ``retired[]`` entry."""
        return RetiredRecord(
            claim_id=self.claim_id, action=self.action, by=self.by, reason=self.reason
        )


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


def live_eval_claims(snapshot: Snapshot) -> dict[PriorKey, list[tuple[int, ClaimEntry]]]:
    """Active or stale eval-measured claims by (model, effort, task class), in file order."""
    found: dict[PriorKey, list[tuple[int, ClaimEntry]]] = {}
    for index, claim in enumerate(snapshot.entries):
        if claim.claim_class == "eval-measured" and claim.status in LIVE_STATUSES:
            key = (claim.model, claim.effort, claim.task_class)
            found.setdefault(key, []).append((index, claim))
    return found


def sweep_ops(
    snapshot: Snapshot,
    cells: Sequence[tuple[SweepCell, ModelClaim | None]],
    gate: EvalCommitterGate,
    policy: GatePolicy,
) -> list[Op]:
    """The ops for one sweep against ``snapshot`` (a pure function; rerun on every CAS retry)."""
    live = live_eval_claims(snapshot)
    ops: list[Op] = []
    for cell, claim in cells:
        if not cell.complete:
            continue
        priors = live.get((cell.member.ref, cell.member.effort, cell.task_class), [])
        replaced: ClaimEntry | None = None
        if claim is not None:
            same = [
                (stored_instant(p.observed_at), i, p)
                for i, p in priors
                if p.polarity == claim.polarity
            ]
            if same:
                replaced = max(same, key=lambda item: (item[0], item[1]))[2]
                ops.append(SupersedeClaim(replaced.id, claim, gate))
            else:
                ops.append(AddClaim(claim, gate))
        epoch = cell.epoch
        for index, prior in priors:
            if prior is replaced:
                continue
            renewed = claim is not None and claim.polarity == prior.polarity
            alarmed = epoch is not None and epoch.blocked == prior.polarity
            if renewed or alarmed or policy.retires(prior.polarity, cell.estimate):
                ops.append(ArchiveClaim(prior.id, "falsified"))
            elif epoch is not None and not protected(snapshot.wire_at(index), epoch, policy):
                ops.append(ArchiveClaim(prior.id, "stale"))
    return ops


def protected(prior: Mapping[str, Any], epoch: CellEpochNight, policy: GatePolicy) -> bool:
    """Whether hysteresis may keep ``prior`` (a claim's wire object) in ``epoch``'s cell."""
    metrics = prior.get("metrics")
    if not isinstance(metrics, Mapping) or metrics.get("graderId") != epoch.grader_id:
        return False  # another gate's, or another suite's
    if stored_instant(str(prior["observedAt"])) < stored_instant(epoch.epoch.start.observed_at):
        return False  # from before this epoch (a drift, an alarm, a changed suite)
    rate, n = metrics.get("passRate"), metrics.get("n")
    if not isinstance(rate, int | float) or not isinstance(n, int) or n <= 0:
        return False
    return policy.band(CellEstimate(rate * n, n)) == prior.get("polarity")
