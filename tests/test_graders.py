"""Golden, rubric and judge graders, and suite results."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kb.engine.budget import SpendEnvelope
from kb.engine.scheduler import Engine
from kb.evals.cases import Case, GoldenGrader, RubricGrader, unique_names
from kb.evals.graders import GraderError, grade, grade_golden, grade_rubric, normalize
from kb.evals.suite import run_suites
from tests.engine_helpers import FAST, scripted


def golden(expected: Any, match: str) -> GoldenGrader:
    return GoldenGrader.model_validate({"kind": "golden", "expected": expected, "match": match})


def rubric(*criteria: dict[str, Any], threshold: float = 1.0) -> RubricGrader:
    return RubricGrader.model_validate(
        {"kind": "rubric", "criteria": list(criteria), "pass_threshold": threshold}
    )


@pytest.mark.parametrize(
    ("expected", "match", "output", "passed"),
    [
        ("Paris", "exact", "Paris", True),
        ("Paris", "exact", "Paris.", False),
        ("Paris", "normalized", "  PARIS\n", True),
        ("e\u0301te", "normalized", "\u00e9te", True),  # NFC
        ("a b", "normalized", "A \t\n B", True),
        ("Paris", "contains", "The capital is Paris.", True),
        (r"\b4\b", "regex", "2 + 2 = 4", True),
        (r"^\d+$", "regex", "four", False),
        ({"a": [1, 2]}, "json", '{"a": [1, 2.0]}', True),
        ('{"a": 1}', "json", '{"a": 1}', True),
        ({"a": 1}, "json", "not json", False),
    ],
)
def test_golden(expected: Any, match: str, output: str, passed: bool) -> None:
    assert grade_golden(golden(expected, match), output).passed is passed


def test_normalize() -> None:
    assert normalize("  Hello\u00a0\tWORLD  ") == "hello world"


@pytest.mark.parametrize(
    ("criterion", "output", "met"),
    [
        ({"name": "c", "contains": "Paris"}, "in Paris", True),
        ({"name": "c", "not_contains": "Lyon"}, "in Lyon", False),
        ({"name": "c", "regex": r"\d{4}"}, "year 2026", True),
        ({"name": "c", "max_chars": 5}, "123456", False),
        ({"name": "c", "min_chars": 3}, "123", True),
        ({"name": "c", "one_of": ["yes", "no"]}, " yes\n", True),
        ({"name": "c", "json_path": "a.0.b", "equals": 3}, '{"a": [{"b": 3}]}', True),
        ({"name": "c", "json_path": "a.1", "equals": 3}, '{"a": [3]}', False),
        ({"name": "c", "json_path": "a", "equals": 3}, "not json", False),
    ],
)
def test_rubric_predicates(criterion: dict[str, Any], output: str, met: bool) -> None:
    assert grade_rubric(rubric(criterion), output).passed is met


def test_rubric_threshold() -> None:
    grader = rubric(
        {"name": "a", "contains": "a"},
        {"name": "b", "contains": "b"},
        {"name": "c", "contains": "c"},
        threshold=0.66,
    )
    assert grade_rubric(grader, "a b").passed
    assert not grade_rubric(grader, "a").passed
    graded = grade_rubric(grader, "a b")
    assert graded.detail == "score 0.67 (2/3); missed: c"  # what a reviewer checks
    assert graded.score == 2 / 3


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "rubric", "criteria": [{"name": "x", "contains": "a"}], "pass_threshold": 1.5},
        {
            "kind": "rubric",
            "criteria": [{"name": "x", "contains": "a"}],
            "pass_threshold": float("nan"),
        },
        {"kind": "rubric", "criteria": [{"name": "x"}]},
        {"kind": "rubric", "criteria": [{"name": "x", "contains": "a", "regex": "b"}]},
        {"kind": "rubric", "criteria": [{"name": "x", "json_path": "a"}]},
        {"kind": "rubric", "criteria": [{"name": "x", "regex": "("}]},
        {"kind": "rubric", "criteria": []},
        {"kind": "golden", "expected": "(", "match": "regex"},
        {"kind": "golden", "expected": 3, "match": "exact"},
        {"kind": "golden", "expected": "a", "match": "fuzzy"},
        {"kind": "golden", "expected": "a", "typo": 1},
        {"kind": "judge", "instructions": "x"},
        {"kind": "judge", "model": "gpt-4o", "instructions": "x"},
    ],
)
def test_bad_grader_specs_are_refused_at_load(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Case.model_validate({"name": "n", "task_class": "t", "prompt": "p", "graders": [spec]})


def test_a_grader_that_raises_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    grader = golden("x", "exact")

    def broken(*args: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr("kb.evals.graders.grade_golden", broken)
    with pytest.raises(GraderError, match="grader golden:exact raised on case 'c1'"):
        grade(grader, "x", "c1")


def case(name: str, prompt: str, *graders: dict[str, Any], task_class: str = "extraction") -> Case:
    return Case.model_validate(
        {"name": name, "task_class": task_class, "prompt": prompt, "graders": list(graders)}
    )


def test_duplicate_names_are_suffixed() -> None:
    g = {"kind": "golden", "expected": "x"}
    assert unique_names(
        [case("a", "p", g), case("b", "p", g), case("a", "q", g), case("a", "r", g)]
    ) == ["a", "b", "a#2", "a#3"]


JUDGE = {"kind": "judge", "model": "scripted:judge", "instructions": "mentions Paris"}


def test_suite_with_golden_rubric_and_judge() -> None:
    judge_reply = '{"passed": true, "reason": "says Paris"}'
    judge = {**JUDGE, "params": {"default": judge_reply, "cost_usd": 0.0005}}
    cases = [
        case("c1", "capital?", {"kind": "golden", "expected": "Paris", "match": "normalized"}),
        case("c2", "capital again?", {"kind": "golden", "expected": "Paris"}, judge),
        case("c3", "sum?", {"kind": "rubric", "criteria": [{"name": "four", "contains": "4"}]}),
        case("c1", "duplicate name", {"kind": "golden", "expected": "nope"}),
    ]
    target = scripted(
        "t",
        responses={"capital?": "paris ", "capital again?": "Paris", "sum?": "4"},
        cost_usd=0.001,
        latency_ms=2,
    )
    (suite,) = run_suites(
        Engine(FAST), [target], cases, SpendEnvelope.from_usd(1.0), target_usd=0.01, judge_usd=0.01
    )
    assert [v.name for v in suite.verdicts] == ["c1", "c2", "c3", "c1#2"]
    assert [v.passed for v in suite.verdicts] == [True, True, True, False]
    assert suite.pass_rate == 0.75 and suite.planned_n == 4 and suite.completed_n == 4
    assert suite.total_cost_usd == pytest.approx(4 * 0.001 + 0.0005)
    assert suite.mean_latency_ms is not None
    assert suite.verdicts[1].grades[1].detail == "says Paris"


def test_judge_budget_marks_the_row_judge_incomplete_not_failed() -> None:
    expensive_judge = {
        **JUDGE,
        "params": {"default": '{"passed": true, "reason": "ok"}', "cost_usd": 0.05},
    }
    cases = [case("c", "q", expensive_judge)]
    (suite,) = run_suites(
        Engine(FAST),
        [scripted(default="Paris")],
        cases,
        SpendEnvelope.from_usd(1.0),
        target_usd=0.01,
        judge_usd=0.01,
    )
    (verdict,) = suite.verdicts
    assert verdict.judge_incomplete and not verdict.passed
    assert verdict.judges[0].status == "exhausted"
    assert suite.completed_n == 0


def test_an_unparseable_verdict_is_unscored_not_a_fail() -> None:
    cases = [case("c", "q", {**JUDGE, "params": {"default": "I think it passed?"}})]
    (suite,) = run_suites(
        Engine(FAST),
        [scripted(default="x")],
        cases,
        SpendEnvelope(cap=None),
        target_usd=None,
        judge_usd=None,
    )
    (verdict,) = suite.verdicts
    assert verdict.unscored and not verdict.judge_incomplete and not verdict.measured
    assert not verdict.passed and verdict.grades[0].passed is None
    assert verdict.grades[0].detail.startswith("unscored: ")


def test_judges_debit_the_same_envelope() -> None:
    judge = {**JUDGE, "params": {"default": '{"passed": false, "reason": "no"}', "cost_usd": 0.004}}
    envelope = SpendEnvelope.from_usd(1.0)
    run_suites(
        Engine(FAST),
        [scripted(default="x", cost_usd=0.001)],
        [case("c", "q", judge)],
        envelope,
        target_usd=0.01,
        judge_usd=0.01,
    )
    assert envelope.debited == 1000 + 4000


def test_multiple_members_run_in_one_pass() -> None:
    cases = [case("c", "q", {"kind": "golden", "expected": "yes"})]
    strong, weak = scripted("strong", default="yes"), scripted("weak", default="no")
    suites = run_suites(
        Engine(FAST),
        [strong, weak],
        cases,
        SpendEnvelope(cap=None),
        target_usd=None,
        judge_usd=None,
    )
    assert [(s.model.ref, s.pass_rate) for s in suites] == [
        ("scripted:strong", 1.0),
        ("scripted:weak", 0.0),
    ]


def test_json_equality_is_typed() -> None:
    assert grade_golden(golden({"ok": True}, "json"), '{"ok": true}').passed
    assert not grade_golden(golden(True, "json"), "1").passed  # Python's True == 1
    assert not grade_golden(golden('"1"', "json"), "1").passed  # the string "1" vs the number
    assert grade_golden(golden([1, 2.5], "json"), "[1.0, 2.5]").passed


def test_a_pathological_reply_is_a_wrong_answer_not_a_crash() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert not grade_golden(golden([], "json"), deep).passed
    assert not grade_rubric(rubric({"name": "p", "json_path": "a", "equals": 1}), deep).passed


def test_json_expected_must_be_json_at_load() -> None:
    with pytest.raises(ValidationError, match="expected is not JSON"):
        golden("{not json", "json")
