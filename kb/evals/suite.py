"""Running cases against models: targets first, then judges, then verdicts.

A job plans its cases as two engine phases: :func:`target_phase` (every
target run, known before the first call) and :func:`judge_phase` (a bound:
at most one run per judge — each of a panel's — of each target that settles ok).
:func:`run_pairs` then runs exactly the planned targets, builds the judge runs
for the answers that came back ok, and grades. :func:`run_suites` does all
of it for callers that need no plan (a suite measured on its own), so a
sweep's models run concurrently with each other either way.

A case passes when its target run settled ``ok`` and every grader passed.
Its row is *judge-incomplete* when a judge run did not settle ``ok`` (its
budget, the envelope, the judge's provider), and *unscored* when a judge
answered something that is not ``{passed, reason}`` or a panel tied: both
are missing evidence, never a fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kb.engine.budget import SpendEnvelope
from kb.engine.phases import Phase
from kb.engine.requests import ModelSpec, build_request
from kb.engine.runs import PlannedRun, RunResult
from kb.engine.scheduler import Engine
from kb.errors import GraderError
from kb.evals.cases import Case, JudgeGrader, case_fingerprint, expected_text, unique_names
from kb.evals.graders import (
    Grade,
    grade,
    judge_request,
    judge_spec,
    panel_grade,
    parse_verdict,
)


class CaseRun(NamedTuple):
    """One planned run of a case on a model (one of its repeats)."""

    member: ModelSpec
    case: Case
    name: str
    """The case's unique name in the suite."""
    repeat: int | None = None
    """Which repeat (0-based) when a case runs more than once; ``None`` when it runs once."""

    @property
    def suffix(self) -> str:
        """``#2`` for the second repeat (labels count from 1); empty without repeats."""
        return "" if self.repeat is None else f"#{self.repeat + 1}"


@dataclass(frozen=True)
class CaseVerdict:
    """One case on one model (one repeat of it)."""

    name: str
    """Unique within the suite."""
    task_class: str
    target: RunResult
    grades: tuple[Grade, ...]
    judges: tuple[RunResult, ...]
    judge_incomplete: bool
    """A judge run did not settle ``ok`` (its ceiling, the envelope, its provider)."""
    passed: bool
    repeat: int | None = None
    judge_models: tuple[ModelSpec, ...] = ()
    """The judge behind each of ``judges``, in the same order."""
    fingerprint: str = ""
    """The case's fingerprint (:func:`kb.evals.cases.case_fingerprint`)."""
    expected: str = ""
    """What the case's graders take as a pass, in words (:func:`kb.evals.cases.expected_text`)."""

    @property
    def unscored(self) -> bool:
        """The answer has no verdict: a judge's reply could not be read, or a panel tied.

        Missing evidence, never a fail (the seed's rule: null, not zero).
        """
        return (
            self.target.status == "ok"
            and not self.judge_incomplete
            and any(g.passed is None for g in self.grades)
        )

    @property
    def measured(self) -> bool:
        """The target answered and every grader gave a verdict."""
        return self.target.status == "ok" and not self.judge_incomplete and not self.unscored


@dataclass(frozen=True)
class SuiteResult:
    """Every case on one model."""

    model: ModelSpec
    verdicts: tuple[CaseVerdict, ...]

    @property
    def planned_n(self) -> int:
        """Cases planned."""
        return len(self.verdicts)

    @property
    def completed_n(self) -> int:
        """Cases whose target settled ok and whose graders all gave a verdict."""
        return sum(1 for v in self.verdicts if v.measured)

    @property
    def passed_n(self) -> int:
        """Cases that passed."""
        return sum(1 for v in self.verdicts if v.passed)

    @property
    def pass_rate(self) -> float:
        """Passed over planned (0 when nothing was planned)."""
        return self.passed_n / self.planned_n if self.planned_n else 0.0

    @property
    def total_cost_usd(self) -> float:
        """Target and judge runs together."""
        return sum(v.target.cost_usd + sum(j.cost_usd for j in v.judges) for v in self.verdicts)

    @property
    def mean_latency_ms(self) -> float | None:
        """Mean latency of the target runs that settled ok."""
        latencies = [
            v.target.latency_ms
            for v in self.verdicts
            if v.target.status == "ok" and v.target.latency_ms is not None
        ]
        return sum(latencies) / len(latencies) if latencies else None


def target_run(run: CaseRun, target_usd: float | None) -> PlannedRun:
    """The target run of one case (one repeat) on one model."""
    member, case = run.member, run.case
    return PlannedRun(
        label=target_label(run),
        kind="target",
        spec=member,
        request=build_request(
            member, case.prompt, system=case.system, response_schema=case.schema_
        ),
        ceiling_usd=target_usd,
    )


def target_phase(pairs: Sequence[CaseRun], target_usd: float | None) -> Phase:
    """Every target run of ``pairs``, in plan order."""
    return Phase("targets", tuple(target_run(pair, target_usd) for pair in pairs))


