"""How far to trust a judge: agreement with people's labels and between judges (SPEC 14.5).

Two numbers, each with a 95 % interval, and the case (one answer) as the
unit of sampling:

* **Cohen's κ** of a judge against people's labels (:mod:`kb.store.labels`;
  :func:`record_labels` checks each against its night's evidence and keeps
  what the judges said about the answer with it),
  per judge model and task class: the chance-corrected agreement on the
  answers people labelled, with n, the 2×2 confusion matrix and a
  percentile bootstrap interval over answers. A judge whose κ upper bound
  is below :data:`WEAK_KAPPA` is *weak*: the sweep summary and the site
  name it.
* **Krippendorff's α** (nominal) between the judges that graded the same
  answers (a panel, or several judge graders of a case), per task class,
  with a percentile bootstrap over answers.

Both bootstraps draw :data:`BOOTSTRAP` resamples from a fixed seed, so a
report is the same every time it is made.

``bench/judge_sim.py`` measures how often these intervals cover the true κ
and α (judges of known error rates); ``bench/RESULTS.md`` has the figures.
A verdict that was unscored (unreadable) is left out of both, and counted.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kb.schema import DEFAULT_ATTEMPTS

if TYPE_CHECKING:
    from kb.store.filestore import CommitResult, KnowledgeStore
    from kb.store.labels import Label, LabelRequest, LabelsFile
    from kb.store.records import RunRecord

WEAK_KAPPA = 0.6
"""A judge whose κ upper bound is below this agrees with people too little to trust."""
BOOTSTRAP = 2000
"""Resamples of answers behind α's interval."""
_SEED = 20261206


@dataclass(frozen=True)
class Kappa:
    """Cohen's κ of two raters on binary verdicts, with its 95 % interval."""

    n: int
    both_pass: int
    first_pass_only: int
    second_pass_only: int
    both_fail: int
    kappa: float | None
    """``None`` when chance agreement is total (both raters gave one verdict only)."""
    low: float | None
    high: float | None

    @property
    def observed(self) -> float | None:
        """The share of answers the two agree on."""
        return (self.both_pass + self.both_fail) / self.n if self.n else None


def _kappas(tables: np.ndarray) -> np.ndarray:
    """κ of each 2×2 table [both pass, first only, second only, both fail] (NaN: undefined)."""
    n = tables.sum(axis=-1)
    share = tables / n[..., None]
    first = share[..., 0] + share[..., 1]
    second = share[..., 0] + share[..., 2]
    chance = first * second + (1 - first) * (1 - second)
    seen = share[..., 0] + share[..., 3]
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = (seen - chance) / (1 - chance)
    return np.where(chance < 1 - 1e-12, kappa, np.nan)


def cohen_kappa(pairs: Iterable[tuple[bool, bool]], resamples: int = BOOTSTRAP) -> Kappa:
    """κ of (first rater, second rater) verdict pairs, with a 95 % bootstrap interval.

    The interval is the 2.5 and 97.5 percentiles of κ over ``resamples``
    resamples of the answers (seeded). The large-sample Wald interval
    (Fleiss, Cohen and Everitt 1969) covered the true κ only 85–93 % of the
    time below 200 answers or near κ = 0.9 (``bench/judge_sim.py``); the
    bootstrap covers 93.5–95.5 % there.
    """
    counts = [0, 0, 0, 0]  # both pass, first only, second only, both fail
    for first, second in pairs:
        counts[(0 if first else 2) + (0 if second else 1)] += 1
    n = sum(counts)
    table = np.array(counts, dtype=float)
    if n == 0:
        return Kappa(0, *_four(counts), None, None, None)
    kappa = float(_kappas(table))
    if math.isnan(kappa):
        return Kappa(n, *_four(counts), None, None, None)
    if resamples <= 0:
        return Kappa(n, *_four(counts), kappa, None, None)
    rng = np.random.default_rng(_SEED)
    spread = _kappas(rng.multinomial(n, table / n, size=resamples).astype(float))
    spread = spread[~np.isnan(spread)]
    low, high = np.percentile(spread, [2.5, 97.5]) if len(spread) else (kappa, kappa)
    return Kappa(n, *_four(counts), kappa, float(low), float(high))


def _four(counts: Sequence[int]) -> tuple[int, int, int, int]:
    return (counts[0], counts[1], counts[2], counts[3])


@dataclass(frozen=True)
class Alpha:
    """Krippendorff's α (nominal) over units rated by two or more raters, with its interval."""

    units: int
    """Units with two or more values (the only ones α reads)."""
    values: int
    alpha: float | None
    """``None`` when every value is the same (no disagreement is expected)."""
    low: float | None
    high: float | None


