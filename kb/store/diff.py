"""What changed in the store between two versions: the review a pull request needs.

``diff_snapshots(before, after, …)`` lists claims added, superseded (with the
pass-rate change), archived (with the reason, from the commits' ``Kb-Archived``
trailers), flipped stale, and expired between the two instants. Pure: the
caller reads the snapshots (from git or the work tree) and supplies the
instants.

Every rendering leads with what changed a belief, in this order:

1. **falsified** — archived with reason ``falsified`` (a change detector's
   alarm, or the gate's verdict), or superseded by a claim of the other
   polarity;
2. **flipped stale** — the canary saw the provider change the model;
3. **added** — new claims;
4. **lost** — archived for another reason (``stale``, ``deprecated``,
   ``rejected``, none recorded), and expired;
5. **superseded** — re-measurements that moved something;
6. **re-measured, no belief changed** — one count line (all listed on request):
   a claim superseded by one of the same subject, task class, polarity and
   claim class, both with metrics, whose pass rates print the same to two
   decimals (``0.96 → 0.96``: the figure every view shows), and not flipped
   stale in the range (a re-measurement after a drift is news).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kb.markdown import code_span, table_code
from kb.store.canonical import to_fixed_2
from kb.store.models import ModelClaim
from kb.store.snapshot import Snapshot
from kb.store.ttl import format_instant, stored_instant

FALSIFIED = "falsified"
"""The archive reason of a claim the evidence turned against (detector alarm or gate)."""


@dataclass(frozen=True)
class Side:
    """One end of a diff: a label (``HEAD~1``, ``work tree``), a version and an instant."""

    label: str
    version: int
    at: int
    night: str | None = None
    """The sweep (its report id) whose measurements this side's store holds last, when known."""

    def heading(self) -> str:
        """The label, and the night it stands on (``HEAD~1, night 2026-11-29``)."""
        if self.night is None:
            return self.label
        return f"{self.label}, night {night_of(self.night)}"


def night_of(report_id: str) -> str:
    """The night a report id names, as a date (the id itself when it names none)."""
    instant = report_id.removeprefix("kb-sweep-")
    return instant[:10] if instant[:4].isdigit() else report_id


@dataclass(frozen=True)
class StoreDiff:
    """The changes from ``before`` to ``after``."""

    before: Side
    after: Side
    added: tuple[ModelClaim, ...]
    """New claims that replace nothing (a replacement is listed with what it superseded)."""
    superseded: tuple[tuple[ModelClaim, ModelClaim | None], ...]
    """(the old claim, the claim that replaced it)."""
    archived: tuple[tuple[ModelClaim, str | None], ...]
    """(the claim, the reason when a commit recorded it)."""
    staled: tuple[ModelClaim, ...]
    expired: tuple[ModelClaim, ...]
    """Active claims whose lifetime ended between the two instants."""
    compacted: tuple[ModelClaim, ...] = ()
    """Claims ``kb compact`` took out of the file (they stay in git history)."""

    @property
    def falsified(self) -> tuple[tuple[ModelClaim, ModelClaim | None], ...]:
        """The claims the evidence turned against: archived ``falsified``, then others.

        (the claim, the claim of the other polarity that superseded it, else ``None``).
        """
        archived = tuple((claim, None) for claim, reason in self.archived if reason == FALSIFIED)
        flipped = tuple(
            (old, new)
            for old, new in self.superseded
            if new is not None and new.polarity != old.polarity
        )
        return archived + flipped

    @property
    def lost(self) -> tuple[tuple[ModelClaim, str | None], ...]:
        """Archived claims whose reason was not ``falsified`` (expired ones: ``expired``)."""
        return tuple((claim, reason) for claim, reason in self.archived if reason != FALSIFIED)

    @property
    def remeasured(self) -> tuple[tuple[ModelClaim, ModelClaim | None], ...]:
        """Supersessions that kept the polarity and moved something (see :meth:`unchanged`)."""
        return tuple(
            (old, new)
            for old, new in self.superseded
            if not (new is not None and new.polarity != old.polarity)
            and not self.changed_no_belief(old, new)
        )

    @property
    def unchanged(self) -> tuple[tuple[ModelClaim, ModelClaim], ...]:
        """Re-measurements that changed no belief (:meth:`changed_no_belief`)."""
        return tuple(
            (old, new)
            for old, new in self.superseded
            if new is not None and self.changed_no_belief(old, new)
        )

    def changed_no_belief(self, old: ModelClaim, new: ModelClaim | None) -> bool:
        """Whether ``new`` superseding ``old`` is a re-measurement that changed no belief.

        Same subject, task class, polarity and claim class, both with metrics, pass
        rates that print the same to two decimals, and ``old`` not flipped stale in
        the range.
        """
        if new is None or old.metrics is None or new.metrics is None:
            return False
        if any(claim.id == old.id for claim in self.staled):
            return False
        return (old.subject_key, old.task_class, old.polarity, old.claim_class) == (
            new.subject_key,
            new.task_class,
            new.polarity,
            new.claim_class,
        ) and to_fixed_2(old.metrics["passRate"]) == to_fixed_2(new.metrics["passRate"])

    @property
    def empty(self) -> bool:
        """Nothing changed."""
        return not (
            self.added
            or self.superseded
            or self.archived
            or self.staled
            or self.expired
            or self.compacted
        )


