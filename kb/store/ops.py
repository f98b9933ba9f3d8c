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
* ``CompactClaim`` — kb only: removes a ``superseded`` or ``archived`` claim
  from the file (``kb compact``); it stays in git history.

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
from typing import Literal

from kb.errors import ConfigError
from kb.schema import ARCHIVE_REASONS, LIVE_STATUSES, RULED_OUT_VALUES, ArchiveReason, RuledOut
from kb.store.claim_texts import PatchedTexts, claims_hash_of
from kb.store.models import ModelClaim, claim_to_wire
from kb.store.snapshot import Snapshot, entry_of
from kb.store.ttl import stored_instant

DEFAULT_ACTIVE_CLAIMS_CAP = 8


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


@dataclass(frozen=True)
class CompactClaim:
    """Remove a superseded or archived claim from the file (git history keeps it)."""

    claim_id: str


Op = AddClaim | SupersedeClaim | ArchiveClaim | MarkStale | CompactClaim


@dataclass(frozen=True)
class OpCounts:
    """What a batch did, for commit messages and summaries."""

    added: int = 0
    superseded: int = 0
    archived: Mapping[str, int] = field(default_factory=dict)
    staled: int = 0
    compacted: int = 0

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
        if self.compacted:
            parts.append(f"{self.compacted} compacted")
        return ", ".join(parts) if parts else "no changes"


@dataclass(frozen=True)
class AppliedBatch:
    """The next snapshot and what the batch did to get there."""

    snapshot: Snapshot
    counts: OpCounts


def _gate_issues(where: str, claim: ModelClaim, gate: Gate) -> list[str]:
    if isinstance(gate, EvalCommitterGate):
        return _eval_gate_issues(where, claim, gate)
    return _human_gate_issues(where, claim, gate)


def _eval_gate_issues(where: str, claim: ModelClaim, gate: EvalCommitterGate) -> list[str]:
    checks = (
        (bool(gate.committer_id), "eval-committer gate needs a committerId"),
        (bool(gate.report_id), "eval-committer gate needs a reportId"),
        (
            claim.claim_class == "eval-measured",
            "eval-committer gate only admits eval-measured claims",
        ),
        (
            claim.author["kind"] == "eval-pipeline",
            "eval-committer gate needs author.kind 'eval-pipeline'",
        ),
        (claim.metrics is not None, "eval-committer gate needs a metrics block"),
    )
    return [f"{where}: {problem}" for ok, problem in checks if not ok]


def _human_gate_issues(where: str, claim: ModelClaim, gate: HumanGate) -> list[str]:
    allowed = ", ".join(RULED_OUT_VALUES)
    checks = (
        (bool(gate.approver), "human gate needs an approver"),
        (bool(gate.ruled_out), f"human gate needs attribution.ruledOut (one or more of {allowed})"),
        (claim.claim_class == "human-editorial", "human gate only admits human-editorial claims"),
        (claim.metrics is None, "human gate refuses a metrics block"),
        (claim.author["kind"] == "human", "human gate needs author.kind 'human'"),
    )
    issues = [f"{where}: {problem}" for ok, problem in checks if not ok]
    issues += [
        f"{where}: ruledOut value {value!r} is not one of {allowed}"
        for value in gate.ruled_out
        if value not in RULED_OUT_VALUES
    ]
    return issues


def _new_claim_issues(where: str, claim: ModelClaim) -> list[str]:
    issues = []
    if claim.status != "active":
        issues.append(f"{where}: a new claim must be active, not {claim.status!r}")
    if stored_instant(claim.expires_at) <= stored_instant(claim.observed_at):
        issues.append(f"{where}: expiresAt must be after observedAt")
    return issues


