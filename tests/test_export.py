"""``kb export --parquet DIR``: evidence as tables (SPEC 14.3), and the docs' DuckDB questions.

Two nights of two scripted models through the real ``kb sweep``, exported;
the tables are read back with pyarrow and every figure is checked against
the evidence files; each ``sql`` block of the docs' "Evidence as tables"
section runs in DuckDB against the export.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from kb.evidence_index import recorded_nights
from kb.store.filestore import KnowledgeStore
from tests.cli_helpers import kb
from tests.test_epochs import STORE, model, night, spec

pytestmark = pytest.mark.usefixtures("initialized_store")

TABLES_DOC = Path(__file__).parent.parent / "docs" / "how-to" / "team-scale.md"


def two_nights(runner: CliRunner, root: Path) -> None:
    path = spec(root / "s.toml", model(), model(set(range(0, 60, 2)), name="half"))
    night(runner, path, 1)
    night(runner, path, 2)


def readme_queries() -> list[str]:
    text = TABLES_DOC.read_text()
    section = text[text.index("## Evidence as tables") :]
    return re.findall(r"```sql\n(.*?)```", section, re.S)


def test_the_tables_hold_every_run_cell_and_claim(runner: CliRunner, isolated: Path) -> None:
    two_nights(runner, isolated)
    done = kb(runner, "export", "--parquet", "kb-tables")
    assert done.exit_code == 0, done.stderr
    runs = pq.read_table(isolated / "kb-tables" / "runs.parquet").to_pylist()
    nights, _ = recorded_nights(KnowledgeStore(isolated / STORE))
    assert len(runs) == sum(len(n.runs) for n in nights) == 240
    half = [r for r in runs if r["model"] == "scripted:half"]
    assert sum(r["passed"] for r in half) == 60 and {r["report_id"] for r in half} == {
        n.report.report_id for n in nights
    }
    cells = pq.read_table(isolated / "kb-tables" / "cells.parquet").to_pylist()
    assert len(cells) == 4
    assert {(c["model"], c["pass_rate"]) for c in cells} == {
        ("scripted:m", 1.0),
        ("scripted:half", 0.5),
    }
    claims = pq.read_table(isolated / "kb-tables" / "claims.parquet").to_pylist()
    live = [c for c in claims if c["status"] == "active"]
    assert [c["model"] for c in live] == ["scripted:m"]
    assert live[0]["wilson95_low"] < 1.0 == live[0]["pass_rate"]
    # the types are declared, not guessed: no effort anywhere, every claim's rate 1 here
    claims_schema = pq.read_schema(isolated / "kb-tables" / "claims.parquet")
    assert str(claims_schema.field("pass_rate").type) == "double"
    assert str(claims_schema.field("effort").type) == "string"
    assert str(claims_schema.field("reports").type).startswith("list<") and "string" in str(
        claims_schema.field("reports").type
    )
    runs_schema = pq.read_schema(isolated / "kb-tables" / "runs.parquet")
    assert str(runs_schema.field("passed").type) == "bool"
    assert str(runs_schema.field("repeat").type) == "int64"
    meta = pq.ParquetFile(isolated / "kb-tables" / "runs.parquet").metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    assert "kb-tables/runs.parquet: 240 rows" in done.stdout


def test_the_readmes_duckdb_questions_answer(runner: CliRunner, isolated: Path) -> None:
    two_nights(runner, isolated)
    assert kb(runner, "export", "--parquet", "kb-tables").exit_code == 0
    queries = readme_queries()
    assert len(queries) == 3
    failing, weekly, live = (duckdb.sql(q).fetchall() for q in queries)
    # only scripted:half fails cases: no case is failed by every model
    assert failing == []
    assert {row[0] for row in weekly} == {"scripted:m", "scripted:half"}
    assert [(row[0], row[2]) for row in live] == [("scripted:m", "strength")]


def test_without_pyarrow_the_export_says_how_to_get_it(
    runner: CliRunner, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    done = kb(runner, "export", "--parquet", "kb-tables")
    assert done.exit_code == 2
    assert done.stderr.strip().splitlines() == [
        "Error: export: needs pyarrow, which is optional: pip install 'kb[table]'"
    ]
    assert not (isolated / "kb-tables").exists()


def test_a_file_in_the_way_is_one_line(runner: CliRunner, isolated: Path) -> None:
    (isolated / "taken").write_text("a user's file\n")
    done = kb(runner, "export", "--parquet", "taken")
    assert done.exit_code == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert (isolated / "taken").read_text() == "a user's file\n"
