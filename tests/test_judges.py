"""Judges you can trust (SPEC 14.5): labels, agreement, no self-judging, null not zero, panels."""

from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from kb.cli import cli
from kb.judging import cohen_kappa, krippendorff_alpha
from kb.store.labels import Label, LabelsFile, merge_labels, parse_labels
from kb.store.runs_file import parse_runs
from kb.store.ttl import parse_flag_instant
from tests.conftest import git
from tests.fake_openai import serving
from tests.sweep_helpers import CASES, scripted_model, toml_value, write_spec

STORE = "rulvar.models.json"
LABELS = "rulvar.models.labels.json"
NIGHT1 = "kb-sweep-2026-11-20T02:00:00.000Z"
NIGHT2 = "kb-sweep-2026-11-21T02:00:00.000Z"


def kb(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(cli, list(args), catch_exceptions=False)


def judge_params(wrong_on: tuple[int, ...] = (), garbled: tuple[int, ...] = ()) -> dict[str, Any]:
    """A scripted judge: right about every answer but those of the cases ``wrong_on`` (it flips
    them) and ``garbled`` (it answers prose, not {passed, reason})."""
    contains = {}
    for i, (_, _, answer) in enumerate(CASES):
        for said, truth in ((f"answer:\n{answer}\n", True), (f"answer:\nwrong-{i}\n", False)):
            verdict = truth != (i in wrong_on)
            reply = {"passed": verdict, "reason": "checked"}
            contains[said] = "I think it is fine?" if i in garbled else json.dumps(reply)
    return {"contains": contains}


def judge_grader(
    model: str = "scripted:judge", params: dict[str, Any] | None = None, **more: Any
) -> str:
    keys = {"params": params if params is not None else judge_params(), **more}
    shown = ", ".join(f"{k} = {toml_value(v)}" for k, v in keys.items())
    return f'{{ kind = "judge", model = "{model}", instructions = "Is it right?", {shown} }}'


def panel_grader(*seats: dict[str, Any]) -> str:
    shown = ", ".join(
        "{ " + f'model = "{seat["model"]}", params = {toml_value(seat["params"])}' + " }"
        for seat in seats
    )
    return f'{{ kind = "judge", models = [{shown}], instructions = "Is it right?" }}'


def judged_spec(path: Path, graders: str, gate: str = "point", **more: Any) -> Path:
    return write_spec(
        path,
        [scripted_model("m", 7)],
        graders=graders,
        budgets={"target_usd": 0.01, "judge_usd": 0.01, "max_total_usd": 5},
        gate=gate,
        **more,
    )


def sweep(runner: CliRunner, spec: Path, night: str, *more: str) -> Result:
    return kb(runner, "sweep", str(spec), "--quiet", "--observed-at", night[9:], *more)


def night_runs(repo: Path, night: str) -> list[Any]:
    path = repo / "kb-evidence" / f"{night}.jsonl"
    return parse_runs(path.read_bytes(), str(path))


# -- the statistics ------------------------------------------------------------------------


def test_kappa_and_alpha_give_the_published_values() -> None:
    # Cohen's kappa, the textbook table (Wikipedia, "Cohen's kappa"): 20/5/10/15 -> 0.4; and
    # a 200-answer table, checked against statsmodels' cohens_kappa (0.76009596).
    textbook = [(True, True)] * 20 + [(True, False)] * 5 + [(False, True)] * 10
    textbook += [(False, False)] * 15
    assert cohen_kappa(textbook).kappa == pytest.approx(0.4)
    big = [(True, True)] * 88 + [(True, False)] * 14 + [(False, True)] * 10 + [(False, False)] * 88
    found = cohen_kappa(big)
    assert found.kappa == pytest.approx(0.7600959616153539)
    assert found.low is not None and found.high is not None
    assert found.low < 0.7601 < found.high and found.high - found.low < 0.25
    # Krippendorff (2011), "Computing Krippendorff's alpha-reliability": 4 coders, 12 units,
    # nominal, with missing values -> 0.743.
    n = None
    coders = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
        [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n],
    ]
    units = [[v for v in unit if v is not None] for unit in zip(*coders, strict=True)]
    alpha = krippendorff_alpha(units)
    assert alpha.alpha == pytest.approx(0.743, abs=0.0005) and alpha.units == 11


