"""Graders users expect (SPEC 12.4): JSONPath, json_schema, fenced JSON, python graders,
and a dataset template that wins over ``fields.prompt``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from kb.errors import ConfigError
from kb.evals.cases import Case, RubricGrader
from kb.evals.graders import GraderError, grade, grade_golden, grade_rubric
from kb.evals.jsonpath import answer_json, parse_path
from kb.sweep.spec import load_spec
from tests.cli_helpers import kb
from tests.sweep_helpers import write_spec
from tests.test_graders import golden

pytestmark = pytest.mark.usefixtures("initialized_store")


def criterion(**predicate: Any) -> RubricGrader:
    return RubricGrader.model_validate({"kind": "rubric", "criteria": [{"name": "c", **predicate}]})


# -- JSONPath -----------------------------------------------------------------------------

ANSWER = '{"ok": true, "items": [{"name": "a"}, {"name": "b"}], "a key": 3, "0": "zero"}'


@pytest.mark.parametrize(
    ("path", "equals", "met"),
    [
        ("$.ok", True, True),  # v2 never matched a $ path
        ("$", json.loads(ANSWER), True),
        ("$.items[0].name", "a", True),
        ("$.items[-1].name", "b", True),
        ("$['a key']", 3, True),
        ('$["a key"]', 3, True),
        ("$.items[2].name", "c", False),  # nothing there: not met, never an error
        ("$.missing", 1, False),
        ("items.1.name", "b", True),  # v2's dotted form keeps its meaning
        ("0", "zero", True),
        ("ok", True, True),
    ],
)
def test_json_path_finds_one_value(path: str, equals: Any, met: bool) -> None:
    grader = criterion(json_path=path, equals=equals)
    assert grade_rubric(grader, ANSWER).passed is met


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("$..name", "wildcards and recursive descent are not supported"),
        ("$.items[*]", "wildcards and recursive descent are not supported"),
        ("$.", "expected a name after '.'"),
        ("$.items[x]", "unexpected '['"),
        (".ok", "must start with $"),
        ("", "json_path is empty"),
    ],
)
def test_a_bad_json_path_is_refused_when_the_spec_loads(path: str, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        criterion(json_path=path, equals=1)


def test_parse_path_steps() -> None:
    assert parse_path("$.a[0]['b c'].d") == ("a", 0, "b c", "d")
    assert parse_path("a.0.b") == ("a", 0, "b")


# -- fenced JSON, json_schema -------------------------------------------------------------

FENCED = 'Here you go:\n```json\n{"ok": true}\n```'


@pytest.mark.parametrize(
    ("output", "parsed"),
    [
        ('```json\n{"ok": true}\n```', {"ok": True}),
        ("  ```\n[1, 2]\n```\n", [1, 2]),
        ('```JSON\n{"a": 1}\n```', {"a": 1}),
    ],
)
def test_a_fenced_answer_is_json(output: str, parsed: Any) -> None:
    assert answer_json(output) == parsed
    assert grade_golden(golden(json.dumps(parsed), "json"), output).passed


def test_only_a_whole_fenced_answer_counts() -> None:
    with pytest.raises(ValueError):
        answer_json(FENCED)  # prose around the fence is not a JSON answer
    assert not grade_golden(golden('{"ok": true}', "json"), FENCED).passed


SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}


@pytest.mark.parametrize(
    ("output", "met"),
    [
        ('{"ok": true}', True),
        ('```json\n{"ok": false, "extra": 1}\n```', True),
        ('{"ok": "yes"}', False),
        ("{}", False),
        ("not json", False),
    ],
)
def test_json_schema_criterion(output: str, met: bool) -> None:
    assert grade_rubric(criterion(json_schema=SCHEMA), output).passed is met


def test_an_invalid_json_schema_is_refused() -> None:
    with pytest.raises(ValidationError, match="json_schema is not a valid JSON Schema"):
        criterion(json_schema={"type": "nonsense"})


# -- python graders -----------------------------------------------------------------------

CHECKS = """
def exact(output, case):
    return output.strip() == "answer-" + case["name"].split("-")[1]

