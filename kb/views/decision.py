"""The decision views: which model for which task, on one screen.

``kb list`` (one line per active claim, newest first) and ``kb matrix``
(model × task class). Both show as beliefs only live claims: active and
unexpired at the instant given. Where a cell has none, the matrix shows its
newest claim's state (stale: its model drifted; retired; expired) and the
list counts them, never as a belief. Views return strings
or plain data; printing is the CLI's job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kb.markdown import table_code
from kb.money import usd_per_case
from kb.paired import margin_text
from kb.schema import DEFAULT_MARGIN
from kb.store.canonical import to_fixed_2
from kb.store.models import ModelClaim
from kb.store.snapshot import Snapshot
from kb.store.ttl import claim_expired, format_instant, stored_instant
from kb.textwidth import WIDTH, fits, table_lines, wrapped_items

if TYPE_CHECKING:
    from kb.compare import CellCost

DAY_MS = 86_400_000


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
    interval = claim.interval
    if claim.metrics is None or interval is None:
        return "note", "—", "—"
    low, high = interval
    return (
        to_fixed_2(claim.metrics["passRate"]),
        f"[{to_fixed_2(low)}, {to_fixed_2(high)}]",
        str(claim.metrics["n"]),
    )


def by_group(keys: Sequence[str]) -> list[int]:
    """Indexes of ``keys`` regrouped: groups in the order they first appear, stable within."""
    first = {key: at for at, key in reversed(list(enumerate(keys)))}
    return sorted(range(len(keys)), key=lambda at: first[keys[at]])


def _grouped(
    rows: Sequence[tuple[str, Sequence[str]]], header: Sequence[str], right: frozenset[int]
) -> list[str]:
    """Rows (already in ``by_group`` order) under one line per group, indented.

    The layout of a table too wide for 80 columns: a long model id then costs
    one line of its own instead of widening every row.
    """
    table = table_lines(
        [[f"model / {header[0]}", *header[1:]], *(["  " + r[0], *r[1:]] for _, r in rows)],
        right,
    )
    lines, group = [table[0]], None
    for (key, _), line in zip(rows, table[1:], strict=True):
        if key != group:
            lines.append(key)
            group = key
        lines.append(line)
    return lines


def _list_footer(
    shown: Sequence[ModelClaim], snapshot: Snapshot, as_of: int, *, ids: bool
) -> list[str]:
    """What ``kb list`` did not show, and the flags that show it."""
    stale = sum(1 for c in snapshot.claims if c.status == "stale")
    expired = sum(1 for c in snapshot.claims if c.status == "active" and claim_expired(c, as_of))
    footer = [
        f"{len(shown)} claim{'s' if len(shown) != 1 else ''} shown ({len(snapshot)} in the store"
    ]
    if stale and not any(claim.status == "stale" for claim in shown):
        footer.append(f"{stale} stale after a canary drift: kb list --status stale")
    if expired:
        footer.append(f"{expired} active but expired: kb queue")
    footer[-1] += ")"
    footer += [*([] if ids else ["--ids for claim ids"]), "--long for the full view"]
    footer.append("--all for every status")
    return footer


def list_lines(
    chosen: Sequence[ModelClaim],
    snapshot: Snapshot,
    as_of: int,
    *,
    ids: bool = False,
    width: int = WIDTH,
) -> str:
    """``kb list``: one line per claim (newest first), then what is not shown.

    ``ids`` adds each claim's id (what ``kb show`` takes) as the last column.
    When a line would pass ``width`` columns (long model ids), the claims are
    grouped under their model, models in the order of their newest claim; an
    id that still does not fit goes on its own line under its claim.
    """
    shown = newest_first(chosen)
    statuses = any(claim.status != "active" for claim in shown)
    header = ["task class", "claim", "rate", "95% interval", "n", "expires"]
    header += ["status"] if statuses else []
    rows: list[tuple[str, list[str]]] = []
    for claim in shown:
        rate, interval, n = _rate(claim)
        left = stored_instant(claim.expires_at) - as_of
        ends = f"{claim.expires_at[:10]} ({_days(left) if left > 0 else 'expired'})"
        row = [claim.task_class, claim.polarity, rate, interval, n, ends]
        rows.append((claim.subject_key, row + ([claim.status] if statuses else [])))
    lines: list[str] = []
    if shown:
        with_ids = [(m, [*r, c.id]) for (m, r), c in zip(rows, shown, strict=True)]
        id_header = [*header, "id"]
        flat = table_lines(
            [["model", *(id_header if ids else header)]]
            + [[m, *r] for m, r in (with_ids if ids else rows)],
            right=frozenset({3, 5}),
        )
        lines = flat if fits(flat, width) else []
        if not lines:
            order = by_group([m for m, _ in rows])
            grouped = _grouped([with_ids[at] for at in order], id_header, frozenset({2, 4}))
            if not ids or not fits(grouped, width):
                grouped = _grouped([rows[at] for at in order], header, frozenset({2, 4}))
                if ids:  # each id on a line of its own under its claim
                    claims = iter(shown[at] for at in order)
                    grouped[1:] = [
                        entry
                        for line in grouped[1:]
                        for entry in (
                            [line, f"    id {next(claims).id}"] if line.startswith("  ") else [line]
                        )
                    ]
            lines = grouped
    footer = _list_footer(shown, snapshot, as_of, ids=ids)
    return "\n".join([*lines, *wrapped_items(footer, width=width)])


@dataclass(frozen=True)
class MatrixCell:
    """What the store believes of one model on one task class."""

    model: str
    task_class: str
    claims: tuple[ModelClaim, ...]
    """The live claims (at most one per polarity, the newest), or the stale one."""
    stale: bool
    """No live claim, and the newest claim here was flipped stale by a drift."""
    retired: ModelClaim | None = None
    """No live claim, and the newest claim here was archived (a falsification, by hand)."""
    retired_reason: str | None = None
    """Why it was archived (``falsified``, ``deprecated``, …), when the history says."""
    expired: ModelClaim | None = None
    """No live claim, and the newest claim here is active but past its expiry."""

    @property
    def state(self) -> str:
        """``live``, ``stale``, ``retired`` or ``expired``: what the cell shows."""
        if self.stale:
            return "stale"
        if self.retired is not None:
            return "retired"
        if self.expired is not None:
            return "expired"
        return "live"


@dataclass(frozen=True)
class ClaimMatrix:
    """Model × task class at one instant."""

    as_of: int
    models: tuple[str, ...]
    task_classes: tuple[str, ...]
    cells: dict[tuple[str, str], MatrixCell]
    costs: Mapping[tuple[str, str], CellCost] | None = None
    """``kb matrix --cost``: each measured cell's cost, latency and whether to route to it."""
    margin: float = DEFAULT_MARGIN

    def with_costs(
        self, costs: Mapping[str, Mapping[str, CellCost]], margin: float = DEFAULT_MARGIN
    ) -> ClaimMatrix:
        """The matrix with :func:`kb.compare.class_costs` (their models and classes added)."""
        flat = {(s, t): cost for t, row in costs.items() for s, cost in row.items()}
        models = tuple(sorted({*self.models, *(s for s, _ in flat)}))
        classes = tuple(sorted({*self.task_classes, *(t for _, t in flat)}))
        return replace(self, models=models, task_classes=classes, costs=flat, margin=margin)


