"""Selecting claims: the filters behind ``kb list`` and the TTL state at an instant."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from kb.errors import ConfigError, ModelRefError
from kb.schema import ModelRef
from kb.store.snapshot import ClaimView, Snapshot
from kb.store.ttl import claim_expired


@dataclass(frozen=True)
class ClaimFilter:
    """Which claims to show; ``None`` means no constraint."""

    model: str | None = None
    """Exact ``provider:model``, or ``provider:model@effort`` to pin the effort too."""
    task_class: str | None = None
    statuses: frozenset[str] | None = None
    expired: bool | None = None
    """``True`` only expired, ``False`` only unexpired, at the filter's instant."""

    def matches(self, claim: ClaimView, as_of: int) -> bool:
        """Whether ``claim`` passes every constraint at instant ``as_of`` (ms)."""
        if self.model is not None:
            target = claim.subject_key if "@" in self.model else claim.model
            if target != self.model:
                return False
        if self.task_class is not None and claim.task_class != self.task_class:
            return False
        if self.statuses is not None and claim.status not in self.statuses:
            return False
        if self.expired is not None and claim_expired(claim, as_of) != self.expired:
            return False
        return True


def check_model_filter(text: str) -> None:
    """``provider:model`` or ``provider:model@effort``; anything else is refused."""
    ref, at, effort = text.partition("@")
    try:
        ModelRef.parse(ref)
    except ModelRefError as exc:
        raise ConfigError("--model", str(exc)) from None
    if at and not effort:
        raise ConfigError("--model", f"{text!r}: an effort must follow '@'")


def ttl_state(claim: ClaimView, as_of: int) -> str:
    """``holds`` or ``expired`` at ``as_of``."""
    return "expired" if claim_expired(claim, as_of) else "holds"


def select(snapshot: Snapshot, claim_filter: ClaimFilter, as_of: int) -> Iterator[int]:
    """Positions of the matching claims (decided on the light entries, nothing parsed)."""
    for index, entry in enumerate(snapshot.entries):
        if claim_filter.matches(entry, as_of):
            yield index


def near_miss(wanted: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for an id close to ``wanted``, else ``""``."""
    import difflib

    ids = list(known)
    holding = sorted((i for i in ids if wanted and wanted in i), reverse=True)
    if holding:  # a part of an id (``scripted:m/echo``): the newest ids holding it
        more = f", +{len(holding) - 2} more" if len(holding) > 2 else ""
        return " (did you mean " + " or ".join(repr(f) for f in holding[:2]) + f"{more}?)"
    found = difflib.get_close_matches(wanted, ids, n=3, cutoff=0.85)
    if not found:
        return ""
    # ids share long prefixes (the report id): only the closest, or a tie, is a suggestion
    score = [difflib.SequenceMatcher(None, wanted, f).ratio() for f in found]
    found = [f for f, r in zip(found, score, strict=True) if r >= max(score) - 0.005][:2]
    return " (did you mean " + " or ".join(repr(f) for f in found) + "?)"