def _contributions(units: Sequence[Sequence[Hashable]]) -> tuple[np.ndarray, int]:
    """Each pairable unit's coincidences, flattened (units × categories²)."""
    categories = sorted({value for unit in units for value in unit}, key=repr)
    index = {value: i for i, value in enumerate(categories)}
    size = len(categories)
    rows = []
    for unit in units:
        if len(unit) < 2:
            continue
        tally = np.zeros(size)
        for value in unit:
            tally[index[value]] += 1
        pairs = np.outer(tally, tally) - np.diag(tally)
        rows.append((pairs / (len(unit) - 1)).ravel())
    return (np.array(rows) if rows else np.zeros((0, size * size))), size


def _alpha_of(coincidences: np.ndarray, size: int) -> np.ndarray:
    """α of each row of summed coincidence matrices (flattened); NaN where undefined."""
    matrix = coincidences.reshape(-1, size, size)
    totals = matrix.sum(axis=2)
    n = totals.sum(axis=1)
    off = ~np.eye(size, dtype=bool)
    observed = matrix[:, off].sum(axis=1)
    expected = (totals[:, :, None] * totals[:, None, :])[:, off].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = 1.0 - (n - 1.0) * observed / expected
    return np.where(expected > 0, alpha, np.nan)


def krippendorff_alpha(units: Sequence[Sequence[Hashable]], resamples: int = BOOTSTRAP) -> Alpha:
    """α (nominal) of ``units``, each the values its raters gave (missing ones left out).

    The interval is the 2.5 and 97.5 percentiles of α over ``resamples``
    bootstrap resamples of the pairable units (seeded: the same units, the
    same interval). Resamples where α is undefined are left out.
    """
    rows, size = _contributions(units)
    values = sum(len(unit) for unit in units if len(unit) >= 2)
    if len(rows) == 0:
        return Alpha(0, 0, None, None, None)
    alpha = float(_alpha_of(rows.sum(axis=0)[None, :], size)[0])
    if math.isnan(alpha):
        return Alpha(len(rows), values, None, None, None)
    if resamples <= 0:
        return Alpha(len(rows), values, alpha, None, None)
    rng = np.random.default_rng(_SEED)
    draws = rng.multinomial(len(rows), np.full(len(rows), 1.0 / len(rows)), size=resamples)
    spread = _alpha_of(draws @ rows, size)
    spread = spread[~np.isnan(spread)]
    if len(spread) == 0:
        return Alpha(len(rows), values, alpha, None, None)
    low, high = np.percentile(spread, [2.5, 97.5])
    return Alpha(len(rows), values, alpha, float(low), float(high))


# -- reading the evidence -----------------------------------------------------------------


@dataclass(frozen=True)
class JudgeAgreement:
    """One judge model on one task class against people's labels."""

    judge: str
    task_class: str
    kappa: Kappa
    unscored: int = 0
    """Labelled answers this judge left unscored (not in κ)."""

    @property
    def weak(self) -> bool:
        """κ's upper bound is below :data:`WEAK_KAPPA`."""
        return self.kappa.high is not None and self.kappa.high < WEAK_KAPPA


@dataclass(frozen=True)
class PanelAgreement:
    """The judges that graded the same answers of one task class, and their α."""

    task_class: str
    judges: tuple[str, ...]
    alpha: Alpha


@dataclass(frozen=True)
class JudgesReport:
    """``kb judges``: every judge's agreement with the labels, and between judges."""

    labels: int
    """Labels read."""
    against_labels: tuple[JudgeAgreement, ...]
    between: tuple[PanelAgreement, ...]
    nights: tuple[str, ...] = ()
    """The nights whose judge runs α read."""
    left_out: tuple[str, ...] = field(default_factory=tuple)
    """Nights that could not be read, and why."""

    @property
    def weak(self) -> tuple[JudgeAgreement, ...]:
        """The judges people's labels say not to trust (κ upper bound below 0.6)."""
        return tuple(found for found in self.against_labels if found.weak)


def judge_verdict(run: RunRecord) -> bool | None:
    """What a judge run said: its own verdict (format 4), else its reply read again."""
    from kb.evals.graders import verdict_data

    if run.status != "ok":
        return None
    if run.verdicts:
        return run.verdicts[0].passed
    data = verdict_data(run.output)
    return None if data is None else bool(data["passed"])


def _grader_seat(run: RunRecord) -> str:
    """Which of the case's judge graders the run served (its label's last part, before a dot)."""
    return run.label.rpartition("/")[2].partition(".")[0]