class _Batch:
    """The claims as the batch has changed them so far, and what it did.

    Each op is first checked against this state (its issues collected) and
    applied only when it has none, so later ops see earlier ones: a claim
    added in the batch can be archived in the same batch. Only what changes
    is held: new statuses by position, and the appended claims.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.statuses: dict[int, str] = {}
        self.appended: list[ModelClaim] = []
        self.appended_at: dict[str, int] = {}
        self.issues: list[str] = []
        self.removed: set[int] = set()
        self.added = self.superseded = self.staled = 0
        self.archived: Counter[str] = Counter()

    def status(self, claim_id: str) -> str | None:
        position = self.appended_at.get(claim_id)
        if position is not None:
            return self.appended[position].status
        found = self.snapshot.index.get(claim_id)
        if found is None or found in self.removed:
            return None
        return self.statuses.get(found, self.snapshot.entries[found].status)

    def append(self, claim: ModelClaim) -> None:
        self.appended_at[claim.id] = len(self.appended)
        self.appended.append(claim)
        self.added += 1

    def set_status(self, claim_id: str, value: str) -> None:
        position = self.appended_at.get(claim_id)
        if position is not None:
            self.appended[position] = self.appended[position].model_copy(update={"status": value})
        else:
            self.statuses[self.snapshot.index[claim_id]] = value

    def remove(self, claim_id: str) -> None:
        self.removed.add(self.snapshot.index[claim_id])

    def counts(self) -> OpCounts:
        return OpCounts(
            self.added, self.superseded, dict(self.archived), self.staled, len(self.removed)
        )

    def active_pairs(self) -> Counter[tuple[str, str]]:
        """Active claims per (model, task class) once the batch is applied."""
        pairs: Counter[tuple[str, str]] = Counter()
        for position, entry in enumerate(self.snapshot.entries):
            if position in self.removed:
                continue
            if self.statuses.get(position, entry.status) == "active":
                pairs[(entry.model, entry.task_class)] += 1
        for claim in self.appended:
            if claim.status == "active":
                pairs[(claim.model, claim.task_class)] += 1
        return pairs

    def result(self) -> Snapshot:
        """The next snapshot: the base with its changes, rendered and hashed incrementally."""
        base = self.snapshot
        entries = list(base.entries)
        for position, status in self.statuses.items():
            entries[position] = entries[position]._replace(status=status)
        if self.removed:
            entries = [e for i, e in enumerate(entries) if i not in self.removed]
        wires = [claim_to_wire(claim) for claim in self.appended]
        entries += [entry_of(wire) for wire in wires]
        texts = PatchedTexts(base.texts, self.statuses, wires, self.removed)
        return Snapshot(
            base.version + 1,
            claims_hash_of(texts),
            texts=texts,
            entries=entries,
            extra=base.extra,
        )


def _add(batch: _Batch, where: str, op: AddClaim) -> None:
    found = _new_claim_issues(where, op.claim) + _gate_issues(where, op.claim, op.gate)
    if batch.status(op.claim.id) is not None:
        found.append(f"{where}: claim id {op.claim.id!r} already exists")
    batch.issues += found
    if not found:
        batch.append(op.claim)


def _supersede(batch: _Batch, where: str, op: SupersedeClaim) -> None:
    found = _new_claim_issues(where, op.by) + _gate_issues(where, op.by, op.gate)
    prior = batch.status(op.claim_id)
    if prior is None:
        found.append(f"{where}: no claim {op.claim_id!r} to supersede")
    elif prior not in LIVE_STATUSES:
        found.append(
            f"{where}: claim {op.claim_id!r} is {prior}; only an active or stale claim "
            "can be superseded"
        )
    if batch.status(op.by.id) is not None:
        found.append(f"{where}: claim id {op.by.id!r} already exists")
    if op.by.supersedes not in (None, op.claim_id):
        found.append(f"{where}: replacement says it supersedes {op.by.supersedes!r}")
    batch.issues += found
    if not found:
        batch.set_status(op.claim_id, "superseded")
        batch.append(op.by.model_copy(update={"supersedes": op.claim_id}))
        batch.superseded += 1


def _archive(batch: _Batch, where: str, op: ArchiveClaim) -> None:
    prior = batch.status(op.claim_id)
    if op.reason not in ARCHIVE_REASONS:
        batch.issues.append(
            f"{where}: archive reason {op.reason!r} is not one of {', '.join(ARCHIVE_REASONS)}"
        )
    elif prior is None:
        batch.issues.append(f"{where}: no claim {op.claim_id!r} to archive")
    elif prior not in LIVE_STATUSES:
        batch.issues.append(f"{where}: claim {op.claim_id!r} is already {prior}")
    else:
        batch.set_status(op.claim_id, "archived")
        batch.archived[op.reason] += 1


def _mark_stale(batch: _Batch, where: str, op: MarkStale) -> None:
    prior = batch.status(op.claim_id)
    if op.reason != "canary-drift":
        batch.issues.append(f"{where}: mark_stale reason must be 'canary-drift'")
    elif prior is None:
        batch.issues.append(f"{where}: no claim {op.claim_id!r} to mark stale")
    elif prior == "active":
        batch.set_status(op.claim_id, "stale")
        batch.staled += 1


def _compact(batch: _Batch, where: str, op: CompactClaim) -> None:
    prior = batch.status(op.claim_id)
    if prior is None:
        batch.issues.append(f"{where}: no claim {op.claim_id!r} to compact")
    elif op.claim_id in batch.appended_at or prior not in ("superseded", "archived"):
        batch.issues.append(
            f"{where}: claim {op.claim_id!r} is {prior}; only a superseded or archived "
            "claim already in the file can be compacted"
        )
    else:
        batch.remove(op.claim_id)


def apply_ops(
    snapshot: Snapshot,
    ops: Sequence[Op],
    *,
    active_claims_cap: int = DEFAULT_ACTIVE_CLAIMS_CAP,
) -> AppliedBatch:
    """Apply ``ops`` in order to ``snapshot``; the result is version + 1.

    Raises one ``ConfigError`` (source ``ops``) naming every issue in the batch.
    """
    batch = _Batch(snapshot)
    for i, op in enumerate(ops):
        where = f"ops[{i}]"
        if isinstance(op, AddClaim):
            _add(batch, where, op)
        elif isinstance(op, SupersedeClaim):
            _supersede(batch, where, op)
        elif isinstance(op, ArchiveClaim):
            _archive(batch, where, op)
        elif isinstance(op, CompactClaim):
            _compact(batch, where, op)
        else:
            _mark_stale(batch, where, op)
    if not batch.issues:
        batch.issues += _cap_issues(
            _active_pairs(snapshot), batch.active_pairs(), active_claims_cap
        )
    if batch.issues:
        raise ConfigError("ops", batch.issues)
    return AppliedBatch(snapshot=batch.result(), counts=batch.counts())


def _active_pairs(snapshot: Snapshot) -> Counter[tuple[str, str]]:
    return Counter(
        (entry.model, entry.task_class) for entry in snapshot.entries if entry.status == "active"
    )


def _cap_issues(
    old: Counter[tuple[str, str]], new: Counter[tuple[str, str]], cap: int
) -> list[str]:
    return [
        f"cap: {count} active claims for ({model}, {task_class}) exceed the cap of {cap}; "
        "archive or supersede older ones in the same batch"
        for (model, task_class), count in sorted(new.items())
        if count > cap and count > old.get((model, task_class), 0)
    ]
