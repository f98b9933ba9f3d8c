"""``kb canary --calibrate SPEC``: choose each model's border probes and record their baselines.

Candidates are a built-in list of prompts whose first answer word is a
near-tie for many models (a coin, a colour, a number …) and the suite's own
prompts (the first :data:`FROM_SUITE` distinct ones). Each model answers
each candidate ``samples`` times at temperature 1 (the screen); the
candidates with the most first-word entropy — at least two different
answers — are kept, ``keep`` per model (8). The kept probes are then asked
again, :data:`BASELINE_FACTOR` × ``samples`` times each (64), and those
fresh answers are the baseline: counting the screen's answers would bias the
baseline toward the ties the screen picked, and the nightly test would then
see a tie regress as a shift.

The probes go to the probes file the canary names (outside the repository
if they are private); the baselines to the canary baselines file beside the
store, in one CAS commit (``kb: canary calibrate``). Every call has the
``canary_usd`` ceiling and the whole calibration — the screen and the most
the baseline can ask — is authorized before the first call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kb.atomicfile import write_atomic
from kb.engine.budget import SpendEnvelope
from kb.engine.journal import RunJournal, read_journal
from kb.engine.phases import JobPlan, Phase, job_plan
from kb.engine.requests import ModelSpec
from kb.engine.runs import PlannedRun, RunResult
from kb.engine.scheduler import Engine, journaled
from kb.engine.transports.base import replays
from kb.errors import ConfigError
from kb.logprobs import TopLogprobs
from kb.store.baselines import BaselinesFile, SubjectBaselines
from kb.store.filestore import Change, CommitContext, KnowledgeStore
from kb.store.snapshot import Snapshot
from kb.store.ttl import format_instant, parse_flag_instant
from kb.sweep.evidence import EvidenceContext
from kb.sweep.pool import build_pool
from kb.sweep.resume import JOURNAL_SUFFIX, SweptSpec
from kb.sweep.sensitive import (
    CALIBRATION_READINGS,
    LABEL_MARK,
    READING_MARK,
    SensitiveProbes,
    entropy_bits,
    kept_readings,
    member_secrets,
    probe_id,
    probes_for,
    reading_runs,
    readings_of,
    sample_runs,
    short_answer,
    takes_logprobs,
)
from kb.sweep.spec import SweepSpec, judge_models

BORDER_PROMPTS: tuple[str, ...] = (
    "Heads or tails? Reply with one word.",
    "Pick a colour: red, blue or green. Reply with one word.",
    "Pick a number from 1 to 10. Reply with the number only.",
    "Cats or dogs? Reply with one word.",
    "Tea or coffee? Reply with one word.",
    "Name an animal. Reply with one word.",
    "Name a fruit. Reply with one word.",
    "Pick a day of the week. Reply with one word.",
    "Summer or winter? Reply with one word.",
    "Left or right? Reply with one word.",
    "Pick a letter from A to E. Reply with the letter only.",
    "Is a tomato a fruit or a vegetable? Reply with one word.",
    "Say a word that rhymes with cat.",
    "Pick a planet. Reply with one word.",
    "Yes or no: will it rain tomorrow? Reply with one word.",
    "Pick a season. Reply with one word.",
)
"""Built-in candidates: prompts with many plausible one-word answers."""
FROM_SUITE = 16
"""Suite prompts screened per model (the first distinct ones, in case order)."""
BASELINE_FACTOR = 4
"""Baseline samples per kept probe, as a multiple of the nightly ``samples``."""


@dataclass(frozen=True)
class KeptProbe:
    """A border probe kept for a model: its prompt, the screen's entropy, its baseline."""

    prompt: str
    entropy: float
    baseline: Counter[str]
    readings: TopLogprobs = ()
    """Its baseline logprob readings (none where the provider gives no logprobs)."""


