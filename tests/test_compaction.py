"""kb compact: old superseded/archived claims and unused evidence leave the file, not git."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.cli import cli
from kb.store.validation import parse_store
from tests.cli_helpers import kb, note
from tests.conftest import git

STORE = "rulvar.models.json"
DAY = 86_400


def at_day(monkeypatch: pytest.MonkeyPatch, day: int) -> str:
    """Commits made now are dated ``day`` days after 2026-01-01 (git reads the env)."""
    seconds = 1_767_225_600 + day * DAY  # 2026-01-01T00:00:00Z
    monkeypatch.setenv("GIT_COMMITTER_DATE", f"@{seconds} +0000")
    monkeypatch.setenv("GIT_AUTHOR_DATE", f"@{seconds} +0000")
    return f"2026-01-{1 + day:02d}T00:00:00Z" if day < 31 else f"2026-02-{day - 30:02d}T00:00:00Z"


def write_report(directory: Path, report_id: str, observed_at: str) -> None:
    """A report's two evidence files, as a sweep that measured nothing would write them."""
    directory.mkdir(exist_ok=True)
    (directory / f"{report_id}.jsonl").write_text("")
    report = {
        "format": 2,
        "reportId": report_id,
        "observedAt": observed_at,
        "gate": {"kind": "interval", "tolerance": 0.1, "strength": 0.9, "weakness": 0.5},
        "pool": [],
        "worstCaseUsd": None,
        "spentUsd": 0,
        "cells": [],
        "claims": [],
        "retired": [],
        "canary": [],
    }
    (directory / f"{report_id}.report.json").write_text(json.dumps(report))


