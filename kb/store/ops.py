"""Store operations, the gates that admit new claims, and whole-batch validation.

A commit is a batch of ops applied in order to a copy of the snapshot's
claims. The batch is validated as a whole: every problem with every op is
collected and raised as one :class:`ConfigError`, and nothing is written
unless the batch is clean. The rules (rulvar's, made stricter where noted):

* ``AddClaim`` — the id must be new (also within the batch); the claim must
  be ``active`` with ``expiresAt`` after ``observedAt``; its gate must fit it.
* ``SupersedeClaim`` — the prior claim becomes ``superseded``; ``by`` is added
  with ``supersedes`` set. Beyond rulvar: only an ``active`` or ``stale``
  claim can be superseded, so a supersede chain never forks.
* ``ArchiveClaim`` — status ``archived``, the claim stays in the file.
  Beyond rulvar: archiving an already ``archived`` or ``superseded`` claim
  is refused instead of silently rewriting its terminal status.
* ``MarkStale`` — ``active`` → ``stale``; on any other status a no-op, so it
  is idempotent and terminal statuses never revive.

Gates: ``EvalCommitterGate`` admits only eval-measured claims authored by the
eval pipeline with a metrics block; ``HumanGate`` admits only
human-editorial claims without metrics and needs a non-empty ``ruled_out``.
Cap: at most ``active_claims_cap`` (8) active claims per (model, taskClass)
after the batch. Unlike rulvar, a pair that was already over the cap before
the batch and that the batch does not grow does not block the commit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kb.errors import ConfigError
from kb.store.models import ArchiveReason, ModelClaim, RuledOut, claim_to_wire
from kb.store.snapshot import Snapshot, build_snapshot
from kb.store.ttl import InstantError, parse_instant

DEFAULT_ACTIVE_CLAIMS_CAP = 8
RULED_OUT_VALUES: tuple[str, ...] = ("prompt", "tools", "difficulty", "transient-provider")
ARCHIVE_REASONS: tuple[str, ...] = ("deprecated", "stale", "rejected", "falsified")


@dataclass(frozen=True)
class EvalCommitterGate:
    """Admits claims measured by an eval pipeline run (a sweep)."""

    committer_id: str
    report_id: str


@dataclass(frozen=True)
class HumanGate:
    """Admits a person's editorial claim, with what they ruled out as the cause."""

    approver: str
    at: str
    ruled_out: tuple[RuledOut, ...]
    contrast_evidence: str | None = None


Gate = EvalCommitterGate | HumanGate


@dataclass(frozen=True)
class AddClaim:
    """Add a new claim through a gate."""

    claim: ModelClaim
    gate: Gate


@dataclass(frozen=True)
class SupersedeClaim:
    """Replace ``claim_id`` with ``by`` (which records ``supersedes``)."""

    claim_id: str
    by: ModelClaim
    gate: Gate


@dataclass(frozen=True)
class ArchiveClaim:
    """Retire a claim for good, keeping it in the file."""

    claim_id: str
    reason: ArchiveReason


@dataclass(frozen=True)
class MarkStale:
    """Flag a claim whose model drifted since it was measured."""

    claim_id: str
    reason: Literal["canary-drift"] = "canary-drift"


Op = AddClaim | SupersedeClaim | ArchiveClaim | MarkStale


@dataclass(frozen=True)
class OpCounts:
    """What a batch did, for commit messages and summaries."""

    added: int = 0
    superseded: int = 0
    archived: Mapping[str, int] = field(default_factory=dict)
    staled: int = 0

    def describe(self) -> str:
        """``+3 claims, 1 superseded, 1 falsified`` (``no changes`` when empty)."""
        parts = []
        if self.added:
            parts.append(f"+{self.added} claim{'s' if self.added != 1 else ''}")
        if self.superseded:
            parts.append(f"{self.superseded} superseded")
        for reason in ARCHIVE_REASONS:
            count = self.archived.get(reason, 0)
            if count:
                parts.append(f"{count} {'archived ' + reason if reason != 'falsified' else reason}")
        if self.staled:
            parts.append(f"{self.staled} marked stale")
        return ", ".join(parts) if parts else "no changes"


@dataclass(frozen=True)
class AppliedBatch:
    """The next snapshot and what the batch did to get there."""

    snapshot: Snapshot
    counts: OpCounts


def _gate_issues(where: str, claim: ModelClaim, gate: Gate) -> list[str]:
    issues = []
    if isinstance(gate, EvalCommitterGate):
        if not gate.committer_id:
            issues.append(f"{where}: eval-committer gate needs a committerId")
        if not gate.report_id:
            issues.append(f"{where}: eval-committer gate needs a reportId")
        if claim.claim_class != "eval-measured":
            issues.append(f"{where}: eval-committer gate only admits eval-measured claims")
        if claim.author["kind"] != "eval-pipeline":
            issues.append(f"{where}: eval-committer gate needs author.kind 'eval-pipeline'")
        if claim.metrics is None:
            issues.append(f"{where}: eval-committer gate needs a metrics block")
    else:
        if not gate.approver:
            issues.append(f"{where}: human gate needs an approver")
        if not gate.ruled_out:
            issues.append(
                f"{where}: human gate needs attribution.ruledOut (one or more of "
                + ", ".join(RULED_OUT_VALUES)
                + ")"
            )
        for value in gate.ruled_out:
            if value not in RULED_OUT_VALUES:
                issues.append(
                    f"{where}: ruledOut value {value!r} is not one of "
                    + ", ".join(RULED_OUT_VALUES)
                )
        if claim.claim_class != "human-editorial":
            issues.append(f"{where}: human gate only admits human-editorial claims")
        if claim.metrics is not None:
            issues.append(f"{where}: human gate refuses a metrics block")
        if claim.author["kind"] != "human":
            issues.append(f"{where}: human gate needs author.kind 'human'")
    return issues


