"""One immutable :class:`Snapshot` per version of the store, and the light view of a claim.

Logic reads a light :class:`ClaimEntry` per claim; a full :class:`ModelClaim`
is built only when asked for. Where the claims' bytes are is
:mod:`kb.store.claim_texts`; reading and validating a file is
:mod:`kb.store.validation`, writing one :mod:`kb.store.writing`.

**Cost independent of history.** A store file written by kb or rulvar is
read as spans (:mod:`kb.store.layout`), parsed 1,000 claims at a time by the
C parser and kept as bytes; the hash streams their canonical forms. A commit
re-renders and re-hashes only what it changed: unchanged claims are copied
byte for byte — their unknown keys and exact integers included — and a
status change patches one line. A file in any other layout is read whole and
rewritten in kb's layout.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cached_property
from typing import Any, NamedTuple, Protocol

from kb.store.claim_texts import ClaimTexts, WireTexts
from kb.store.models import ModelClaim, claim_to_wire

EMPTY_HASH = "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"


# -- the light view of a claim ----------

_INTERNED: dict[str, str] = {}


def _shared(text: str) -> str:
    """One object per repeated string (models, task classes, a night's instants)."""
    return _INTERNED.setdefault(text, text)


class ClaimEntry(NamedTuple):
    """The fields logic reads, without building the whole claim.

    A named tuple: a read builds one per claim, and a tuple is built in C
    (a frozen dataclass's ``__init__`` costs ~0.1 s more per 100,000 claims).
    """

    id: str
    status: str
    model: str
    effort: str | None
    task_class: str
    polarity: str
    claim_class: str
    observed_at: str
    expires_at: str
    canary_fingerprint: str | None

    @property
    def subject_key(self) -> str:
        """``model`` or ``model@effort``."""
        return f"{self.model}@{self.effort}" if self.effort else self.model


def entry_of(wire: Mapping[str, Any]) -> ClaimEntry:
    """The entry of a claim's wire object (one that passed the read boundary)."""
    shared = _shared if len(_INTERNED) < 200_000 else str
    subject = wire["subject"]
    effort = subject.get("effort")
    epoch = wire.get("modelEpoch")
    fingerprint = epoch.get("canaryFingerprint") if isinstance(epoch, dict) else None
    return ClaimEntry(
        wire["id"],
        shared(wire["status"]),
        shared(subject["model"]),
        shared(effort) if isinstance(effort, str) and effort else None,
        shared(wire["taskClass"]),
        shared(wire["polarity"]),
        shared(wire["class"]),
        shared(wire["observedAt"]),
        shared(wire["expiresAt"]),
        shared(fingerprint) if isinstance(fingerprint, str) else None,
    )


class ClaimView(Protocol):
    """What both a :class:`ClaimEntry` and a :class:`ModelClaim` tell about a claim."""

    @property
    def id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def effort(self) -> str | None: ...
    @property
    def task_class(self) -> str: ...
    @property
    def polarity(self) -> str: ...
    @property
    def claim_class(self) -> str: ...
    @property
    def observed_at(self) -> str: ...
    @property
    def expires_at(self) -> str: ...
    @property
    def canary_fingerprint(self) -> str | None: ...
    @property
    def subject_key(self) -> str: ...


_FIELD_OF_ALIAS = {(info.alias or name): name for name, info in ModelClaim.model_fields.items()}


def construct_claim(wire: Mapping[str, Any]) -> ModelClaim:
    """A :class:`ModelClaim` of a wire object that passed the read boundary (no re-check)."""
    fields = {_FIELD_OF_ALIAS[k]: v for k, v in wire.items() if k in _FIELD_OF_ALIAS}
    return ModelClaim.model_construct(**fields)


# -- the snapshot ----------


class Snapshot:
    """One version of the store: what a reader sees and what a commit replaces.

    Built eagerly from claims or wire objects (``Snapshot(version, hash,
    claims, wire)``), or by the reader over the file's bytes. Either way
    ``entries`` is the cheap view logic uses; ``claims`` and ``wire`` build
    every claim on first use.
    """

    def __init__(
        self,
        version: int,
        hash: str,
        claims: Sequence[ModelClaim] | None = None,
        wire: Sequence[Mapping[str, Any]] | None = None,
        *,
        texts: ClaimTexts | None = None,
        entries: Sequence[ClaimEntry] | None = None,
        warnings: Sequence[str] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.version = version
        self.hash = hash
        self.warnings = tuple(warnings)
        """What rulvar accepts but kb would never write (``kb verify`` prints them)."""
        self.extra = dict(extra or {})
        """Unknown top-level keys of a file read whole (kept on rewrite)."""
        if texts is None:
            if wire is None:
                wire = [claim_to_wire(claim) for claim in claims or ()]
            texts = WireTexts(wire)
        self.texts = texts
        self._claims = tuple(claims) if claims is not None else None
        self._entries = tuple(entries) if entries is not None else None

    def __repr__(self) -> str:
        return f"Snapshot(version={self.version}, hash={self.hash[:12]}…, claims={len(self)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return (self.version, self.hash, self.wire) == (other.version, other.hash, other.wire)

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.texts)

    @cached_property
    def entries(self) -> tuple[ClaimEntry, ...]:
        """Each claim's light view, in file order."""
        if self._entries is not None:
            return self._entries
        if self._claims is not None:
            return tuple(entry_of(claim_to_wire(claim)) for claim in self._claims)
        return tuple(entry_of(self.texts.wire(i)) for i in range(len(self.texts)))

    @cached_property
    def claims(self) -> tuple[ModelClaim, ...]:
        """Every claim, built on first use."""
        if self._claims is not None:
            return self._claims
        with collector_paused():
            return tuple(construct_claim(self.texts.wire(i)) for i in range(len(self.texts)))

    @cached_property
    def wire(self) -> tuple[dict[str, Any], ...]:
        """Every claim's JSON object as stored (key order included)."""
        with collector_paused():
            return tuple(self.texts.wire(i) for i in range(len(self.texts)))

    def wire_at(self, index: int) -> dict[str, Any]:
        """One claim's JSON object, parsed on its own."""
        return self.texts.wire(index)

    def claim_at(self, index: int) -> ModelClaim:
        """One claim, built on its own."""
        if self._claims is not None:
            return self._claims[index]
        return construct_claim(self.texts.wire(index))

    @cached_property
    def index(self) -> dict[str, int]:
        """Position of each claim id (the first, if a hand edit duplicated one)."""
        found: dict[str, int] = {}
        for position, entry in enumerate(self.entries):
            found.setdefault(entry.id, position)
        return found

    def get(self, claim_id: str) -> ModelClaim | None:
        """The claim with this id, or ``None``."""
        position = self.index.get(claim_id)
        return None if position is None else self.claim_at(position)

    def has(self, claim_id: str) -> bool:
        """Whether a claim with this id exists."""
        return claim_id in self.index

    @cached_property
    def by_id(self) -> dict[str, ModelClaim]:
        """Claims indexed by id (builds every claim)."""
        return {claim.id: claim for claim in self.claims}


EMPTY_SNAPSHOT = Snapshot(version=0, hash=EMPTY_HASH, claims=(), wire=())


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic GC while building a large acyclic object graph.

    Parsing a 10,000-claim store allocates ~10⁶ containers and none of them
    form cycles, yet each allocation burst triggers generation scans; pausing
    the collector takes ~30 % off a read.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
