"""The knowledge card: tier-relative advice compiled from the store for an orchestrator.

Inputs are *ladders* (named, ordered rungs of ``model``/``effort`` with a
default ``start_tier`` and optionally the ``task_class`` the ladder serves),
optional role *floors* (models excluded for a task class — hard constraints
that knowledge never overrides) and optional *profiles* (a name, a concrete
model, a task class). The card never names a model.

* **Verified layer** — :func:`compile_verified_layer`: only active, unexpired,
  eval-measured claims about a rung vote. A strength on a rung below the
  start tier votes one rung cheaper; a weakness on the start rung or below
  votes one rung higher. The net sign moves the start exactly one rung,
  clamped to the ladder; a tie (or a move onto a floored rung, or a clamp
  that leaves the start where it was) emits nothing. The one-rung move bounds
  the price of any false belief in the store.
* **Profile evidence** — per profile, its model's measured claims folded per
  task class, weakness winning over strength.
* **Editorial notes** — human-editorial claims, dated, tier-relative, marked
  "editorial note, no metrics, not confirmed by evals"; they never move a tier.

The render is a pure function (same claims, ladders and instant → the same
bytes) and at most 4096 characters: the oldest notes are withheld first
behind a marker, and mandatory sections that alone overflow are cut with
``...``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from kb.errors import ConfigError
from kb.schema import ModelRefText, StrictModel, subject_key, validation_issues
from kb.store.models import ModelClaim
from kb.store.ttl import claim_expired, format_instant, stored_instant
from kb.tomlfile import read_toml

CARD_BUDGET_CHARS = 4096
EDITORIAL_MARK = "editorial note, no metrics, not confirmed by evals"
PROFILE_GUIDANCE = (
    "Prefer the cheapest profile marked strong for the task at hand; "
    "avoid profiles marked weak at it."
)


class Rung(StrictModel):
    """One step of a ladder."""

    model: ModelRefText
    """``provider:model`` of the rung."""
    effort: str | None = Field(default=None, min_length=1)
    """Its effort, when the model takes one."""

    @property
    def key(self) -> str:
        """``model`` or ``model@effort``."""
        return subject_key(self.model, self.effort)


class Ladder(StrictModel):
    """Ordered rungs, cheapest first, and the tier a task starts on by default."""

    name: str = Field(min_length=1)
    """The ladder's name (what the card calls it)."""
    rungs: list[Rung] = Field(min_length=1)
    """The rungs, cheapest first."""
    start_tier: int = Field(ge=0)
    """The rung (from 0) a task starts on when no claim says otherwise."""
    task_class: str | None = Field(default=None, min_length=1)
    """When set, the ladder only serves (and compiles for) this task class."""

    @model_validator(mode="after")
    def _start_on_the_ladder(self) -> Ladder:
        if self.start_tier >= len(self.rungs):
            raise ValueError(
                f"start_tier {self.start_tier} is off the ladder ({len(self.rungs)} rungs)"
            )
        return self


class Profile(StrictModel):
    """A spawnable profile pinned to one model, for one task class."""

    name: str = Field(min_length=1)
    """The profile's name (what the orchestrator picks)."""
    model: ModelRefText
    """The model it is pinned to."""
    effort: str | None = None
    """Its effort, when the model takes one."""
    task_class: str = Field(min_length=1)
    """The task class it serves."""


class LaddersFile(StrictModel):
    """A ladders file (``kb card LADDERS.toml``)."""

    ladders: list[Ladder] = Field(min_length=1)
    floors: dict[str, list[str]] = Field(default_factory=dict)
    """Task class → model refs excluded for it (hard constraints)."""
    profiles: list[Profile] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_names(self) -> LaddersFile:
        for kind, names in (
            ("ladder", [ladder.name for ladder in self.ladders]),
            ("profile", [p.name for p in self.profiles]),
        ):
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(f"duplicate {kind} names: {', '.join(duplicates)}")
        return self


def parse_ladders(data: Mapping[str, Any], source: str) -> LaddersFile:
    """Validate ladders data (from TOML) into a :class:`LaddersFile`."""
    try:
        return LaddersFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, validation_issues("", exc)) from None