verdict_pairs = st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(verdict_pairs, st.randoms(use_true_random=False))
def test_kappa_ignores_order_and_is_one_when_raters_agree(
    pairs: list[tuple[bool, bool]], shuffle: random.Random
) -> None:
    found = cohen_kappa(pairs, resamples=0)
    mixed = list(pairs)
    shuffle.shuffle(mixed)
    assert cohen_kappa(mixed, resamples=0).kappa == found.kappa
    swapped = cohen_kappa([(b, a) for a, b in pairs], resamples=0).kappa
    assert swapped == pytest.approx(found.kappa) if found.kappa is not None else swapped is None
    same = cohen_kappa([(a, a) for a, _ in pairs], resamples=0)
    assert same.kappa is None or same.kappa == pytest.approx(1.0)  # None: one verdict only
    if found.kappa is not None:
        assert -1.0 <= found.kappa <= 1.0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from("abc"), min_size=0, max_size=4), min_size=1, max_size=30),
    st.randoms(use_true_random=False),
)
def test_alpha_ignores_order_and_names_and_is_one_when_raters_agree(
    units: list[list[str]], shuffle: random.Random
) -> None:
    found = krippendorff_alpha(units, resamples=0)
    mixed = [list(unit) for unit in units]
    shuffle.shuffle(mixed)
    for unit in mixed:
        shuffle.shuffle(unit)
    renamed = [[{"a": "b", "b": "c", "c": "a"}[v] for v in unit] for unit in mixed]
    for other in (mixed, renamed):
        again = krippendorff_alpha(other, resamples=0).alpha
        assert (again is None) == (found.alpha is None)
        if found.alpha is not None:
            assert again == pytest.approx(found.alpha)
    agreeing = [[unit[0]] * len(unit) for unit in units if unit]
    perfect = krippendorff_alpha(agreeing, resamples=0).alpha
    assert perfect is None or perfect == pytest.approx(1.0)


def test_chance_agreement_is_near_zero() -> None:
    draw = random.Random(7)
    pairs = [(draw.random() < 0.6, draw.random() < 0.6) for _ in range(20_000)]
    assert abs(cohen_kappa(pairs, resamples=0).kappa or 1.0) < 0.03
    units = [[draw.random() < 0.6 for _ in range(3)] for _ in range(20_000)]
    assert abs(krippendorff_alpha(units, resamples=0).alpha or 1.0) < 0.03


def test_the_intervals_are_the_same_every_time() -> None:
    pairs = [(i % 3 != 0, i % 4 != 0) for i in range(80)]
    assert cohen_kappa(pairs) == cohen_kappa(list(pairs))
    units = [[i % 2 == 0, i % 3 == 0, i % 5 != 0] for i in range(50)]
    assert krippendorff_alpha(units) == krippendorff_alpha(units)


# -- labels ------------------------------------------------------------------------------


def label(answer: int, verdict: str = "fail", at: str = "2026-11-20T10:00:00.000Z") -> Label:
    return Label.model_validate(
        {
            "reportId": NIGHT1,
            "case": CASES[answer][0],
            "model": "scripted:m",
            "verdict": verdict,
            "labelledAt": at,
            "by": "alice",
            "taskClass": "extraction",
        }
    )


def test_merging_labels_keeps_both_sides_and_the_later_label_of_one_answer() -> None:
    base = LabelsFile(labels=(label(1),))
    ours = LabelsFile(labels=(label(1), label(2)))
    theirs = LabelsFile(labels=(label(1, "pass", "2026-11-21T00:00:00.000Z"), label(3)))
    merged = merge_labels(base, ours, theirs)
    assert merged == merge_labels(base, theirs, ours)
    assert [(lb.case, lb.verdict) for lb in merged.labels] == [
        ("case-01", "pass"),
        ("case-02", "fail"),
        ("case-03", "fail"),
    ]
    assert parse_labels(merged.render(), "f") == merged