@pytest.fixture
def history(repo: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Three notes on day 0; A archived on day 1, B on day 40; evidence of three reports."""
    as_of = at_day(monkeypatch, 0)
    assert kb(runner, "init").exit_code == 0
    evidence = repo / "kb-evidence"
    write_report(evidence, "r-old", "2026-01-01T00:00:00.000Z")
    write_report(evidence, "r-cited", "2026-01-01T00:00:00.000Z")
    write_report(evidence, "r-recent", "2026-02-13T00:00:00.000Z")
    git(repo, "add", "kb-evidence")
    git(repo, "commit", "-q", "-m", "evidence")
    ids = {
        "a": note(runner, "extraction", as_of),
        "b": note(runner, "planning", as_of),
        "c": note(runner, "judging", as_of, "eval:r-cited#c1"),
    }
    at_day(monkeypatch, 1)
    assert kb(runner, "archive", ids["a"], "--reason", "rejected").exit_code == 0
    at_day(monkeypatch, 40)
    assert kb(runner, "archive", ids["b"], "--reason", "rejected").exit_code == 0
    return ids


def test_compaction_removes_only_what_was_retired_before_the_cutoff(
    repo: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch, history: dict[str, str]
) -> None:
    before = parse_store((repo / STORE).read_bytes(), "before")
    as_of = at_day(monkeypatch, 45)
    result = kb(runner, "--as-of", as_of, "compact", "--keep-days", "30")
    assert result.exit_code == 0, result.output
    assert "1 compacted" in result.output and f"(store v{before.version + 1})" in result.output
    after = parse_store((repo / STORE).read_bytes(), "after")
    assert after.version == before.version + 1
    assert [e.id for e in after.entries] == [history["b"], history["c"]]
    evidence = sorted(p.name for p in (repo / "kb-evidence").iterdir())
    assert evidence == [
        "r-cited.jsonl",
        "r-cited.report.json",
        "r-recent.jsonl",
        "r-recent.report.json",
    ]
    assert git(repo, "status", "--porcelain") == ""
    # Everything removed is still in git history.
    assert "r-old.jsonl" in git(repo, "show", "--stat", "--format=", "HEAD")
    body = git(repo, "log", "-1", "--format=%B")
    assert f"Kb-Compacted: {history['a']}" in body
    verify = kb(runner, "verify")
    assert verify.exit_code == 0, verify.output
    again = kb(runner, "--as-of", as_of, "compact", "--keep-days", "30")
    assert again.exit_code == 0 and "nothing to compact" in again.output


def test_kb_show_finds_a_compacted_claim_in_history(
    repo: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch, history: dict[str, str]
) -> None:
    as_of = at_day(monkeypatch, 45)
    assert kb(runner, "--as-of", as_of, "compact", "--keep-days", "30").exit_code == 0
    version = parse_store((repo / STORE).read_bytes(), "s").version
    shown = kb(runner, "--as-of", as_of, "show", history["a"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith("compacted: removed from the file by commit")
    assert history["a"] in shown.output and "archived" in shown.output
    lines = shown.output.splitlines()
    changes = [line for line in lines if line.startswith("  ") and " — " in line]
    assert [c.split(" ", 5)[5].split(" — ")[0] for c in changes] == [
        "added",
        "status active → archived (rejected)",
        f"compacted at store v{version} (in git history)",
    ]
    missing = runner.invoke(cli, ["show", "no-such-claim"])
    assert missing.exit_code == 2 and "no claim with id 'no-such-claim'" in missing.stderr


def test_keep_days_zero_takes_every_retired_claim(
    repo: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch, history: dict[str, str]
) -> None:
    as_of = at_day(monkeypatch, 41)
    assert kb(runner, "--as-of", as_of, "compact", "--keep-days", "0").exit_code == 0
    after = parse_store((repo / STORE).read_bytes(), "after")
    assert [e.id for e in after.entries] == [history["c"]]


@pytest.mark.parametrize("days", ["-1", "x", "1.5"])
def test_bad_keep_days_is_refused_and_changes_nothing(
    repo: Path, runner: CliRunner, history: dict[str, str], days: str
) -> None:
    before = (repo / STORE).read_bytes()
    head = git(repo, "rev-parse", "HEAD")
    result = runner.invoke(cli, ["compact", "--keep-days", days])
    assert result.exit_code == 2
    assert "keep-days" in result.stderr.strip().splitlines()[-1]
    assert (repo / STORE).read_bytes() == before and git(repo, "rev-parse", "HEAD") == head


def test_compaction_needs_git(isolated: Path, runner: CliRunner) -> None:
    assert kb(runner, "init").exit_code == 0
    before = (isolated / STORE).read_bytes()
    result = runner.invoke(cli, ["compact", "--keep-days", "30"])
    assert result.exit_code == 2 and "needs the store in a git work tree" in result.stderr
    assert (isolated / STORE).read_bytes() == before


def test_an_edited_evidence_file_is_not_deleted_behind_your_back(
    repo: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch, history: dict[str, str]
) -> None:
    (repo / "kb-evidence" / "r-old.jsonl").write_text("edited by hand\n")
    before = (repo / STORE).read_bytes()
    result = runner.invoke(
        cli, ["--as-of", at_day(monkeypatch, 45), "compact", "--keep-days", "30"]
    )
    assert result.exit_code != 0 and "r-old.jsonl" in result.stderr
    assert (repo / STORE).read_bytes() == before
    assert (repo / "kb-evidence" / "r-old.jsonl").read_text() == "edited by hand\n"


def test_kb_diff_tells_what_compaction_took_out(
    repo: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch, history: dict[str, str]
) -> None:
    as_of = at_day(monkeypatch, 45)
    assert kb(runner, "--as-of", as_of, "compact", "--keep-days", "30").exit_code == 0
    text = kb(runner, "--as-of", as_of, "diff")
    assert text.exit_code == 0
    assert "  . compacted   1 superseded/archived claim left the file" in text.output
    data = json.loads(kb(runner, "--as-of", as_of, "diff", "--json").output)
    assert [c["id"] for c in data["compacted"]] == [history["a"]]
    assert (
        "**Compacted** (1 superseded" in kb(runner, "--as-of", as_of, "diff", "--markdown").output
    )


def test_keep_days_beyond_the_calendar_is_refused(
    repo: Path, runner: CliRunner, history: dict[str, str]
) -> None:
    before = (repo / STORE).read_bytes()
    result = runner.invoke(cli, ["compact", "--keep-days", "1000000"])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: --keep-days: 1000000 days before --as-of")
    assert (repo / STORE).read_bytes() == before