def judges_of(runs: Iterable[RunRecord]) -> dict[tuple[str, str, int], list[RunRecord]]:
    """The judge runs of a night by the answer they judged: (target subject, case, repeat)."""
    found: dict[tuple[str, str, int], list[RunRecord]] = defaultdict(list)
    for run in runs:
        judged = run.judged
        if judged is not None:
            found[(judged, run.case, run.repeat)].append(run)
    return found


def agreement_with_labels(labels: Sequence[Label]) -> list[JudgeAgreement]:
    """κ per (judge, task class) from each label and what the judges said about its answer."""
    pairs: dict[tuple[str, str], list[tuple[bool, bool]]] = defaultdict(list)
    unscored: dict[tuple[str, str], int] = defaultdict(int)
    for label in labels:
        for judge, said in label.judges.items():
            key = (judge, label.task_class)
            if said is None:
                unscored[key] += 1
            else:
                pairs[key].append((said, label.verdict == "pass"))
    return [
        JudgeAgreement(judge, task_class, cohen_kappa(pairs.get((judge, task_class), [])), count)
        for judge, task_class in sorted({*pairs, *unscored})
        for count in [unscored.get((judge, task_class), 0)]
    ]


def agreement_between(nights: Iterable[Sequence[RunRecord]]) -> list[PanelAgreement]:
    """α per task class over answers two or more judges graded under one grader."""
    units: dict[str, list[list[bool]]] = defaultdict(list)
    judges: dict[str, set[str]] = defaultdict(set)
    for runs in nights:
        classes = {
            (r.subject_key, r.case, r.repeat): r.task_class for r in runs if r.kind == "target"
        }
        for answer, found in judges_of(runs).items():
            by_grader: dict[str, list[RunRecord]] = defaultdict(list)
            for run in found:
                by_grader[_grader_seat(run)].append(run)
            task_class = classes.get(answer)
            if task_class is None:
                continue
            for seated in by_grader.values():
                said = [(run.subject_key, judge_verdict(run)) for run in seated]
                values = [verdict for _, verdict in said if verdict is not None]
                if len({who for who, _ in said}) < 2:
                    continue
                units[task_class].append(values)
                judges[task_class].update(who for who, _ in said)
    return [
        PanelAgreement(task_class, tuple(sorted(judges[task_class])), krippendorff_alpha(found))
        for task_class, found in sorted(units.items())
    ]


def judges_report(store: KnowledgeStore, labels: LabelsFile, *, nights: int = 7) -> JudgesReport:
    """Agreement with every label, and between judges over the last ``nights`` recorded nights.

    κ reads the labels file alone (each label carries its answer's judges);
    α reads the judge runs of the last ``nights`` nights' evidence.
    """
    from kb.evidence_index import UNREADABLE, recorded_reports

    left_out: list[str] = []
    recorded, unread = recorded_reports(store) if nights > 0 else ([], [])
    recent = recorded[-nights:] if nights > 0 else []
    read: list[Sequence[RunRecord]] = []
    for night in recent:
        try:
            read.append(night.runs())
        except UNREADABLE as exc:
            left_out.append(f"{night.report.report_id}: {str(exc)[:200]}; its night is left out")
    return JudgesReport(
        labels=len(labels.labels),
        against_labels=tuple(agreement_with_labels(labels.labels)),
        between=tuple(agreement_between(read)),
        nights=tuple(night.report.report_id for night in recent),
        left_out=tuple(left_out + unread),
    )


def weak_judge_lines(report: JudgesReport, judges: Iterable[str] | None = None) -> list[str]:
    """One line per weak judge (of ``judges``, when given): what the sweep summary prints."""
    wanted = set(judges) if judges is not None else None
    lines = []
    for found in report.weak:
        if wanted is not None and found.judge not in wanted:
            continue
        k = found.kappa
        assert k.kappa is not None and k.low is not None and k.high is not None
        lines.append(
            f"weak judge: {found.judge} on {found.task_class} agrees with people's labels at "
            f"κ {k.kappa:.2f} [{k.low:.2f}, {k.high:.2f}] (n {k.n}), below {WEAK_KAPPA} "
            "even at its upper bound: its verdicts there are not to be trusted"
        )
    return lines


def weak_judges_of(store: KnowledgeStore, judges: Iterable[str] | None) -> list[str]:
    """The lines for the ``judges`` (subject keys; ``None``: all) labels say not to trust.

    Reads only the labelled nights' evidence (nothing at all without labels).
    """
    from kb.store.labels import read_labels

    labels = read_labels(store.home.labels_file)
    if not labels.labels:
        return []
    return weak_judge_lines(judges_report(store, labels, nights=0), judges)


