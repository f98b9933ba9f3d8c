"""``kb sweep SPEC --resume`` is the one safe CI step (SPEC 14.4).

It starts the night when none is journaled, resumes a stopped one, and exits
0 saying the night is already committed for a committed one; under
``--fail-on-change`` a re-run of a red night stays red for the same reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import git
from tests.test_changes_that_matter import five_models, night, store_version

pytestmark = pytest.mark.usefixtures("initialized_store")


def test_resume_starts_a_night_none_journaled_then_says_it_is_committed(
    runner: CliRunner, repo: Path
) -> None:
    spec = five_models(repo, "a.toml", 10)
    first = night(runner, spec, 1, "--resume")
    assert first.exit_code == 0, first.stderr
    assert first.stderr.startswith(
        "warning: --resume: nothing to resume for report 'kb-sweep-2026-11-01T02:00:00.000Z': "
        "no journal in "
    )
    assert first.stderr.rstrip().endswith("and no committed evidence of it: the night starts now")
    assert store_version(repo) == 1
    commits = git(repo, "rev-list", "--count", "HEAD")
    summary, page = repo.parent / "summary.md", repo.parent / "report.html"
    again = night(  # the CI job re-run: the same instant, its step summary and page asked for
        runner, spec, 1, "--resume", "--summary", str(summary), "--html", str(page)
    )
    assert again.exit_code == 0, again.stderr
    assert "kb-sweep-2026-11-01T02:00:00.000Z is already committed (store v1)" in again.stdout
    assert store_version(repo) == 1 and git(repo, "rev-list", "--count", "HEAD") == commits
    # the re-run job still has its artifacts: the committed night's summary and page
    assert "kb-sweep-2026-11-01T02:00:00.000Z" in summary.read_text()
    assert "scripted:e" in summary.read_text() and "<html" in page.read_text()


def test_a_red_night_re_run_with_resume_stays_red_for_the_same_reason(
    runner: CliRunner, repo: Path
) -> None:
    assert night(runner, five_models(repo, "a.toml", 10), 1, "--resume").exit_code == 0
    dropped = five_models(repo, "b.toml", 5)
    red = night(runner, dropped, 2, "--resume", "--fail-on-change")
    assert red.exit_code == 1, red.stderr
    reason = [line for line in red.stderr.splitlines() if line.startswith("Error:")]
    assert reason == [
        "Error: 1 held claim falsified: scripted:e · extraction (the gate archived it falsified)"
    ]
    rerun = night(runner, dropped, 2, "--resume", "--fail-on-change")
    assert rerun.exit_code == 1 and "already committed" in rerun.stdout
    assert [line for line in rerun.stderr.splitlines() if line.startswith("Error:")] == reason
    assert store_version(repo) == 2  # nothing committed twice


def test_a_night_committed_without_evidence_is_never_measured_again(
    runner: CliRunner, repo: Path
) -> None:
    spec = five_models(repo, "a.toml", 10)
    assert night(runner, spec, 1, "--no-evidence").exit_code == 0
    commits = git(repo, "rev-list", "--count", "HEAD")
    again = night(runner, spec, 1, "--resume")
    assert again.exit_code == 2
    assert "is committed already (its commit is in git) but its evidence is not in" in (
        again.stderr
    )
    assert git(repo, "rev-list", "--count", "HEAD") == commits and store_version(repo) == 1