def _chain_end(
    claim: ModelClaim, replaced_by: Mapping[str, ModelClaim], old: Mapping[str, ModelClaim]
) -> ModelClaim | None:
    """The claim that replaces ``claim`` at the end of the range.

    Past any claim added and superseded within it: night 2's claim, superseded on
    night 3, is only a step.
    """
    found = replaced_by.get(claim.id)
    seen = {claim.id}
    while (
        found is not None
        and found.status == "superseded"
        and found.id not in old
        and found.id not in seen
        and replaced_by.get(found.id) is not None
    ):
        seen.add(found.id)
        found = replaced_by[found.id]
    return found


def _chain_root(
    claim: ModelClaim, old: Mapping[str, ModelClaim], now: Mapping[str, ModelClaim]
) -> ModelClaim | None:
    """The claim of the earlier side that ``claim`` replaces, through steps added in the range."""
    current, seen = claim, {claim.id}
    while current.supersedes and current.supersedes not in seen:
        if current.supersedes in old:
            return old[current.supersedes]
        step = now.get(current.supersedes)
        if step is None:
            return None
        seen.add(step.id)
        current = step
    return None


def diff_snapshots(
    before: Snapshot,
    after: Snapshot,
    before_side: Side,
    after_side: Side,
    archive_reasons: Mapping[str, str] | None = None,
    staled_ids: Collection[str] = (),
) -> StoreDiff:
    """Compare two snapshots of one store (``archive_reasons``: claim id → reason).

    ``staled_ids``: the claims the commits in between flagged stale (their ops or
    ``Kb-Staled`` trailers). A claim flagged stale and then superseded or archived by
    the same commit is listed under both: a drift is never hidden by what followed it.
    """
    reasons = archive_reasons or {}
    flagged = set(staled_ids)
    old = before.by_id
    replaced_by = {claim.supersedes: claim for claim in after.claims if claim.supersedes}
    now = after.by_id
    added, superseded, archived, staled, expired = [], [], [], [], []
    for claim in after.claims:
        prior = old.get(claim.id)
        replacement = replaced_by.get(claim.id)
        intermediate = (
            claim.status == "superseded" and replacement is not None and replacement.id not in old
        )
        if prior is None and (claim.status in ("archived", "stale") or intermediate):
            # added and retired between the two sides: told by its fate, not as a live
            # addition; one a later claim of the same range superseded is an intermediate
            # step (a branch's claim superseded by one the other side already had is not)
            if claim.status == "archived":
                archived.append((claim, reasons.get(claim.id)))
            if claim.status == "stale" or claim.id in flagged:
                staled.append(claim)
            continue
        if prior is None:
            # A replacement is told with what it superseded, when that happened in this
            # diff and it ends the chain on record; any other new claim is "added".
            target = _chain_root(claim, old, now)
            told = (
                target is not None
                and target.status != "superseded"
                and getattr(now.get(target.id), "status", None) == "superseded"
                and _chain_end(target, replaced_by, old) is claim
            )
            if not told:
                added.append(claim)
        elif prior.status != claim.status:
            if claim.status == "superseded":
                # net of the range: what replaces it now, not a step the range also retired
                superseded.append((claim, _chain_end(claim, replaced_by, old)))
            elif claim.status == "archived":
                archived.append((claim, reasons.get(claim.id)))
            if claim.status == "stale" or (claim.id in flagged and prior.status != "stale"):
                staled.append(claim)
        if claim.status == "active":
            ends = stored_instant(claim.expires_at)
            if before_side.at < ends <= after_side.at:
                expired.append(claim)
    present = after.index
    compacted = tuple(claim for claim in before.claims if claim.id not in present)
    return StoreDiff(
        before_side,
        after_side,
        tuple(added),
        tuple(superseded),
        tuple(archived),
        tuple(staled),
        tuple(expired),
        compacted,
    )


