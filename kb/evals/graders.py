"""Grading one output: golden and rubric checks, and the judge's request and verdict.

Graders are pure functions of the output. A grader that raises is a defect
of the suite, not a failed case: :func:`grade` wraps any unexpected
exception in :class:`GraderError` so the job fails loudly instead of
quietly scoring zero.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kb.engine.requests import ModelSpec, ProviderRequest, build_request
from kb.errors import GraderError
from kb.evals.cases import (
    Case,
    Criterion,
    GoldenGrader,
    Grader,
    JudgeGrader,
    LabelGrader,
    PythonGrader,
    RubricGrader,
)
from kb.evals.jsonpath import answer_json, find, parse_path
from kb.evals.python_graders import case_view, read_result

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"passed": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["passed", "reason"],
    "additionalProperties": False,
}
JUDGE_SYSTEM = (
    "You grade another model's answer against criteria. Reply with only a JSON object "
    '{"passed": true|false, "reason": "<one sentence>"}.'
)


@dataclass(frozen=True)
class Grade:
    """One grader's verdict on one output."""

    grader_id: str
    passed: bool | None
    """``None``: unscored (a judge whose verdict could not be read, a panel's tie)."""
    detail: str
    """Why, in a few words a reviewer can check against the output."""
    score: float | None = None
    """A rubric's fraction of criteria met."""


def normalize(text: str) -> str:
    """NFC, trimmed, whitespace runs collapsed to one space, casefolded."""
    return " ".join(unicodedata.normalize("NFC", text).split()).casefold()


def grade_golden(grader: GoldenGrader, output: str) -> Grade:
    """Compare ``output`` with the expected answer."""
    expected = grader.expected
    if grader.match == "exact":
        passed = output == expected
    elif grader.match == "normalized":
        passed = normalize(output) == normalize(expected)
    elif grader.match == "contains":
        passed = expected in output
    elif grader.match == "regex":
        passed = re.search(expected, output) is not None
    else:
        target = json.loads(expected) if isinstance(expected, str) else expected
        try:
            passed = json_equal(answer_json(output), target)
        except (ValueError, RecursionError):
            passed = False  # not JSON, or nested past what we parse: a wrong answer
    shown = expected if isinstance(expected, str) else json.dumps(expected)
    if len(shown) > 80:  # the spec's own text (a provider's is shortened by kb.textwidth)
        shown = shown[:77] + "..."
    verdict = "matches" if passed else "does not match"
    # a pattern as written (repr would double its backslashes); other text as Python
    # quotes it, so a newline or a trailing space in the expected answer shows
    quoted = f"'{shown}'" if grader.match == "regex" else repr(shown)
    return Grade(grader.grader_id, passed, f"{verdict} {grader.match} {quoted}")


def json_equal(left: Any, right: Any) -> bool:
    """JSON equality: ``1 == 1.0`` (one number type) but ``true != 1`` and ``"1" != 1``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(json_equal, left, right))
    return type(left) is type(right) and bool(left == right)


def _json_path(output: str, path: str) -> Any:
    return find(answer_json(output), parse_path(path))


def _schema_valid(output: str, schema: dict[str, Any]) -> bool:
    from jsonschema import Draft202012Validator

    return bool(Draft202012Validator(schema).is_valid(answer_json(output)))


def criterion_met(criterion: Criterion, output: str) -> bool:
    """Whether one rubric criterion holds for ``output``."""
    if criterion.contains is not None:
        return criterion.contains in output
    if criterion.not_contains is not None:
        return criterion.not_contains not in output
    if criterion.regex is not None:
        return re.search(criterion.regex, output) is not None
    if criterion.max_chars is not None:
        return len(output) <= criterion.max_chars
    if criterion.min_chars is not None:
        return len(output) >= criterion.min_chars
    if criterion.one_of is not None:
        return output.strip() in criterion.one_of
    try:
        if criterion.json_schema is not None:
            return _schema_valid(output, criterion.json_schema)
        assert criterion.json_path is not None
        return json_equal(_json_path(output, criterion.json_path), criterion.equals)
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return False  # not JSON, or nothing at the path: the criterion is not met


def grade_rubric(grader: RubricGrader, output: str) -> Grade:
    """Score = fraction of criteria met; passes at ``pass_threshold``."""
    met = [criterion.name for criterion in grader.criteria if criterion_met(criterion, output)]
    missed = [c for c in grader.criteria if c.name not in met]
    score = len(met) / len(grader.criteria)
    passed = score >= grader.pass_threshold - 1e-12
    detail = f"score {score:.2f} ({len(met)}/{len(grader.criteria)})"
    if missed:
        detail += "; missed: " + ", ".join(_missed(c, output) for c in missed)
    return Grade(grader.grader_id, passed, detail, score)


def _missed(criterion: Criterion, output: str) -> str:
    """A missed criterion's name, with why when the answer had to parse as JSON."""
    if criterion.json_path is None and criterion.json_schema is None:
        return criterion.name
    try:
        value = answer_json(output)
    except (ValueError, RecursionError):
        return f"{criterion.name} (the answer is not JSON)"
    if criterion.json_schema is not None:
        from jsonschema import Draft202012Validator

        error = next(iter(Draft202012Validator(criterion.json_schema).iter_errors(value)), None)
        why = error.message[:80] if error is not None else "not valid"
        return f"{criterion.name} (schema: {why})"
    assert criterion.json_path is not None
    try:
        found = find(value, parse_path(criterion.json_path))
    except (KeyError, IndexError, TypeError):
        return f"{criterion.name} (nothing at {criterion.json_path})"
    shown = json.dumps(found)[:40]
    return f"{criterion.name} ({criterion.json_path} is {shown})"