# -- recording labels ---------------------------------------------------------------------


@dataclass(frozen=True)
class LabelledAnswer:
    """The answer a label names, as the night's evidence holds it."""

    task_class: str
    judges: dict[str, bool | None]
    """What each judge said about it (judge key → verdict; ``None``: unscored)."""


@dataclass(frozen=True)
class NightAnswers:
    """One night's target runs by case, and its judge runs by the answer they judged.

    Indexed once per night: a ``--from`` file may label thousands of its answers.
    """

    targets: dict[str, list[RunRecord]]
    judges: dict[tuple[str, str, int], list[RunRecord]]

    @classmethod
    def of(cls, runs: Iterable[RunRecord]) -> NightAnswers:
        """The index of ``runs``."""
        listed = list(runs)
        targets: dict[str, list[RunRecord]] = defaultdict(list)
        for run in listed:
            if run.kind == "target":
                targets[run.case].append(run)
        return cls(dict(targets), judges_of(listed))


def labelled_answer(night: NightAnswers, request: LabelRequest, where: str) -> LabelledAnswer:
    """The target run a label names, and its judges' verdicts (``ConfigError``: no such answer).

    The answer is a target run of the case on the model, that repeat, settled ok.
    """
    from kb.errors import ConfigError

    answers = night.targets.get(request.case, [])
    if not answers:
        raise ConfigError(where, f"report {request.report_id!r} has no case {request.case!r}")
    mine = [run for run in answers if run.subject_key == request.model]
    if not mine:
        models = ", ".join(sorted({run.subject_key for run in answers}))
        raise ConfigError(
            where, f"no answer of {request.model!r} to that case (it has answers of {models})"
        )
    repeat = (request.repeat or 1) - 1
    run = next((run for run in mine if run.repeat == repeat), None)
    if run is None:
        raise ConfigError(
            where, f"the night ran that case {len(mine)} time(s): --repeat {repeat + 1} is not one"
        )
    if run.status != "ok" or run.task_class is None:
        raise ConfigError(where, f"that run has no answer to label (it settled {run.status})")
    judged = night.judges.get((request.model, request.case, repeat), [])
    verdicts: dict[str, bool | None] = {}
    for judge in judged:
        verdicts.setdefault(judge.subject_key, judge_verdict(judge))
    return LabelledAnswer(run.task_class, verdicts)


def record_labels(
    store: KnowledgeStore,
    requests: Sequence[LabelRequest],
    *,
    labelled_at: int,
    by: str,
    attempts: int = DEFAULT_ATTEMPTS,
    push: bool = False,
    directory: Path | None = None,
) -> CommitResult | None:
    """Check each request against its night's evidence, then commit the labels in one commit.

    Each label keeps the answer's task class and what its judges said, so
    agreement never needs the night again. The labels file is re-read under
    the store lock on every attempt (another writer's labels are kept).
    ``None``: the file already said exactly this.
    """
    from kb.errors import ConfigError
    from kb.store.evidence import load_evidence
    from kb.store.filestore import Change, CommitContext
    from kb.store.labels import parse_labels
    from kb.store.merge import driver_files

    nights: dict[str, NightAnswers | None] = {}
    added = []
    for request in requests:
        if request.report_id not in nights:
            loaded = load_evidence(store, request.report_id, directory)
            found = NightAnswers.of(loaded.runs) if loaded is not None else None
            nights[request.report_id] = found
        runs = nights[request.report_id]
        where = request.where or f"kb label {request.report_id} {request.case} {request.model}"
        if runs is None:
            raise ConfigError(
                where,
                f"no evidence for report {request.report_id!r} (in the evidence directory or "
                "git history); kb label names a night whose answers kb kept",
            )
        answer = labelled_answer(runs, request, where)
        added.append(request.label(labelled_at, by, answer.task_class, answer.judges))
    path = store.home.labels_file

    def build(_: object) -> Change:
        before = path.read_bytes() if path.exists() else None
        after = parse_labels(before, str(path)).with_labels(added).render()
        if after == before:
            return Change()
        files = {path.name: after} | (driver_files(store) if store.git is not None else {})
        return Change(files=files, note=f"{len(added)} label{'s' if len(added) != 1 else ''}")

    first = requests[0]
    label = f"{first.report_id} {first.case} {first.model}" if len(requests) == 1 else None
    context = CommitContext("label", by, label=label)
    return store.commit_with_rebase(build, context, attempts=attempts, push=push)
