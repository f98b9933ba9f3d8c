"""Drift is never quiet (SPEC 12.4): the night a provider silently swaps its model.

The canary answers differently and the same commit re-measures the drifted
claims; CI must still learn of it: ``--fail-on-drift`` exits 1 after
committing, the summary, the HTML, ``kb diff`` (text and JSON) and ``kb show``
all name the stale flip even though the claims were superseded in the same
commit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.store.validation import parse_store
from tests.cli_helpers import kb, unwrapped
from tests.test_epochs import model, spec

pytestmark = pytest.mark.usefixtures("initialized_store")

CANARY = '\n[canary]\nprompts = ["Ping?", "Pong?"]\n'
V1 = {"Ping?": "pong v1", "Pong?": "ping v1"}
V2 = {"Ping?": "pong v2", "Pong?": "ping v2"}
FIRST = "kb-sweep-2026-11-01T02:00:00.000Z/scripted:m/extraction"


def sweep(runner: CliRunner, path: Path, day: int, *args: str) -> object:
    observed = f"2026-11-{day:02d}T02:00:00Z"
    return kb(runner, "sweep", str(path), "--quiet", "--observed-at", observed, *args)


def drift_night(runner: CliRunner, repo: Path, *args: str) -> object:
    steady = spec(repo / "a.toml", model(probes=V1), extra=CANARY)
    assert sweep(runner, steady, 1).exit_code == 0
    swapped = spec(repo / "b.toml", model(probes=V2), extra=CANARY)
    return sweep(runner, swapped, 2, *args)


def test_fail_on_drift_exits_1_after_committing(runner: CliRunner, repo: Path) -> None:
    result = drift_night(runner, repo, "--fail-on-drift", "--summary", "s.md", "--html", "r.html")
    assert result.exit_code == 1, result.stderr
    assert "drift: the canary saw the provider change scripted:m" in result.stderr
    assert "drift in 1 model" in result.stderr
    store = parse_store((repo / "rulvar.models.json").read_bytes(), "store")
    assert store.version == 2  # v0 at init, night 1, night 2: committed before failing
    summary = (repo / "s.md").read_text()
    assert summary.splitlines()[2].startswith("> **Drift:**")  # first, under the title
    assert "**Drift:** the canary saw the provider change the model behind `scripted:m`" in summary
    assert "| `scripted:m` | DRIFT | 1 |" in summary
    assert "Flipped stale (canary drift)" in summary
    assert "~1` (night 2026-11-01) → `" in summary  # the base named by the night it stood on
    page = (repo / "r.html").read_text()
    assert '<p class="drift-banner"' in page and '<th scope="row" class="drifted">' in page
    assert "drift · 1 claim stale" in page


def test_without_the_flag_a_drift_exits_0_but_says_so(runner: CliRunner, repo: Path) -> None:
    result = drift_night(runner, repo)
    assert result.exit_code == 0, result.stderr
    assert "drift: the canary saw the provider change scripted:m" in result.stderr
    assert "its claims were flipped stale (kb diff HEAD~1 HEAD)" in result.stderr


def test_outside_git_the_drift_line_names_no_commit_to_diff(
    runner: CliRunner, isolated: Path
) -> None:
    result = drift_night(runner, isolated)  # a plain file: no HEAD~1 to diff against
    assert result.exit_code == 0, result.stderr
    drift = next(line for line in result.stderr.splitlines() if line.startswith("drift:"))
    assert drift.endswith("its claims were flipped stale") and "kb diff" not in result.stderr


def test_diff_and_show_tell_the_stale_flip_the_same_commit_re_measured(
    runner: CliRunner, repo: Path
) -> None:
    assert drift_night(runner, repo).exit_code == 0
    found = json.loads(kb(runner, "diff", "--json").stdout)
    assert [c["id"] for c in found["stale"]] == [FIRST]
    assert [c["id"] for c in found["superseded"]] == [FIRST]
    text = unwrapped(kb(runner, "diff").stdout)
    assert f"! stale {FIRST} (canary drift: the provider changed the model; " in text
    shown = kb(runner, "show", FIRST).stdout
    assert "status active → stale (canary-drift) → superseded" in shown


def test_a_steady_night_says_nothing_of_drift(runner: CliRunner, repo: Path) -> None:
    steady = spec(repo / "a.toml", model(probes=V1), extra=CANARY)
    assert sweep(runner, steady, 1).exit_code == 0
    result = sweep(runner, steady, 2, "--fail-on-drift", "--summary", "s.md", "--html", "r.html")
    assert result.exit_code == 0 and "drift" not in result.stderr
    assert "Drift" not in (repo / "s.md").read_text()
    page = (repo / "r.html").read_text()
    assert '<p class="drift-banner"' not in page and 'class="drifted"' not in page
    assert json.loads(kb(runner, "diff", "--json").stdout)["stale"] == []