@dataclass(frozen=True)
class Calibration:
    """What calibration found for one model."""

    member: ModelSpec
    screened: int
    kept: tuple[KeptProbe, ...]
    failed: str | None = None
    """Why nothing was kept although candidates were asked (a provider error …)."""

    def line(self) -> str:
        """One line per model for ``kb canary --calibrate``."""
        head = f"{self.member.key}  "
        if self.failed:
            return head + f"not calibrated: {self.failed}"
        if not self.kept:
            return head + (
                f"no border probe: every one of {self.screened} candidates got one answer "
                "(a deterministic model: only the exact tier watches it)"
            )
        best = ", ".join(f"{k.entropy:.2f}" for k in self.kept[:3])
        read = sum(1 for k in self.kept if k.readings)
        return head + (
            f"kept {len(self.kept)} of {self.screened} candidates "
            f"(first-word entropy {best}{', …' if len(self.kept) > 3 else ''} bits)"
            + (f"; logprob readings for {read}" if read else "")
        )


def candidates(spec: SweepSpec) -> tuple[str, ...]:
    """The built-in border prompts, then the suite's first distinct prompts."""
    suite = list(dict.fromkeys(case.prompt for case in spec.cases))[:FROM_SUITE]
    return tuple(dict.fromkeys([*BORDER_PROMPTS, *suite]))


def _answers(
    runs: Sequence[RunResult], secrets: Sequence[str] = ()
) -> tuple[Counter[str], str | None]:
    failed = next((r.status for r in runs if r.status != "ok"), None)
    counted = Counter(short_answer(r.output or "", secrets) for r in runs if r.status == "ok")
    return counted, failed


def calibrate(
    spec: SweepSpec,
    store: KnowledgeStore,
    engine: Engine,
    *,
    at: int,
    commit: bool = True,
    allow_partial: bool = False,
) -> list[Calibration]:
    """Screen the candidates, keep each model's border probes, record their baselines.

    A committing calibration that calls providers journals every settled call as a night does
    (:func:`calibration_journal`): one that was stopped (Ctrl-C, a crash, a
    full disk) is resumed by the next ``kb canary --calibrate`` of the same
    spec — at the stopped one's instant, so its requests are the same — and
    pays nothing twice. The journal goes once the baselines are committed.
    """
    if spec.canary is None or spec.canary.sensitive is None:
        raise ConfigError(
            str(spec.path), 'no [sensitive] in the canary: add probes = "PATH" to calibrate'
        )
    engine.keep_secrets([*spec.models, *judge_models(spec.cases)])
    if not commit or replays(engine.transport):  # a replay pays nothing: nothing to keep
        return _calibrate(spec, store, engine, at=at, commit=commit, allow_partial=allow_partial)
    path = calibration_journal(store)
    swept = SweptSpec.of(spec.path, store)
    stopped = read_journal(path)
    if stopped is not None and not swept.swept(stopped.spec):
        raise ConfigError(
            "--calibrate",
            f"a stopped calibration of {stopped.spec} is journaled in {path}: run kb canary "
            "--calibrate with that spec to finish it (or delete the journal to start over)",
        )
    if stopped is not None:
        at = parse_flag_instant(stopped.observed_at)  # the same instant: the same requests
    if store.git is not None:
        store.git.exclude(path)  # a working file of this clone, never committed
    opened = RunJournal.open(
        path,
        CALIBRATION,
        format_instant(at),
        spec=swept.name,
        cut=EvidenceContext.of([*spec.models, *judge_models(spec.cases)]).cut,
    )
    try:
        with journaled(engine, opened, stopped):
            found = _calibrate(spec, store, engine, at=at, commit=True, allow_partial=allow_partial)
    finally:
        opened.close()
    path.unlink(missing_ok=True)  # committed: nothing left to resume
    return found


CALIBRATION = "canary-calibration"
"""The run journal's report id for a calibration."""


def calibration_journal(store: KnowledgeStore) -> Path:
    """Where a calibration journals its calls (beside the evidence; git never sees it)."""
    return store.home.evidence_dir() / f"{CALIBRATION}{JOURNAL_SUFFIX}"