def half(output, case):
    return 0.5

def explained(output, case):
    return {"passed": output.startswith("answer"), "reason": "starts with answer"}

def raises(output, case):
    raise RuntimeError("boom")

def wrong_type(output, case):
    return "yes"

def out_of_range(output, case):
    return 1.5
"""


def python_spec(folder: Path, function: str, *extra: str) -> Path:
    (folder / "checks.py").write_text(CHECKS)
    grader = f'{{ kind = "python", function = "{function}"{"".join(extra)} }}'
    cases = [(f"case-{i}", f"Question {i}?", f"answer-{i}") for i in range(3)]
    model = {"model": "scripted:m", "params": {"responses": {p: a for _, p, a in cases}}}
    return write_spec(folder / "spec.toml", [model], cases=cases, graders=grader)


def sweep(runner: CliRunner, path: Path, code: int = 0) -> dict[str, Any]:
    result = kb(
        runner, "sweep", str(path), "--json", "--quiet", "--observed-at", "2026-11-01T02:00:00Z"
    )
    assert result.exit_code == code, result.stderr
    return json.loads(result.stdout) if code == 0 else {"stderr": result.stderr}


def test_a_python_grader_grades_through_the_real_sweep(runner: CliRunner, isolated: Path) -> None:
    report = sweep(runner, python_spec(isolated, "checks:exact"))
    (cell,) = report["cells"]
    assert cell["passRate"] == 1.0
    run = report["runs"][0]
    assert run["verdicts"][0]["grader"] == "python:checks:exact"


@pytest.mark.parametrize(
    ("function", "extra", "rate"),
    [("checks:half", "", 0.0), ("checks:half", ", pass_threshold = 0.5", 1.0)],
)
def test_a_returned_score_passes_at_the_threshold(
    runner: CliRunner, isolated: Path, function: str, extra: str, rate: float
) -> None:
    report = sweep(runner, python_spec(isolated, function, extra))
    assert report["cells"][0]["passRate"] == rate


def test_a_reason_is_kept(runner: CliRunner, isolated: Path) -> None:
    report = sweep(runner, python_spec(isolated, "checks:explained"))
    assert report["runs"][0]["verdicts"][0]["reason"] == "starts with answer"


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (
            "checks:raises",
            "grader python:checks:raises raised on case 'case-0': RuntimeError: boom",
        ),
        ("checks:wrong_type", "returned str; expected a bool, a score in [0, 1]"),
        ("checks:out_of_range", "returned a score 1.5 outside [0, 1]"),
    ],
)
def test_a_broken_python_grader_fails_the_job_loudly(
    runner: CliRunner, isolated: Path, function: str, message: str
) -> None:
    before = (isolated / "rulvar.models.json").read_bytes()
    found = sweep(runner, python_spec(isolated, function), code=1)
    assert message in found["stderr"]
    assert (isolated / "rulvar.models.json").read_bytes() == before


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("nowhere:f", "python grader 'nowhere:f': no file nowhere.py in"),
        ("checks:absent", "python grader 'checks:absent': checks.py has no 'absent'"),
        ("checks", "function must be 'module:name' (got \"checks\")"),
    ],
)
def test_a_python_grader_that_cannot_be_found_is_refused_at_load(
    runner: CliRunner, isolated: Path, function: str, message: str
) -> None:
    path = python_spec(isolated, function)
    result = kb(runner, "sweep", str(path), "--dry-run")
    assert result.exit_code == 2 and message in result.stderr
    assert "(and 2 more cases)" in result.stderr or "module:name" in result.stderr


def test_a_module_that_does_not_import_is_named(runner: CliRunner, isolated: Path) -> None:
    path = python_spec(isolated, "checks:exact")
    (isolated / "checks.py").write_text("import nonexistent_module_xyz\n")
    result = kb(runner, "sweep", str(path), "--dry-run")
    assert result.exit_code == 2
    assert "importing checks.py raised ModuleNotFoundError" in result.stderr


def test_editing_the_grader_module_is_a_new_suite(isolated: Path) -> None:
    from kb.evals.cases import suite_fingerprint

    path = python_spec(isolated, "checks:exact")
    before = suite_fingerprint(load_spec(path).cases)
    (isolated / "checks.py").write_text(CHECKS + "\n# edited\n")
    assert suite_fingerprint(load_spec(path).cases) != before


def test_an_unbound_python_grader_is_a_defect_not_a_fail() -> None:
    case = Case.model_validate(
        {
            "name": "x",
            "task_class": "t",
            "prompt": "p",
            "graders": [{"kind": "python", "function": "m:f"}],
        }
    )
    with pytest.raises(GraderError, match="was not bound"):
        grade(case.graders[0], "out", "x", case)  # type: ignore[arg-type]


# -- the template wins over fields.prompt -----------------------------------------------------


def template_spec(folder: Path, prompt_field: str) -> Path:
    """The SPEC 11.5 example: a dataset with both ``fields.prompt`` and a template."""
    (folder / "d.jsonl").write_text(
        '{"id": "q1", "question": "Capital of France?", "answer": "Paris"}\n'
    )
    spec = folder / "s.toml"
    spec.write_text(
        '[sweep]\ncommitter = "ci"\nallow_unbounded = true\n'
        '[[models]]\nmodel = "scripted:m"\n'
        '[[datasets]]\npath = "d.jsonl"\ntask_class = "t"\n'
        f'fields = {{ name = "id", prompt = "{prompt_field}", expected = "answer" }}\n'
        'prompt_template = "Answer in one word. {question}"\n'
    )
    return spec


def test_a_template_wins_over_fields_prompt(isolated: Path) -> None:
    (case,) = load_spec(template_spec(isolated, "question")).cases
    assert case.prompt == "Answer in one word. Capital of France?"


def test_a_missed_json_criterion_says_why() -> None:
    grader = RubricGrader.model_validate(
        {
            "kind": "rubric",
            "criteria": [
                {"name": "shape", "json_schema": SCHEMA},
                {"name": "first", "json_path": "$.items[0]", "equals": 1},
                {"name": "here", "json_path": "$.missing", "equals": 1},
            ],
        }
    )
    assert grade_rubric(grader, '{"ok": "yes", "items": [2]}').detail == (
        "score 0.00 (0/3); missed: shape (schema: 'yes' is not of type 'boolean'), "
        "first ($.items[0] is 2), here (nothing at $.missing)"
    )
    assert "shape (the answer is not JSON)" in grade_rubric(grader, FENCED).detail


def test_a_typo_in_an_unread_fields_prompt_is_still_caught(isolated: Path) -> None:
    spec = template_spec(isolated, "questoin")
    with pytest.raises(ConfigError) as raised:
        load_spec(spec)
    assert "no field 'questoin' (the record has: id, question, answer)" in str(raised.value)


def test_a_regex_is_shown_as_written_not_with_doubled_backslashes() -> None:
    from kb.evals.cases import GoldenGrader, expected_text

    grader = GoldenGrader.model_validate(
        {"kind": "golden", "expected": r"^\s*APPLE\s*$", "match": "regex"}
    )
    assert expected_text([grader]) == r"regex '^\s*APPLE\s*$'"
    assert grade_golden(grader, "pear").detail == r"does not match regex '^\s*APPLE\s*$'"


def test_a_bad_python_grader_field_is_named_without_the_union_tag(isolated: Path) -> None:
    from kb.errors import ConfigError
    from kb.sweep.spec import load_spec

    spec = python_spec(isolated, "checks:exact", ", pass_threshold = 2")
    with pytest.raises(ConfigError) as refused:
        load_spec(spec)
    said = str(refused.value)
    assert "graders[0].pass_threshold" in said and ".python." not in said