def _new_claim_issues(where: str, claim: ModelClaim) -> list[str]:
    issues = []
    if claim.status != "active":
        issues.append(f"{where}: a new claim must be active, not {claim.status!r}")
    try:
        if parse_instant(claim.expires_at) <= parse_instant(claim.observed_at):
            issues.append(f"{where}: expiresAt must be after observedAt")
    except InstantError as exc:  # pragma: no cover - ModelClaim already validated both
        issues.append(f"{where}: {exc}")
    return issues


def apply_ops(
    snapshot: Snapshot,
    ops: Sequence[Op],
    *,
    active_claims_cap: int = DEFAULT_ACTIVE_CLAIMS_CAP,
) -> AppliedBatch:
    """Apply ``ops`` in order to ``snapshot``; the result is version + 1.

    Raises one ``ConfigError`` (source ``ops``) naming every issue in the batch.
    """
    wire: list[dict[str, Any]] = [dict(item) for item in snapshot.wire]
    status: dict[str, str] = {claim.id: claim.status for claim in snapshot.claims}
    index: dict[str, int] = {claim.id: i for i, claim in enumerate(snapshot.claims)}
    issues: list[str] = []
    added = superseded = staled = 0
    archived: Counter[str] = Counter()

    def append(claim_wire: dict[str, Any], claim_id: str) -> None:
        index[claim_id] = len(wire)
        status[claim_id] = "active"
        wire.append(claim_wire)

    def set_status(claim_id: str, value: str) -> None:
        status[claim_id] = value
        wire[index[claim_id]]["status"] = value  # in place: the key keeps its position

    for i, op in enumerate(ops):
        where = f"ops[{i}]"
        if isinstance(op, AddClaim):
            found = _new_claim_issues(where, op.claim) + _gate_issues(where, op.claim, op.gate)
            if op.claim.id in status:
                found.append(f"{where}: claim id {op.claim.id!r} already exists")
            issues.extend(found)
            if not found:
                append(claim_to_wire(op.claim), op.claim.id)
                added += 1
        elif isinstance(op, SupersedeClaim):
            found = _new_claim_issues(where, op.by) + _gate_issues(where, op.by, op.gate)
            prior = status.get(op.claim_id)
            if prior is None:
                found.append(f"{where}: no claim {op.claim_id!r} to supersede")
            elif prior not in ("active", "stale"):
                found.append(
                    f"{where}: claim {op.claim_id!r} is {prior}; only an active or "
                    "stale claim can be superseded"
                )
            if op.by.id in status:
                found.append(f"{where}: claim id {op.by.id!r} already exists")
            if op.by.supersedes not in (None, op.claim_id):
                found.append(f"{where}: replacement says it supersedes {op.by.supersedes!r}")
            issues.extend(found)
            if not found:
                set_status(op.claim_id, "superseded")
                replacement = claim_to_wire(op.by)
                replacement["supersedes"] = op.claim_id
                append(replacement, op.by.id)
                added += 1
                superseded += 1
        elif isinstance(op, ArchiveClaim):
            prior = status.get(op.claim_id)
            if op.reason not in ARCHIVE_REASONS:
                issues.append(
                    f"{where}: archive reason {op.reason!r} is not one of "
                    + ", ".join(ARCHIVE_REASONS)
                )
            elif prior is None:
                issues.append(f"{where}: no claim {op.claim_id!r} to archive")
            elif prior in ("archived", "superseded"):
                issues.append(f"{where}: claim {op.claim_id!r} is already {prior}")
            else:
                set_status(op.claim_id, "archived")
                archived[op.reason] += 1
        elif isinstance(op, MarkStale):
            prior = status.get(op.claim_id)
            if op.reason != "canary-drift":
                issues.append(f"{where}: mark_stale reason must be 'canary-drift'")
            elif prior is None:
                issues.append(f"{where}: no claim {op.claim_id!r} to mark stale")
            elif prior == "active":
                set_status(op.claim_id, "stale")
                staled += 1
        else:  # pragma: no cover - the type checker keeps this unreachable
            issues.append(f"{where}: unknown op {op!r}")

    if not issues:
        issues.extend(_cap_issues(snapshot, wire, active_claims_cap))
    if issues:
        raise ConfigError("ops", issues)
    counts = OpCounts(added=added, superseded=superseded, archived=dict(archived), staled=staled)
    return AppliedBatch(snapshot=build_snapshot(snapshot.version + 1, wire), counts=counts)


def _active_pairs(items: Sequence[Mapping[str, Any]]) -> Counter[tuple[str, str]]:
    return Counter(
        (item["subject"]["model"], item["taskClass"])
        for item in items
        if item["status"] == "active"
    )


def _cap_issues(before: Snapshot, after: Sequence[Mapping[str, Any]], cap: int) -> list[str]:
    old = _active_pairs(before.wire)
    new = _active_pairs(after)
    return [
        f"cap: {count} active claims for ({model}, {task_class}) exceed the cap of {cap}; "
        "archive or supersede older ones in the same batch"
        for (model, task_class), count in sorted(new.items())
        if count > cap and count > old.get((model, task_class), 0)
    ]
