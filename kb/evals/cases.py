"""Eval cases and grader specs, as a sweep spec writes them (TOML tables).

Every shape forbids unknown keys, so a misspelt grader option is an error
when the spec loads, not a silently ignored setting. Regexes compile and
thresholds are checked at load time too.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from kb.schema import ModelRefText, StrictModel
from kb.store.canonical import canonical_json, sha256_hex

GoldenMatch = Literal["exact", "normalized", "contains", "regex", "json"]
_PREDICATES = (
    "contains",
    "not_contains",
    "regex",
    "max_chars",
    "min_chars",
    "json_path",
    "json_schema",
    "one_of",
)
_FUNCTION = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")


def _fraction(value: float, what: str) -> float:
    if isinstance(value, bool) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{what} must be a finite fraction in [0, 1]")
    return value


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regex {pattern!r}: {exc}") from None
    return pattern


class GoldenGrader(StrictModel):
    """Compare the output with ``expected``."""

    kind: Literal["golden"]
    """Compare with an expected answer."""
    expected: Any
    """The answer; for ``match = "json"`` a TOML value or a JSON string."""
    match: GoldenMatch = "exact"
    """``exact``; ``normalized`` (NFC, trimmed, whitespace collapsed, casefolded);
    ``contains``; ``regex`` (search); ``json`` (parsed equality)."""

    @model_validator(mode="after")
    def _expected_fits_match(self) -> GoldenGrader:
        if self.match != "json" and not isinstance(self.expected, str):
            raise ValueError(f"expected must be a string for match = {self.match!r}")
        if self.match == "regex":
            _compiles(self.expected)
        if self.match == "json" and isinstance(self.expected, str):
            try:
                json.loads(self.expected)
            except (ValueError, RecursionError) as exc:
                raise ValueError(f"expected is not JSON: {exc}") from None
        return self

    @property
    def grader_id(self) -> str:
        """A short name for reports."""
        return f"golden:{self.match}"

    @property
    def expects(self) -> str:
        """What a passing answer is, in words (the site's "expected" column)."""
        shown = self.expected if isinstance(self.expected, str) else _compact_json(self.expected)
        if self.match == "regex":
            return f"regex '{shown}'"  # as written: repr would double its backslashes
        return f"{self.match} {shown!r}" if self.match != "json" else f"json {shown}"


class Criterion(StrictModel):
    """One rubric criterion: a name and exactly one predicate."""

    name: str = Field(min_length=1)
    """What a report says was met or missed."""
    contains: str | None = None
    """Met when the answer contains this text."""
    not_contains: str | None = None
    """Met when the answer does not contain this text."""
    regex: str | None = None
    """Met when this regular expression is found in the answer."""
    max_chars: int | None = Field(default=None, ge=0)
    """Met when the answer has at most this many characters."""
    min_chars: int | None = Field(default=None, ge=0)
    """Met when the answer has at least this many characters."""
    json_path: str | None = None
    """A JSONPath into the output parsed as JSON (``$.a.b[0]``, ``$['a key']``, or v2's
    dotted ``a.b.0``; no wildcards); needs ``equals``. A fenced JSON answer is accepted."""
    equals: Any = None
    """With ``json_path``: met when the value there equals this (absent: when one exists)."""
    json_schema: dict[str, Any] | None = None
    """The output parsed as JSON (fenced accepted) is valid against this JSON Schema."""
    one_of: list[str] | None = None
    """The trimmed output is one of these."""

    @model_validator(mode="after")
    def _exactly_one_predicate(self) -> Criterion:
        given = [name for name in _PREDICATES if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                f"criterion {self.name!r} needs exactly one of {', '.join(_PREDICATES)}"
                + (f" (has {', '.join(given)})" if given else "")
            )
        if self.json_path is None and self.equals is not None:
            raise ValueError(f"criterion {self.name!r}: equals goes with json_path")
        if self.json_path is not None and self.equals is None:
            raise ValueError(f"criterion {self.name!r}: json_path needs equals")
        if self.regex is not None:
            _compiles(self.regex)
        if self.json_path is not None:
            from kb.evals.jsonpath import parse_path

            try:
                parse_path(self.json_path)
            except ValueError as exc:
                raise ValueError(f"criterion {self.name!r}: {exc}") from None
        if self.json_schema is not None:
            from jsonschema import Draft202012Validator
            from jsonschema.exceptions import SchemaError

            try:
                Draft202012Validator.check_schema(self.json_schema)
            except SchemaError as exc:
                raise ValueError(
                    f"criterion {self.name!r}: json_schema is not a valid JSON Schema: "
                    f"{exc.message}"
                ) from None
        return self

    @property
    def expects(self) -> str:
        """The predicate in words (``json_path $.a equals 1``)."""
        if self.json_path is not None:
            return f"{self.json_path} equals {_compact_json(self.equals)}"
        if self.json_schema is not None:
            return "valid against its json_schema"
        for name in _PREDICATES:
            value = getattr(self, name)
            if value is not None:
                return f"{name} '{value}'" if name == "regex" else f"{name} {value!r}"
        return "?"  # pragma: no cover - the validator demands one predicate


class RubricGrader(StrictModel):
    """Named criteria; passes when the fraction met reaches ``pass_threshold``."""

    kind: Literal["rubric"]
    """Named criteria; the score is the fraction met."""
    criteria: list[Criterion] = Field(min_length=1)
    """The criteria, each a name and exactly one predicate."""
    pass_threshold: float = 1.0
    """The case passes when at least this fraction of the criteria is met."""

    @field_validator("pass_threshold")
    @classmethod
    def _threshold(cls, value: float) -> float:
        return _fraction(value, "pass_threshold")

    @property
    def grader_id(self) -> str:
        """A short name for reports."""
        return "rubric"

    @property
    def expects(self) -> str:
        """Each criterion in words, with the share that must be met."""
        met = "all of" if self.pass_threshold >= 1 else f"{self.pass_threshold:.0%} of"
        return f"rubric, {met}: " + "; ".join(f"{c.name}: {c.expects}" for c in self.criteria)


class PanelJudge(StrictModel):
    """One judge of a panel written as a table: its own effort and params (over the grader's)."""

    model: ModelRefText
    """``provider:model`` of this judge."""
    effort: str | None = None
    """Its effort (unset: the grader's)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Its params, over the grader's ``params``."""


class JudgeGrader(StrictModel):
    """An LLM verdict ``{passed, reason}`` from one judge (``model``) or a panel (``models``).

    There is no default judge: one of ``model`` and ``models`` is required. A
    panel asks each of its judges and passes by strict majority of the
    verdicts it got; a tie (or no verdict at all) is *unscored*, never a
    fail. A judge may not be a target model of the same spec (any effort)
    unless ``self_judge = true`` (:func:`kb.sweep.spec.self_judge_issues`).
    """

    kind: Literal["judge"]
    """An LLM verdict ``{passed, reason}``."""
    model: ModelRefText | None = None
    """``provider:model`` of the judge."""
    models: list[ModelRefText | PanelJudge] | None = None
    """A panel: two or more judges, each asked once per answer. A judge is
    ``"provider:model"`` or ``{ model, effort?, params? }`` (its params over the grader's,
    so judges of different providers keep their own keys and endpoints)."""
    instructions: str = Field(min_length=1)
    """What the answer must do to pass."""
    effort: str | None = None
    """The judges' reasoning effort, when they take one."""
    params: dict[str, Any] = Field(default_factory=dict)
    """litellm params of every judge call (``temperature`` is 0 unless set here)."""
    self_judge: bool | None = None
    """``true`` lets a judge grade answers of its own model (refused otherwise)."""

    @model_validator(mode="after")
    def _one_judge_or_panel(self) -> JudgeGrader:
        if (self.model is None) == (self.models is None):
            raise ValueError('a judge needs model = "provider:model" or models = [...] (not both)')
        if self.models is not None:
            if len(self.models) < 2:
                raise ValueError("a panel (models) needs two or more judges; use model for one")
            keys = [(seat.model, seat.effort) for seat in self.seats]
            if len(set(keys)) != len(keys):
                raise ValueError("a panel names each judge (model and effort) once")
        return self

    @property
    def seats(self) -> tuple[PanelJudge, ...]:
        """Every judge the grader asks, each with its own effort and params merged in."""
        if self.models is None:
            return (PanelJudge(model=str(self.model), effort=self.effort, params=self.params),)
        return tuple(
            PanelJudge(model=seat, effort=self.effort, params=self.params)
            if isinstance(seat, str)
            else PanelJudge(
                model=seat.model,
                effort=seat.effort if seat.effort is not None else self.effort,
                params={**self.params, **seat.params},
            )
            for seat in self.models
        )

    @property
    def panel(self) -> tuple[str, ...]:
        """The model of every judge the grader asks (one for a single judge)."""
        return tuple(seat.model for seat in self.seats)

    @property
    def grader_id(self) -> str:
        """A short name for reports: ``judge:<model>``, a panel's joined by ``+``."""
        return "judge:" + "+".join(self.panel)

    @property
    def expects(self) -> str:
        """The judge and what it was told an answer must do."""
        who = self.panel[0] if len(self.panel) == 1 else "panel " + ", ".join(self.panel)
        return f"judge {who}: {self.instructions}"


class LabelGrader(StrictModel):
    """A person's verdict on a case for one model (``kb label``), in place of its graders.

    Never written in a spec: the sweep puts it in a case's place for the
    model a label names, from the night after it was recorded
    (:mod:`kb.store.labels`). Being part of the case, it changes the cell's
    suite fingerprint, so the epoch starts over.
    """

    kind: Literal["label"]
    verdict: Literal["pass", "fail"]
    report_id: str
    """The night whose answer the person labelled."""
    labelled_at: str
    why: str | None = None

    @property
    def grader_id(self) -> str:
        """A short name for reports."""
        return "label"

    @property
    def expects(self) -> str:
        """The label in words."""
        return f"a person's label: {self.verdict} (kb label, {self.labelled_at[:10]})"


class PythonGrader(StrictModel):
    """``function = "module:name"``: a function beside the spec grades the answer.

    See :mod:`kb.evals.python_graders` for what it is given and may return.
    The spec loader binds it (:meth:`bind`) to the directory of the file
    that declared the case.
    """

    kind: Literal["python"]
    """A function beside the spec decides."""
    function: str
    """``module:name``: ``name`` in ``module.py`` beside the file that declares the case."""
    pass_threshold: float = 1.0
    """A returned score passes at this fraction."""
    _call: Any = PrivateAttr(default=None)
    _source: str | None = PrivateAttr(default=None)

    @field_validator("function")
    @classmethod
    def _function(cls, value: str) -> str:
        if _FUNCTION.fullmatch(value) is None:
            raise ValueError("function must be 'module:name'")
        return value

    @field_validator("pass_threshold")
    @classmethod
    def _threshold(cls, value: float) -> float:
        return _fraction(value, "pass_threshold")

    def bind(self, directory: Path) -> None:
        """Find the function beside ``directory``; ``ValueError`` when it is not there."""
        from kb.evals.python_graders import load_function

        self._call, self._source = load_function(directory, self.function)

    @property
    def source_sha256(self) -> str | None:
        """The sha256 of the module's file (part of the suite fingerprint)."""
        return self._source

    def call(self, output: str, case: Any) -> Any:
        """Run the function (bound first)."""
        if self._call is None:
            raise RuntimeError(f"python grader {self.function!r} was not bound to a directory")
        return self._call(output, case)

    @property
    def grader_id(self) -> str:
        """A short name for reports."""
        return f"python:{self.function}"

    @property
    def expects(self) -> str:
        """The function that decides."""
        return f"python {self.function}"


Grader = GoldenGrader | RubricGrader | JudgeGrader | PythonGrader | LabelGrader
"""Every kind of grader: the one place the union is spelled."""
GraderSpec = Annotated[Grader, Field(discriminator="kind")]
"""A grader as a spec writes it (its ``kind`` picks the class)."""


def expected_text(graders: Sequence[Grader]) -> str:
    """What a case's graders take as a pass, in words, one grader after another."""
    return " · ".join(grader.expects for grader in graders)


class Case(StrictModel):
    """One eval case."""

    name: str = Field(min_length=1)
    """Unique in the spec with its includes (what reports, labels and evidence name)."""
    task_class: str = Field(min_length=1, max_length=100)
    """At most 100 characters, so a claim statement naming it stays within 200."""
    prompt: str = Field(min_length=1)
    """The user message."""
    system: str | None = None
    """A system message, when the case has one."""
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    """JSON Schema for structured output, passed to the model."""
    graders: list[GraderSpec] = Field(min_length=1)
    """Every grader must pass (``golden``, ``rubric``, ``judge``, ``python``)."""

    @property
    def judges(self) -> tuple[JudgeGrader, ...]:
        """The case's judge graders (each one judge run per target run that settles ok)."""
        return tuple(grader for grader in self.graders if isinstance(grader, JudgeGrader))


def unique_names(cases: Sequence[Case]) -> list[str]:
    """Case names with duplicates suffixed ``#2``, ``#3`` … in order."""
    seen: dict[str, int] = {}
    names = []
    for case in cases:
        count = seen.get(case.name, 0) + 1
        seen[case.name] = count
        names.append(case.name if count == 1 else f"{case.name}#{count}")
    return names


def case_dump(case: Case) -> dict[str, Any]:
    """The case as it runs (a python grader with its module's sha256)."""
    dump = case.model_dump(by_alias=True, exclude_none=True)
    for grader, table in zip(case.graders, dump["graders"], strict=True):
        if isinstance(grader, PythonGrader) and grader.source_sha256 is not None:
            table["sourceSha256"] = grader.source_sha256
    return dump


def case_fingerprint(case: Case) -> str:
    """The sha256 of the case as it runs: name, prompt, system, schema and graders.

    Computed after templating (a dataset's case holds its rendered prompt and
    expected values), over RFC 8785 canonical JSON, so any edit to what the
    case asks or how it is graded (a python grader's module included) changes
    it, and nothing else does.
    """
    return sha256_hex(canonical_json(case_dump(case)))


def suite_fingerprint(cases: Sequence[Case]) -> str:
    """The sha256 of a cell's cases, sorted by name (a changed test is a new suite).

    Adding, removing or editing a case — its prompt, system, schema, graders
    or expected values, after templating — changes it; reordering does not.
    """
    dumps = sorted((case_dump(case) for case in cases), key=lambda dump: str(dump["name"]))
    return sha256_hex(canonical_json(dumps))