def test_a_label_grades_only_nights_after_it() -> None:
    file = LabelsFile(labels=(label(1, at="2026-11-20T10:00:00.000Z"),))
    assert file.grading(parse_flag_instant("2026-11-20T10:00:00Z")) == {}  # not its own night
    later = file.grading(parse_flag_instant("2026-11-21T02:00:00Z"))
    assert list(later) == [("scripted:m", "case-01")]


@pytest.mark.usefixtures("initialized_store")
def test_a_label_changes_no_claim_and_grades_the_next_night_in_a_new_epoch(
    runner: CliRunner, repo: Path
) -> None:
    # The judge wrongly passes case-08's wrong answer; a person says it failed.
    spec = judged_spec(
        repo / "s.toml", judge_grader(params=judge_params(wrong_on=(8,))), "interval"
    )
    assert sweep(runner, spec, NIGHT1).exit_code == 0
    store_before = (repo / STORE).read_bytes()
    labelled = kb(
        runner, "label", NIGHT1, "case-08", "scripted:m", "fail", "--why", "the judge missed it",
        "--as-of", "2026-11-20T12:00:00Z",
    )  # fmt: skip
    assert labelled.exit_code == 0, labelled.stderr
    assert "kb: label" in labelled.stdout and "1 label" in labelled.stdout
    assert (repo / STORE).read_bytes() == store_before  # no committed claim changes
    assert git(repo, "status", "--porcelain", LABELS, ".gitattributes") == ""
    assert f"/{LABELS} merge=kb" in (repo / ".gitattributes").read_text()
    saved = json.loads((repo / LABELS).read_text())
    assert saved["labels"][0] | {"labelledAt": ""} == {
        "reportId": NIGHT1, "case": "case-08", "model": "scripted:m", "verdict": "fail",
        "why": "the judge missed it", "labelledAt": "", "by": saved["labels"][0]["by"],
        "taskClass": "extraction", "judges": {"scripted:judge": True},
    }  # fmt: skip
    # The next night grades case-08 on m by the label: no judge is asked, a new epoch.
    night2 = sweep(runner, spec, NIGHT2, "--json")
    assert night2.exit_code == 0, night2.stderr
    report = json.loads(night2.stdout)
    (cell,) = report["cells"]
    assert cell["epoch"]["reason"] == "suite"
    assert "1 case now graded by a person's label" in cell["epoch"]["why"]
    runs = night_runs(repo, NIGHT2)
    target = next(r for r in runs if r.kind == "target" and r.case == "case-08")
    assert [(v.grader, v.passed) for v in target.verdicts] == [("label", False)]
    assert not [r for r in runs if r.kind == "judge" and r.case == "case-08"]
    # kb judges: the judge passed an answer a person failed.
    judged = json.loads(kb(runner, "judges", "--json").stdout)
    (row,) = judged["againstLabels"]
    assert row["judge"] == "scripted:judge" and row["n"] == 1
    assert row["confusion"]["judgePassLabelFail"] == 1 and row["kappa"] == 0
    # The label carries what the judge said: agreement outlives the night's evidence.
    (repo / "kb-evidence").rename(repo / "elsewhere")
    again = json.loads(kb(runner, "judges", "--json", "--nights", "0").stdout)
    assert again["againstLabels"] == judged["againstLabels"]


