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
    # c's only claim expired long ago: shown as expired (when), never as a belief
    assert lines[3].split() == "openai:c · - S expired 101d ago".split()
    assert lines[-5:] == [  # the legend wraps between its items, never inside one
        "S strength, W weakness: pass rate [95% interval] n=cases, age since observed;",
        "note: a person's claim; · no claim;",
        "- expired: the newest claim here is past its expiry (kb queue);",
        "x retired (why, from git): the newest claim here was archived;",
        "! stale: the canary saw the model change",
    ]


def test_matrix_json_and_markdown(runner: CliRunner, isolated: Path) -> None:
    seed()
    found = json.loads(kb(runner, "--as-of", AT, "matrix", "--json").stdout)
    assert found["models"] == ["openai:a", "openai:b", "openai:c"]
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
    assert stale["state"] == "stale" and cell["state"] == "live"
    expired = next(c for c in found["cells"] if c["model"] == "openai:c")
    assert expired["state"] == "expired" and expired["claims"] == []
    assert expired["expired"]["id"] == "old"
    assert expired["expired"]["expiresAt"] == "2026-04-01T00:00:00.000Z"
    markdown = kb(runner, "--as-of", AT, "matrix", "--markdown").stdout
    assert markdown.splitlines()[:2] == [
        "| model | `arithmetic` | `extraction` |",
        "|---|---|---|",
    ]
    assert "| `openai:b` | W note 10d | ! stale (drift) |" in markdown
    assert "| `openai:c` | · | - S expired 101d ago |" in markdown


def test_matrix_of_an_empty_store_says_so(runner: CliRunner, isolated: Path) -> None:
    KnowledgeStore(Path(STORE)).initialize(CommitContext("init", "t"))
    assert "no live claims" in kb(runner, "matrix").stdout


def test_list_counts_what_it_does_not_show(runner: CliRunner, isolated: Path) -> None:
    seed()
    out = kb(runner, "--as-of", AT, "list").stdout.splitlines()
    assert [line.split()[0] for line in out[1:4]] == ["openai:a", "openai:a", "openai:b"]
    assert out[1].split()[2] == "weakness"  # the newest first (observed 2026-07-05)
    # the footer wraps at 80 columns between its items, never inside one
    assert out[4:] == [
        "3 claims shown (5 in the store;",
        "1 stale after a canary drift: kb list --status stale;",
        "1 active but expired: kb queue); --ids for claim ids; --long for the full view;",
        "--all for every status",
    ]
    note = next(line for line in out if "openai:b" in line)
    assert note.split()[3:6] == ["note", "—", "—"]


def test_list_ids_adds_what_kb_show_takes(runner: CliRunner, isolated: Path) -> None:
    seed()
    lines = kb(runner, "--as-of", AT, "list", "--ids").stdout.splitlines()
    assert lines[0].split()[-1] == "id"
    assert lines[1].split()[-1] == "a-math" and lines[1].split()[0] == "openai:a"
    assert "--ids for claim ids" not in "\n".join(lines)  # already asked for


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
    # a plain file: no commit holds the reason, so none is claimed
    assert lines[1].split() == "openai:a x retired x retired".split()


def test_a_retired_cell_says_why_from_its_archive_commit(
    runner: CliRunner, repo: Path, initialized_store: Path
) -> None:
    from kb.store.ops import ArchiveClaim

    seed()
    store = KnowledgeStore(Path(STORE))
    version = store.read().version
    store.commit([ArchiveClaim("a-math", "deprecated")], version, CommitContext("t", "t"))
    store.commit([ArchiveClaim("a-ext", "falsified")], version + 1, CommitContext("t", "t"))
    lines = kb(runner, "--as-of", AT, "matrix").stdout.splitlines()
    assert lines[1].split() == "openai:a x retired (deprecated) x retired (falsified)".split()
    found = json.loads(kb(runner, "--as-of", AT, "matrix", "--json").stdout)
    cells = {(c["model"], c["taskClass"]): c for c in found["cells"]}
    assert cells["openai:a", "extraction"]["claims"] == []
    assert cells["openai:a", "extraction"]["retired"] == {
        "id": "a-ext",
        "polarity": "strength",
        "observedAt": "2026-07-01T00:00:00.000Z",
        "reason": "falsified",
    }
    assert cells["openai:b", "extraction"]["retired"] is None  # stale, not retired
    markdown = kb(runner, "--as-of", AT, "matrix", "--markdown").stdout
    assert "| `openai:a` | x retired (`deprecated`) | x retired (`falsified`) |" in markdown


def test_a_retirement_made_on_a_merged_branch_keeps_its_reason(
    runner: CliRunner, repo: Path, initialized_store: Path
) -> None:
    from kb.store.ops import ArchiveClaim
    from tests.conftest import git

    seed()
    git(repo, "checkout", "-q", "-b", "review")
    store = KnowledgeStore(Path(STORE))
    version = store.read().version
    store.commit([ArchiveClaim("a-ext", "rejected")], version, CommitContext("t", "t"))
    git(repo, "checkout", "-q", "main")
    (repo / "other.txt").write_text("meanwhile\n")
    git(repo, "add", "other.txt")
    git(repo, "commit", "-q", "-m", "user: meanwhile")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge review", "review")
    lines = kb(runner, "--as-of", AT, "matrix").stdout.splitlines()
    row = next(line for line in lines if line.startswith("openai:a"))
    assert "x retired (rejected)" in row