def _rate(claim: ModelClaim | None) -> str:
    if claim is None or claim.metrics is None:
        return "—"
    return to_fixed_2(claim.metrics["passRate"])


def diff_json(diff: StoreDiff) -> dict[str, Any]:
    """The ``--json`` form: every change listed, what changed a belief first.

    ``falsified`` repeats the falsified entries of ``archived`` and ``superseded``;
    each ``superseded`` entry says whether it changed a belief (``beliefChanged``);
    ``unchangedCount`` counts those that did not.
    """

    def side(s: Side) -> dict[str, Any]:
        return {
            "label": s.label,
            "version": s.version,
            "at": format_instant(s.at),
            "night": s.night,
        }

    def brief(claim: ModelClaim) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "id": claim.id,
            "subject": dict(claim.subject),
            "taskClass": claim.task_class,
            "polarity": claim.polarity,
            "class": claim.claim_class,
        }
        if claim.metrics is not None:
            entry["passRate"] = claim.metrics["passRate"]
            entry["n"] = claim.metrics["n"]
        return entry

    return {
        "from": side(diff.before),
        "to": side(diff.after),
        "falsified": [
            {
                **brief(old),
                "how": "superseded" if new else "archived",
                "by": new.id if new else None,
                "byPolarity": new.polarity if new else None,
            }
            for old, new in diff.falsified
        ],
        "stale": [{**brief(c), "reason": "canary-drift", "status": c.status} for c in diff.staled],
        "added": [brief(c) for c in diff.added],
        "archived": [{**brief(c), "reason": reason} for c, reason in diff.archived],
        "expired": [{**brief(c), "expiresAt": c.expires_at} for c in diff.expired],
        "superseded": [
            {
                **brief(old),
                "by": new.id if new else None,
                "newPassRate": _number(new),
                "beliefChanged": not diff.changed_no_belief(old, new),
            }
            for old, new in diff.superseded
        ],
        "unchangedCount": len(diff.unchanged),
        "compacted": [{**brief(c), "status": c.status} for c in diff.compacted],
    }


def _number(claim: ModelClaim | None) -> float | None:
    return claim.metrics["passRate"] if claim is not None and claim.metrics else None


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _when(side: Side) -> str:
    """The side's night (a date; a report id that names none, inert) or its instant."""
    if side.night is not None:
        night = night_of(side.night)
        return f"night {night if _DATE.fullmatch(night) else code_span(night)}"
    return f"{format_instant(side.at)[:16]}Z"


def _md_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    if not rows:
        return []
    return [
        f"**{title}** ({len(rows)})",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]


def _md_who(claim: ModelClaim) -> str:
    return f"{table_code(claim.subject_key)} · {table_code(claim.task_class)}"


