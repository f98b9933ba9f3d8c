"""The persisted shapes of the knowledge store, field for field as rulvar writes them.

Python attributes are snake_case; the wire names (``taskClass``, ``class``,
``observedAt`` …) are the aliases. Every model forbids unknown keys and is
strict (no ``"5"`` → ``5`` coercion), so a typo or a wrong type in a
hand-edited store is refused rather than silently repaired. Optional fields
are omitted on the wire when absent, never written as ``null``
(:func:`claim_to_wire`).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kb.store.ttl import InstantError, parse_instant

TASK_CLASS_VOCABULARY = (
    "code-edit",
    "investigation",
    "synthesis",
    "extraction",
    "planning",
    "judging",
)
STATEMENT_MAX_UTF16 = 200

Polarity = Literal["strength", "weakness"]
ClaimClass = Literal["eval-measured", "human-editorial"]
ClaimStatus = Literal["active", "stale", "superseded", "archived"]
Confidence = Literal["high", "medium", "low"]
ArchiveReason = Literal["deprecated", "stale", "rejected", "falsified"]
RuledOut = Literal["prompt", "tools", "difficulty", "transient-provider"]

NonEmpty = Annotated[str, Field(min_length=1)]


def utf16_length(text: str) -> int:
    """Length as JavaScript's ``String.prototype.length`` counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class Subject(_Wire):
    """Who a claim is about: a model ref and, when it matters, the effort it ran at."""

    model: NonEmpty
    """``provider:model``, e.g. ``openai:gpt-4o-mini``."""
    effort: NonEmpty | None = None
    """Reasoning effort; part of the subject's identity (``low`` ≠ ``high``)."""

    @field_validator("model")
    @classmethod
    def _model_has_provider(cls, value: str) -> str:
        if ":" not in value:
            raise ValueError(f"model {value!r} must be 'provider:model'")
        return value

    @property
    def key(self) -> str:
        """``model`` or ``model@effort``: the subject as one string (claim ids use it)."""
        return f"{self.model}@{self.effort}" if self.effort else self.model


class EvalEvidence(_Wire):
    """An eval report and the case names that make up the measurement."""

    kind: Literal["eval"]
    report_id: NonEmpty = Field(alias="reportId")
    """The sweep or eval report the measurement came from."""
    case_ids: list[str] = Field(alias="caseIds")
    """Case names in plan order."""


class JournalEvidence(_Wire):
    """A pointer into a rulvar run journal."""

    kind: Literal["journal"]
    run_id: NonEmpty = Field(alias="runId")
    entry_ref: int = Field(alias="entryRef", ge=0)


Evidence = Annotated[EvalEvidence | JournalEvidence, Field(discriminator="kind")]


def _finite_fraction(value: float) -> float:
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"must be a finite fraction in [0, 1], got {value!r}")
    return value


class Baseline(_Wire):
    """The pass rate of the model this measurement was compared against."""

    model: NonEmpty
    pass_rate: float = Field(alias="passRate")

    _check_rate = field_validator("pass_rate")(_finite_fraction)


class Metrics(_Wire):
    """The numbers behind an eval-measured claim."""

    pass_rate: float = Field(alias="passRate")
    """Fraction of the cell's cases that passed."""
    n: int = Field(ge=0)
    """Number of cases measured."""
    grader_id: NonEmpty = Field(alias="graderId")
    """Which grader produced the verdicts (``eval-suite`` for sweeps)."""
    cost: float | None = Field(default=None, ge=0)
    """Total USD the cell's runs cost."""
    baseline: Baseline | None = None

    _check_rate = field_validator("pass_rate")(_finite_fraction)

    @field_validator("cost")
    @classmethod
    def _finite_cost(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be finite")
        return value


class ModelEpoch(_Wire):
    """What the model looked like when measured; a fingerprint change means drift."""

    registry_version: str | None = Field(default=None, alias="registryVersion")
    pricing_version: str | None = Field(default=None, alias="pricingVersion")
    caps_hash: str | None = Field(default=None, alias="capsHash")
    canary_fingerprint: str | None = Field(default=None, alias="canaryFingerprint")


class Author(_Wire):
    """Who wrote the claim: the eval pipeline (a committer id) or a person."""

    kind: Literal["eval-pipeline", "human"]
    id: NonEmpty


class Origin(_Wire):
    """Where a human claim was proposed (a rulvar kb-proposal journal entry)."""

    kind: Literal["kb-proposal"]
    run_id: NonEmpty = Field(alias="runId")
    entry_ref: int = Field(alias="entryRef", ge=0)


class ModelClaim(_Wire):
    """One belief about one model on one task class, with its evidence and lifetime."""

    id: NonEmpty
    subject: Subject
    task_class: NonEmpty = Field(alias="taskClass")
    """Open vocabulary; see ``TASK_CLASS_VOCABULARY`` for the conventional names."""
    polarity: Polarity
    statement: NonEmpty
    """A template render (≤ 200 UTF-16 units), never text quoted from a model."""
    claim_class: ClaimClass = Field(alias="class")
    status: ClaimStatus
    evidence: list[Evidence] = Field(min_length=1)
    metrics: Metrics | None = None
    """Present if and only if the claim is eval-measured."""
    confidence: Confidence
    observed_at: str = Field(alias="observedAt")
    expires_at: str = Field(alias="expiresAt")
    model_epoch: ModelEpoch | None = Field(default=None, alias="modelEpoch")
    author: Author
    origin: Origin | None = None
    supersedes: NonEmpty | None = None
    """Id of the claim this one replaced."""

    @field_validator("statement")
    @classmethod
    def _statement_length(cls, value: str) -> str:
        if utf16_length(value) > STATEMENT_MAX_UTF16:
            raise ValueError(
                f"is {utf16_length(value)} characters; the limit is {STATEMENT_MAX_UTF16}"
            )
        return value

    @field_validator("observed_at", "expires_at")
    @classmethod
    def _instant(cls, value: str) -> str:
        try:
            parse_instant(value)
        except InstantError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _metrics_iff_eval(self) -> ModelClaim:
        if self.claim_class == "eval-measured" and self.metrics is None:
            raise ValueError("an eval-measured claim needs a metrics block")
        if self.claim_class == "human-editorial" and self.metrics is not None:
            raise ValueError("a human-editorial claim must not carry metrics")
        return self


def claim_to_wire(claim: BaseModel) -> dict[str, Any]:
    """The claim as the JSON object rulvar writes: aliases, absent fields omitted."""
    return claim.model_dump(by_alias=True, exclude_none=True)


def claim_from_wire(data: Any) -> ModelClaim:
    """Validate one wire object as a claim (raises pydantic's ``ValidationError``)."""
    return ModelClaim.model_validate(data, strict=True)