def test_the_newest_claim_decides_a_cell_without_a_live_one(
    runner: CliRunner, repo: Path, initialized_store: Path
) -> None:
    from kb.store.ops import ArchiveClaim

    store = KnowledgeStore(Path(STORE))
    metrics = {"passRate": 0.3, "n": 40, "graderId": "eval-suite"}
    store.commit(
        [
            add(eval_claim("s-old", subject={"model": "openai:a"}, metrics=metrics)),
            add(
                eval_claim(
                    "w-new",
                    polarity="weakness",
                    subject={"model": "openai:a"},
                    observedAt="2026-07-05T00:00:00.000Z",
                    metrics=metrics,
                )
            ),
            add(
                eval_claim(
                    "w-only",
                    polarity="weakness",
                    taskClass="arithmetic",
                    subject={"model": "openai:a"},
                    observedAt="2026-07-05T00:00:00.000Z",
                    metrics=metrics,
                )
            ),
        ],
        store.read().version,
        CommitContext("seed", "t"),
    )
    store.commit(
        [ArchiveClaim("s-old", "falsified")], store.read().version, CommitContext("t", "t")
    )
    # a month on both weaknesses expired (30 days): the falsified strength is older news
    row = kb(runner, "--as-of", "2026-08-10", "matrix").stdout.splitlines()[1].split()
    assert row == "openai:a - W expired 6d ago - W expired 6d ago".split()
    # before the weakness expired it is the belief; the archive shows nowhere
    row = kb(runner, "--as-of", AT, "matrix").stdout.splitlines()[1]
    assert "retired" not in row and row.split()[1:3] == ["W", "0.30"]


def long_names_seed() -> None:
    """Claims on models with long ids and long task classes: a flat table would be ~110 wide."""
    store = KnowledgeStore(Path(STORE))
    claims = []
    for at, model in enumerate(
        ["anthropic:claude-3-5-sonnet-20241022", "openai:gpt-4o-mini-2024-07-18", "openai:a"]
    ):
        for day, task_class in enumerate(["instruction-following", "extraction"]):
            claims.append(
                add(
                    eval_claim(
                        f"{model}/{task_class}/" + "x" * 40,
                        subject={"model": model},
                        taskClass=task_class,
                        observedAt=f"2026-07-0{1 + day + at}T00:00:00.000Z",
                        metrics={"passRate": 0.95, "n": 120, "graderId": "eval-suite"},
                    )
                )
            )
    store.commit(claims, 0, CommitContext("seed", "t"))


def test_list_and_matrix_fit_80_columns_with_long_names(runner: CliRunner, isolated: Path) -> None:
    long_names_seed()
    listed = kb(runner, "--as-of", AT, "list").stdout.splitlines()
    assert all(len(line) <= 80 for line in listed)
    # grouped under each model, models in the order of their newest claim, newest first within
    assert [line for line in listed if line and not line.startswith(("  ", "model"))][:3] == [
        "openai:a",
        "openai:gpt-4o-mini-2024-07-18",
        "anthropic:claude-3-5-sonnet-20241022",
    ]
    assert listed[2].split()[0] == "extraction"  # openai:a's extraction was observed last
    assert len([line for line in listed if line.startswith("  ")]) == 6  # one line per claim
    matrix = kb(runner, "--as-of", AT, "matrix").stdout.splitlines()
    assert all(len(line) <= 80 for line in matrix)
    at = matrix.index("openai:gpt-4o-mini-2024-07-18")
    assert matrix[at + 1].split()[:2] == ["extraction", "S"]
    assert matrix[at + 2].split()[:2] == ["instruction-following", "S"]


def test_matrix_puts_each_belief_under_a_task_class_too_long_for_a_column(
    runner: CliRunner, isolated: Path
) -> None:
    long_class = "summarisation-of-long-legal-documents-in-german-x"
    store = KnowledgeStore(Path(STORE))
    metrics = {"passRate": 0.95, "n": 120, "graderId": "eval-suite"}
    store.commit(
        [
            add(eval_claim("long", subject={"model": "openai:a"}, taskClass=long_class)),
            add(eval_claim("short", subject={"model": "openai:a"}, metrics=metrics)),
        ],
        0,
        CommitContext("seed", "t"),
    )
    matrix = kb(runner, "--as-of", AT, "matrix").stdout.splitlines()
    assert all(len(line) <= 80 for line in matrix), max(matrix, key=len)
    at = matrix.index(f"  {long_class}")
    assert matrix[at + 1].split()[:3] == ["S", "0.95", "[0.76,"]  # n=20
    assert matrix[matrix.index("  extraction") + 1].startswith("    S 0.95")


def test_list_ids_too_long_for_a_column_go_under_their_claim(
    runner: CliRunner, isolated: Path
) -> None:
    long_names_seed()
    listed = kb(runner, "--as-of", AT, "list", "--ids").stdout.splitlines()
    ids = [line.split()[1] for line in listed if line.startswith("    id ")]
    assert len(ids) == 6 and all(claim_id.endswith("x" * 40) for claim_id in ids)
    at = listed.index("openai:a")
    assert listed[at + 2] == f"    id openai:a/extraction/{'x' * 40}"
    # the only lines past 80 columns are the ids themselves, kept whole to be copied
    assert all(len(line) <= 80 for line in listed if not line.startswith("    id "))