def load_ladders(path: Path | str) -> LaddersFile:
    """Load a ladders TOML file."""
    path = Path(path)
    return parse_ladders(read_toml(path, str(path)), str(path))


@dataclass(frozen=True)
class Recommendation:
    """A verified start-tier move for one (ladder, task class)."""

    ladder: str
    task_class: str
    default_tier: int
    recommended_tier: int
    votes_cheaper: int
    votes_higher: int

    def to_json(self) -> dict[str, Any]:
        """The ``kb card --json`` entry."""
        return {
            "ladder": self.ladder,
            "taskClass": self.task_class,
            "defaultTier": self.default_tier,
            "recommendedTier": self.recommended_tier,
            "votesCheaper": self.votes_cheaper,
            "votesHigher": self.votes_higher,
        }


def _excluded(floors: Mapping[str, Sequence[str]], task_class: str, model: str) -> bool:
    return model in floors.get(task_class, ())


def usable_claims(claims: Sequence[ModelClaim], as_of: int) -> list[ModelClaim]:
    """Active, unexpired claims (what may steer anything at ``as_of``)."""
    return [c for c in claims if c.status == "active" and not claim_expired(c, as_of)]


def _rung_index(ladder: Ladder, claim: ModelClaim) -> int | None:
    for index, rung in enumerate(ladder.rungs):
        if rung.model == claim.model and rung.effort == claim.effort:
            return index
    return None


def compile_verified_layer(
    claims: Sequence[ModelClaim],
    ladders: Sequence[Ladder],
    as_of: int,
    floors: Mapping[str, Sequence[str]] | None = None,
) -> list[Recommendation]:
    """Start-tier recommendations per (ladder, task class), from eval-measured claims only.

    Pure and deterministic: ladders in order, task classes sorted.
    """
    floors = floors or {}
    measured = [c for c in usable_claims(claims, as_of) if c.claim_class == "eval-measured"]
    recommendations = []
    for ladder in ladders:
        votes: dict[str, list[int]] = {}
        for claim in measured:
            if ladder.task_class is not None and claim.task_class != ladder.task_class:
                continue
            tier = _rung_index(ladder, claim)
            if tier is None or _excluded(floors, claim.task_class, claim.model):
                continue
            tally = votes.setdefault(claim.task_class, [0, 0])
            if claim.polarity == "strength" and tier < ladder.start_tier:
                tally[0] += 1
            elif claim.polarity == "weakness" and tier <= ladder.start_tier:
                tally[1] += 1
        for task_class in sorted(votes):
            cheaper, higher = votes[task_class]
            net = higher - cheaper
            if net == 0:
                continue
            step = 1 if net > 0 else -1
            target = min(len(ladder.rungs) - 1, max(0, ladder.start_tier + step))
            if target == ladder.start_tier:
                continue
            if _excluded(floors, task_class, ladder.rungs[target].model):
                continue
            recommendations.append(
                Recommendation(ladder.name, task_class, ladder.start_tier, target, cheaper, higher)
            )
    return recommendations


def profile_warnings(ladders_file: LaddersFile, claims: Sequence[ModelClaim]) -> list[str]:
    """Profiles whose ``task_class`` nothing else knows (a typo, most likely).

    A profile's task class is what the orchestrator is told the profile is
    for (the checkpoint's router prompt); its evidence line lists every
    measured task class of its model, whatever the profile says.
    """
    known = {claim.task_class for claim in claims} | {
        ladder.task_class for ladder in ladders_file.ladders if ladder.task_class
    }
    return [
        f"profile {profile.name!r}: task class {profile.task_class!r} matches no ladder and "
        "no claim in the store"
        for profile in ladders_file.profiles
        if profile.task_class not in known
    ]


def profile_evidence(
    claims: Sequence[ModelClaim], profiles: Sequence[Profile], as_of: int
) -> list[str]:
    """``name: strong extraction; weak code-edit`` per profile with measured claims."""
    measured = [c for c in usable_claims(claims, as_of) if c.claim_class == "eval-measured"]
    lines = []
    for profile in profiles:
        folded: dict[str, str] = {}
        for claim in measured:
            if claim.model == profile.model and claim.effort == profile.effort:
                if folded.get(claim.task_class) != "weakness":  # weakness wins
                    folded[claim.task_class] = claim.polarity
        if folded:
            parts = [
                f"{'strong' if p == 'strength' else 'weak'} {t}" for t, p in sorted(folded.items())
            ]
            lines.append(f"{profile.name}: {'; '.join(parts)}")
    return lines


