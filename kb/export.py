"""Evidence as tables: ``kb export --parquet DIR`` (SPEC 14.3).

A team asks questions of its evidence that no kb command was written for
("which cases did every model fail last month?", "how did cost per case move
week by week?"). Three tables answer them in any SQL engine that reads
Parquet (DuckDB, polars, pandas) without a line of kb:

* ``runs`` — one row per target or judge run of every night with evidence:
  the night, the model, the task class, the case and its repeat, status,
  passed (``null`` when not graded ok, or unscored), cost, latency, tokens and the reply;
* ``cells`` — one row per measured cell per night: pass rate, n, planned n,
  cost, outcome, whether it was complete, and the epoch's pooled estimate;
* ``claims`` — one row per claim in the store file: identity, polarity,
  status, pass rate, n, its 95 % interval, cost, when observed and when it
  expires, and the reports it cites.

pyarrow is an optional dependency (``pip install 'kb[table]'``); everything
else in kb works without it. Files are written with zstd compression, one
per table, through a temp file and a rename (a killed export leaves the
previous file or the new one, never half of one).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb.errors import ConfigError
from kb.evidence_index import RecordedNight, recorded_nights
from kb.store.filestore import KnowledgeStore

if TYPE_CHECKING:
    import pyarrow

TABLES = ("runs", "cells", "claims")


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise ConfigError(
            "export", "needs pyarrow, which is optional: pip install 'kb[table]'"
        ) from None
    return pyarrow


def _runs_rows(nights: Iterable[RecordedNight]) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {
        name: []
        for name in (
            "report_id observed_at kind model effort task_class case repeat status passed "
            "cost_usd latency_ms prompt_tokens completion_tokens attempts output"
        ).split()
    }
    for night in nights:
        for run in night.runs:
            columns["report_id"].append(night.report.report_id)
            columns["observed_at"].append(night.report.observed_at)
            columns["kind"].append(run.kind)
            columns["model"].append(run.model)
            columns["effort"].append(run.effort)
            columns["task_class"].append(run.task_class)
            columns["case"].append(run.case)
            columns["repeat"].append(run.repeat)
            columns["status"].append(run.status)
            graded = run.status == "ok" and run.verdicts and not run.unscored
            columns["passed"].append(run.passed if graded else None)
            columns["cost_usd"].append(run.cost_usd)
            columns["latency_ms"].append(run.latency_ms)
            usage = run.usage
            columns["prompt_tokens"].append(usage.prompt_tokens if usage else None)
            columns["completion_tokens"].append(usage.completion_tokens if usage else None)
            columns["attempts"].append(run.attempts)
            columns["output"].append(run.output)
    return columns


def _cells_rows(nights: Iterable[RecordedNight]) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {
        name: []
        for name in (
            "report_id observed_at model effort task_class pass_rate n planned_n complete "
            "outcome total_cost_usd claim_id epoch_pass_rate epoch_n"
        ).split()
    }
    for night in nights:
        for cell in night.report.cells:
            columns["report_id"].append(night.report.report_id)
            columns["observed_at"].append(night.report.observed_at)
            columns["model"].append(cell.model)
            columns["effort"].append(cell.effort)
            columns["task_class"].append(cell.task_class)
            columns["pass_rate"].append(cell.pass_rate)
            columns["n"].append(cell.n)
            columns["planned_n"].append(cell.planned_n)
            columns["complete"].append(cell.outcome != "incomplete")
            columns["outcome"].append(cell.outcome)
            columns["total_cost_usd"].append(cell.total_cost_usd)
            columns["claim_id"].append(cell.claim_id)
            epoch = cell.epoch
            columns["epoch_pass_rate"].append(epoch.pass_rate if epoch is not None else None)
            columns["epoch_n"].append(epoch.n if epoch is not None else None)
    return columns


def _claims_rows(store: KnowledgeStore) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {
        name: []
        for name in (
            "id model effort task_class polarity class status pass_rate n wilson95_low "
            "wilson95_high cost_usd observed_at expires_at reports supersedes"
        ).split()
    }
    for claim in store.read().claims:
        metrics = claim.metrics
        interval = claim.interval
        columns["id"].append(claim.id)
        columns["model"].append(claim.model)
        columns["effort"].append(claim.effort)
        columns["task_class"].append(claim.task_class)
        columns["polarity"].append(claim.polarity)
        columns["class"].append(claim.claim_class)
        columns["status"].append(claim.status)
        columns["pass_rate"].append(metrics["passRate"] if metrics else None)
        columns["n"].append(metrics["n"] if metrics else None)
        columns["wilson95_low"].append(interval[0] if interval else None)
        columns["wilson95_high"].append(interval[1] if interval else None)
        columns["cost_usd"].append(metrics.get("cost") if metrics else None)
        columns["observed_at"].append(claim.observed_at)
        columns["expires_at"].append(claim.expires_at)
        columns["reports"].append([e["reportId"] for e in claim.evidence if e["kind"] == "eval"])
        columns["supersedes"].append(claim.supersedes)
    return columns


_NUMBERS = {
    "int64": "repeat prompt_tokens completion_tokens attempts n planned_n epoch_n",
    "float64": "cost_usd latency_ms pass_rate total_cost_usd epoch_pass_rate wilson95_low "
    "wilson95_high",
    "bool_": "passed complete",
}
"""Each column's type is declared, never guessed from the rows: a night whose rates are all
1 still writes ``pass_rate`` as a double, so exports of different days stack."""


def _table(pa: Any, columns: dict[str, list[Any]]) -> pyarrow.Table:
    typed = {name: kind for kind, names in _NUMBERS.items() for name in names.split()}
    fields = [
        pa.field(
            name,
            pa.list_(pa.string())
            if name == "reports"
            else getattr(pa, typed[name])()
            if name in typed
            else pa.string(),
        )
        for name in columns
    ]
    rows = {
        name: [
            None if v is None else str(v) if name not in typed and name != "reports" else v
            for v in values
        ]
        for name, values in columns.items()
    }
    return pa.table(rows, schema=pa.schema(fields))


def evidence_tables(store: KnowledgeStore) -> tuple[dict[str, pyarrow.Table], list[str]]:
    """The ``runs``, ``cells`` and ``claims`` tables, and the nights left out (unreadable files).

    Column types are fixed (strings, ``int64``, ``double``, ``bool``, a list of strings
    for a claim's reports), whatever the rows hold.
    """
    pa = _pyarrow()
    nights, left_out = recorded_nights(store)
    tables = {
        "runs": _table(pa, _runs_rows(nights)),
        "cells": _table(pa, _cells_rows(nights)),
        "claims": _table(pa, _claims_rows(store)),
    }
    return tables, left_out


def write_parquet(tables: dict[str, pyarrow.Table], directory: Path) -> list[Path]:
    """Each table as ``DIR/<name>.parquet`` (zstd), replaced whole; the paths written."""
    _pyarrow()
    import pyarrow.parquet as pq

    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            "--parquet", f"cannot create {directory}: {exc.strerror or exc}"
        ) from None
    written = []
    for name, table in tables.items():
        path = directory / f"{name}.parquet"
        temp = directory / f".{name}.parquet.{os.getpid()}.kb-tmp"
        try:
            pq.write_table(table, temp, compression="zstd")
            os.replace(temp, path)
        except OSError as exc:
            temp.unlink(missing_ok=True)
            raise ConfigError("--parquet", f"cannot write {path}: {exc.strerror or exc}") from None
        written.append(path)
    return written
