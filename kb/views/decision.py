"""The decision views: which model for which task, on one screen.

``kb list`` (one line per active claim, newest first) and ``kb matrix``
(model × task class). Both read only live claims: active and unexpired at
the instant given; a stale claim (its model drifted) is shown as such in the
matrix and counted under the list, never as a belief. Views return strings
or plain data; printing is the CLI's job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kb.stats import wilson_interval
from kb.store.canonical import to_fixed_2
from kb.store.models import ModelClaim
from kb.store.snapshot import Snapshot
from kb.store.ttl import claim_expired, format_instant, stored_instant

DAY_MS = 86_400_000


def metrics_interval(metrics: Mapping[str, Any] | None) -> tuple[float, float] | None:
    """The 95 % Wilson interval of a claim's metrics (``None`` for a note).

    Over ``n`` cases of the stored mean case score: the interval the gate used.
    """
    if metrics is None:
        return None
    n = metrics["n"]
    successes = min(float(n), max(0.0, metrics["passRate"] * n))
    return wilson_interval(successes, n)


def claim_interval(claim: ModelClaim) -> tuple[float, float] | None:
    """The 95 % Wilson interval of an eval claim's metrics (``None`` for a note)."""
    return metrics_interval(claim.metrics)


def newest_first(claims: Sequence[ModelClaim]) -> list[ModelClaim]:
    """The claims, newest observation first (then by id)."""
    found = sorted(claims, key=lambda c: c.id)
    found.sort(key=lambda c: stored_instant(c.observed_at), reverse=True)
    return found


def _days(ms: int) -> str:
    days = ms // DAY_MS
    return "today" if days <= 0 else f"{days}d"


def _rate(claim: ModelClaim) -> tuple[str, str, str]:
    """(pass rate, interval, n) as shown; dashes for a note."""
    interval = claim_interval(claim)
    if claim.metrics is None or interval is None:
        return "note", "—", "—"
    low, high = interval
    return (
        to_fixed_2(claim.metrics["passRate"]),
        f"[{to_fixed_2(low)}, {to_fixed_2(high)}]",
        str(claim.metrics["n"]),
    )