def _md_rates(old: ModelClaim, new: ModelClaim | None) -> str:
    return f"{_rate(old)} → {_rate(new)}"


def _md_tables(diff: StoreDiff, list_all: bool) -> list[str]:
    """The change tables in the module doc's order (what changed a belief first)."""
    who, rates = _md_who, _md_rates
    tables = [
        (
            "Falsified",
            ["subject", "claim", "how"],
            [
                [
                    who(old),
                    old.polarity,
                    f"superseded by a {new.polarity} ({rates(old, new)})"
                    if new
                    else f"archived ({table_code(FALSIFIED)}; was {_rate(old)})",
                ]
                for old, new in diff.falsified
            ],
        ),
        (
            "Flipped stale (canary drift)",
            ["subject", "claim", "now"],
            [[who(c), c.polarity, c.status] for c in diff.staled],
        ),
        (
            "Added",
            ["subject", "claim", "pass rate", "n", "id"],
            [
                [who(c), f"{c.polarity} ({c.claim_class})", _rate(c), _n(c), table_code(c.id)]
                for c in diff.added
            ],
        ),
        (
            "Archived",
            ["subject", "claim", "reason"],
            [[who(c), c.polarity, table_code(r) if r else "—"] for c, r in diff.lost],
        ),
        (
            "Expired",
            ["subject", "claim", "expired at"],
            [[who(c), c.polarity, c.expires_at] for c in diff.expired],
        ),
        (
            "Superseded",
            ["subject", "claim", "pass rate"],
            [[who(old), old.polarity, rates(old, new)] for old, new in diff.remeasured],
        ),
    ]
    if list_all:
        tables.append(
            (
                "Re-measured, no belief changed",
                ["subject", "claim", "pass rate"],
                [[who(old), old.polarity, rates(old, new)] for old, new in diff.unchanged],
            )
        )
    return [line for title, header, rows in tables for line in _md_table(title, header, rows)]


def diff_markdown(diff: StoreDiff, list_all: bool = False) -> str:
    """A pull-request comment or ``$GITHUB_STEP_SUMMARY`` block.

    What changed a belief leads (the module doc's order); re-measurements that
    changed no belief are one count line, or a table with ``list_all``. Every
    name, id, label and reason is inert (:mod:`kb.markdown`): a model, a
    dataset, a spec or a commit trailer chose them.
    """
    before, after = diff.before, diff.after
    lines = [
        f"### kb: store v{before.version} → v{after.version}",
        "",
        f"{code_span(before.label)} ({_when(before)}) → {code_span(after.label)} ({_when(after)})",
        "",
    ]
    if diff.empty:
        return "\n".join([*lines, "No claim changed."]) + "\n"
    if diff.staled:
        lines += [
            f"> **Drift:** the canary saw a provider change the model behind "
            f"{_subjects(len({c.subject_key for c in diff.staled}))}; their claims were "
            "flipped stale.",
            "",
        ]
    lines += _md_tables(diff, list_all)
    unchanged = diff.unchanged
    if unchanged and not list_all:
        lines += [
            f"{unchanged_line(len(unchanged))} ({code_span('kb diff --all')} lists them).",
            "",
        ]
    if diff.compacted:
        lines += [
            f"**Compacted** ({len(diff.compacted)} superseded or archived "
            f"claim{'s' if len(diff.compacted) != 1 else ''} left the file; they stay in git "
            "history: "
            + ", ".join(code_span(c.id) for c in diff.compacted[:20])
            + (" …" if len(diff.compacted) > 20 else "")
            + ")",
            "",
        ]
    return "\n".join(lines)


def unchanged_line(count: int) -> str:
    """``4 claims re-measured, no belief changed``."""
    return f"{count} claim{'s' if count != 1 else ''} re-measured, no belief changed"


def _n(claim: ModelClaim) -> str:
    return str(claim.metrics["n"]) if claim.metrics else "—"


def _subjects(count: int) -> str:
    return f"{count} subject{'s' if count != 1 else ''}"
