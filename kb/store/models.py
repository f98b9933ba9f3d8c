"""The persisted shapes of the knowledge store, field for field as rulvar writes them.

A claim is a :class:`ModelClaim` (pydantic, snake_case attributes with the
wire names — ``taskClass``, ``class``, ``observedAt`` … — as aliases). Its
nested objects (subject, evidence, metrics, author …) are plain JSON objects
described by ``TypedDict`` s and keep their wire keys: validating a
10,000-claim store builds one model per claim instead of seven, which is
most of the difference between 0.25 s and 0.1 s per read.

Every shape forbids unknown keys and is strict (no ``"5"`` → ``5``
coercion), so a typo or a wrong type in a hand-edited store is refused
rather than silently repaired. Optional fields are omitted on the wire when
absent, never written as ``null`` (:func:`claim_to_wire`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal, NotRequired

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict

from kb.errors import InstantError
from kb.schema import (
    STRICT,
    ArchiveReason,
    AuthorKind,
    ClaimClass,
    ClaimStatus,
    Confidence,
    ModelRefText,
    Polarity,
    RuledOut,
    StrictModel,
    Subject,
    subject_key,
    utf16_length,
)
from kb.stats import wilson_interval
from kb.store.canonical import LONE_SURROGATE
from kb.store.ttl import parse_instant, read_stored_instant

__all__ = [
    "ArchiveReason",
    "ClaimClass",
    "ClaimStatus",
    "Confidence",
    "ModelClaim",
    "Polarity",
    "RuledOut",
    "claim_from_wire",
    "claim_to_wire",
]

STATEMENT_MAX_UTF16 = 200


def _fraction(value: float) -> float:
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError("must be a finite fraction in [0, 1]")
    return value


def _cost(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError("must be a finite nonnegative number")
    return value


def _statement(value: str) -> str:
    # A character is at most two UTF-16 units: a short text needs no counting.
    if len(value) > STATEMENT_MAX_UTF16 // 2 and utf16_length(value) > STATEMENT_MAX_UTF16:
        raise ValueError(f"is {utf16_length(value)} characters; the limit is {STATEMENT_MAX_UTF16}")
    return value


def _instant(value: str) -> str:
    try:
        parse_instant(value)
    except InstantError as exc:
        raise ValueError(str(exc)) from None
    return value


NonEmpty = Annotated[str, Field(min_length=1)]
Fraction = Annotated[float, AfterValidator(_fraction)]
Instant = Annotated[str, AfterValidator(_instant)]


@with_config(STRICT)
class SubjectWire(TypedDict):
    """Who a claim is about: ``model`` is ``provider:model``; ``effort`` is part of identity."""

    model: ModelRefText
    effort: NotRequired[NonEmpty]


@with_config(STRICT)
class EvalEvidence(TypedDict):
    """An eval report and the case names (in plan order) that make up the measurement."""

    kind: Literal["eval"]
    reportId: NonEmpty
    caseIds: list[str]


@with_config(STRICT)
class JournalEvidence(TypedDict):
    """A pointer into a rulvar run journal."""

    kind: Literal["journal"]
    runId: NonEmpty
    entryRef: Annotated[int, Field(ge=0)]


Evidence = Annotated[EvalEvidence | JournalEvidence, Field(discriminator="kind")]


@with_config(STRICT)
class Baseline(TypedDict):
    """The pass rate of the model a measurement was compared against."""

    model: NonEmpty
    passRate: Fraction


@with_config(STRICT)
class Metrics(TypedDict):
    """The numbers behind an eval-measured claim (``cost`` in USD for the whole cell)."""

    passRate: Fraction
    n: Annotated[int, Field(ge=0)]
    graderId: NonEmpty
    cost: NotRequired[Annotated[float, AfterValidator(_cost)]]
    baseline: NotRequired[Baseline]


@with_config(STRICT)
class ModelEpoch(TypedDict, total=False):
    """What the model looked like when measured; a canary fingerprint change means drift."""

    registryVersion: str
    pricingVersion: str
    capsHash: str
    canaryFingerprint: str


@with_config(STRICT)
class Author(TypedDict):
    """Who wrote the claim: the eval pipeline (a committer id) or a person."""

    kind: AuthorKind
    id: NonEmpty


@with_config(STRICT)
class Origin(TypedDict):
    """Where a human claim was proposed (a rulvar kb-proposal journal entry)."""

    kind: Literal["kb-proposal"]
    runId: NonEmpty
    entryRef: Annotated[int, Field(ge=0)]


class ModelClaim(StrictModel):
    """One belief about one model on one task class, with its evidence and lifetime."""

    model_config = ConfigDict(populate_by_name=True)

    id: NonEmpty
    subject: SubjectWire
    task_class: NonEmpty = Field(alias="taskClass")
    """Open vocabulary; see ``TASK_CLASS_VOCABULARY`` for the conventional names."""
    polarity: Polarity
    statement: Annotated[NonEmpty, AfterValidator(_statement)]
    """A template render (≤ 200 UTF-16 units), never text quoted from a model."""
    claim_class: ClaimClass = Field(alias="class")
    status: ClaimStatus
    evidence: Annotated[list[Evidence], Field(min_length=1)]
    metrics: Metrics | None = None
    """Present if and only if the claim is eval-measured."""
    confidence: Confidence
    observed_at: Instant = Field(alias="observedAt")
    expires_at: Instant = Field(alias="expiresAt")
    model_epoch: ModelEpoch | None = Field(default=None, alias="modelEpoch")
    author: Author
    origin: Origin | None = None
    supersedes: NonEmpty | None = None
    """Id of the claim this one replaced."""

    @model_validator(mode="after")
    def _metrics_iff_eval(self) -> ModelClaim:
        if self.claim_class == "eval-measured" and self.metrics is None:
            raise ValueError("an eval-measured claim needs a metrics block")
        if self.claim_class == "human-editorial" and self.metrics is not None:
            raise ValueError("a human-editorial claim must not carry metrics")
        return self

    @property
    def model(self) -> str:
        """The subject's ``provider:model``."""
        return self.subject["model"]

    @property
    def effort(self) -> str | None:
        """The subject's effort, if any."""
        return self.subject.get("effort")

    @property
    def subject_key(self) -> str:
        """``model`` or ``model@effort``: the subject as one string (claim ids use it)."""
        return subject_key(self.subject["model"], self.subject.get("effort"))

    @property
    def canary_fingerprint(self) -> str | None:
        """The canary fingerprint recorded when the claim was measured."""
        return self.model_epoch.get("canaryFingerprint") if self.model_epoch else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """The 95 % interval the gate used (``None`` for a note): see :func:`metrics_interval`."""
        return metrics_interval(self.metrics)