def claim_matrix(
    snapshot: Snapshot, as_of: int, archive_reasons: Mapping[str, str] | None = None
) -> ClaimMatrix:
    """The newest live claim of each polarity per (model, task class).

    A cell with no live claim shows its newest claim's state instead: stale
    (a drift), retired (archived; why, when ``archive_reasons`` — claim id →
    reason, :func:`kb.store.audit.archive_reasons` — knows) or expired. The
    newest decides, so a weakness that replaced a falsified strength and
    then expired reads as expired, not as retired. Such a model keeps its
    row: an empty cell says "nothing steers here", a vanished row says nothing.
    """
    models: dict[str, None] = {}
    classes: dict[str, None] = {}
    live: dict[tuple[str, str], dict[str, ModelClaim]] = {}
    last: dict[tuple[str, str], ModelClaim] = {}
    for claim in snapshot.claims:
        key = (claim.subject_key, claim.task_class)
        if claim.status == "active" and not claim_expired(claim, as_of):
            held = live.setdefault(key, {})
            prior = held.get(claim.polarity)
            if prior is None or stored_instant(claim.observed_at) > stored_instant(
                prior.observed_at
            ):
                held[claim.polarity] = claim
        elif claim.status in ("active", "stale") or (
            claim.status == "archived" and claim.claim_class == "eval-measured"
        ):
            prior = last.get(key)  # on a tie the later in the file, as the store orders them
            if prior is None or stored_instant(claim.observed_at) >= stored_instant(
                prior.observed_at
            ):
                last[key] = claim
        else:
            continue
        models.setdefault(claim.subject_key, None)
        classes.setdefault(claim.task_class, None)
    cells = {}
    for key in {*live, *last}:
        held = live.get(key, {})
        if held:
            chosen = tuple(held[p] for p in ("strength", "weakness") if p in held)
            cells[key] = MatrixCell(key[0], key[1], chosen, False)
            continue
        newest = last[key]
        if newest.status == "stale":
            cells[key] = MatrixCell(key[0], key[1], (newest,), True)
        elif newest.status == "archived":
            reason = (archive_reasons or {}).get(newest.id)
            cells[key] = MatrixCell(key[0], key[1], (), False, newest, reason)
        else:
            cells[key] = MatrixCell(key[0], key[1], (), False, expired=newest)
    return ClaimMatrix(as_of, tuple(sorted(models)), tuple(sorted(classes)), cells)