def _calibrate(
    spec: SweepSpec,
    store: KnowledgeStore,
    engine: Engine,
    *,
    at: int,
    commit: bool,
    allow_partial: bool,
) -> list[Calibration]:
    """The calibration itself (inside a journal when it commits)."""
    assert spec.canary is not None and spec.canary.sensitive is not None
    section = spec.canary.sensitive
    settings = section.settings()
    probes = probes_for(spec)
    assert probes is not None
    snapshot = store.read()
    # a baselines file that cannot be read is refused before anything is paid for,
    # not after every call when the commit reads it
    BaselinesFile.read(store.home.canary_baselines).parsed  # noqa: B018 - read to check
    members = _members(spec, snapshot, at)
    tried = candidates(spec)
    screen_probes = SensitiveProbes(probes.path, {m.key: tried for m in members})
    canary_usd = spec.budgets.canary_usd
    screen = sample_runs(members, screen_probes, settings, canary_usd, f"calibrate-{at}")
    _screen_plan(spec, members, screen).refuse_overspend(
        allow_partial=allow_partial or spec.sweep.allow_partial
    )
    envelope = SpendEnvelope.from_usd(spec.budgets.max_total_usd)
    try:
        screened = engine.run(screen, envelope)
        chosen, failures = _choose(members, tried, screened, settings.samples, section.keep)
        kept_probes = SensitiveProbes(
            probes.path, {key: tuple(p for p, _ in found) for key, found in chosen.items()}
        )
        baseline_runs = sample_runs(
            members,
            kept_probes,
            settings,
            canary_usd,
            f"calibrate-baseline-{at}",
            samples=BASELINE_FACTOR * settings.samples,
        )
        readings = reading_runs(
            members, kept_probes, settings, canary_usd, readings=CALIBRATION_READINGS
        )
        settled = engine.run(baseline_runs + readings, envelope)
    finally:
        engine.finish()
    per_probe = BASELINE_FACTOR * settings.samples
    sampled = [r for r in settled if READING_MARK not in r.label]
    read = [r for r in settled if READING_MARK in r.label]
    results = _results(members, tried, chosen, failures, sampled, per_probe)
    results = _with_readings(results, read)
    if commit:
        _write(results, probes, store, spec)
    return results


def _screen_plan(
    spec: SweepSpec, members: Sequence[ModelSpec], screen: Sequence[PlannedRun]
) -> JobPlan:
    """The calibration's job: the screen, and the most its baselines can ask afterwards."""
    assert spec.canary is not None and spec.canary.sensitive is not None
    section = spec.canary.sensitive
    samples = section.settings().samples
    reading = sum(CALIBRATION_READINGS for m in members if takes_logprobs(m) and section.logprobs)
    baseline_size = len(members) * section.keep * BASELINE_FACTOR * samples
    baseline_size += section.keep * reading
    baseline = Phase(
        "baseline",
        later=baseline_size,
        later_ceiling_usd=spec.budgets.canary_usd,
        later_what="baseline samples of the kept probes",
    )
    return job_plan([Phase("canary", tuple(screen)), baseline], spec.budgets.max_total_usd)


def _choose(
    members: Sequence[ModelSpec],
    tried: Sequence[str],
    screened: Sequence[RunResult],
    samples: int,
    keep: int,
) -> tuple[dict[str, list[tuple[str, float]]], dict[str, str]]:
    """Per model: the ``keep`` most entropic candidates, and its screen's first failure.

    A candidate needs two different first words at least; ties keep the list's order.
    Where the provider gives logprobs, the longest candidate that settled always takes
    the last place (when ``keep`` ≥ 2 and it is not among them already), whatever its
    entropy: a provider that cuts the context cuts that probe first, and its logprob
    readings show it.
    """
    chosen: dict[str, list[tuple[str, float]]] = {}
    failures: dict[str, str] = {}
    per_member = len(tried) * samples
    for m_index, member in enumerate(members):
        mine = screened[m_index * per_member : (m_index + 1) * per_member]
        answered: list[tuple[str, float, int]] = []
        secrets = member_secrets(member)
        for p_index, prompt in enumerate(tried):
            counts, failed = _answers(mine[p_index * samples : (p_index + 1) * samples], secrets)
            if failed is not None:
                failures.setdefault(member.key, failed)
            else:
                answered.append((prompt, entropy_bits(counts), len(counts)))
        scored = [(prompt, bits) for prompt, bits, distinct in answered if distinct >= 2]
        scored.sort(key=lambda item: (-item[1], tried.index(item[0])))
        kept = scored[:keep]
        if keep >= 2 and answered and takes_logprobs(member):
            prompt, bits, _ = max(answered, key=lambda item: (len(item[0]), -tried.index(item[0])))
            if prompt not in {p for p, _ in kept}:
                kept = [*kept[: keep - 1], (prompt, bits)]
        chosen[member.key] = kept
    return chosen, failures