@pytest.mark.usefixtures("initialized_store")
@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([NIGHT1, "case-01", "scripted:m", "fail"], "the evidence"),
        (["no-such-night", "case-01", "scripted:m", "fail"], "no evidence for report"),
        ([NIGHT1, "no-such-case", "scripted:m", "fail"], "has no case 'no-such-case'"),
        ([NIGHT1, "case-01", "scripted:other", "fail"], "it has answers of scripted:m"),
        ([NIGHT1, "case-01", "scripted:m", "fail", "--repeat", "2"], "--repeat 2 is not one"),
        ([NIGHT1, "case-01", "scripted:m"], "needs REPORT_ID CASE MODEL pass|fail"),
    ],
)
def test_a_label_that_names_no_answer_is_refused_and_writes_nothing(
    runner: CliRunner, repo: Path, args: list[str], said: str
) -> None:
    spec = judged_spec(repo / "s.toml", judge_grader())
    assert sweep(runner, spec, NIGHT1).exit_code == 0
    if said == "the evidence":  # the one good line: it is accepted
        assert kb(runner, "label", *args).exit_code == 0
        return
    head = git(repo, "rev-parse", "HEAD")
    result = kb(runner, "label", *args)
    assert result.exit_code == 2 and said in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (repo / LABELS).exists() and git(repo, "rev-parse", "HEAD") == head


@pytest.mark.usefixtures("initialized_store")
def test_labels_from_a_file_are_checked_line_by_line(runner: CliRunner, repo: Path) -> None:
    spec = judged_spec(repo / "s.toml", judge_grader())
    assert sweep(runner, spec, NIGHT1).exit_code == 0
    bad = repo / "bad.jsonl"
    bad.write_text(
        json.dumps({"reportId": NIGHT1, "case": "case-01", "model": "scripted:m", "verdict": "ok"})
        + "\nnot json\n"
    )
    result = kb(runner, "label", "--from", str(bad))
    assert result.exit_code == 2 and "line 1: verdict" in result.stderr
    assert "line 2: not JSON" in result.stderr and not (repo / LABELS).exists()
    good = repo / "good.jsonl"
    good.write_text(
        "".join(
            json.dumps({"reportId": NIGHT1, "case": name, "model": "scripted:m", "verdict": "pass"})
            + "\n"
            for name, _, _ in CASES[:3]
        )
    )
    assert kb(runner, "label", "--from", str(good)).exit_code == 0
    assert len(json.loads((repo / LABELS).read_text())["labels"]) == 3
    again = kb(runner, "label", "--from", str(good))
    assert again.exit_code == 0  # the same labels at a new instant replace the old
    mixed = kb(runner, "label", NIGHT1, "case-01", "scripted:m", "pass", "--from", str(good))
    assert mixed.exit_code == 2 and "not both" in mixed.stderr


@pytest.mark.usefixtures("initialized_store")
def test_a_broken_labels_file_is_refused_by_kb_label_and_kept_as_it_is(
    runner: CliRunner, repo: Path
) -> None:
    spec = judged_spec(repo / "s.toml", judge_grader())
    assert sweep(runner, spec, NIGHT1).exit_code == 0
    (repo / LABELS).write_text('{"format": 9, "labels": []}\n')
    result = kb(runner, "label", NIGHT1, "case-01", "scripted:m", "fail")
    assert result.exit_code == 2 and "written by a newer kb" in result.stderr
    assert (repo / LABELS).read_text() == '{"format": 9, "labels": []}\n'
    judged = kb(runner, "judges")
    assert judged.exit_code == 2 and LABELS in judged.stderr


@pytest.mark.usefixtures("initialized_store")
def test_a_broken_labels_file_stops_the_sweep_before_any_call(
    runner: CliRunner, repo: Path
) -> None:
    spec = judged_spec(repo / "s.toml", judge_grader())
    (repo / LABELS).write_text('{"format": 1, "labels": [{"reportId": 3}]}\n')
    before = (repo / STORE).read_bytes()
    result = sweep(runner, spec, NIGHT1)
    assert result.exit_code == 2 and LABELS in result.stderr
    assert (repo / STORE).read_bytes() == before


# -- no self-judging, null not zero, panels -------------------------------------------------