def _table(rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def list_lines(
    chosen: Sequence[ModelClaim], snapshot: Snapshot, as_of: int, *, ids: bool = False
) -> str:
    """``kb list``: one line per claim (newest first), then what is not shown.

    ``ids`` adds each claim's id (what ``kb show`` takes) as the last column.
    """
    shown = newest_first(chosen)
    statuses = any(claim.status != "active" for claim in shown)
    header = ["model", "task class", "claim", "rate", "95% interval", "n", "expires"]
    header += ["status"] if statuses else []
    rows = [header + (["id"] if ids else [])]
    for claim in shown:
        rate, interval, n = _rate(claim)
        left = stored_instant(claim.expires_at) - as_of
        ends = f"{claim.expires_at[:10]} ({_days(left) if left > 0 else 'expired'})"
        row = [claim.subject_key, claim.task_class, claim.polarity, rate, interval, n, ends]
        rows.append(row + ([claim.status] if statuses else []) + ([claim.id] if ids else []))
    lines = _table(rows, right=frozenset({3, 5})) if shown else []
    stale = sum(1 for c in snapshot.claims if c.status == "stale")
    expired = sum(1 for c in snapshot.claims if c.status == "active" and claim_expired(c, as_of))
    footer = (
        f"{len(shown)} claim{'s' if len(shown) != 1 else ''} shown ({len(snapshot)} in the store"
    )
    if stale and not any(claim.status == "stale" for claim in shown):
        footer += f"; {stale} stale after a canary drift: kb list --status stale"
    if expired:
        footer += f"; {expired} active but expired: kb queue"
    footer += "); --ids for claim ids, --long for the full view, --all for every status"
    return "\n".join([*lines, footer])


@dataclass(frozen=True)
class MatrixCell:
    """What the store believes of one model on one task class."""

    model: str
    task_class: str
    claims: tuple[ModelClaim, ...]
    """The live claims (at most one per polarity, the newest), or the stale ones."""
    stale: bool
    """No live claim, and the newest claim here was flipped stale by a drift."""


@dataclass(frozen=True)
class ClaimMatrix:
    """Model × task class at one instant."""

    as_of: int
    models: tuple[str, ...]
    task_classes: tuple[str, ...]
    cells: dict[tuple[str, str], MatrixCell]


def claim_matrix(snapshot: Snapshot, as_of: int) -> ClaimMatrix:
    """The newest live claim of each polarity per (model, task class); stale cells marked."""
    models: dict[str, None] = {}
    classes: dict[str, None] = {}
    live: dict[tuple[str, str], dict[str, ModelClaim]] = {}
    stale: dict[tuple[str, str], ModelClaim] = {}
    retired: dict[tuple[str, str], ModelClaim] = {}
    for claim in snapshot.claims:
        key = (claim.subject_key, claim.task_class)
        if claim.status == "active" and not claim_expired(claim, as_of):
            held = live.setdefault(key, {})
            prior = held.get(claim.polarity)
            if prior is None or stored_instant(claim.observed_at) > stored_instant(
                prior.observed_at
            ):
                held[claim.polarity] = claim
        elif claim.status == "stale":
            stale[key] = claim
        elif claim.status == "archived" and claim.claim_class == "eval-measured":
            # a model whose claims were all retired (a drift, a falsified strength) keeps its
            # row: an empty cell says "nothing steers here", a vanished row says nothing
            retired.setdefault(key, claim)
        else:
            continue
        models.setdefault(claim.subject_key, None)
        classes.setdefault(claim.task_class, None)
    cells = {}
    for key in {*live, *stale, *retired}:
        held = live.get(key, {})
        if held:
            chosen = tuple(held[p] for p in ("strength", "weakness") if p in held)
            cells[key] = MatrixCell(key[0], key[1], chosen, False)
        elif key in stale:
            cells[key] = MatrixCell(key[0], key[1], (stale[key],), True)
        else:
            cells[key] = MatrixCell(key[0], key[1], (), False)  # every claim here retired
    return ClaimMatrix(as_of, tuple(sorted(models)), tuple(sorted(classes)), cells)


_SIGN = {"strength": "S", "weakness": "W"}


def _cell_text(cell: MatrixCell | None, as_of: int) -> str:
    if cell is None:
        return "·"
    if cell.stale:
        return "! stale (drift)"
    if not cell.claims:
        return "x retired"
    parts = []
    for claim in cell.claims:
        rate, interval, n = _rate(claim)
        age = _days(as_of - stored_instant(claim.observed_at))
        if claim.metrics is None:
            parts.append(f"{_SIGN[claim.polarity]} note {age}")
        else:
            parts.append(f"{_SIGN[claim.polarity]} {rate} {interval} n={n} {age}")
    return " / ".join(parts)


def matrix_text(matrix: ClaimMatrix) -> str:
    """The matrix as an aligned table, with a legend."""
    if not matrix.models:
        return "no live claims: nothing to decide from yet (kb sweep SPEC.toml measures)"
    rows = [["model", *matrix.task_classes]]
    for model in matrix.models:
        rows.append(
            [
                model,
                *(
                    _cell_text(matrix.cells.get((model, task_class)), matrix.as_of)
                    for task_class in matrix.task_classes
                ),
            ]
        )
    legend = (
        "S strength, W weakness: pass rate [95% interval] n=cases, age since observed; "
        "· no claim; x every claim retired; ! stale: the canary saw the model change"
    )
    return "\n".join([*_table(rows), "", legend])


def matrix_markdown(matrix: ClaimMatrix) -> str:
    """The matrix as a markdown table (a PR comment, a wiki page)."""
    if not matrix.models:
        return "No live claims.\n"
    lines = [
        "| model | " + " | ".join(matrix.task_classes) + " |",
        "|---|" + "---|" * len(matrix.task_classes),
    ]
    for model in matrix.models:
        cells = [
            _cell_text(matrix.cells.get((model, t)), matrix.as_of).replace("|", "\\|")
            for t in matrix.task_classes
        ]
        lines.append(f"| `{model}` | " + " | ".join(cells) + " |")
    lines += [
        "",
        "S strength, W weakness: pass rate [95% interval] n=cases, age; · no claim; "
        "x every claim retired; ! stale: the canary saw the model change.",
    ]
    return "\n".join(lines) + "\n"


def matrix_json(matrix: ClaimMatrix) -> dict[str, Any]:
    """The ``--json`` form: every cell, with each claim's numbers."""
    cells = []
    for model in matrix.models:
        for task_class in matrix.task_classes:
            cell = matrix.cells.get((model, task_class))
            if cell is None:
                continue
            claims = []
            for claim in cell.claims:
                interval = claim_interval(claim)
                claims.append(
                    {
                        "id": claim.id,
                        "polarity": claim.polarity,
                        "status": claim.status,
                        "class": claim.claim_class,
                        "passRate": claim.metrics["passRate"] if claim.metrics else None,
                        "wilson95": list(interval) if interval else None,
                        "n": claim.metrics["n"] if claim.metrics else None,
                        "observedAt": claim.observed_at,
                        "expiresAt": claim.expires_at,
                        "ageDays": (matrix.as_of - stored_instant(claim.observed_at)) // DAY_MS,
                    }
                )
            cells.append(
                {"model": model, "taskClass": task_class, "stale": cell.stale, "claims": claims}
            )
    return {
        "asOf": format_instant(matrix.as_of),
        "models": list(matrix.models),
        "taskClasses": list(matrix.task_classes),
        "cells": cells,
    }