def grade_python(grader: PythonGrader, output: str, case: Case | None) -> Grade:
    """Call the grader's function with the answer and the case."""
    view = case_view(case) if case is not None else {}
    try:
        passed, score, detail = read_result(grader.call(output, view), grader.pass_threshold)
    except TypeError as exc:
        if "returned" not in str(exc):
            raise
        raise GraderError(f"grader {grader.grader_id} {exc}") from None
    return Grade(grader.grader_id, passed, detail, score)


def grade(
    grader: Grader,
    output: str,
    case_name: str,
    case: Case | None = None,
) -> Grade:
    """Run a deterministic grader; an exception inside it fails the job loudly.

    A judge grades through its own run (:func:`parse_verdict`), never here.
    """
    if isinstance(grader, JudgeGrader):
        raise GraderError(f"{case_name}: a judge grades through its run, not locally")
    if isinstance(grader, LabelGrader):
        return label_grade(grader)
    try:
        if isinstance(grader, GoldenGrader):
            return grade_golden(grader, output)
        if isinstance(grader, PythonGrader):
            return grade_python(grader, output, case)
        return grade_rubric(grader, output)
    except GraderError as exc:
        raise GraderError(f"{exc} on case {case_name!r}") from exc
    except Exception as exc:  # noqa: BLE001 - any failure here is a suite defect
        raise GraderError(
            f"grader {grader.grader_id} raised on case {case_name!r}: {type(exc).__name__}: {exc}"
        ) from exc


def judge_spec(grader: JudgeGrader, seat: int = 0) -> ModelSpec:
    """One judge as a model (temperature 0 unless its params say otherwise).

    ``seat``: which of a panel's judges (a single judge's is 0).
    """
    judge = grader.seats[seat]
    return ModelSpec(judge.model, judge.effort, {"temperature": 0, **judge.params})


def judge_specs(grader: JudgeGrader) -> tuple[ModelSpec, ...]:
    """Every judge the grader asks, in its order."""
    return tuple(judge_spec(grader, seat) for seat in range(len(grader.seats)))


def judge_request(grader: JudgeGrader, prompt: str, output: str, seat: int = 0) -> ProviderRequest:
    """The call to one judge (``seat``: which of a panel's) for one answer."""
    question = (
        f"Task given to the model:\n{prompt}\n\n"
        f"The model's answer:\n{output}\n\n"
        f"Criteria:\n{grader.instructions}\n\n"
        "Did the answer meet the criteria?"
    )
    return build_request(
        judge_spec(grader, seat), question, system=JUDGE_SYSTEM, response_schema=VERDICT_SCHEMA
    )


def verdict_data(reply: str) -> dict[str, Any] | None:
    """A judge reply's ``{passed, reason}`` object (``None``: the reply is not that shape)."""
    text = reply.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("passed"), bool)
        or not isinstance(data.get("reason", ""), str)
    ):
        return None
    return data


def parse_verdict(judge: str, reply: str) -> Grade | None:
    """One judge's ``{passed, reason}`` as ``judge:<judge>``; ``None``: the reply is not that."""
    data = verdict_data(reply)
    if data is None:
        return None
    return Grade(f"judge:{judge}", data["passed"], str(data.get("reason", ""))[:200])


def unscored_grade(grader_id: str, why: str) -> Grade:
    """A verdict nobody could read: neither a pass nor a fail (the seed's null, not zero)."""
    return Grade(grader_id, None, f"unscored: {why}"[:200])


def panel_grade(grader: JudgeGrader, said: Sequence[Grade | None]) -> Grade:
    """The grader's verdict from its judges' (aligned with :attr:`JudgeGrader.panel`).

    A single judge's verdict is its own; unreadable, it is unscored. A panel
    passes or fails by strict majority of the verdicts it got; a tie, or no
    verdict at all, is unscored.
    """
    if len(grader.panel) == 1:
        found = said[0]
        if found is None:
            return unscored_grade(grader.grader_id, "the judge's reply was not {passed, reason}")
        return Grade(grader.grader_id, found.passed, found.detail)
    passes = sum(1 for g in said if g is not None and g.passed)
    fails = sum(1 for g in said if g is not None and g.passed is False)
    tally = f"{passes} of {len(said)} judges passed it, {fails} failed it"
    if passes == fails:
        return unscored_grade(grader.grader_id, f"a tie ({tally})")
    return Grade(grader.grader_id, passes > fails, f"panel majority: {tally}")


def label_grade(grader: LabelGrader) -> Grade:
    """The person's verdict, saying whose night it was recorded against."""
    why = f": {grader.why}" if grader.why else ""
    detail = f"labelled {grader.verdict} by a person (report {grader.report_id}){why}"
    return Grade("label", grader.verdict == "pass", detail[:200])
