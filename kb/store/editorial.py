"""What people commit by hand: editorial notes, archives and deprecations."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from kb.errors import ConfigError, ModelRefError
from kb.schema import ArchiveReason, Confidence, Polarity, RuledOut, Subject, validation_issues
from kb.store.models import Author, EvalEvidence, JournalEvidence, ModelClaim, subject_wire
from kb.store.ops import ArchiveClaim, HumanGate, Op
from kb.store.snapshot import Snapshot
from kb.store.ttl import claim_expiry, format_instant


def parse_evidence(text: str) -> EvalEvidence | JournalEvidence:
    """``eval:REPORT_ID[#case1,case2]`` or ``journal:RUN_ID:ENTRY_REF`` → evidence.

    A report id keeps its colons (kb's own ids hold an ISO instant); the
    case names follow a ``#``.
    """
    kind, _, rest = text.partition(":")
    if kind == "eval" and rest:
        report, _, cases = rest.partition("#")
        case_ids = [case for case in cases.split(",") if case] if cases else []
        if report:
            return EvalEvidence(kind="eval", reportId=report, caseIds=case_ids)
    if kind == "journal" and rest:
        run_id, _, entry = rest.rpartition(":")
        if run_id and entry.isdigit():
            return JournalEvidence(kind="journal", runId=run_id, entryRef=int(entry))
    raise ConfigError(
        "--evidence",
        f"{text!r} must be 'eval:REPORT_ID[#case1,case2]' or 'journal:RUN_ID:ENTRY_REF' "
        "(ENTRY_REF a whole number)",
    )


def editorial_claim(
    *,
    model: str,
    effort: str | None,
    task_class: str,
    polarity: Polarity,
    statement: str,
    approver: str,
    evidence: Sequence[EvalEvidence | JournalEvidence],
    observed_at: int,
    confidence: Confidence = "low",
    claim_id: str | None = None,
) -> ModelClaim:
    """A human-editorial claim observed at ``observed_at`` (ms), ready for the human gate.

    The default id is ``note/<model>[@effort]/<taskClass>/<observedAt>``.
    """
    observed = format_instant(observed_at)
    try:
        subject = Subject(model, effort)
    except ModelRefError as exc:
        raise ConfigError("--model", str(exc)) from None
    try:
        return ModelClaim(
            id=claim_id or f"note/{subject.key}/{task_class}/{observed}",
            subject=subject_wire(subject),
            task_class=task_class,
            polarity=polarity,
            statement=statement,
            claim_class="human-editorial",
            status="active",
            evidence=list(evidence),
            confidence=confidence,
            observed_at=observed,
            expires_at=claim_expiry("human-editorial", polarity, observed),
            author=Author(kind="human", id=approver),
        )
    except ValidationError as exc:
        raise ConfigError("note", validation_issues("", exc)) from None


def human_gate(
    approver: str, at: int, ruled_out: Sequence[RuledOut], contrast_evidence: str | None = None
) -> HumanGate:
    """The gate a person's note passes through."""
    return HumanGate(
        approver=approver,
        at=format_instant(at),
        ruled_out=tuple(ruled_out),
        contrast_evidence=contrast_evidence,
    )


def deprecate_ops(snapshot: Snapshot, model: str) -> list[Op]:
    """Archive (``deprecated``) every active or stale claim about ``model``, any effort.

    A model no claim has ever been about is refused: most likely a typo.
    """
    if not any(claim.model == model for claim in snapshot.entries):
        raise ConfigError("deprecate", f"no claim in the store is about {model!r}")
    return [
        ArchiveClaim(claim.id, "deprecated")
        for claim in snapshot.entries
        if claim.model == model and claim.status in ("active", "stale")
    ]


def archive_ops(snapshot: Snapshot, claim_id: str, reason: ArchiveReason) -> list[Op]:
    """One archive op, after checking the claim can be archived (a clear error otherwise)."""
    claim = snapshot.get(claim_id)
    if claim is None:
        from kb.store.query import near_miss

        raise ConfigError(
            "archive", f"no claim with id {claim_id!r}{near_miss(claim_id, snapshot.index)}"
        )
    if claim.status in ("archived", "superseded"):
        raise ConfigError("archive", f"claim {claim_id!r} is already {claim.status}")
    return [ArchiveClaim(claim_id, reason)]