_SIGN = {"strength": "S", "weakness": "W"}


def retired_cells(matrix: ClaimMatrix) -> list[MatrixCell]:
    """The cells that show a retired claim (worth reading the history for, when any)."""
    return [cell for cell in matrix.cells.values() if cell.retired is not None]


ROUTE_MARK = "◆"


def _cost_text(cost: CellCost | None) -> str:
    if cost is None:
        return ""
    c = cost.costs
    money = (
        f"{usd_per_case(c.cost_per_case)}/case" if c.cost_per_case is not None else "cost unknown"
    )
    latency = f" p90 {c.p90_ms:.0f}ms" if c.p90_ms is not None else ""
    mark = f" {ROUTE_MARK}" if cost.cheapest_non_inferior else ""
    return f" · {money}{latency}{mark}"


def _shown_cell(matrix: ClaimMatrix, key: tuple[str, str], name: Callable[[str], str] = str) -> str:
    text = _cell_text(matrix.cells.get(key), matrix.as_of, name)
    if matrix.costs is None:
        return text
    cost = matrix.costs.get(key)
    if cost is not None and key not in matrix.cells:
        text = f"no claim ({to_fixed_2(cost.pass_rate)} n={cost.n})"
    return text + _cost_text(cost)


def _cost_legend(matrix: ClaimMatrix) -> list[str]:
    if matrix.costs is None:
        return []
    return [
        "$/case: mean cost per case in the current epoch; p90: a latency that occurred "
        "(kb's send to the answer, including kb's own queueing)",
        f"{ROUTE_MARK} the cheapest model non-inferior to the class's best",
        f"non-inferior: paired on shared cases, margin {margin_text(matrix.margin)} (kb compare)",
    ]


def _cell_text(cell: MatrixCell | None, as_of: int, name: Callable[[str], str] = str) -> str:
    """What one cell shows; ``name`` formats the text a commit trailer chose (its reason)."""
    if cell is None:
        return "·"
    if cell.stale:
        return "! stale (drift)"
    if cell.retired is not None:
        reason = cell.retired_reason
        return f"x retired ({name(reason)})" if reason else "x retired"
    if cell.expired is not None:
        ago = _days(as_of - stored_instant(cell.expired.expires_at))
        return f"- {_SIGN[cell.expired.polarity]} expired {ago if ago == 'today' else ago + ' ago'}"
    parts = []
    for claim in cell.claims:
        rate, interval, n = _rate(claim)
        age = _days(as_of - stored_instant(claim.observed_at))
        if claim.metrics is None:
            parts.append(f"{_SIGN[claim.polarity]} note {age}")
        else:
            parts.append(f"{_SIGN[claim.polarity]} {rate} {interval} n={n} {age}")
    return " / ".join(parts)