def metrics_successes(metrics: Metrics | Mapping[str, Any]) -> float:
    """The successes behind stored metrics: ``passRate × n`` held to ``[0, n]``.

    Fractional when the cases were repeated (a case's score is its mean over repeats).
    """
    n = float(metrics["n"])
    return min(n, max(0.0, float(metrics["passRate"]) * n))


def metrics_interval(metrics: Metrics | Mapping[str, Any] | None) -> tuple[float, float] | None:
    """The 95 % Wilson interval of a claim's metrics (``None`` for a note).

    Over ``n`` cases of the stored mean case score: the interval the gate used, so a
    view shows it and never recomputes it its own way.
    """
    if metrics is None:
        return None
    return wilson_interval(metrics_successes(metrics), int(metrics["n"]))


def subject_wire(subject: Subject) -> SubjectWire:
    """A claim's ``subject`` object for ``subject`` (effort omitted when absent)."""
    wire = SubjectWire(model=subject.model)
    if subject.effort:
        wire["effort"] = subject.effort
    return wire


def claim_to_wire(claim: ModelClaim) -> dict[str, Any]:
    """The claim as the JSON object rulvar writes: aliases, absent fields omitted."""
    return claim.model_dump(by_alias=True, exclude_none=True)


def validate_stored(model: type[BaseModel], data: Any) -> None:
    """Validate a claim as read (raises pydantic's ``ValidationError``).

    pydantic cannot read a lone surrogate, which JSON allows and rulvar
    accepts; such text is checked with U+FFFD in its place, which has the
    same UTF-16 length. The claim itself keeps the original text.
    """
    try:
        model.model_validate(data, strict=True)
    except ValidationError as exc:
        if not any(error["type"] == "string_unicode" for error in exc.errors()):
            raise
        model.model_validate(_surrogates_replaced(data), strict=True)


def _surrogates_replaced(value: Any) -> Any:
    if isinstance(value, str):
        return LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_surrogates_replaced(k): _surrogates_replaced(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_surrogates_replaced(v) for v in value]
    return value


def claim_from_wire(data: Any) -> ModelClaim:
    """Validate one wire object as a claim (raises pydantic's ``ValidationError``)."""
    return ModelClaim.model_validate(data, strict=True)


def _stored_instant(value: str) -> str:
    try:
        read_stored_instant(value)
    except InstantError as exc:
        raise ValueError(str(exc)) from None
    return value


def _has_colon(value: str) -> str:
    if ":" not in value:
        raise ValueError(f"model {value!r} must contain ':' (provider:model)")
    return value


_OPEN = ConfigDict(extra="allow", strict=True)


@with_config(_OPEN)
class _LenientSubject(TypedDict):
    model: Annotated[str, AfterValidator(_has_colon)]


@with_config(_OPEN)
class _LenientAuthor(TypedDict):
    kind: AuthorKind
    id: NonEmpty


class LenientClaim(BaseModel):
    """What rulvar's reader checks of a claim, and no more (unknown keys are kept).

    A stored claim that passes this but not :class:`ModelClaim` is read, with
    the differences reported as warnings by ``kb verify``; kb never writes one.
    """

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)

    id: NonEmpty
    subject: _LenientSubject
    task_class: NonEmpty = Field(alias="taskClass")
    polarity: Polarity
    statement: NonEmpty
    claim_class: ClaimClass = Field(alias="class")
    status: ClaimStatus
    evidence: Annotated[list[Any], Field(min_length=1)]
    confidence: Confidence
    observed_at: Annotated[str, AfterValidator(_stored_instant)] = Field(alias="observedAt")
    expires_at: Annotated[str, AfterValidator(_stored_instant)] = Field(alias="expiresAt")
    author: _LenientAuthor
