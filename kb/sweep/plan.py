"""Steps 1–3 of a sweep: read the store, build the pool, plan every run, bound the spend.

:func:`prepare_sweep` does everything before the first provider call, so the
CLI can print the plan first (or stop there with ``--dry-run``). The plan's
:class:`JobPlan` holds the exact phases the sweep then runs — the canary
probes, the target runs, and the bound on judge runs — so the dry run, the
spend forecast and the budget refusal all read the same runs. No function
here reads a clock: the sweep instant is a parameter.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kb.engine.phases import JobPlan, Phase, job_plan
from kb.engine.requests import ModelSpec
from kb.engine.runs import PlannedRun
from kb.errors import ConfigError
from kb.evals.cases import Case, LabelGrader, unique_names
from kb.evals.suite import CaseRun, judge_phase, target_phase
from kb.store.epochs import EpochsFile, cell_key
from kb.store.labels import Label, LabelsFile
from kb.store.snapshot import Snapshot
from kb.store.ttl import format_instant, stored_instant
from kb.sweep.canary import probe_phase
from kb.sweep.cells import claim_id
from kb.sweep.falsify import live_eval_claims
from kb.sweep.pool import PoolMember, build_pool
from kb.sweep.resume import Resume
from kb.sweep.sampling import CellSuite, cell_suite
from kb.sweep.sensitive import SensitiveProbes, probes_for, tier_runs
from kb.sweep.spec import SweepSpec, judge_models


@dataclass(frozen=True)
class SweepPlan:
    """Everything decided before the first provider call."""

    spec: SweepSpec
    report_id: str
    observed_at: int
    snapshot: Snapshot
    pool: tuple[PoolMember, ...]
    pairs: tuple[CaseRun, ...]
    """Every case run this sweep (or shard) makes, in plan order (a case's repeats together)."""
    job: JobPlan
    """The phases the engine runs: ``canary``, ``targets`` (aligned with ``pairs``), ``judges``."""
    shard: tuple[int, int] | None = None
    resume: Resume | None = None
    """What a stopped invocation of this night left (``--resume``): done cells, settled runs."""
    suites: tuple[CellSuite, ...] = ()
    """Each cell's cases and epoch (the interval gate; empty under the point gate)."""
    epochs: EpochsFile = field(default_factory=EpochsFile)
    """The epochs file as the plan read it."""
    probes: SensitiveProbes | None = None
    """The canary's border probes (``None``: the canary has no ``[sensitive]``)."""

    @property
    def members(self) -> list[ModelSpec]:
        """The pool members with at least one cell in this sweep (or shard)."""
        keys = {pair.member.key for pair in self.pairs}
        return [member.spec for member in self.pool if member.spec.key in keys]

    @property
    def worst_case_usd(self) -> float | None:
        """Worst-case authorized spend (``None``: no envelope, unbounded)."""
        return self.job.worst_case_usd

    def check_budget(self, *, allow_partial: bool = False) -> None:
        """Refuse, before any call, a sweep the envelope could not pay for in full.

        With ``allow_partial`` (or ``[sweep] allow_partial``) the sweep runs and
        the envelope refuses the overflow, leaving those cells incomplete.
        """
        self.job.refuse_overspend(allow_partial=allow_partial or self.spec.sweep.allow_partial)

    @property
    def judge_models(self) -> list[ModelSpec]:
        """The judges the spec's cases call."""
        return judge_models(self.spec.cases)


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` with 1 ≤ I ≤ N."""
    index, sep, total = text.partition("/")
    if not (sep and index.isdigit() and total.isdigit()) or not 1 <= int(index) <= int(total):
        raise ConfigError("--shard", f"{text!r} must be I/N with 1 <= I <= N")
    return int(index), int(total)


def shard_of(member_key: str, task_class: str, total: int) -> int:
    """The shard (1-based) a cell belongs to.

    A hash of the cell itself, not its position: shards that start at
    different moments may read slightly different pools (another shard
    already superseded a queued claim), yet every cell still lands in exactly
    one shard. Cells are never split, so each shard's claims are complete.
    """
    digest = hashlib.sha256(f"{member_key}\0{task_class}".encode()).hexdigest()
    return int(digest, 16) % total + 1


def plan_case_runs(
    spec: SweepSpec,
    pool: Sequence[PoolMember],
    shard: tuple[int, int] | None = None,
    resume: Resume | None = None,
    labels: Mapping[tuple[str, str], Label] | None = None,
) -> list[CaseRun]:
    """Every case run of the sweep (or shard) in plan order: member, case, repeat.

    Only measured members run; a shard keeps whole cells (member × task class);
    a resumed night skips the cells it already committed. ``labels`` (member
    key, case name → the label that grades it, :meth:`LabelsFile.grading`):
    a labelled case is graded by its label on that member, not by its graders.
    """
    repeats = spec.sweep.repeats
    named = list(zip(spec.cases, unique_names(spec.cases), strict=True))
    labels = labels or {}
    return [
        CaseRun(
            member.spec,
            labelled_case(case, found) if (found := labels.get((member.spec.key, name))) else case,
            name,
            repeat if repeats > 1 else None,
        )
        for member in pool
        if member.measured
        for case, name in named
        if shard is None or shard_of(member.spec.key, case.task_class, shard[1]) == shard[0]
        if resume is None or not resume.is_done(member.spec.key, case.task_class)
        for repeat in range(repeats)
    ]


NO_LABELS = LabelsFile()


def labelled_case(case: Case, label: Label) -> Case:
    """``case`` graded by a person's ``label`` instead of its graders (SPEC 14.5)."""
    grader = LabelGrader(
        kind="label",
        verdict=label.verdict,
        report_id=label.report_id,
        labelled_at=label.labelled_at,
        why=label.why,
    )
    return case.model_copy(update={"graders": [grader]})


def sweep_phases(
    spec: SweepSpec,
    pairs: Sequence[CaseRun],
    members: Sequence[ModelSpec],
    night: str = "",
    probes: SensitiveProbes | None = None,
) -> list[Phase]:
    """The sweep's phases in the order the engine runs (and the envelope authorizes) them.

    ``night`` (the report id) seeds the sensitive tier's samples; ``probes`` are its probes.
    """
    budgets = spec.budgets
    phases = []
    if spec.canary is not None:
        sampled: tuple[PlannedRun, ...] = ()
        if probes is not None and spec.canary.sensitive is not None:
            settings = spec.canary.sensitive.settings()
            sampled = tier_runs(members, probes, settings, budgets.canary_usd, night)
        phases.append(
            probe_phase(
                members, spec.canary.prompts, spec.canary.repeats, budgets.canary_usd, sampled
            )
        )
    phases.append(target_phase(pairs, budgets.target_usd))
    phases.append(judge_phase(pairs, budgets.judge_usd))
    return phases


def _refuse_backdating(snapshot: Snapshot, pairs: Sequence[CaseRun], observed_at: int) -> None:
    """A committing sweep may not be older than the live claims it would retire.

    Otherwise a replayed old night would supersede newer knowledge with an
    older, possibly expired, measurement.
    """
    live = live_eval_claims(snapshot)
    cells = {(p.member.ref, p.member.effort, p.case.task_class) for p in pairs}
    newer = [
        claim
        for key in cells
        for _, claim in live.get(key, [])
        if stored_instant(claim.observed_at) > observed_at
    ]
    if newer:
        first = min(newer, key=lambda claim: claim.id)
        # The instant may be --observed-at, --as-of or the clock: name none of them.
        raise ConfigError(
            "sweep instant",
            f"{format_instant(observed_at)} is older than {len(newer)} live claim"
            f"{'s' if len(newer) != 1 else ''} this sweep would retire (e.g. {first.id}, "
            f"observed {first.observed_at}); measure at a later instant (--observed-at), or "
            "replay the old night with --no-commit",
        )


REPORT_ID_MAX = 120


def report_id_issue(report_id: str) -> str | None:
    """Why ``report_id`` cannot name a night (``None``: it can).

    It becomes file names, a claim id's first part (before a ``/``) and a
    commit trailer: printable, no ``/``, no whitespace, not starting with
    ``-`` or ``.``, at most 120 characters.
    """
    if not report_id.strip():
        return "must not be empty (omit it for kb-sweep-<observedAt>)"
    bad = sorted({ch for ch in report_id if not ch.isprintable() or ch.isspace() or ch in "/\\"})
    if bad:
        return f"{report_id!r} must not contain {', '.join(map(repr, bad))}"
    if report_id[0] in "-.":
        return f"{report_id!r} must not start with {report_id[0]!r}"
    if len(report_id) > REPORT_ID_MAX:
        return f"is {len(report_id)} characters; at most {REPORT_ID_MAX}"
    return None


FUTURE_SLACK_MS = 86_400_000
"""How far past now a sweep instant may be (clocks and time zones disagree; a year does not)."""


def refuse_future_instant(observed_at: int, now: int, flag: str) -> None:
    """A sweep observed in the future would outrank every real night until then: refuse it.

    ``now`` is the instant the caller runs at (``--as-of``, else the clock).
    """
    if observed_at > now + FUTURE_SLACK_MS:
        days = (observed_at - now) / 86_400_000
        raise ConfigError(
            flag,
            f"{format_instant(observed_at)} is {days:.1f} days after now "
            f"({format_instant(now)}): its claims would block every real night until then; "
            "check the date, or pass --as-of to sweep as of a later instant on purpose",
        )


def refuse_used_report_id(snapshot: Snapshot, report_id: str, pairs: Sequence[CaseRun]) -> None:
    """A committing sweep may not reuse a report id that already named claims of its cells."""
    taken = sorted(
        {
            cid
            for pair in pairs
            if snapshot.has(cid := claim_id(report_id, pair.member, pair.case.task_class))
        }
    )
    if taken:  # found now, before any money is spent, not at commit time
        raise ConfigError(
            "report id",
            f"{report_id!r} was already used: claim {taken[0]!r} exists; pass a new "
            "--report-id or --observed-at (or --resume, to finish a night that stopped)",
        )


def prepare_sweep(
    spec: SweepSpec,
    snapshot: Snapshot,
    *,
    observed_at: int,
    report_id: str | None = None,
    shard: tuple[int, int] | None = None,
    commit: bool = True,
    resume: Resume | None = None,
    epochs: EpochsFile | None = None,
    new_epoch: bool = False,
    labels: LabelsFile = NO_LABELS,
) -> SweepPlan:
    """Steps 1–3 against the store as ``snapshot`` holds it: pool, runs, phases.

    A report id already used in the store is refused only when the sweep will
    commit (``commit``): a replay of a past night under its own id may measure.
    ``resume`` finishes a night that stopped (see :mod:`kb.sweep.resume`).
    ``epochs`` is the epochs file (:mod:`kb.store.epochs`); ``new_epoch``
    starts a new epoch in every cell (``kb sweep --new-epoch``); ``labels`` grade the
    cases people labelled before ``observed_at`` (:mod:`kb.store.labels`). The plan
    holds every case of every cell — the worst case the envelope authorizes
    and the dry run lists; adaptive sampling runs fewer (:mod:`kb.sweep.sampling`).
    """
    epochs = epochs if epochs is not None else EpochsFile()
    pool = build_pool(spec.models, snapshot, observed_at)
    pairs = plan_case_runs(spec, pool, shard, resume, labels.grading(observed_at))
    if resume is not None:
        report_id = resume.report_id
    for given, source in ((report_id, "--report-id"), (spec.sweep.report_id, "sweep.report_id")):
        issue = report_id_issue(given) if given is not None else None
        if issue is not None:
            raise ConfigError(source, issue)
    report_id = report_id or spec.sweep.report_id or f"kb-sweep-{format_instant(observed_at)}"
    if commit:
        refuse_used_report_id(snapshot, report_id, pairs)
        if resume is None or resume.journal is None:
            # A resumed night was paid already: it commits what it measured, and where the
            # store holds a newer night it decides nothing there (kb.sweep.order).
            _refuse_backdating(snapshot, pairs, observed_at)
    suites = plan_suites(spec, snapshot, pairs, epochs, new_epoch)
    pairs = _within_pools(spec, pairs, suites)
    keys = {pair.member.key for pair in pairs}
    members = [member.spec for member in pool if member.spec.key in keys]
    probes = probes_for(spec)
    phases = sweep_phases(spec, pairs, members, report_id, probes)
    return SweepPlan(
        spec=spec,
        report_id=report_id,
        observed_at=observed_at,
        snapshot=snapshot,
        pool=tuple(pool),
        pairs=tuple(pairs),
        job=job_plan(phases, spec.budgets.max_total_usd, _settled(phases, resume)),
        shard=shard,
        resume=resume,
        suites=suites,
        epochs=epochs,
        probes=probes,
    )


def _within_pools(
    spec: SweepSpec, pairs: Sequence[CaseRun], suites: Sequence[CellSuite]
) -> list[CaseRun]:
    """The pairs that can run tonight: under adaptive sampling, each epoch's pool only.

    The pool is the first ``max_cases`` of the cell's rotation; the plan, the
    dry run and the envelope's worst case leave the other cases out.
    """
    cap = spec.sweep.max_cases
    if spec.sweep.sampling == "full" or all(len(s.names) <= cap for s in suites):
        return list(pairs)
    from kb.sweep.epochs import rotation

    allowed = {
        suite.key: {suite.names[i] for i in rotation(suite.suite, len(suite.names))[:cap]}
        for suite in suites
        if len(suite.names) > cap
    }
    return [
        pair
        for pair in pairs
        if (found := allowed.get((pair.member.key, pair.case.task_class))) is None
        or pair.name in found
    ]


def plan_suites(
    spec: SweepSpec,
    snapshot: Snapshot,
    pairs: Sequence[CaseRun],
    epochs: EpochsFile,
    new_epoch: bool = False,
) -> tuple[CellSuite, ...]:
    """Each cell's suite and epoch, in plan order (none under the point gate)."""
    if spec.gate.kind != "interval":
        if new_epoch:
            raise ConfigError(
                "--new-epoch", 'the point gate keeps no epochs (it is for gate = "interval")'
            )
        return ()
    cells: dict[tuple[str, str], tuple[ModelSpec, dict[str, Case]]] = {}
    for pair in pairs:
        member, found = cells.setdefault((pair.member.key, pair.case.task_class), (pair.member, {}))
        found[pair.name] = pair.case
    live = live_eval_claims(snapshot)
    suites = []
    for (key, task_class), (member, cases) in cells.items():
        priors = live.get((member.ref, member.effort, task_class), [])
        newest = max(
            priors, key=lambda item: (stored_instant(item[1].observed_at), item[0]), default=None
        )
        held = newest[1].polarity if newest is not None else "none"
        suites.append(
            cell_suite(
                member,
                task_class,
                [(case, name) for name, case in cases.items()],
                epochs.cells.get(cell_key(key, task_class)),
                "strength" if held == "strength" else "weakness" if held == "weakness" else "none",
                new_epoch=new_epoch,
                held_claim=snapshot.claim_at(newest[0]) if newest is not None else None,
            )
        )
    return tuple(suites)


def _settled(phases: Sequence[Phase], resume: Resume | None) -> frozenset[str]:
    """The planned runs a stopped invocation's journal holds as settled ok, by label.

    Never a canary probe: a resume asks the canary again before it reuses
    anything (:class:`kb.sweep.resume.ResumeGuard`).
    """
    if resume is None or resume.journal is None:
        return frozenset()
    journal = resume.journal
    return frozenset(
        run.label
        for phase in phases
        for run in phase.runs
        if run.kind != "canary" and journal.reusable(run.label, run.request.key) is not None
    )