_MODEL_REF = re.compile(r"\b[A-Za-z][\w.-]*:[A-Za-z0-9][\w./@-]*")


def tier_relative(text: str, ladders: Sequence[Ladder]) -> str:
    """A person's note with model names replaced, so the card never names a model.

    A rung becomes ``[ladder L tier N]``; any other ``provider:model`` becomes ``[model]``.
    """
    for ladder in ladders:
        rungs = sorted(enumerate(ladder.rungs), key=lambda item: -len(item[1].key))
        for tier, rung in rungs:
            for name in dict.fromkeys((rung.key, rung.model)):
                text = text.replace(name, f"[ladder {ladder.name} tier {tier}]")
    return _MODEL_REF.sub("[model]", text)


def _note_lines(
    claims: Sequence[ModelClaim], ladders: Sequence[Ladder], as_of: int
) -> list[tuple[int, str]]:
    """(observed instant, line) for each editorial claim reachable on a ladder."""
    notes = []
    for claim in usable_claims(claims, as_of):
        if claim.claim_class != "human-editorial":
            continue
        places = [
            f"ladder {ladder.name} tier {tier}"
            for ladder in ladders
            if (tier := _rung_index(ladder, claim)) is not None
        ]
        if not places:
            continue
        observed = stored_instant(claim.observed_at)
        lines = (
            f"- {format_instant(observed)[:10]}, {', '.join(places)}, {claim.task_class}: "
            f"{claim.polarity} — {tier_relative(claim.statement, ladders)} ({EDITORIAL_MARK})"
        )
        notes.append((observed, lines))
    notes.sort(key=lambda item: (item[0], item[1]))
    return notes


def render_card(
    claims: Sequence[ModelClaim],
    ladders_file: LaddersFile,
    as_of: int,
    budget: int = CARD_BUDGET_CHARS,
) -> str:
    """The card text (≤ ``budget`` characters, byte-deterministic)."""
    ladders = ladders_file.ladders
    recommendations = compile_verified_layer(claims, ladders, as_of, ladders_file.floors)
    head = [
        f"# Model knowledge card (as of {format_instant(as_of)})",
        "",
        "## Verified start tiers (eval-measured)",
    ]
    if recommendations:
        for rec in recommendations:
            direction = "cheaper" if rec.recommended_tier < rec.default_tier else "higher"
            votes = rec.votes_cheaper if direction == "cheaper" else rec.votes_higher
            head.append(
                f"- ladder {rec.ladder}, {rec.task_class}: start at tier {rec.recommended_tier} "
                f"instead of tier {rec.default_tier} ({direction}; {votes} measured "
                f"vote{'s' if votes != 1 else ''} for, "
                f"{rec.votes_higher if direction == 'cheaper' else rec.votes_cheaper} against)"
            )
    else:
        head.append("- no change: keep every ladder's default start tier")
    evidence = profile_evidence(claims, ladders_file.profiles, as_of)
    if evidence:
        head += ["", "## Profile evidence (eval-measured)"] + [f"- {line}" for line in evidence]
        head.append(PROFILE_GUIDANCE)
    mandatory = "\n".join(head) + "\n"
    if len(mandatory) > budget:
        return mandatory[: max(0, budget - 3)] + "..."
    notes = [line for _, line in _note_lines(claims, ladders, as_of)]
    if not notes:
        return mandatory
    for withheld in range(len(notes) + 1):
        kept = notes[withheld:]  # oldest first in the list: withhold from the front
        block = ["", "## Editorial notes"]
        if withheld:
            block.append(
                f"[{withheld} older editorial note{'s' if withheld != 1 else ''} "
                "withheld for length]"
            )
        block += kept
        text = mandatory + "\n".join(block) + "\n"
        if len(text) <= budget:
            return text
    return mandatory  # even the withheld-notes marker does not fit
