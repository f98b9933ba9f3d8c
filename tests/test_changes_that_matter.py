"""CI sees changes that matter (SPEC 13.3): ``--fail-on-change``, alarm cells, diffs that lead.

A week of real use: a held strength falsified (by the point gate, or by the
change detector's alarm) exited 0 under ``--fail-on-drift``, the heatmap
showed the alarm cell in green, and ``kb diff`` and the summary listed four
``superseded 0.96 -> 0.96`` no-ops before the one archived claim. Here five
scripted models hold strengths; on night 2 four are re-measured at the same
rate and one drops.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner, Result

from kb.store.changes import cell_alarms, exact_drifts, falsified_claims
from kb.store.records import CanaryRecord, ReportFile, RetiredRecord, parse_report
from kb.store.validation import parse_store
from tests.cli_helpers import kb, unwrapped
from tests.conftest import git
from tests.sweep_helpers import scripted_model, write_spec
from tests.test_drift_visible import drift_night
from tests.test_epochs import model, spec

pytestmark = pytest.mark.usefixtures("initialized_store")

STEADY = ("a", "b", "c", "d")
NIGHT2 = "kb-sweep-2026-11-02T02:00:00.000Z"
DROPPED = "kb-sweep-2026-11-01T02:00:00.000Z/scripted:e/extraction"


def night(runner: CliRunner, path: Path, day: int, *args: str) -> Result:
    observed = f"2026-11-{day:02d}T02:00:00Z"
    return kb(runner, "sweep", str(path), "--quiet", "--observed-at", observed, *args)


def five_models(repo: Path, name: str, e_correct: int) -> Path:
    """Four steady strengths (10/10) and ``scripted:e`` right on ``e_correct`` of 10."""
    models = [scripted_model(m, 10) for m in STEADY] + [scripted_model("e", e_correct)]
    return write_spec(repo / name, models)


def falsified_night(runner: CliRunner, repo: Path, *args: str) -> Result:
    """Night 1: five strengths. Night 2: four re-measured at 1.00, ``e`` down to 5/10
    (the point gate archives its strength ``falsified`` and claims a weakness)."""
    assert night(runner, five_models(repo, "a.toml", 10), 1).exit_code == 0
    return night(runner, five_models(repo, "b.toml", 5), 2, *args)


def store_version(repo: Path) -> int:
    return parse_store((repo / "rulvar.models.json").read_bytes(), "store").version


# -- kb sweep --fail-on-change ----------------------------------------------------------------


def test_fail_on_change_exits_1_after_committing_a_falsified_strength(
    runner: CliRunner, repo: Path
) -> None:
    result = falsified_night(runner, repo, "--fail-on-change")
    assert result.exit_code == 1, result.stderr
    # one failing line, naming what changed
    (failing,) = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert failing == (
        "Error: 1 held claim falsified: scripted:e · extraction (the gate archived it falsified)"
    )
    # committed before failing: the night is HEAD, its strength archived
    assert store_version(repo) == 2
    assert f"Kb-Report: {NIGHT2}" in git(repo, "log", "-1", "--format=%B")
    stored = parse_store((repo / "rulvar.models.json").read_bytes(), "store")
    assert {c.id: c.status for c in stored.claims}[DROPPED] == "archived"
    assert git(repo, "status", "--porcelain").split("\n") == ["?? a.toml", "?? b.toml", ""]


def test_fail_on_drift_alone_still_exits_0_on_a_falsified_strength(
    runner: CliRunner, repo: Path
) -> None:
    result = falsified_night(runner, repo, "--fail-on-drift")
    assert result.exit_code == 0, result.stderr
    assert "Error" not in result.stderr and store_version(repo) == 2


def test_fail_on_change_exits_1_on_a_canary_drift(runner: CliRunner, repo: Path) -> None:
    result = cast(Result, drift_night(runner, repo, "--fail-on-change"))
    assert result.exit_code == 1, result.stderr
    assert "Error: drift in 1 model (scripted:m)" in result.stderr
    assert store_version(repo) == 2  # v0 at init, night 1, night 2: committed before failing


def test_fail_on_drift_is_unchanged_on_a_drift(runner: CliRunner, repo: Path) -> None:
    result = cast(Result, drift_night(runner, repo, "--fail-on-drift"))
    assert result.exit_code == 1, result.stderr
    assert "Error: drift in 1 model" in result.stderr


def test_fail_on_change_exits_0_on_a_night_that_changed_no_belief(
    runner: CliRunner, repo: Path
) -> None:
    steady = five_models(repo, "a.toml", 10)
    assert night(runner, steady, 1).exit_code == 0
    result = night(runner, steady, 2, "--fail-on-change", "--summary", "s.md")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == "" and store_version(repo) == 2
    summary = (repo / "s.md").read_text()
    assert "5 claims re-measured, no belief changed (`kb diff --all` lists them)." in summary
    assert "**Superseded**" not in summary and "**Falsified**" not in summary
    text = kb(runner, "diff").stdout.split("\n", 1)[1]
    assert unwrapped(text) == "= 5 claims re-measured, no belief changed (kb diff --all lists them)"


def test_a_detector_alarm_fails_the_night_and_is_marked_on_both_heatmaps(
    runner: CliRunner, isolated: Path
) -> None:
    for day, name in ((1, "a.toml"), (2, "b.toml")):
        assert night(runner, spec(isolated / name, model()), day).exit_code == 0
    # The model silently gets half of the cases wrong: the drop detector alarms.
    dropped = spec(isolated / "c.toml", model(set(range(0, 60, 2))))
    result = night(runner, dropped, 3, "--fail-on-change", "--html", "r.html")
    assert result.exit_code == 1, result.stderr
    assert result.stderr.splitlines()[-1] == (
        "Error: 1 held claim falsified: scripted:m · extraction (the change detector saw a drop)"
    )
    page = (isolated / "r.html").read_text()
    cell = alarm_cell(page, "td")
    assert 'class="cell alarm"' in cell and "#ffebe9" in cell
    assert "hsl(" not in cell  # never the pass colour its rate (0.75) would give
    assert 'data-direction="down"' in cell and "ALARM ▼ drop</div>" in cell
    assert "retired …/scripted:m/extraction (falsified)</div>" in cell
    assert "ALARM: the change detector alarmed tonight" in page  # the legend
    assert kb(runner, "--as-of", "2026-11-04", "site", "site").exit_code == 0
    shown = (isolated / "site" / "night-kb-sweep-2026-11-03T02_00_00.000Z.html").read_text()
    cell = alarm_cell(shown, "td")
    assert 'class="cell alarm"' in cell and "ALARM ▼ drop</div>" in cell and "hsl(" not in cell
    assert "retired …/scripted:m/extraction (falsified)</div>" in cell  # as --html draws it
    assert "ALARM: the change detector alarmed tonight" in shown
    earlier = (isolated / "site" / "night-kb-sweep-2026-11-02T02_00_00.000Z.html").read_text()
    assert '<div class="alarm-badge"' not in earlier and 'class="cell alarm"' not in earlier


def alarm_cell(page: str, tag: str) -> str:
    """The one heatmap cell marked as an alarm (its opening tag through its end)."""
    (found,) = re.findall(rf'<{tag} class="[^"]*alarm[^"]*".*?</{tag}>', page, re.S)
    return str(found).replace("<wbr>", "")  # where a long name may wrap: not text


def test_a_falsified_strength_is_an_alarm_cell_without_a_detector(
    runner: CliRunner, repo: Path
) -> None:
    falsified_night(runner, repo, "--html", "r.html")
    cell = alarm_cell((repo / "r.html").read_text(), "td")
    assert 'aria-label="cases of scripted:e extraction"' in cell
    assert 'data-direction="falsified"' in cell and "ALARM · falsified</div>" in cell
    assert kb(runner, "--as-of", "2026-11-03", "site", "site").exit_code == 0
    shown = (repo / "site" / "night-kb-sweep-2026-11-02T02_00_00.000Z.html").read_text()
    assert "ALARM · falsified</div>" in alarm_cell(shown, "td")
    index = (repo / "site" / "index.html").read_text()
    assert '<span class="drift">alarm: 1 cell</span>' in index


# -- kb diff and the summary lead with what changed a belief ----------------------------------


def test_the_summary_and_kb_diff_lead_with_the_falsified_claim(
    runner: CliRunner, repo: Path
) -> None:
    assert falsified_night(runner, repo, "--summary", "s.md").exit_code == 0
    summary = (repo / "s.md").read_text()
    order = [
        summary.index("**Falsified** (1)"),
        summary.index("**Added** (1)"),  # 5/10 under the point gate: now a weakness
        summary.index("4 claims re-measured, no belief changed (`kb diff --all` lists them)."),
        summary.index("### Cells"),
    ]
    assert order == sorted(order)
    assert (
        "| `scripted:e` · `extraction` | strength | archived (`falsified`; was 1.00) |" in summary
    )
    assert "**Superseded**" not in summary and "1.00 → 1.00" not in summary
    markdown = kb(runner, "diff", "--markdown").stdout
    assert markdown.split("\n", 3)[3] in summary  # the same changes as kb diff of the commit

    text = unwrapped(kb(runner, "diff").stdout.split("\n", 1)[1])
    assert text == (
        f"- archived {DROPPED} (falsified: was strength, passRate 1.00) "
        f"+ added {NIGHT2}/scripted:e/extraction (weakness, passRate 0.50) "
        "= 4 claims re-measured, no belief changed (kb diff --all lists them)"
    )

    every = unwrapped(kb(runner, "diff", "--all").stdout)
    assert every.index(f"- archived {DROPPED}") < every.index("= re-measured")
    for name in STEADY:
        first = f"kb-sweep-2026-11-01T02:00:00.000Z/scripted:{name}/extraction"
        assert (
            f"= re-measured {first} by {NIGHT2}/scripted:{name}/extraction (passRate 1.00 -> 1.00)"
        ) in every
    listed = kb(runner, "diff", "--markdown", "--all").stdout
    assert "**Re-measured, no belief changed** (4)" in listed and "lists them" not in listed
    assert listed.index("**Falsified** (1)") < listed.index("**Re-measured")

    found = json.loads(kb(runner, "diff", "--json").stdout)
    assert list(found)[:3] == ["from", "to", "falsified"]
    assert [(f["id"], f["how"]) for f in found["falsified"]] == [(DROPPED, "archived")]
    assert found["unchangedCount"] == 4
    assert [s["beliefChanged"] for s in found["superseded"]] == [False] * 4


def test_a_re_measurement_that_moved_the_rate_is_listed_not_counted(
    runner: CliRunner, repo: Path
) -> None:
    assert night(runner, write_spec(repo / "a.toml", [scripted_model("m", 10)]), 1).exit_code == 0
    assert night(runner, write_spec(repo / "b.toml", [scripted_model("m", 9)]), 2).exit_code == 0
    text = unwrapped(kb(runner, "diff").stdout)
    assert "(passRate 1.00 -> 0.90)" in text and "no belief changed" not in text
    found = json.loads(kb(runner, "diff", "--json").stdout)
    assert found["unchangedCount"] == 0 and found["superseded"][0]["beliefChanged"] is True


# -- the core: one definition for the failing line and the heatmaps ---------------------------


def night2_report(repo: Path) -> ReportFile:
    return parse_report((repo / "kb-evidence" / f"{NIGHT2}.report.json").read_bytes(), "report")


def test_only_falsified_claims_and_exact_drifts_count(runner: CliRunner, repo: Path) -> None:
    falsified_night(runner, repo)
    report = night2_report(repo)
    (found,) = falsified_claims(report)
    assert found.claim_id == DROPPED and found.cell is not None and found.alarm is None
    assert list(cell_alarms(report)) == [("scripted:e", "extraction")]
    # a duplicate archived beside the renewal of its belief is no falsification
    renewed = next(c for c in report.cells if c.subject_key == "scripted:a")
    duplicate = RetiredRecord(
        claim_id="kb-sweep-2026-10-30T02:00:00.000Z/scripted:a/extraction",
        action="archived",
        reason="falsified",
    )
    assert any(r.by == renewed.claim_id for r in report.retired)
    with_duplicate = report.model_copy(update={"retired": (*report.retired, duplicate)})
    assert [f.claim_id for f in falsified_claims(with_duplicate)] == [DROPPED]
    # archived for another reason: lost, not falsified
    stale = duplicate.model_copy(update={"reason": "stale", "claim_id": "x/scripted:e/q"})
    assert len(falsified_claims(report.model_copy(update={"retired": (stale,)}))) == 0
    # a canary that could not judge, or saw a new probe set, is no drift
    quiet: list[Any] = [
        CanaryRecord(model="scripted:a", fingerprint="f" * 64, all_ok=ok, probes=(), status=status)
        for status, ok in (("unstable", True), ("incomplete", False), ("rebaselined", True))
    ]
    assert exact_drifts(report.model_copy(update={"canary": tuple(quiet)})) == []
    drift = quiet[0].model_copy(update={"status": "drift"})
    assert exact_drifts(report.model_copy(update={"canary": (drift,)})) == ["scripted:a"]
