"""Messages (SPEC 12.4): near-miss ids, shell completion of claim and report ids."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from kb.cli import cli
from kb.store.filestore import CommitContext, KnowledgeStore
from tests.cli_helpers import kb
from tests.factories import add, eval_claim

STORE = "rulvar.models.json"
ID = "kb-sweep-2026-11-30T02:00:00.000Z/openai:gpt-4o-mini/arithmetic"


def seed() -> None:
    claims = [add(eval_claim(ID)), add(eval_claim(ID.replace("arithmetic", "extraction")))]
    KnowledgeStore(Path(STORE)).commit(claims, 0, CommitContext("seed", "t"))


def test_a_near_miss_id_gets_a_suggestion(runner: CliRunner, isolated: Path) -> None:
    seed()
    typo = ID.replace("arithmetic", "arithmetc")
    shown = kb(runner, "show", typo)
    assert shown.exit_code == 2
    assert f"no claim with id {typo!r} (did you mean {ID!r}?)" in shown.stderr
    archived = kb(runner, "archive", typo, "--reason", "rejected")
    assert archived.exit_code == 2 and f"(did you mean {ID!r}?)" in archived.stderr
    far = kb(runner, "show", "nothing-like-it")
    assert far.exit_code == 2 and "did you mean" not in far.stderr


def complete(words: str, cwd: Path) -> list[str]:
    env = {**os.environ, "_KB_COMPLETE": "bash_complete", "COMP_WORDS": words}
    env["COMP_CWORD"] = str(len(words.split()) - 1)
    done = subprocess.run(
        [sys.executable, "-m", "kb"], capture_output=True, text=True, env=env, cwd=cwd
    )
    return [line.split(",", 1)[1] for line in done.stdout.splitlines() if "," in line]


def test_claim_and_report_ids_complete_in_the_shell(isolated: Path) -> None:
    seed()
    assert complete("kb show kb-sweep-2026-11-30T02:00:00.000Z/openai:gpt-4o-mini/a", isolated) == [
        ID
    ]
    assert len(complete("kb show kb-sweep", isolated)) == 2
    evidence = isolated / "kb-evidence"
    evidence.mkdir()
    (evidence / "nightly-1.report.json").write_text("{}")
    assert complete("kb report night", isolated) == ["nightly-1"]
    assert complete("kb show x", isolated / "kb-evidence") == []  # no store here: nothing


def test_a_part_of_an_id_gets_the_ids_that_hold_it(runner: CliRunner, isolated: Path) -> None:
    seed()
    shown = kb(runner, "show", "openai:gpt-4o-mini/arithmetic")
    assert shown.exit_code == 2 and f"(did you mean {ID!r}?)" in shown.stderr


def test_a_bad_kb_as_of_names_the_variable(runner: CliRunner, isolated: Path) -> None:
    seed()
    result = runner.invoke(cli, ["list"], env={"KB_AS_OF": "bogus"})
    assert result.exit_code == 2 and "KB_AS_OF: 'bogus' is not an ISO date" in result.stderr
    flag = runner.invoke(cli, ["list", "--as-of", "bogus"], env={"KB_AS_OF": "2026-01-01"})
    assert flag.exit_code == 2 and "--as-of: 'bogus'" in flag.stderr


def test_a_refused_json_sweep_is_one_line_on_stderr(runner: CliRunner, isolated: Path) -> None:
    from tests.sweep_helpers import scripted_model, write_spec

    seed()
    spec = write_spec(
        isolated / "s.toml",
        [scripted_model("m", 10)],
        budgets={"target_usd": 0.01, "max_total_usd": 0.02},
    )
    result = kb(runner, "sweep", str(spec), "--json", "--observed-at", "2026-11-01T02:00:00Z")
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "worst-case authorized spend" in result.stderr


def test_a_long_list_of_issues_names_twelve_and_counts_the_rest() -> None:
    from kb.errors import ConfigError

    many = ConfigError("cp.toml", [f"case-{i}: used to produce the claims" for i in range(160)])
    text = str(many)
    assert text.startswith("cp.toml: 160 issues: case-0: used to produce the claims; ")
    assert "case-11: used" in text and "case-12: used" not in text
    assert text.endswith("; and 148 more") and len(text) < 1000
    assert many.issues[-1] == "case-159: used to produce the claims"  # all kept for callers
