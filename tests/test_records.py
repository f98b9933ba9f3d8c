"""The typed evidence files: format 2 written, format 1 (kb v2's own files) still read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.errors import ConfigError
from kb.store.evidence import earlier_reports
from kb.store.records import (
    FORMAT,
    EpochRecord,
    ReportFile,
    RunRecord,
    parse_report,
)
from kb.store.runs_file import parse_runs, render_runs
from kb.views.html import cell_history, report_html
from kb.views.report_text import summary_text
from tests.cli_helpers import kb
from tests.sweep_helpers import scripted_model, write_spec

FORMAT1 = Path(__file__).parent / "data" / "format1"
NIGHTS = ["kb-sweep-2026-11-29T02:00:00.000Z", "kb-sweep-2026-11-30T02:00:00.000Z"]


@pytest.mark.parametrize("night", NIGHTS)
def test_format_1_files_made_by_kb_v2_read_into_the_same_models(night: str) -> None:
    report = parse_report((FORMAT1 / f"{night}.report.json").read_bytes(), night)
    runs = parse_runs((FORMAT1 / f"{night}.jsonl").read_bytes(), night)
    assert report.format == 1 and {run.format for run in runs} == {1}
    assert report.report_id == night and len(report.cells) == 3
    assert [c.outcome for c in report.cells] == ["strength", "weakness", "incomplete"]
    assert report.cells[2].incomplete_reason is not None
    kinds = {run.kind for run in runs}
    assert kinds == {"canary", "target", "judge"}
    # Format 1 never recorded what was asked: those fields read as absent.
    assert all(run.request is None and run.price_source is None for run in runs)
    # Read back and written again, a v2 report keeps every key it had (numbers as JS prints).
    original = json.loads((FORMAT1 / f"{night}.report.json").read_text())
    assert report.to_wire() == {"format": 1, **original}


def test_the_second_v2_night_has_repeats_and_a_drift() -> None:
    report = parse_report((FORMAT1 / f"{NIGHTS[1]}.report.json").read_bytes(), "night 2")
    assert report.cells[0].repeats == 2 and report.cells[0].cases is not None
    assert [c.status for c in report.canary] == ["no-drift", "drift", "no-drift"]


def test_views_render_a_v2_night_with_its_trend(tmp_path: Path) -> None:
    night = parse_report((FORMAT1 / f"{NIGHTS[1]}.report.json").read_bytes(), "n")
    runs = parse_runs((FORMAT1 / f"{NIGHTS[1]}.jsonl").read_bytes(), "n")
    text = summary_text(night)
    assert "scripted:weak@low" in text and "canary scripted:weak@low: DRIFT" in text
    earlier = earlier_reports(FORMAT1, night.observed_at)
    assert [r.report_id for r in earlier] == [NIGHTS[0]]
    page = report_html(night.with_runs(runs), cell_history(earlier))
    assert "vs 2026-11-29" in page and "case-00" in page


def test_kb_report_and_kb_show_read_a_v2_night(runner: CliRunner, repo: Path) -> None:
    shutil.copytree(
        FORMAT1, repo / "kb-evidence", ignore=shutil.ignore_patterns("*.py", "*.models.json")
    )
    shutil.copy(FORMAT1 / "rulvar.models.json", repo / "rulvar.models.json")
    result = kb(runner, "report", NIGHTS[1])
    assert result.exit_code == 0, result.stderr
    assert (
        "committed: store v2" in result.stdout
        and "(from the evidence in the work tree)" in result.stdout
    )
    as_json = json.loads(kb(runner, "report", NIGHTS[1], "--json").stdout)
    assert as_json["format"] == 1 and len(as_json["runs"]) > 0
    claim = f"{NIGHTS[1]}/scripted:strong/extraction"
    shown = kb(runner, "--as-of", "2026-12-01", "show", claim)
    assert shown.exit_code == 0, shown.stderr
    assert "cases (12 of 12 runs passed" in shown.stdout


def test_a_sweep_writes_format_4_and_reads_it_back(runner: CliRunner, repo: Path) -> None:
    assert kb(runner, "init").exit_code == 0
    spec = write_spec(repo / "s.toml", [scripted_model("m", 7)])
    result = kb(
        runner, "sweep", str(spec), "--json", "--quiet", "--observed-at", "2026-11-29T02:00:00Z"
    )
    assert result.exit_code == 0, result.stderr
    printed = json.loads(result.stdout)
    stem = "kb-sweep-2026-11-29T02:00:00.000Z"
    report = parse_report((repo / "kb-evidence" / f"{stem}.report.json").read_bytes(), "r")
    runs = parse_runs((repo / "kb-evidence" / f"{stem}.jsonl").read_bytes(), "r")
    assert report.format == FORMAT == 4 and {run.format for run in runs} == {4}
    # the file is in case order; --json keeps the sweep's order: the same runs, whole
    assert sorted((r.to_wire() for r in runs), key=lambda r: r["label"]) == sorted(
        printed["runs"], key=lambda r: r["label"]
    )
    assert report.with_runs(()).to_wire() == printed | {"runs": []}
    assert all(run.request is not None for run in runs if run.kind == "target")
    assert render_runs(runs) == (repo / "kb-evidence" / f"{stem}.jsonl").read_bytes()
    assert report.render() == (repo / "kb-evidence" / f"{stem}.report.json").read_bytes()


def _night_runs(count: int = 3) -> list[RunRecord]:
    """Target runs of two models on ``count`` cases, model by model (the sweep's order)."""
    good = json.loads((FORMAT1 / f"{NIGHTS[0]}.jsonl").read_text().splitlines()[0])
    good = {k: v for k, v in good.items() if k in ("output", "verdicts", "costUsd", "attempts")}
    return [
        RunRecord.model_validate(
            good
            | {
                "kind": "target",
                "label": f"target:{model}/c{case}",
                "model": model,
                "case": f"c{case}",
                "taskClass": "t",
                "repeat": 0,
                "status": "ok",
                "latencyMs": 5,
                "request": {"system": "Be terse.", "user": f"question {case} " * 50},
            }
        )
        for model in ("a", "b")
        for case in range(count)
    ]


def test_a_runs_file_is_in_case_order_with_each_request_once() -> None:
    runs = _night_runs()
    text = render_runs(runs).decode()
    lines = [json.loads(line) for line in text.splitlines()]
    assert [(x["case"], x["model"]) for x in lines] == [
        (f"c{case}", model) for case in range(3) for model in ("a", "b")
    ]
    assert [("request" in x, x.get("sameRequest")) for x in lines] == [
        (True, None),
        (False, True),
    ] * 3
    assert text.count("question 0") == 50  # the request once, not once per model
    back = parse_runs(text.encode(), "night.jsonl")
    assert sorted(json.dumps(r.to_wire()) for r in back) == sorted(
        json.dumps(r.to_wire()) for r in runs
    )
    assert render_runs(back).decode() == text
    # a model asked with its own request carries it whole
    own = [
        r.model_copy(update={"request": r.request.model_copy(update={"system": "Mine."})})
        if r.model == "b" and r.request
        else r
        for r in runs
    ]
    assert "sameRequest" not in render_runs(own).decode()


def test_a_format_2_runs_file_is_still_read() -> None:
    older = [r.model_copy(update={"format": 2}) for r in _night_runs()]
    data = "".join(json.dumps(r.to_wire()) + "\n" for r in older).encode()
    assert "sameRequest" not in data.decode()
    assert [r.to_wire() for r in parse_runs(data, "n.jsonl")] == [r.to_wire() for r in older]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"format": 2}, "sameRequest: a format-3 key in a format-2 record"),
        ({"sameRequest": False}, "sameRequest: must be true, and without a request"),
        ({"case": "elsewhere"}, "sameRequest: no earlier line of this case and kind carries"),
    ],
)
def test_a_shared_request_that_cannot_be_filled_in_is_named(
    change: dict[str, object], problem: str
) -> None:
    lines = render_runs(_night_runs()).decode().splitlines()
    second = json.loads(lines[1]) | change
    lines[1] = json.dumps(second)
    with pytest.raises(ConfigError) as caught:
        parse_runs("\n".join(lines).encode(), "night.jsonl")
    assert str(caught.value).startswith("night.jsonl: line 2: ") and problem in str(caught.value)


