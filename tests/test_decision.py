"""The decision views (SPEC 12.4): ``kb matrix`` and the one-line ``kb list``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kb.store.filestore import CommitContext, KnowledgeStore
from kb.store.ops import MarkStale
from tests.cli_helpers import kb
from tests.factories import add, eval_claim, human_claim

STORE = "rulvar.models.json"
AT = "2026-07-11"


def seed() -> None:
    store = KnowledgeStore(Path(STORE))
    metrics = {"passRate": 0.95, "n": 60, "graderId": "eval-suite@0123456789abcdef"}
    store.commit(
        [
            add(eval_claim("a-ext", metrics=metrics, subject={"model": "openai:a"})),
            add(
                eval_claim(
                    "a-math",
                    polarity="weakness",
                    taskClass="arithmetic",
                    subject={"model": "openai:a"},
                    observedAt="2026-07-05T00:00:00.000Z",
                    metrics={"passRate": 0.25, "n": 40, "graderId": "eval-suite"},
                )
            ),
            add(eval_claim("b-ext", metrics=metrics, subject={"model": "openai:b"})),
            add(
                human_claim(
                    "b-note",
                    taskClass="arithmetic",
                    subject={"model": "openai:b"},
                    polarity="weakness",
                )
            ),
            # expired long ago: never shown as a belief
            add(
                eval_claim(
                    "old",
                    subject={"model": "openai:c"},
                    observedAt="2026-01-01T00:00:00.000Z",
                    metrics=metrics,
                )
            ),
        ],
        0,
        CommitContext("seed", "t"),
    )
    store.commit([MarkStale("b-ext")], 1, CommitContext("canary", "t"))


def test_matrix_text_shows_each_model_on_each_task_class(runner: CliRunner, isolated: Path) -> None:
    seed()
    lines = kb(runner, "--as-of", AT, "matrix").stdout.splitlines()
    assert lines[0].split() == ["model", "arithmetic", "extraction"]
    assert lines[1].split() == (
        "openai:a W 0.25 [0.14, 0.40] n=40 6d S 0.95 [0.86, 0.98] n=60 10d".split()
    )
    # b's extraction strength was flipped stale by a drift; its arithmetic is a note
    assert lines[2].split() == "openai:b W note 10d ! stale (drift)".split()
    assert len([line for line in lines if line.startswith("openai:")]) == 2  # c expired
    assert lines[-1].startswith("S strength, W weakness")


def test_matrix_json_and_markdown(runner: CliRunner, isolated: Path) -> None:
    seed()
    found = json.loads(kb(runner, "--as-of", AT, "matrix", "--json").stdout)
    assert found["models"] == ["openai:a", "openai:b"]
    assert found["taskClasses"] == ["arithmetic", "extraction"]
    cell = next(
        c for c in found["cells"] if c["model"] == "openai:a" and c["taskClass"] == "extraction"
    )
    (claim,) = cell["claims"]
    assert claim["id"] == "a-ext" and claim["n"] == 60 and claim["ageDays"] == 10
    low, high = claim["wilson95"]
    assert round(low, 2) == 0.86 and round(high, 2) == 0.98
    stale = next(
        c for c in found["cells"] if c["model"] == "openai:b" and c["taskClass"] == "extraction"
    )
    assert stale["stale"] is True and stale["claims"][0]["status"] == "stale"
    markdown = kb(runner, "--as-of", AT, "matrix", "--markdown").stdout
    assert markdown.splitlines()[:2] == ["| model | arithmetic | extraction |", "|---|---|---|"]
    assert "| `openai:b` | W note 10d | ! stale (drift) |" in markdown


def test_matrix_of_an_empty_store_says_so(runner: CliRunner, isolated: Path) -> None:
    KnowledgeStore(Path(STORE)).initialize(CommitContext("init", "t"))
    assert "no live claims" in kb(runner, "matrix").stdout


def test_list_counts_what_it_does_not_show(runner: CliRunner, isolated: Path) -> None:
    seed()
    out = kb(runner, "--as-of", AT, "list").stdout.splitlines()
    assert [line.split()[0] for line in out[1:-1]] == ["openai:a", "openai:a", "openai:b"]
    assert out[1].split()[2] == "weakness"  # the newest first (observed 2026-07-05)
    assert out[-1] == (
        "3 claims shown (5 in the store; 1 stale after a canary drift: kb list --status stale; "
        "1 active but expired: kb queue); --ids for claim ids, --long for the full view, "
        "--all for every status"
    )
    note = next(line for line in out if "openai:b" in line)
    assert note.split()[3:6] == ["note", "—", "—"]


def test_list_ids_adds_what_kb_show_takes(runner: CliRunner, isolated: Path) -> None:
    seed()
    lines = kb(runner, "--as-of", AT, "list", "--ids").stdout.splitlines()
    assert lines[0].split()[-1] == "id"
    assert lines[1].split()[-1] == "a-math" and lines[1].split()[0] == "openai:a"


def test_a_model_whose_claims_were_all_retired_keeps_its_row(
    runner: CliRunner, isolated: Path
) -> None:
    from kb.store.ops import ArchiveClaim

    seed()
    store = KnowledgeStore(Path(STORE))
    store.commit(
        [ArchiveClaim("a-ext", "falsified"), ArchiveClaim("a-math", "falsified")],
        2,
        CommitContext("t", "t"),
    )
    lines = kb(runner, "--as-of", AT, "matrix").stdout.splitlines()
    assert lines[1].split() == "openai:a x retired x retired".split()