def matrix_text(matrix: ClaimMatrix, width: int = WIDTH) -> str:
    """The matrix as an aligned table, with a legend.

    A grid of model rows and task-class columns when it fits ``width``
    columns; otherwise each model heads its own block, one line per task
    class, and when a task class is too long even for that, each belief goes
    on its own line under it: the table never runs past the terminal (only
    a single name longer than the terminal could).
    """
    if not matrix.models:
        return "no live claims: nothing to decide from yet (kb sweep SPEC.toml measures)"
    texts = {
        (model, task_class): _shown_cell(matrix, (model, task_class))
        for model in matrix.models
        for task_class in matrix.task_classes
    }
    grid = table_lines(
        [
            ["model", *matrix.task_classes],
            *(
                [model, *(texts[model, task_class] for task_class in matrix.task_classes)]
                for model in matrix.models
            ),
        ]
    )
    if not fits(grid, width):
        rows = [
            (model, [task_class, texts[model, task_class]])
            for model in matrix.models
            for task_class in matrix.task_classes
        ]
        grid = _grouped(rows, ["task class", "what the store believes"], frozenset())
    if not fits(grid, width):  # a task class too long for a column: each belief under it
        grid = ["model / task class / what the store believes"]
        for model in matrix.models:
            grid.append(model)
            for task_class in matrix.task_classes:
                grid += [f"  {task_class}", f"    {texts[model, task_class]}"]
    legend = [
        "S strength, W weakness: pass rate [95% interval] n=cases, age since observed",
        "note: a person's claim",
        "· no claim",
        "- expired: the newest claim here is past its expiry (kb queue)",
        "x retired (why, from git): the newest claim here was archived",
        "! stale: the canary saw the model change",
        *_cost_legend(matrix),
    ]
    return "\n".join([*grid, "", *wrapped_items(legend, width=width)])


def matrix_markdown(matrix: ClaimMatrix) -> str:
    """The matrix as a markdown table (a PR comment, a wiki page).

    Models, task classes and retirement reasons are inert (:mod:`kb.markdown`).
    """
    if not matrix.models:
        return "No live claims.\n"
    lines = [
        "| model | " + " | ".join(map(table_code, matrix.task_classes)) + " |",
        "|---|" + "---|" * len(matrix.task_classes),
    ]
    for model in matrix.models:
        cells = [_shown_cell(matrix, (model, t), table_code) for t in matrix.task_classes]
        lines.append(f"| {table_code(model)} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "S strength, W weakness: pass rate [95% interval] n=cases, age since observed; "
        "note: a person's claim; · no claim; "
        "- expired: the newest claim here is past its expiry (kb queue); "
        "x retired (why, from git): the newest claim here was archived; "
        "! stale: the canary saw the model change.",
        *(f"{line}." for line in _cost_legend(matrix)),
    ]
    return "\n".join(lines) + "\n"


def _brief(claim: ModelClaim) -> dict[str, Any]:
    return {"id": claim.id, "polarity": claim.polarity, "observedAt": claim.observed_at}


def _claim_json(claim: ModelClaim, as_of: int) -> dict[str, Any]:
    """One claim of a matrix cell, with its numbers and age."""
    interval = claim.interval
    return {
        "id": claim.id,
        "polarity": claim.polarity,
        "status": claim.status,
        "class": claim.claim_class,
        "passRate": claim.metrics["passRate"] if claim.metrics else None,
        "wilson95": list(interval) if interval else None,
        "n": claim.metrics["n"] if claim.metrics else None,
        "observedAt": claim.observed_at,
        "expiresAt": claim.expires_at,
        "ageDays": (as_of - stored_instant(claim.observed_at)) // DAY_MS,
    }


def matrix_json(matrix: ClaimMatrix) -> dict[str, Any]:
    """The ``--json`` form: every cell, with each claim's numbers."""
    cells = []
    for model in matrix.models:
        for task_class in matrix.task_classes:
            cell = matrix.cells.get((model, task_class))
            if cell is None:
                continue
            claims = [_claim_json(claim, matrix.as_of) for claim in cell.claims]
            retired, expired = cell.retired, cell.expired
            cells.append(
                {
                    "model": model,
                    "taskClass": task_class,
                    "state": cell.state,
                    "stale": cell.stale,
                    "claims": claims,
                    "retired": None
                    if retired is None
                    else {**_brief(retired), "reason": cell.retired_reason},
                    "expired": None
                    if expired is None
                    else {**_brief(expired), "expiresAt": expired.expires_at},
                }
            )
    found: dict[str, Any] = {
        "asOf": format_instant(matrix.as_of),
        "models": list(matrix.models),
        "taskClasses": list(matrix.task_classes),
        "cells": cells,
    }
    if matrix.costs is not None:
        found["margin"] = matrix.margin
        found["costs"] = [
            {
                "model": cost.subject,
                "taskClass": cost.task_class,
                "passRate": cost.pass_rate,
                "n": cost.n,
                "costPerCaseUsd": cost.costs.cost_per_case,
                "p50Ms": cost.costs.p50_ms,
                "p90Ms": cost.costs.p90_ms,
                "nonInferiorToBest": cost.non_inferior_to_best,
                "cheapestNonInferior": cost.cheapest_non_inferior,
            }
            for _, cost in sorted(matrix.costs.items())
        ]
    return found