def _members(spec: SweepSpec, snapshot: Snapshot, at: int) -> list[ModelSpec]:
    return [member.spec for member in build_pool(spec.models, snapshot, at) if member.measured]


def _results(
    members: Sequence[ModelSpec],
    tried: Sequence[str],
    chosen: dict[str, list[tuple[str, float]]],
    failures: dict[str, str],
    settled: Sequence[RunResult],
    per_probe: int,
) -> list[Calibration]:
    results = []
    start = 0
    for member in members:
        kept = []
        failed = None
        secrets = member_secrets(member)
        for prompt, entropy in chosen.get(member.key, []):
            counts, failed_here = _answers(settled[start : start + per_probe], secrets)
            start += per_probe
            if failed_here is not None:
                failed = f"a baseline sample of {prompt!r} settled {failed_here}"
                continue
            kept.append(KeptProbe(prompt, entropy, counts))
        if not kept and failed is None and member.key in failures:
            failed = f"candidates settled {failures[member.key]}"
        results.append(Calibration(member, len(tried), tuple(kept), failed))
    return results


def _with_readings(results: Sequence[Calibration], read: Sequence[RunResult]) -> list[Calibration]:
    """Each kept probe with its baseline readings (``read`` in :func:`reading_runs` order).

    A reading that failed or came back without logprobs leaves that probe without
    readings (its logprobs are not tested); the answer baseline still stands.
    """
    by_label = {r.label: r for r in read}
    out = []
    for result in results:
        kept = []
        secrets = member_secrets(result.member)
        for probe in result.kept:
            prefix = f"{LABEL_MARK}{result.member.key}/{probe_id(probe.prompt)}{READING_MARK}"
            mine = [by_label.get(f"{prefix}{k + 1}") for k in range(CALIBRATION_READINGS)]
            found = [r for r in mine if r is not None]
            tokens, unreadable = readings_of(found, secrets)
            if len(found) == len(mine) and unreadable is None:
                probe = replace(probe, readings=kept_readings(tokens))
            kept.append(probe)
        out.append(replace(result, kept=tuple(kept)))
    return out


def _write(
    results: Sequence[Calibration], probes: SensitiveProbes, store: KnowledgeStore, spec: SweepSpec
) -> None:
    """The probes file, then the baselines in one CAS commit."""
    updated = probes
    for result in results:
        if result.failed is None:
            updated = updated.with_model(result.member.key, [k.prompt for k in result.kept])
    try:
        updated.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(updated.path, updated.render())
    except OSError as exc:
        raise ConfigError(str(updated.path), f"cannot write: {exc.strerror or exc}") from None
    path = store.home.canary_baselines

    def build(snapshot: Snapshot) -> Change:
        del snapshot
        found = BaselinesFile.read(path)
        before = found.parsed
        after = before
        for result in results:
            if result.failed is not None:
                continue
            known = before.subjects.get(result.member.key) or SubjectBaselines()
            counts = {probe_id(k.prompt): dict(k.baseline) for k in result.kept}
            readings = {probe_id(k.prompt): k.readings for k in result.kept if k.readings}
            after = after.with_subject_only(
                result.member.key, known.with_sensitive(counts, readings)
            )
        rendered = after.render()
        files = {path.name: rendered} if rendered != found.data else {}
        return Change((), files, "sensitive canary baselines" if files else None)

    store.commit_with_rebase(
        build, CommitContext("canary", spec.sweep.committer, label="calibrate")
    )