@pytest.mark.usefixtures("initialized_store")
def test_a_judge_that_is_the_target_is_refused_unless_the_grader_allows_it(
    runner: CliRunner, repo: Path
) -> None:
    spec = judged_spec(repo / "s.toml", judge_grader("scripted:m"))
    result = kb(runner, "sweep", str(spec), "--dry-run")
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if "self_judge" in line]
    assert len(lines) == 1 and "'case-00'" in lines[0] and "scripted:m" in lines[0]
    # any effort: the same model at another effort is still the same model
    spec = write_spec(
        repo / "e.toml",
        [{**scripted_model("m", 7), "effort": "high"}],
        graders=judge_grader("scripted:m", effort="low"),
        budgets={"target_usd": 0.01, "judge_usd": 0.01, "max_total_usd": 5},
    )
    assert kb(runner, "sweep", str(spec), "--dry-run").exit_code == 2
    allowed = judged_spec(repo / "ok.toml", judge_grader("scripted:m", self_judge=True))
    assert kb(runner, "sweep", str(allowed), "--dry-run").exit_code == 0


@pytest.mark.usefixtures("initialized_store")
def test_an_unreadable_verdict_is_unscored_and_over_five_percent_claims_nothing(
    runner: CliRunner, repo: Path
) -> None:
    cases = [(f"case-{i:02d}", f"Question {i}?", f"answer-{i}") for i in range(20)]
    replies = {
        prompt: (answer if i < 19 else f"wrong-{i}") for i, (_, prompt, answer) in enumerate(cases)
    }
    contains = {f"answer:\n{a}\n": '{"passed": true, "reason": "ok"}' for _, _, a in cases}
    contains |= {f"answer:\nwrong-{i}\n": '{"passed": false, "reason": "no"}' for i in range(20)}
    contains["answer:\nanswer-3\n"] = "**Verdict:** it passes."  # markdown, not JSON
    model = {"model": "scripted:m", "params": {"responses": replies}}
    budgets = {"target_usd": 0.01, "judge_usd": 0.01, "max_total_usd": 5}
    grader = judge_grader(params={"contains": contains})
    one = write_spec(repo / "one.toml", [model], cases=cases, graders=grader, budgets=budgets)
    result = kb(runner, "sweep", str(one), "--json", "--quiet", "--observed-at", NIGHT1[9:])
    assert result.exit_code == 0, result.stderr
    (cell,) = json.loads(result.stdout)["cells"]
    # 1 of 20 (5 %) unscored: out of n, never a fail; the cell claims on 19 cases
    assert (cell["n"], cell["plannedN"], cell["unscoredN"]) == (19, 20, 1)
    assert cell["passRate"] == pytest.approx(18 / 19) and cell["outcome"] == "strength"
    target = next(r for r in night_runs(repo, NIGHT1) if r.kind == "target" and r.case == "case-03")
    assert target.unscored and target.verdict_word == "UNSCORED"
    shown = kb(runner, "show", cell["claimId"])
    assert "1 unscored" in shown.stdout and "UNSCORED case-03" in shown.stdout
    # 2 of 20 (10 %): judge-incomplete
    contains["answer:\nanswer-4\n"] = "yes"
    grader = judge_grader(params={"contains": contains})
    two = write_spec(repo / "two.toml", [model], cases=cases, graders=grader, budgets=budgets)
    result = kb(runner, "sweep", str(two), "--json", "--quiet", "--observed-at", NIGHT2[9:])
    assert result.exit_code == 1
    (cell,) = json.loads(result.stdout)["cells"]
    assert cell["outcome"] == "incomplete" and "2 of 20 cases unscored" in cell["incompleteReason"]