def test_a_newer_format_is_refused_with_what_to_do(tmp_path: Path) -> None:
    data = json.loads((FORMAT1 / f"{NIGHTS[0]}.report.json").read_text()) | {"format": 5}
    with pytest.raises(ConfigError) as caught:
        parse_report(json.dumps(data).encode(), "r.report.json")
    assert "format 5 was written by a newer kb (this kb reads format 1, 2, 3 and 4)" in str(
        caught.value
    )
    assert "upgrade kb" in str(caught.value)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "not valid JSON"),
        ('{"kind": "target"}', "label: missing"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_a_broken_run_line_names_its_file_and_line(line: str, problem: str) -> None:
    good = (FORMAT1 / f"{NIGHTS[0]}.jsonl").read_text().splitlines()[0]
    with pytest.raises(ConfigError) as caught:
        parse_runs(f"{good}\n{line}\n".encode(), "night.jsonl")
    assert str(caught.value).startswith("night.jsonl: line 2: ") and problem in str(caught.value)


def test_every_broken_line_is_named_at_once_and_odd_values_are_refused() -> None:
    good = json.loads((FORMAT1 / f"{NIGHTS[0]}.jsonl").read_text().splitlines()[0])
    lines = [
        json.dumps(good).encode(),
        json.dumps(good | {"status": "fine"}).encode(),
        b"\xff\xfe{}",
        json.dumps(good | {"costUsd": -5}).encode(),
        json.dumps(good | {"output": "x" * 4001}).encode(),
        json.dumps(good | {"params": {}}).encode(),
    ]
    with pytest.raises(ConfigError) as caught:
        parse_runs(b"\n".join(lines), "night.jsonl")
    text = str(caught.value)
    assert text.startswith("night.jsonl: 5 issues: line 2: status:")
    assert "line 3: not UTF-8 text" in text
    assert "line 4: costUsd: must be a finite nonnegative number of USD" in text
    assert "line 5: output is longer than 4,000 characters without outputSha256" in text
    assert 'line 6: a format-1 record cannot hold params (format 2 fields: add "format": 2)' in text


def test_a_runs_file_cut_short_or_edited_is_refused(runner: CliRunner, repo: Path) -> None:
    assert kb(runner, "init").exit_code == 0
    spec = write_spec(repo / "s.toml", [scripted_model("m", 7)])
    night = ["--quiet", "--observed-at", "2026-11-29T02:00:00Z"]
    assert kb(runner, "sweep", str(spec), *night).exit_code == 0
    runs = repo / "kb-evidence" / "kb-sweep-2026-11-29T02:00:00.000Z.jsonl"
    lines = runs.read_text().splitlines(keepends=True)
    runs.write_text("".join(lines[:6]))  # cut at a line boundary: every line still parses
    cut = kb(runner, "report", "kb-sweep-2026-11-29T02:00:00.000Z")
    assert cut.exit_code == 2
    assert "holds 6 runs but its report recorded 10: the file was cut or edited" in cut.stderr
    runs.write_text("".join(lines).replace("answer-1", "answer-X"))
    edited = kb(runner, "report", "kb-sweep-2026-11-29T02:00:00.000Z")
    assert edited.exit_code == 2 and "does not match the sha256 its report recorded" in (
        edited.stderr
    )


def test_an_unknown_key_in_a_report_is_refused() -> None:
    data = json.loads((FORMAT1 / f"{NIGHTS[0]}.report.json").read_text())
    data["cells"][0]["pasRate"] = 1
    with pytest.raises(ConfigError) as caught:
        parse_report(json.dumps(data).encode(), "r")
    assert "cells[0].pasRate: unknown key" in str(caught.value)


def test_reading_is_the_inverse_of_writing() -> None:
    report = parse_report((FORMAT1 / f"{NIGHTS[1]}.report.json").read_bytes(), "r")
    again = ReportFile.model_validate_json(report.render())
    assert again == report


def _run(kind: str, label: str, case: str) -> RunRecord:
    return RunRecord(
        kind=kind,  # type: ignore[arg-type]
        label=label,
        model="judge:model",
        case=case,
        task_class="extraction",
        repeat=0,
        status="ok",
        output="yes",
        cost_usd=0.0,
        latency_ms=None,
        attempts=1,
    )


@pytest.mark.parametrize(
    ("label", "case", "judged"),
    [
        ("judge:openai:gpt-4o/case-1/0", "case-1", "openai:gpt-4o"),
        ("judge:openrouter:meta/llama@high/case-1#2/1", "case-1", "openrouter:meta/llama@high"),
        ("judge:m/dir/case#3/0", "dir/case#3", "m"),
        ("judge:m/dir/case#3#2/0", "dir/case#3", "m"),
        ("judge:m/0/0", "0", "m"),
    ],
)
def test_a_judge_run_names_the_target_it_judged(label: str, case: str, judged: str) -> None:
    assert _run("judge", label, case).judged == judged


def test_only_a_judge_run_judged_anything() -> None:
    assert _run("target", "target:m/case-1", "case-1").judged is None
    assert _run("judge", "judge:m/other/0", "case-1").judged is None


def test_a_cell_is_shown_at_its_epochs_rate_else_tonights() -> None:
    night = parse_report((FORMAT1 / f"{NIGHTS[0]}.report.json").read_bytes(), "n")
    cell = night.cells[0]
    assert cell.epoch is None and cell.shown_rate == cell.pass_rate
    epoch = EpochRecord(
        reason="first",
        started_at="2026-11-29T02:00:00.000Z",
        started_in=NIGHTS[0],
        nights=2,
        n=40,
        pass_rate=0.925,
        down=0.0,
        up=0.0,
        pool=40,
        ran=20,
        why="confirm",
    )
    assert cell.model_copy(update={"epoch": epoch}).shown_rate == 0.925


def test_a_format_2_line_never_lends_its_request_to_a_format_3_line() -> None:
    """A resume joins an older kb's committed runs (format 2) with tonight's (format 3)."""
    old, new, newer = _night_runs(1)[0], _night_runs(1)[0], _night_runs(1)[1]
    old = old.model_copy(update={"format": 2, "label": "target:0/c0"})
    asked = new.request.model_copy(update={"user": "tonight's question"})  # type: ignore[union-attr]
    new = new.model_copy(update={"request": asked, "label": "target:1/c0"})
    newer = newer.model_copy(update={"request": asked, "label": "target:2/c0"})
    data = render_runs([old, new, newer])
    assert data.decode().count('"sameRequest":true') == 1
    back = parse_runs(data, "n.jsonl")
    assert [r.request for r in back] == [old.request, asked, asked]