def judge_phase(pairs: Sequence[CaseRun], judge_usd: float | None, name: str = "judges") -> Phase:
    """The judge runs of ``pairs``: one per judge (a panel's each) of each target that settles."""
    judges = sum(len(g.panel) for p in pairs for g in p.case.judges)
    return Phase(
        name,
        later=judges,
        later_ceiling_usd=judge_usd,
        later_what="judge runs, one per judge grader of each target run that settles ok",
    )


def run_pairs(
    engine: Engine,
    pairs: Sequence[CaseRun],
    targets: Phase,
    envelope: SpendEnvelope,
    *,
    judge_usd: float | None,
) -> list[CaseVerdict]:
    """Run the planned ``targets`` of ``pairs`` (aligned), then the judges, then grade.

    Verdicts come back in the order of ``pairs``.
    """
    targets_done = engine.run(targets.runs, envelope)
    judge_plan: list[PlannedRun] = []
    judge_slots: list[tuple[int, int, int]] = []  # (pair index, grader index, panel seat)
    for index, (pair, result) in enumerate(zip(pairs, targets_done, strict=True)):
        if result.status != "ok":
            continue
        case = pair.case
        for g_index, grader in enumerate(case.graders):
            if not isinstance(grader, JudgeGrader):
                continue
            for seat in range(len(grader.seats)):
                judge_plan.append(
                    PlannedRun(
                        label=judge_label(pair, str(result.model), g_index, seat, grader),
                        kind="judge",
                        spec=judge_spec(grader, seat),
                        request=judge_request(grader, case.prompt, result.output or "", seat),
                        ceiling_usd=judge_usd,
                    )
                )
                judge_slots.append((index, g_index, seat))
    judged = engine.run(judge_plan, envelope) if judge_plan else []
    judge_runs = dict(zip(judge_slots, judged, strict=True))
    return [
        _verdict(pair, target, index, judge_runs)
        for index, (pair, target) in enumerate(zip(pairs, targets_done, strict=True))
    ]


def judge_label(pair: CaseRun, target: str, g_index: int, seat: int, grader: JudgeGrader) -> str:
    """``judge:<target>/<case>[#repeat]/<grader index>``; a panel's seat after a dot."""
    where = f"{g_index}" if len(grader.panel) == 1 else f"{g_index}.{seat}"
    return f"judge:{target}/{pair.name}{pair.suffix}/{where}"


def run_suites(
    engine: Engine,
    members: Sequence[ModelSpec],
    cases: Sequence[Case],
    envelope: SpendEnvelope,
    *,
    target_usd: float | None,
    judge_usd: float | None,
) -> list[SuiteResult]:
    """Measure every member on every case; one :class:`SuiteResult` per member."""
    names = unique_names(cases)
    pairs = [
        CaseRun(member, case, name)
        for member in members
        for case, name in zip(cases, names, strict=True)
    ]
    targets = target_phase(pairs, target_usd)
    verdicts = run_pairs(engine, pairs, targets, envelope, judge_usd=judge_usd)
    size = len(cases)
    return [
        SuiteResult(member, tuple(verdicts[i * size : (i + 1) * size]))
        for i, member in enumerate(members)
    ]


def _verdict(
    pair: CaseRun,
    target: RunResult,
    index: int,
    judge_runs: dict[tuple[int, int, int], RunResult],
) -> CaseVerdict:
    case, name = pair.case, pair.name
    fingerprint = case_fingerprint(case)
    if target.status != "ok":
        return CaseVerdict(
            name,
            case.task_class,
            target,
            (),
            (),
            False,
            False,
            pair.repeat,
            (),
            fingerprint,
            expected_text(case.graders),
        )
    grades: list[Grade] = []
    judges: list[RunResult] = []
    judge_models: list[ModelSpec] = []
    incomplete = False
    for g_index, grader in enumerate(case.graders):
        if isinstance(grader, JudgeGrader):
            said: list[Grade | None] = []
            for seat in range(len(grader.seats)):
                run = judge_runs[(index, g_index, seat)]
                judge = judge_spec(grader, seat)
                judges.append(run)
                judge_models.append(judge)
                if run.status != "ok":
                    incomplete = True
                said.append(
                    parse_verdict(judge.key, run.output or "") if run.status == "ok" else None
                )
            grades.append(panel_grade(grader, said))
        else:
            grades.append(grade(grader, target.output or "", name, case))
    passed = not incomplete and all(g.passed for g in grades)
    return CaseVerdict(
        name,
        case.task_class,
        target,
        tuple(grades),
        tuple(judges),
        incomplete,
        passed,
        pair.repeat,
        tuple(judge_models),
        fingerprint,
        expected_text(case.graders),
    )


def target_label(pair: CaseRun) -> str:
    """The label of a pair's target run (what the engine reports it settled under)."""
    return f"target:{pair.member.key}/{pair.name}{pair.suffix}"


def quick_pass(pair: CaseRun, result: RunResult) -> bool | None:
    """Whether a settled target run passes its deterministic graders (progress only).

    ``None`` when a judge must decide, the run failed, or a grader cannot grade:
    the cell's verdict comes later, from :func:`run_pairs`, never from this.
    """
    if result.status != "ok" or pair.case.judges:
        return None
    try:
        return all(
            grade(g, result.output or "", pair.name, pair.case).passed for g in pair.case.graders
        )
    except GraderError:
        return None