@pytest.mark.usefixtures("initialized_store")
def test_a_panel_passes_by_majority_keeps_each_verdict_and_feeds_alpha(
    runner: CliRunner, repo: Path
) -> None:
    fair = {"model": "scripted:j1", "params": judge_params()}
    flips = {"model": "scripted:j2", "params": judge_params(wrong_on=(0, 8, 9))}
    fair2 = {"model": "scripted:j3", "params": judge_params(wrong_on=(5,))}
    spec = judged_spec(repo / "s.toml", panel_grader(fair, flips, fair2))
    result = sweep(runner, spec, NIGHT1, "--json")
    assert result.exit_code == 0, result.stderr
    (cell,) = json.loads(result.stdout)["cells"]
    assert cell["passRate"] == pytest.approx(0.7)  # the majority is right on every case
    runs = night_runs(repo, NIGHT1)
    judges = [r for r in runs if r.kind == "judge"]
    assert len(judges) == 30 and {r.subject_key for r in judges} == {
        "scripted:j1", "scripted:j2", "scripted:j3"
    }  # fmt: skip
    on_nine = {r.subject_key: r.verdicts[0].passed for r in judges if r.case == "case-09"}
    assert on_nine == {"scripted:j1": False, "scripted:j2": True, "scripted:j3": False}
    target = next(r for r in runs if r.kind == "target" and r.case == "case-09")
    assert [(v.grader, v.passed) for v in target.verdicts] == [
        ("judge:scripted:j1+scripted:j2+scripted:j3", False)
    ]
    between = json.loads(kb(runner, "judges", "--json").stdout)["betweenJudges"]
    (row,) = between
    assert row["answers"] == 10 and row["judges"] == ["scripted:j1", "scripted:j2", "scripted:j3"]
    assert row["alpha"] is not None and row["interval"][0] < row["alpha"] < row["interval"][1]
    markdown = kb(runner, "judges", "--markdown").stdout
    assert "| `extraction` |" in markdown


@pytest.mark.usefixtures("initialized_store")
def test_a_panel_tie_is_unscored(runner: CliRunner, repo: Path) -> None:
    yes = {"model": "scripted:j1", "params": judge_params()}
    no = {"model": "scripted:j2", "params": judge_params(wrong_on=(0,))}
    spec = judged_spec(repo / "s.toml", panel_grader(yes, no))
    result = sweep(runner, spec, NIGHT1, "--json")
    assert result.exit_code == 1  # 1 of 10 is over 5 %: the cell is judge-incomplete
    printed = json.loads(result.stdout)
    (cell,) = printed["cells"]
    assert cell["unscoredN"] == 1 and cell["outcome"] == "incomplete"
    target = next(r for r in printed["runs"] if r["kind"] == "target" and r["case"] == "case-00")
    (verdict,) = target["verdicts"]
    assert verdict["passed"] is None and "a tie" in verdict["reason"]


# -- a real judge over HTTP ------------------------------------------------------------------


def flips(case: int, every: int) -> bool:
    """Whether the loopback judge gets this case wrong: a fixed 1 in ``every``."""
    return int(hashlib.sha256(f"case-{case:03d}".encode()).hexdigest(), 16) % every == 0


