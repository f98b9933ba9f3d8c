"""The sweep spec (TOML): load, merge includes, validate everything before any call.

Shape (see the README for a full example)::

    include = ["cases/*.toml"]      # top of file (or in [sweep]): more [[cases]]
    canary = "canaries/default.toml"  # top of file: or an inline [canary] table

    [sweep]       committer (required), report_id, thresholds, gate, tolerance,
                  repeats, concurrency, per_provider, allow_unbounded, timeout_s,
                  max_retries
    [budgets]     target_usd, judge_usd, canary_usd, max_total_usd
    [[models]]    model, effort, params
    [[cases]]     name, task_class, prompt, system, schema, graders
    [canary]      prompts, repeats

Every problem is collected into one :class:`ConfigError` whose lines name
the file, the key path and the problem (``sweep.thresholds.weakness: must
be below strength``). Relative paths (includes, the canary file, a scripted
model's ``script``) resolve against the spec file's directory.
"""

from __future__ import annotations

import glob
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from kb.engine.params import param_issues
from kb.engine.prices import DECLARE_HINT, price_param_issues, unpriced
from kb.engine.providers.scripted import ScriptedModel
from kb.engine.requests import (
    ModelSpec,
    credential_issues,
    provider_issue,
    unset_default_key,
)
from kb.errors import ConfigError
from kb.evals.cases import Case, PythonGrader
from kb.evals.datasets import DatasetSpec, LocatedCase, grouped_issues, load_dataset
from kb.evals.graders import judge_specs
from kb.schema import HIDDEN, ModelRefText, StrictModel, validate_into
from kb.sweep.gate import DEFAULT_TOLERANCE, GateKind, GatePolicy
from kb.tomlfile import read_toml

#: A call that takes longer than a day is a configuration mistake, not patience.
MAX_TIMEOUT_S = 86_400.0


