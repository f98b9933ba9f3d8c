"""The checkpoint spec: load, validate, and refuse leakage from the seeding cases."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from kb.card import Ladder, LaddersFile, Profile, load_ladders, parse_ladders
from kb.engine.requests import ModelSpec
from kb.errors import ConfigError
from kb.evals.cases import Case
from kb.schema import ModelRefText, StrictModel, subject_key, validate_into
from kb.store.models import ModelClaim
from kb.sweep.spec import (
    ModelEntry,
    case_tables,
    duplicate_name_issues,
    included_cases,
    judge_models,
    label_grader_issues,
    load_spec,
    resolve_models,
    self_judge_issues,
    unpriced_issues,
)
from kb.tomlfile import read_toml


class CheckpointSection(StrictModel):
    """``[checkpoint]``."""

    orchestrator: ModelRefText
    """The model that picks profiles in criterion 2."""
    ladders: str | None = None
    """A ladders file (else ``[[ladders]]`` in this file)."""
    seeded_by: list[str] = Field(default_factory=list)
    """Sweep specs whose cases produced the claims (their prompts must not reappear)."""
    concurrency: int = Field(default=8, ge=1)
    """Calls in flight at once."""
    allow_unbounded: bool = False
    """Run without ``[budgets] max_total_usd``."""
    include: list[str] = Field(default_factory=list)
    """More case files (globs), as a top-level ``include`` (TOML puts a key written
    after ``[checkpoint]`` here)."""


class CheckpointBudgets(StrictModel):
    """``[budgets]``."""

    target_usd: float | None = Field(default=None, gt=0)
    """The most one answer (a rung's or a profile's) may cost."""
    judge_usd: float | None = Field(default=None, gt=0)
    """The most one judge run may cost (needed when a case has a judge grader)."""
    orchestrator_usd: float | None = Field(default=None, gt=0)
    """The most one orchestrator call (criterion 2's pick) may cost."""
    max_total_usd: float | None = Field(default=None, gt=0)
    """The checkpoint's envelope: refused before any call when its worst case is over."""


class _CheckpointFile(StrictModel):
    """The spec's tables, but for its eval cases (criterion 1).

    ``[[cases]]``, ``[[datasets]]`` and ``include`` (:data:`CASE_KEYS`) are read as
    a sweep spec's, by the sweep spec's code.
    """

    checkpoint: CheckpointSection
    budgets: CheckpointBudgets = Field(default_factory=CheckpointBudgets)
    models: list[ModelEntry] = Field(default_factory=list)
    ladders: list[Ladder] = Field(default_factory=list)
    floors: dict[str, list[str]] = Field(default_factory=dict)
    profiles: list[Profile] = Field(default_factory=list)
    orchestrated: list[Case] = Field(min_length=1)


CASE_KEYS = ("cases", "datasets", "include")
"""Top-level keys that give criterion 1 its cases, exactly as in a sweep spec."""


@dataclass(frozen=True)
class CheckpointSpec:
    """A validated checkpoint spec."""

    path: Path
    section: CheckpointSection
    budgets: CheckpointBudgets
    params: dict[str, dict[str, Any]]
    """Params per ``model@effort`` key (and per bare model as a fallback)."""
    ladders: LaddersFile
    cases: tuple[Case, ...]
    orchestrated: tuple[Case, ...]
    seeding_cases: tuple[Case, ...]

    def priced_models(self) -> list[ModelSpec]:
        """Every model whose cost the criteria compare: rungs, profiles, orchestrator, judges."""
        models = [
            self.model(r.model, r.effort) for ladder in self.ladders.ladders for r in ladder.rungs
        ]
        models += [self.model(p.model, p.effort) for p in self.ladders.profiles]
        models.append(self.model(self.section.orchestrator))
        return models + judge_models([*self.cases, *self.orchestrated])

    def model(self, ref: str, effort: str | None = None) -> ModelSpec:
        """A model with the params the spec gives it."""
        params = self.params.get(subject_key(ref, effort), self.params.get(ref, {}))
        return ModelSpec(ref, effort, params)


def load_checkpoint_spec(path: Path | str) -> CheckpointSpec:
    """Load and validate a checkpoint spec (leakage is checked against the store later).

    ``[[models]]`` entries are the sweep's: the same params, with relative
    paths (a scripted ``script``, a local ``model_path``) resolved against
    this spec's directory.
    """
    path = Path(path)
    raw = read_toml(path, str(path))
    issues: list[str] = []
    eval_tables = {key: raw[key] for key in CASE_KEYS if key in raw}
    spec = validate_into(
        _CheckpointFile, {k: v for k, v in raw.items() if k not in CASE_KEYS}, "", issues
    )
    base = path.resolve().parent
    located = case_tables(eval_tables, base, path.name, issues, section="checkpoint")
    in_section = spec.checkpoint.include if spec is not None else []
    located += included_cases(eval_tables, in_section, base, issues)
    if spec is None:
        raise ConfigError(str(path), issues)
    ladders = _ladders(spec, base, str(path))
    if not ladders.profiles:
        issues.append("profiles: criterion 2 needs at least one [[profiles]] entry")
    models = resolve_models(list(enumerate(spec.models)), base, issues)
    issues += duplicate_name_issues(located)
    issues += _budget_issues(spec, [item.case for item in located])
    if not located:
        issues.append("cases: criterion 1 needs [[cases]], [[datasets]] or an include")
    seeding: list[Case] = []
    for sweep_path in spec.checkpoint.seeded_by:
        seeding.extend(load_spec(base / sweep_path).cases)
    if issues:
        raise ConfigError(str(path), issues)
    loaded = CheckpointSpec(
        path,
        spec.checkpoint,
        spec.budgets,
        {model.key: dict(model.params) for model in models},
        ladders,
        tuple(item.case for item in located),
        tuple(spec.orchestrated),
        tuple(seeding),
    )
    targets = [loaded.model(p.model, p.effort) for p in ladders.profiles]
    issues = task_class_issues(loaded) + self_judge_issues(
        targets, [*loaded.cases, *loaded.orchestrated]
    )
    issues += label_grader_issues(located)
    if issues:  # a case no ladder serves would be dropped from criterion 1 without a word
        raise ConfigError(str(path), issues)
    # Both criteria compare arms on cost: a model nobody prices cannot be compared; a
    # scripted model without params answers "" to everything (a typo, most likely).
    issues = unpriced_issues(loaded.priced_models(), None) + unscripted_issues(loaded)
    if issues:
        raise ConfigError(str(path), issues)
    return loaded


def _did_you_mean(wanted: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(wanted, sorted(set(known)), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(repr(name) for name in dict.fromkeys(names)) or "none"


def task_class_issues(spec: CheckpointSpec) -> list[str]:
    """One line per task class of the cases that no ladder serves (nor, routed, any profile).

    A ladder with a ``task_class`` serves only that class (one without serves
    every class): criterion 1 would plan no cell for the cases of any other
    class, and an orchestrated case of such a class has no profile meant for it.
    """
    ladders = spec.ladders.ladders
    if any(ladder.task_class is None for ladder in ladders):
        return []
    served = {ladder.task_class: ladder.name for ladder in ladders if ladder.task_class}
    profiled = [p.task_class for p in spec.ladders.profiles]
    serving = ", ".join(f"ladder {name!r} serves {tc!r}" for tc, name in served.items())
    issues = []
    for kind, cases, known in (
        ("cases", spec.cases, list(served)),
        ("orchestrated", spec.orchestrated, [*served, *profiled]),
    ):
        missing: dict[str, list[str]] = {}
        for case in cases:
            if case.task_class not in known:
                missing.setdefault(case.task_class, []).append(case.name)
        for task_class, names in missing.items():
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            count = f"{len(names)} case{'s' if len(names) != 1 else ''}"
            where = "matches no ladder"
            tail = f" ({serving})"
            if kind == "orchestrated":
                where = "matches no ladder and no profile"
                tail = f" ({serving}; profiles are for {_quoted(profiled)})"
            issues.append(
                f"{kind}: task class {task_class!r} ({count}: {shown}) {where}{tail}"
                + _did_you_mean(task_class, known)
            )
    return issues


def unscripted_issues(spec: CheckpointSpec) -> list[str]:
    """One line per ``scripted:`` model the checkpoint would run that ``[[models]]`` lacks.

    Without params a scripted model answers ``""`` to everything, so its arm
    reads 0.00 at $0: a ladder rung (of a ladder serving a case), a profile or
    the orchestrator named so is a typo, most likely. An entry with empty
    params is taken as meant.
    """
    classes = {case.task_class for case in spec.cases}
    used: list[tuple[str, str, str | None]] = [
        (f"ladder {ladder.name!r} rung {index}", rung.model, rung.effort)
        for ladder in spec.ladders.ladders
        if ladder.task_class is None or ladder.task_class in classes
        for index, rung in enumerate(ladder.rungs)
    ]
    used += [(f"profile {p.name!r}", p.model, p.effort) for p in spec.ladders.profiles]
    used.append(("checkpoint.orchestrator", spec.section.orchestrator, None))
    issues: dict[str, str] = {}
    for where, ref, effort in used:
        key = subject_key(ref, effort)
        if ModelSpec(ref).provider != "scripted" or key in spec.params or ref in spec.params:
            continue
        configured = sorted(spec.params)
        hint = _did_you_mean(key, configured) or f" (configured: {_quoted(configured)})"
        issues.setdefault(
            key,
            f"{where}: {key} has no [[models]] entry, and a scripted model without "
            f'params answers "" to everything{hint}',
        )
    return list(issues.values())


def _ladders(spec: _CheckpointFile, base: Path, source: str) -> LaddersFile:
    if spec.checkpoint.ladders is not None:
        return load_ladders(base / spec.checkpoint.ladders)
    inline = {
        "ladders": [ladder.model_dump() for ladder in spec.ladders],
        "floors": spec.floors,
        "profiles": [p.model_dump() for p in spec.profiles],
    }
    return parse_ladders(inline, source)


def _budget_issues(spec: _CheckpointFile, eval_cases: Sequence[Case]) -> list[str]:
    if spec.checkpoint.allow_unbounded:
        return []
    needed = ["target_usd", "orchestrator_usd", "max_total_usd"]
    cases = [*eval_cases, *spec.orchestrated]
    if any(case.judges for case in cases):
        needed.append("judge_usd")
    return [
        f"budgets.{name}: missing (or set checkpoint.allow_unbounded)"
        for name in needed
        if getattr(spec.budgets, name) is None
    ]


def leakage_issues(
    spec: CheckpointSpec, claims: Sequence[ModelClaim], pooled: Iterable[str] = ()
) -> list[str]:
    """Checkpoint cases that share a name or prompt with the cases behind the claims.

    ``pooled``: the cases of the nights the claims' epoch manifests list
    (:func:`kb.store.manifests.claim_evidence`; a claim names only tonight's).
    """
    seen_names = set(pooled) | {
        case_id
        for claim in claims
        if claim.claim_class == "eval-measured"
        for ev in claim.evidence
        if ev["kind"] == "eval"
        for case_id in ev["caseIds"]
    }
    seen_names |= {case.name for case in spec.seeding_cases}
    seen_prompts = {case.prompt for case in spec.seeding_cases}
    issues = []
    for kind, cases in (("cases", spec.cases), ("orchestrated", spec.orchestrated)):
        for index, case in enumerate(cases):
            if case.name in seen_names:
                issues.append(
                    f"{kind}[{index}].name: {case.name!r} is a case that produced "
                    "the store's claims (measuring on seeding cases is leakage)"
                )
            if case.prompt in seen_prompts:
                issues.append(
                    f"{kind}[{index}].prompt: the same prompt produced the store's "
                    "claims (measuring on seeding cases is leakage)"
                )
    return issues