@contextmanager
def loopback_judge(every: int) -> Iterator[str]:
    """An OpenAI-compatible judge on 127.0.0.1 that is right except on a known 1 in ``every``.

    It reads the answer out of kb's judge prompt and compares it with the case's expected
    answer, as a careful judge would, then flips the cases :func:`flips` names.
    """

    class Judge(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            prompt = body["messages"][-1]["content"]
            case = int(prompt.split("Question ", 1)[1].split("?", 1)[0])
            answer = prompt.split("The model's answer:\n", 1)[1].split("\n\nCriteria:", 1)[0]
            verdict = (answer == f"answer-{case}") != flips(case, every)
            text = json.dumps({"passed": verdict, "reason": "compared with the task"})
            reply = {
                "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }  # fmt: skip
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    with serving(Judge) as port:
        yield f"http://127.0.0.1:{port}/v1"


def http_judged_spec(path: Path, base: str, cases: list[tuple[str, str, str]]) -> Path:
    right = {prompt: answer for i, (_, prompt, answer) in enumerate(cases) if i % 4}
    model = {"model": "scripted:m", "params": {"responses": right, "default": "no idea"}}
    params = {"api_base": base, "api_key": "sk-loopback-judge-0000", "cost_usd": 0.0001}
    grader = judge_grader("openai:judge", params=params)
    budgets = {"target_usd": 0.01, "judge_usd": 0.01, "max_total_usd": 5}
    return write_spec(path, [model], cases=cases, graders=grader, budgets=budgets)


@pytest.mark.usefixtures("initialized_store")
@pytest.mark.parametrize("every", [10, 2])
def test_a_loopback_judge_against_200_labels_gives_its_kappa_and_a_weak_one_is_named(
    runner: CliRunner, repo: Path, every: int
) -> None:
    size = 200 if every == 10 else 60  # the 200 labels; a coin needs fewer to show
    cases = [(f"case-{i:03d}", f"Question {i}?", f"answer-{i}") for i in range(size)]
    truth = [bool(i % 4) for i in range(size)]  # the scripted target is right on 3 in 4
    wrong = [flips(i, every) for i in range(size)]
    with loopback_judge(every) as base:
        spec = http_judged_spec(repo / "s.toml", base, cases)
        first = sweep(runner, spec, NIGHT1)
        assert first.exit_code in (0, 1), first.stderr
        labels = repo / "labels.jsonl"
        labels.write_text(
            "".join(
                json.dumps(
                    {"reportId": NIGHT1, "case": name, "model": "scripted:m",
                     "verdict": "pass" if truth[i] else "fail"}
                ) + "\n"
                for i, (name, _, _) in enumerate(cases)
            )
        )  # fmt: skip
        assert kb(runner, "label", "--from", str(labels)).exit_code == 0
        report = json.loads(kb(runner, "judges", "--json").stdout)
        (row,) = report["againstLabels"]
        pairs = [(t != w, t) for t, w in zip(truth, wrong, strict=True)]  # (judge, label)
        expected = cohen_kappa(pairs, resamples=0).kappa
        assert row["n"] == size and row["kappa"] == pytest.approx(expected)
        assert row["confusion"]["judgePassLabelFail"] == sum(
            1 for i in range(size) if wrong[i] and not truth[i]
        )
        low, high = row["interval"]
        assert low < row["kappa"] < high and row["weak"] == (high < 0.6)
        # The next night names the judge in the sweep's summary when it is weak.
        summary = repo / "summary.md"
        night2 = sweep(runner, spec, NIGHT2, "--summary", str(summary))
    assert ("weak judge: openai:judge on extraction" in night2.stderr) == row["weak"]
    assert ("**Weak judge:**" in summary.read_text()) == row["weak"]
    assert row["weak"] == (every == 2)  # 1 in 10 wrong is a fair judge; 1 in 2, a coin
    # The site names a weak judge, and beside each answer gives the command that labels it.
    assert kb(runner, "site", str(repo / "site")).exit_code == 0
    index = (repo / "site" / "index.html").read_text()
    assert ("Weak judge:</strong> openai:judge on extraction" in index) == row["weak"]
    pages = "".join(p.read_text() for p in (repo / "site").glob("*.html"))
    pages = re.sub(r"<[^>]+>", "", pages)  # the command's words are wrapped one by one
    # case-001 is right (1 % 4): kb passed it, so the command proposes fail
    assert f"kb label {NIGHT2} case-001 scripted:m fail --why &quot;...&quot;" in pages


def test_two_branches_that_each_labelled_merge_through_kb_s_driver(
    runner: CliRunner, repo: Path
) -> None:
    assert kb(runner, "init").exit_code == 0  # registers the merge driver
    spec = judged_spec(repo / "s.toml", judge_grader())
    assert sweep(runner, spec, NIGHT1).exit_code == 0
    git(repo, "checkout", "-q", "-b", "reviewer")
    assert kb(runner, "label", NIGHT1, "case-01", "scripted:m", "fail").exit_code == 0
    git(repo, "checkout", "-q", "main")
    assert kb(runner, "label", NIGHT1, "case-02", "scripted:m", "fail").exit_code == 0
    merged = subprocess.run(
        ["git", "merge", "--no-edit", "reviewer"], cwd=repo, capture_output=True, text=True
    )
    assert merged.returncode == 0, merged.stderr + merged.stdout
    cases = [item["case"] for item in json.loads((repo / LABELS).read_text())["labels"]]
    assert cases == ["case-01", "case-02"]
    assert "<<<<<<<" not in (repo / LABELS).read_text()


@pytest.mark.usefixtures("initialized_store")
def test_an_unscored_case_is_out_of_the_epoch_not_a_fail(runner: CliRunner, repo: Path) -> None:
    cases = [(f"case-{i:02d}", f"Question {i}?", f"answer-{i}") for i in range(20)]
    model = {"model": "scripted:m", "params": {"responses": {p: a for _, p, a in cases}}}
    contains = {f"answer:\n{a}\n": '{"passed": true, "reason": "ok"}' for _, _, a in cases}
    contains["answer:\nanswer-3\n"] = "Looks right to me."
    budgets = {"target_usd": 0.01, "judge_usd": 0.01, "max_total_usd": 5}
    grader = judge_grader(params={"contains": contains})
    spec = write_spec(
        repo / "s.toml", [model], cases=cases, graders=grader, budgets=budgets, gate="interval"
    )
    result = sweep(runner, spec, NIGHT1, "--json")
    assert result.exit_code == 0, result.stderr
    (cell,) = json.loads(result.stdout)["cells"]
    assert (cell["n"], cell["unscoredN"], cell["passRate"]) == (19, 1, 1.0)
    assert (cell["epoch"]["n"], cell["epoch"]["passRate"]) == (19, 1.0)
    (epoch,) = json.loads((repo / "rulvar.models.epochs.json").read_text())["cells"].values()
    counts = dict(zip(epoch["cases"], epoch["counts"], strict=True))
    assert counts["case-03"] == 0 and sum(counts.values()) == 19
    assert "case-03" not in epoch["nights"][0]["cases"]


@pytest.mark.usefixtures("initialized_store")
def test_hand_edits_and_overlong_or_contradictory_labels_are_refused(
    runner: CliRunner, repo: Path
) -> None:
    spec = judged_spec(repo / "s.toml", judge_grader())
    assert sweep(runner, spec, NIGHT1).exit_code == 0
    long = kb(runner, "label", NIGHT1, "case-01", "scripted:m", "fail", "--why", "x" * 501)
    assert long.exit_code == 2 and "at most 500 characters" in long.stderr
    two = repo / "two.jsonl"
    line = {"reportId": NIGHT1, "case": "case-01", "model": "scripted:m", "verdict": "fail"}
    two.write_text(json.dumps(line) + "\n" + json.dumps(line | {"verdict": "pass"}) + "\n")
    both = kb(runner, "label", "--from", str(two))
    assert both.exit_code == 2 and "line 2: labels the same answer as line 1" in both.stderr
    missing = repo / "missing.jsonl"
    missing.write_text(json.dumps(line) + "\n" + json.dumps(line | {"case": "nope"}) + "\n")
    named = kb(runner, "label", "--from", str(missing))
    assert named.exit_code == 2 and "missing.jsonl:2" in named.stderr
    assert not (repo / LABELS).exists()
    # a labels file git does not hold as committed never grades a night
    assert kb(runner, "label", NIGHT1, "case-01", "scripted:m", "fail").exit_code == 0
    saved = (repo / LABELS).read_text()
    (repo / LABELS).write_text(saved.replace('"fail"', '"pass"'))
    before = (repo / STORE).read_bytes()
    edited = sweep(runner, spec, NIGHT2)
    assert edited.exit_code == 2 and "graded only by committed labels" in edited.stderr
    assert (repo / STORE).read_bytes() == before
    (repo / LABELS).write_text("<<<<<<< ours\n" + saved + "=======\n" + saved + ">>>>>>> theirs\n")
    conflicted = kb(runner, "judges")
    assert conflicted.exit_code == 2 and "unresolved git merge conflict" in conflicted.stderr


def test_kb_verify_names_a_labels_file_it_cannot_read(runner: CliRunner, repo: Path) -> None:
    assert kb(runner, "init").exit_code == 0
    (repo / LABELS).write_text('{"format": 1, "labels": [{"case": 3}]}\n')
    result = kb(runner, "verify")
    assert result.exit_code != 0 and LABELS in result.stdout + result.stderr