def _positive_usd(value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError("must be a positive finite number of USD")
    return value


class Thresholds(StrictModel):
    """Pass-rate bands: at or above ``strength`` → strength; at or below ``weakness`` → weakness."""

    strength: float = 0.9
    """A cell whose pass rate is at or above this earns a strength claim."""
    weakness: float = 0.5
    """A cell whose pass rate is at or below this earns a weakness claim (strictly below
    ``strength``)."""

    @field_validator("strength", "weakness")
    @classmethod
    def _fraction(cls, value: float) -> float:
        if isinstance(value, bool) or not math.isfinite(value) or not 0 <= value <= 1:
            raise ValueError("must be a finite fraction in [0, 1]")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> Thresholds:
        if not self.weakness < self.strength:
            raise ValueError(
                f"weakness ({self.weakness}) must be strictly below strength ({self.strength})"
            )
        return self


class SweepSection(StrictModel):
    """``[sweep]``."""

    committer: str = Field(min_length=1)
    """The eval-committer identity recorded on every claim and commit."""
    report_id: str | None = Field(default=None, min_length=1)
    """The night's report id (default ``kb-sweep-<observedAt>``); ``--report-id`` wins."""
    thresholds: Thresholds = Field(default_factory=Thresholds)
    """The claim bands (``[sweep.thresholds]``)."""
    gate: GateKind = "interval"
    """``interval`` (95 % interval with tolerance and hysteresis) or ``point`` (rulvar's rule)."""
    tolerance: float = DEFAULT_TOLERANCE
    """How far outside a band the interval may reach and still claim it, in [0, 0.5)."""
    repeats: int = Field(default=1, ge=1, le=100)
    """Runs per case; a case's score is its pass fraction, ``n`` stays the number of cases."""
    concurrency: int = Field(default=8, ge=1)
    """Calls in flight at once, over every model."""
    per_provider: int | None = Field(default=None, ge=1)
    """Calls in flight at once to any one provider (unset: ``concurrency``)."""
    allow_unbounded: bool = False
    """Run without ``[budgets] max_total_usd`` (no envelope: nothing caps the night's spend)."""
    allow_partial: bool = False
    """Run even when the envelope cannot pay for every run (the overflow is refused)."""
    allow_unpriced: bool = False
    """Run models nobody can price under a capped envelope (their runs count as $0)."""
    evidence: bool = True
    """Write every run's evidence beside the store, in the sweep's commit."""
    evidence_dir: str | None = Field(default=None, min_length=1)
    """Where evidence goes (relative to this spec); outside the work tree it is not committed."""
    timeout_s: float = Field(default=120.0, gt=0, le=MAX_TIMEOUT_S)
    """Seconds one call may take before it is a timeout (retried like an error)."""
    max_retries: int = Field(default=3, ge=0)
    """Retries of a call that failed at the provider (a 429 spends none)."""
    sampling: Literal["adaptive", "full"] = "adaptive"
    """``adaptive``: the nightly rule (SPEC 13.7, :mod:`kb.sweep.nightly`) — a
    settled cell measures a rotating minimum each night and 5 more at a time
    while a detector is suspicious, up to the pool; a new epoch stops once its
    interval is clear of the bands. ``full``: the same rule with every case
    of the pool every night. Either way the interval gate pools the nights of
    an epoch; the point gate has no epochs. v3's ``adaptive-v3`` left in v5
    (SPEC 14.2) and is refused with the way on: its epochs files continue
    under the nightly rule."""
    max_cases: int = Field(default=120, ge=1)
    """The most cases an epoch draws from a task class (the first in its rotation)."""

    @field_validator("sampling", mode="before")
    @classmethod
    def _v3_left(cls, value: object) -> object:
        if value == "adaptive-v3":
            raise ValueError(
                'sampling = "adaptive-v3" was removed in kb v5 (SPEC 14.2): use "adaptive", '
                "the nightly rule; its epochs files go on under it, no night is lost"
            )
        return value

    batch: bool = False
    """Send target and judge runs of providers with a batch API (OpenAI) as batches, at
    the batch price (:mod:`kb.engine.batch`); the others run live."""
    batch_poll_s: float = Field(default=2.0, gt=0, le=600)
    """Batch mode: the first wait before polling a batch; it doubles up to 60 s."""
    include: list[str] = Field(default_factory=list)
    """More case files (TOML with ``[[cases]]``/``[[datasets]]``; globs), relative to this
    spec (a top-level ``include`` written before ``[sweep]`` is the same)."""
    rate_limits: str | None = None
    """Where the rate-limit buckets are shared with the other processes calling with the
    same keys (SPEC 14.4): ``redis://HOST:PORT/DB`` across machines, ``file:DIR`` on
    one, ``process`` not at all; unset, a per-user runtime folder on this machine.
    ``KB_RATE_LIMITS`` overrides it."""

    @field_validator("rate_limits")
    @classmethod
    def _rate_limits(cls, value: str | None) -> str | None:
        if value is not None:
            from kb.engine.shared_buckets import rate_limit_setting

            try:
                rate_limit_setting(value, {}, 0)
            except ConfigError as error:  # never echoed: a Redis URL may carry a password
                raise PydanticCustomError(f"rate_limits{HIDDEN}", error.issues[0]) from None
        return value

    @field_validator("tolerance")
    @classmethod
    def _tolerance(cls, value: float) -> float:
        if isinstance(value, bool) or not math.isfinite(value) or not 0 <= value < 0.5:
            raise ValueError("must be a finite number in [0, 0.5)")
        return value

    def unused_settings(self, *, batch: bool) -> list[str]:
        """Settings written in the spec that this sweep will not use.

        ``batch``: whether batch mode is on (``[sweep] batch`` or ``--batch``).
        """
        # a spec that batches, run with --no-batch, is the user's choice for one night
        if not batch and not self.batch and "batch_poll_s" in self.model_fields_set:
            return [
                "[sweep] batch_poll_s has no effect: batch mode is off "
                "(set [sweep] batch = true or pass --batch)"
            ]
        return []

    @property
    def gate_policy(self) -> GatePolicy:
        """The gate, its bands and tolerance."""
        return GatePolicy(
            self.gate, self.thresholds.strength, self.thresholds.weakness, self.tolerance
        )


class Budgets(StrictModel):
    """``[budgets]``: per-run ceilings and the envelope, in USD."""

    target_usd: float | None = None
    """The most one target run (one case on one model) may cost; over it, the run is
    ``exhausted`` and its cell claims nothing."""
    judge_usd: float | None = None
    """The most one judge run may cost (needed as soon as a case has a judge grader)."""
    canary_usd: float | None = None
    """The most one canary probe run may cost (needed with a canary)."""
    max_total_usd: float | None = None
    """The night's spend envelope: a sweep whose worst case exceeds it refuses before any
    call (``--allow-partial``: runs and refuses the overflow)."""

    _positive = field_validator("target_usd", "judge_usd", "canary_usd", "max_total_usd")(
        _positive_usd
    )


class ModelEntry(StrictModel):
    """``[[models]]``: a model ref, its effort and its litellm params."""

    model: ModelRefText
    """``provider:model`` (``openai:gpt-4o-mini``, ``local:smollm2``, ``scripted:NAME``)."""
    effort: str | None = Field(default=None, min_length=1)
    """The reasoning effort, when the model takes one; a claim is about model and effort."""
    params: dict[str, Any] = Field(default_factory=dict)
    """litellm params of every call (``api_base``, ``api_key_env``, ``temperature``, a
    declared ``price``, …; a scripted model's reply table)."""


@dataclass(frozen=True)
class SensitiveSettings:
    """How the tier samples: ``[sensitive]`` of the canary (resolved)."""

    probes_path: Path
    samples: int = 16
    alpha: float = 0.01
    max_tokens: int = 8
    logprobs: int = 5
    """Top-k of each logprob reading (0: no logprob readings)."""
    readings: int = 4
    """Logprob readings per probe a night (temperature 0, one token)."""


class SensitiveSection(StrictModel):
    """``[sensitive]`` of a canary: border probes sampled at temperature 1 (SPEC 13.4)."""

    probes: str = Field(min_length=1)
    """The probes file (JSON, written by ``kb canary --calibrate``): relative to the canary
    file, or absolute — outside the repository keeps the probes private."""
    samples: int = Field(default=16, ge=2, le=1000)
    """Answers sampled per border probe a night (temperature 1)."""
    alpha: float = Field(default=0.01, gt=0, lt=1)
    """The test's false-alarm rate per model and night."""
    max_tokens: int = Field(default=8, ge=1, le=256)
    """The longest sampled answer, in tokens."""
    keep: int = Field(default=8, ge=1, le=64)
    """Calibration: the border probes kept per model."""
    logprobs: int = Field(default=5, ge=0, le=20)
    """Top-k of each logprob reading, where the provider returns logprobs (0: none)."""
    readings: int = Field(default=4, ge=2, le=64)
    """Logprob readings per probe a night (the baseline holds 16)."""

    def resolved(self, base: Path) -> SensitiveSection:
        """A copy whose ``probes`` is an absolute path (relative ones from ``base``)."""
        return self.model_copy(update={"probes": str(_resolve(base, self.probes))})

    def settings(self) -> SensitiveSettings:
        return SensitiveSettings(
            Path(self.probes),
            self.samples,
            self.alpha,
            self.max_tokens,
            self.logprobs,
            self.readings,
        )


class CanarySection(StrictModel):
    """``[canary]`` or a canary file: probes with deterministic answers."""

    prompts: list[str] = Field(min_length=1)
    """The probes, asked at temperature 0: their answers are the model's fingerprint."""
    repeats: int = Field(default=1, ge=1)
    """Times each probe is asked (an answer that varies makes the canary ``unstable``)."""
    sensitive: SensitiveSection | None = None
    """The sensitive tier (``[canary.sensitive]``)."""

    @field_validator("prompts")
    @classmethod
    def _non_empty(cls, value: list[str]) -> list[str]:
        if any(not p.strip() for p in value):
            raise ValueError("prompts must not be empty strings")
        return value


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep spec."""

    path: Path
    sweep: SweepSection
    budgets: Budgets
    models: tuple[ModelSpec, ...]
    cases: tuple[Case, ...]
    canary: CanarySection | None

    @property
    def thresholds(self) -> Thresholds:
        """The pass-rate bands."""
        return self.sweep.thresholds

    @property
    def gate(self) -> GatePolicy:
        """The gate claims pass through."""
        return self.sweep.gate_policy

    @property
    def warnings(self) -> list[str]:
        """Advice that is not an error: task classes too small for the gate to speak."""
        per_class = Counter(case.task_class for case in self.cases)
        found = self.gate.power_warnings(dict(per_class))
        if self.gate.kind == "interval" and self.sweep.sampling != "full":
            cap = self.sweep.max_cases
            capped = {t: cap for t, count in per_class.items() if count > cap}
            found += [
                f"{line} — max_cases = {cap} cuts its pool"
                for line in self.gate.power_warnings(capped)
            ]
        return found


def _resolve(base: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def load_canary_file(path: Path) -> CanarySection:
    """A canary probe set from its own TOML file (``prompts`` at top level or in ``[canary]``)."""
    data = read_toml(path, "canary")
    if "canary" in data and isinstance(data["canary"], dict):
        data = data["canary"]
    issues: list[str] = []
    section = validate_into(CanarySection, data, "", issues)
    if issues:
        raise ConfigError(str(path), issues)
    assert isinstance(section, CanarySection)
    return _with_sensitive_path(section, path.parent)


def _with_sensitive_path(section: CanarySection, base: Path) -> CanarySection:
    if section.sensitive is None:
        return section
    return section.model_copy(update={"sensitive": section.sensitive.resolved(base)})


_TOP_LEVEL = ("sweep", "budgets", "models", "cases", "datasets", "include", "canary")


def load_spec(path: Path | str, *, credentials: bool = False) -> SweepSpec:
    """Load and validate a sweep spec; raise one ``ConfigError`` listing every problem.

    With ``credentials`` every ``api_key_env`` (of a model or a judge) must name a
    variable that is set (a replay needs no key, so callers choose).
    """
    path = Path(path)
    raw = read_toml(path, "spec")
    base = path.resolve().parent
    issues: list[str] = [f"{key}: unknown key" for key in raw if key not in _TOP_LEVEL]
    sweep = validate_into(SweepSection, raw.get("sweep"), "sweep", issues)
    if "sweep" not in raw:
        issues[-1:] = ["sweep: missing [sweep] table (with committer)"]
    budgets = (
        validate_into(Budgets, raw["budgets"], "budgets", issues) if "budgets" in raw else None
    )
    entries = [
        validate_into(ModelEntry, item, f"models[{index}]", issues)
        for index, item in enumerate(_table_list(raw, "models", issues))
    ]
    located = case_tables(raw, base, path.name, issues)
    located += included_cases(raw, sweep.include if sweep else [], base, issues)
    issues.extend(duplicate_name_issues(located))
    cases = [item.case for item in located]
    canary = _canary(raw.get("canary"), base, issues)
    models = resolve_models([(i, e) for i, e in enumerate(entries) if e is not None], base, issues)
    if sweep is not None and (budgets is not None or "budgets" not in raw):
        # a [budgets] table that failed validation is told once, with its own issues
        issues.extend(_budget_issues(sweep, budgets, cases, canary))
    if budgets is not None:
        issues.extend(_ceiling_issues(models, budgets, canary))
    if not cases and not issues:
        issues.append("cases: the spec (with its includes) has no cases")
    issues.extend(_judge_param_issues(cases))
    issues.extend(self_judge_issues(models, cases))
    issues.extend(label_grader_issues(located))
    if sweep is not None and budgets is not None and budgets.max_total_usd is not None:
        if not sweep.allow_unpriced:
            issues.extend(unpriced_issues([*models, *judge_models(cases)], "sweep.allow_unpriced"))
    if credentials:
        issues.extend(_credential_issues(raw, cases))
    if issues or sweep is None:
        raise ConfigError(str(path), issues)
    return SweepSpec(path, sweep, budgets or Budgets(), tuple(models), tuple(cases), canary)


def default_key_warnings(spec: SweepSpec, *, judges: bool = True) -> list[str]:
    """Models (and, with ``judges``, judges) left to an unset key variable litellm would read.

    A warning, not a refusal: the provider may take a credential kb cannot
    see. Naming ``api_key_env`` turns it into a check before any call.
    """
    found = [(model.key, model) for model in spec.models]
    if judges:
        for model, names in _judges_by_config(spec.cases).values():
            more = f" and {len(names) - 1} more" if len(names) > 1 else ""
            found.append((f"judge {model.key} (case {names[0]!r}{more})", model))
    lines = []
    for who, model in found:
        unset = unset_default_key(model)
        if unset is not None:
            variables = (
                f"{unset[0]} is not set"
                if len(unset) == 1
                else f"none of {', '.join(unset)} is set"
            )
            lines.append(
                f"{who}: no api_key_env and {variables}; its calls will likely fail "
                "(set params.api_key_env and kb checks it before any call)"
            )
    return lines


def _judges_by_config(cases: Sequence[Case]) -> dict[tuple[str, str], tuple[ModelSpec, list[str]]]:
    """Each judge configuration (model, effort, params) and the cases that call it."""
    found: dict[tuple[str, str], tuple[ModelSpec, list[str]]] = {}
    for case in cases:
        for grader in case.judges:
            for spec in judge_specs(grader):
                params = json.dumps(spec.params, sort_keys=True, default=str)
                found.setdefault((spec.key, params), (spec, []))[1].append(case.name)
    return found


def judge_models(cases: Sequence[Case]) -> list[ModelSpec]:
    """The judges the cases call, once per configuration (model, effort and params).

    Two cases may judge with the same model under different params (a price,
    a key, an endpoint): each is checked and priced as the case will call it,
    whatever order the cases come in.
    """
    return [spec for spec, _ in _judges_by_config(cases).values()]


def unpriced_issues(models: Sequence[ModelSpec], override: str | None) -> list[str]:
    """One line per model nobody can price (its runs would cost an unbounded $0).

    ``override`` names the setting that accepts them anyway (``None``: none does).
    """
    keys = dict.fromkeys(spec.key for spec in models if unpriced(spec))  # any of its configs
    tail = f", or set {override} = true" if override else ""
    return [
        f"{key}: has no price (litellm's price table does not know it and the spec "
        f"declares none): {DECLARE_HINT}{tail}"
        for key in keys
    ]


def self_judge_issues(models: Sequence[ModelSpec], cases: Sequence[Case]) -> list[str]:
    """A judge that is one of the targets (any effort), unless its grader says ``self_judge``.

    A model grading its own answers is the judge peers refuse by default: it
    shares the target's blind spots. One line per judge and case.
    """
    targets = {model.ref for model in models}
    issues: list[str] = []
    for case in cases:
        for grader in case.judges:
            if grader.self_judge:
                continue
            issues += [
                f"case {case.name!r}: judge {judge} is also a target model (any effort); "
                "a model may not grade its own answers unless the grader says "
                "self_judge = true"
                for judge in grader.panel
                if judge in targets
            ]
    return list(dict.fromkeys(issues))


def label_grader_issues(located: Sequence[LocatedCase]) -> list[str]:
    """``kind = "label"`` is kb's own (from ``kb label``), never a spec's."""
    return [
        f'{item.where}: grader kind "label" is written by kb label, not in a spec '
        "(record a person's verdict with kb label REPORT_ID CASE MODEL pass|fail)"
        for item in located
        if any(grader.kind == "label" for grader in item.case.graders)
    ]


def _judge_param_issues(cases: Sequence[Case]) -> list[str]:
    issues: list[str] = []
    for spec in judge_models(cases):
        where = f"judge {spec.key} params"
        issues += param_issues(spec.provider, spec.params, where)
        issues += price_param_issues(spec.params, where)
    return list(dict.fromkeys(issues))


def _credential_issues(raw: Mapping[str, Any], cases: Sequence[Case]) -> list[str]:
    entries = raw.get("models", [])
    where = [
        (f"models[{index}].params.api_key_env", item.get("params", {}))
        for index, item in enumerate(entries if isinstance(entries, list) else [])
        if isinstance(item, dict) and isinstance(item.get("params", {}), dict)
    ]
    where += [
        (f"cases {case.name!r}: judge {grader.model} params.api_key_env", grader.params)
        for case in cases
        for grader in case.judges
    ]
    found = []
    for path, params in where:
        for issue in credential_issues([ModelSpec("a:b", None, params)]):
            found.append(f"{path}: {issue.split(': ', 1)[1]}")
    return list(dict.fromkeys(found))


def _table_list(raw: Mapping[str, Any], key: str, issues: list[str]) -> list[Any]:
    value = raw.get(key, [])
    if not isinstance(value, list):
        issues.append(f"{key}: must be an array of tables ([[{key}]])")
        return []
    return value


def _canary(value: Any, base: Path, issues: list[str]) -> CanarySection | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return load_canary_file(_resolve(base, value))
        except ConfigError as exc:
            issues.append(f"canary: {exc}")
            return None
    section = validate_into(CanarySection, value, "canary", issues)
    return _with_sensitive_path(section, base) if isinstance(section, CanarySection) else None


def case_tables(
    data: Mapping[str, Any], base: Path, source: str, issues: list[str], section: str = "sweep"
) -> list[LocatedCase]:
    """``[[cases]]`` and ``[[datasets]]`` of one TOML file, each case with its location.

    ``section``: the spec's own table, where an ``include`` may also go.
    """
    located: list[LocatedCase] = []
    for index, item in enumerate(_table_list(data, "cases", issues)):
        if isinstance(item, dict) and "include" in item:
            issues.append(
                f"cases[{index}].include: unknown key; put include = [...] at the top of the "
                f"file (before any table) or in [{section}]"
            )
            item = {k: v for k, v in item.items() if k != "include"}
        case = validate_into(Case, item, f"cases[{index}]", issues)
        if case is not None:
            located.append(LocatedCase(case, f"{source}: cases[{index}]"))
    for index, item in enumerate(_table_list(data, "datasets", issues)):
        dataset = validate_into(DatasetSpec, item, f"datasets[{index}]", issues)
        if dataset is not None:
            located.extend(load_dataset(dataset, base, issues))
    issues.extend(bind_python_graders(located, base, source))
    return located


def bind_python_graders(located: Sequence[LocatedCase], base: Path, source: str = "") -> list[str]:
    """Find each python grader's function beside ``base``: one issue per distinct problem.

    ``source``: the file the cases are in, left out of each issue's place (the error
    names it already).
    """
    found: dict[str, list[str]] = {}
    for item in located:
        for grader in item.case.graders:
            if isinstance(grader, PythonGrader):
                try:
                    grader.bind(base)
                except ValueError as exc:
                    where = item.where.removeprefix(f"{source}: ") if source else item.where
                    found.setdefault(str(exc), []).append(where)
    return grouped_issues(found, "cases")


def duplicate_name_issues(located: Sequence[LocatedCase]) -> list[str]:
    """Two cases may not share a name: evidence, claims and leakage checks go by name."""
    first: dict[str, str] = {}
    issues = []
    for item in located:
        name = item.case.name
        if name in first:
            issues.append(f"cases: {name!r} is defined twice ({first[name]} and {item.where})")
        else:
            first[name] = item.where
    return issues


def included_cases(
    raw: Mapping[str, Any], in_section: Sequence[str], base: Path, issues: list[str]
) -> list[LocatedCase]:
    """The cases a spec includes: its top-level ``include`` patterns, then ``in_section``'s.

    Patterns are globs relative to ``base`` (the spec's directory); each match is a TOML
    file of ``[[cases]]`` and ``[[datasets]]`` only. An ``include`` that is not a list of
    strings, a pattern that matches no file and every problem of an included file are
    issues. Sweep and checkpoint specs both load theirs here.
    """
    includes = raw.get("include", [])
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        issues.append("include: must be a list of glob patterns")
        includes = []
    located: list[LocatedCase] = []
    for pattern in [*includes, *in_section]:
        matches = sorted(glob.glob(str(_resolve(base, pattern))))
        if not matches:
            issues.append(f"include: {pattern!r} matches no file")
        for match in matches:
            located.extend(_included_cases(Path(match), issues))
    return located


def _included_cases(path: Path, issues: list[str]) -> list[LocatedCase]:
    try:
        data = read_toml(path, "include")
    except ConfigError as exc:
        issues.append(f"include: {exc}")
        return []
    unknown = sorted(set(data) - {"cases", "datasets"})
    if unknown:
        issues.append(
            f"include {path}: unknown keys {', '.join(unknown)} (only [[cases]] and [[datasets]])"
        )
    inner: list[str] = []
    found = case_tables(data, path.resolve().parent, path.name, inner)
    issues.extend(
        f"{path.name}: {issue}" if issue.startswith(("cases[", "datasets[")) else issue
        for issue in inner
    )
    return found


def _ceiling_issues(
    models: Sequence[ModelSpec], budgets: Budgets, canary: CanarySection | None
) -> list[str]:
    """A declared per-call cost above a run's ceiling: every call would overspend, known now."""
    issues = []
    ceilings = [("target_usd", budgets.target_usd)]
    if canary is not None:
        ceilings.append(("canary_usd", budgets.canary_usd))
    for model in models:
        cost = model.params.get("cost_usd")
        if model.provider == "scripted" and "script" in model.params:
            from kb.engine.providers.scripted import ScriptedModel

            try:  # a script file declares its cost too (a broken script is told elsewhere)
                cost = ScriptedModel.from_params(model.params, where=model.key).cost_usd
            except (ConfigError, OSError, ValueError):
                continue
        if isinstance(cost, bool) or not isinstance(cost, int | float):
            continue
        for name, ceiling in ceilings:
            if ceiling is not None and cost > ceiling:
                issues.append(
                    f"{model.key}: cost_usd = {cost:g} per call is above budgets.{name} = "
                    f"{ceiling:g} (each run's ceiling): every call would overspend; raise "
                    f"budgets.{name}"
                )
    return issues


def _budget_issues(
    sweep: SweepSection,
    budgets: Budgets | None,
    cases: Sequence[Case],
    canary: CanarySection | None,
) -> list[str]:
    if budgets is None or all(
        value is None
        for value in (
            budgets.target_usd,
            budgets.judge_usd,
            budgets.canary_usd,
            budgets.max_total_usd,
        )
    ):
        if sweep.allow_unbounded:
            return []
        return ["budgets: missing; give [budgets] or set sweep.allow_unbounded = true"]
    # Any budget at all means a bounded sweep: the envelope can only hold if every
    # run reserves a ceiling before it starts.
    issues = []
    if budgets.max_total_usd is None and not sweep.allow_unbounded:
        issues.append("budgets.max_total_usd: missing")
    if budgets.target_usd is None:
        issues.append("budgets.target_usd: missing (every target run needs a ceiling)")
    has_judge = any(case.judges for case in cases)
    if has_judge and budgets.judge_usd is None:
        issues.append("budgets.judge_usd: missing (the cases use judge graders)")
    if canary is not None and budgets.canary_usd is None:
        issues.append("budgets.canary_usd: missing (the spec configures a canary)")
    return issues


def resolve_models(
    entries: Sequence[tuple[int, ModelEntry]], base: Path, issues: list[str]
) -> list[ModelSpec]:
    """``[[models]]`` entries as model specs, relative paths resolved against ``base``.

    Checks what the entries cannot check alone (scripted params, declared
    prices, duplicates) and adds every problem to ``issues``.
    """
    models: list[ModelSpec] = []
    seen: dict[str, int] = {}
    for index, entry in entries:
        spec = ModelSpec(entry.model, entry.effort, _resolve_params(entry.params, base))
        issues.extend(_numeric_param_issues(index, spec.params))
        issues.extend(param_issues(spec.provider, spec.params, f"models[{index}].params"))
        issues.extend(price_param_issues(spec.params, f"models[{index}].params"))
        unknown = provider_issue(spec.ref)
        if unknown:
            issues.append(f"models[{index}].model: {unknown}")
        if spec.provider == "scripted":
            try:
                ScriptedModel.from_params(spec.params, where=f"models[{index}].params")
            except ConfigError as exc:
                issues.extend(f"{exc.source}: {issue}" for issue in exc.issues)
        if spec.key in seen:
            issues.append(f"models[{index}]: duplicates models[{seen[spec.key]}] ({spec.key})")
            continue
        seen[spec.key] = index
        models.append(spec)
    return models


def _numeric_param_issues(index: int, params: Mapping[str, Any]) -> list[str]:
    issues = []
    for name in ("cost_usd", "input_cost_per_token", "output_cost_per_token", "timeout_s"):
        if name not in params:
            continue
        value = params[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (math.isfinite(value) and value >= 0)
        ):
            what = "a number of seconds above 0" if name == "timeout_s" else "a nonnegative number"
            issues.append(f"models[{index}].params.{name}: must be {what} (got {value!r})")
        elif name == "timeout_s" and value == 0:
            issues.append(
                f"models[{index}].params.timeout_s: must be a number of seconds above 0 (got 0)"
            )
        elif name == "timeout_s" and value > MAX_TIMEOUT_S:
            issues.append(
                f"models[{index}].params.timeout_s: at most {MAX_TIMEOUT_S:g} seconds "
                f"(got {value!r})"
            )
    return issues


def _resolve_params(params: Mapping[str, Any], base: Path) -> dict[str, Any]:
    resolved = dict(params)
    if isinstance(resolved.get("script"), str):
        resolved["script"] = str(_resolve(base, resolved["script"]))
    if isinstance(resolved.get("model_path"), str):
        resolved["model_path"] = str(_resolve(base, resolved["model_path"]))
    return resolved
