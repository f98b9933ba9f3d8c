"""Claim and op builders shared by the tests."""

from __future__ import annotations

from typing import Any

from kb.store.models import ModelClaim
from kb.store.ops import AddClaim, EvalCommitterGate, HumanGate
from kb.store.ttl import claim_expiry

GATE = EvalCommitterGate(committer_id="ci", report_id="r1")
HUMAN = HumanGate(approver="alice", at="2026-07-01", ruled_out=("prompt",))


def eval_claim(claim_id: str = "c1", **overrides: Any) -> ModelClaim:
    """An eval-measured claim; keyword overrides use wire names (``taskClass``)."""
    data: dict[str, Any] = {
        "id": claim_id,
        "subject": {"model": "openai:gpt-4o-mini"},
        "taskClass": "extraction",
        "polarity": "strength",
        "statement": "sweep passRate 0.95 over 20 extraction cases: at or above the strength band",
        "class": "eval-measured",
        "status": "active",
        "evidence": [{"kind": "eval", "reportId": "r1", "caseIds": ["a", "b"]}],
        "metrics": {"passRate": 0.95, "n": 20, "graderId": "eval-suite"},
        "confidence": "high",
        "observedAt": "2026-07-01T00:00:00.000Z",
        "author": {"kind": "eval-pipeline", "id": "ci"},
    }
    data.update(overrides)
    data.setdefault("expiresAt", claim_expiry(data["class"], data["polarity"], data["observedAt"]))
    return ModelClaim.model_validate(data, strict=True)


def human_claim(claim_id: str = "h1", **overrides: Any) -> ModelClaim:
    """A human-editorial claim; keyword overrides use wire names."""
    data: dict[str, Any] = {
        "id": claim_id,
        "subject": {"model": "openai:gpt-4o-mini"},
        "taskClass": "extraction",
        "polarity": "weakness",
        "statement": "drops nested fields in long invoices",
        "class": "human-editorial",
        "status": "active",
        "evidence": [{"kind": "journal", "runId": "run-1", "entryRef": 3}],
        "confidence": "low",
        "observedAt": "2026-07-01T00:00:00.000Z",
        "author": {"kind": "human", "id": "alice"},
    }
    data.update(overrides)
    data.setdefault("expiresAt", claim_expiry(data["class"], data["polarity"], data["observedAt"]))
    return ModelClaim.model_validate(data, strict=True)


def add(claim: ModelClaim) -> AddClaim:
    """Add through the gate that fits the claim's class."""
    return AddClaim(claim, GATE if claim.claim_class == "eval-measured" else HUMAN)
