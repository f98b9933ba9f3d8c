r"""Canary drift: fingerprints identical to rulvar's, stale flips, and noise that is not drift.

A canary is a short list of probes with deterministic answers (colours, a
sort, a date, a spelling). Each pool member answers them in declaration
order at temperature 0; each answer is normalized exactly as rulvar does —
Unicode NFC, trimmed, every whitespace run collapsed to one space, where
whitespace is precisely JavaScript's ``\s`` set (U+FEFF is whitespace;
U+001C–U+001F and U+0085 are not, unlike Python's) — and the fingerprint is
the sha256 hex of the UTF-8 of ``JSON.stringify([probeCount, outputs])``,
a probe that did not settle ``ok`` contributing ``"!<status>"``.

Only an all-ok fingerprint may flip claims. A flip marks stale (reason
``canary-drift``) every active eval-measured claim of the member whose
recorded ``modelEpoch.canaryFingerprint`` differs, in one CAS commit;
claims without a fingerprint are untouched and a second run is a no-op.
Beyond rulvar: claims are matched on the whole subject (model *and*
effort), so one effort's answers never flip another effort's claims; and
``repeats`` asks each probe K times and reports the member ``unstable``,
flipping nothing, when a probe's normalized answers disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from kb.engine.budget import SpendEnvelope
from kb.engine.phases import JobPlan, Phase, job_plan
from kb.engine.requests import ModelSpec, build_request, cut_secrets
from kb.engine.runs import PlannedRun, RunResult
from kb.engine.scheduler import Engine
from kb.errors import ConfigError
from kb.schema import DEFAULT_ATTEMPTS
from kb.store.baselines import BaselinesFile, CanaryBaselines, judge, probe_set_id
from kb.store.canonical import js_stringify, normalize_output, sha256_hex
from kb.store.filestore import Change, CommitContext, KnowledgeStore
from kb.store.ops import MarkStale, Op
from kb.store.records import CanaryRecord, ProbeRecord
from kb.store.snapshot import ClaimEntry, Snapshot
from kb.store.wire import cut_texts
from kb.sweep.health import ERROR_PAGE, reply_kind
from kb.sweep.pool import build_pool
from kb.sweep.sensitive import (
    SensitiveProbes,
    SensitiveResult,
    judge_member,
    member_secrets,
    outage_judged,
    probes_for,
    runs_per_member,
    sensitive_record,
    tier_runs,
)
from kb.sweep.spec import SensitiveSettings, SweepSpec, judge_models
from kb.textwidth import shorten

CanaryStatus = Literal["no-drift", "drift", "rebaselined", "incomplete", "unstable"]


def fingerprint(probe_count: int, outputs: Sequence[str]) -> str:
    """sha256 hex of the UTF-8 of JavaScript ``JSON.stringify([probeCount, outputs])``."""
    return sha256_hex(js_stringify([probe_count, list(outputs)]))


def probe_output(run: RunResult) -> str:
    """A probe's contribution: the normalized answer, or ``!<status>``."""
    return normalize_output(run.output or "") if run.status == "ok" else f"!{run.status}"


@dataclass(frozen=True)
class ProbeResult:
    """One probe on one member (all its repeats)."""

    prompt: str
    status: str
    """``ok`` when every repeat settled ok, else the first other status."""
    outputs: tuple[str, ...]
    """The normalized answer of each repeat."""
    runs: tuple[RunResult, ...] = ()
    """The settled runs behind it (for evidence)."""

    @property
    def stable(self) -> bool:
        """Every repeat gave the same normalized answer."""
        return len(set(self.outputs)) <= 1


@dataclass(frozen=True)
class CanaryResult:
    """The canary of one member, and what it did to the store."""

    member: ModelSpec
    probes: tuple[ProbeResult, ...]
    fingerprint: str
    all_ok: bool
    status: CanaryStatus = "no-drift"
    flipped: tuple[str, ...] = ()
    version: int | None = None
    sensitive: SensitiveResult | None = None
    """The sensitive tier tonight (``None``: the canary has no ``[sensitive]``)."""
    not_applied: str | None = None
    """Why tonight's judgement was not applied (an older night: the store holds a newer)."""
    secrets: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """The job's secrets (:attr:`kb.engine.scheduler.Engine.secrets`): a reason quoting a
    probe's answer is cut of them."""

    @property
    def shifted(self) -> bool:
        """The sensitive tier saw this model's answer distribution move tonight."""
        return self.sensitive is not None and self.sensitive.status == "shift"

    @property
    def stable(self) -> bool:
        """No probe disagreed with itself across repeats."""
        return all(probe.stable for probe in self.probes)

    @property
    def unhealthy(self) -> str | None:
        """Why the probes' answers are an outage's, not a model's (secrets cut; ``None``: real)."""
        why = self._unhealthy()
        return cut_secrets(why, self.secrets) if why is not None else None

    def _unhealthy(self) -> str | None:
        """Why the probes' answers are an outage's, not a model's (``None``: they look real).

        Every probe empty, or (with two probes or more) one answer to probes that
        ask different things: an error page or a provider answering without text.
        Replies are compared as the cells' health check compares them
        (:func:`kb.sweep.health.reply_kind`): a CDN's error page that differs per
        request only in its body (a request id) is one reply, told by its title.
        """
        answers = [output for probe in self.probes for output in probe.outputs]
        if answers and all(not output for output in answers):
            return "every probe answered empty: an outage, not drift"
        kinds = {reply_kind(output) for output in answers}
        if len(self.probes) >= 2 and len(kinds) == 1:
            (kind,) = kinds
            shown = shorten(cut_secrets(kind, self.secrets), 40)
            return f"every probe answered {shown!r}: an error page, not drift"
        # an outage that began mid-canary: one probe's answer is a page or nothing at all
        for number, probe in enumerate(self.probes, start=1):
            for output in probe.outputs:
                kind = reply_kind(output)
                if not output or not output.strip():
                    return f"probe {number} answered empty: an outage, not drift"
                if kind.startswith(ERROR_PAGE):
                    shown = shorten(cut_secrets(kind, self.secrets), 40)
                    return f"probe {number} answered {shown!r}: an error page, not drift"
        return None

    @property
    def may_flip(self) -> bool:
        """Only an all-ok, stable fingerprint of real answers is evidence of drift."""
        return self.all_ok and self.stable and self.unhealthy is None

    @property
    def reason(self) -> str | None:
        """Why the canary could not judge the model (for ``incomplete`` and ``unstable``)."""
        failed = [f"{i + 1}: {p.status}" for i, p in enumerate(self.probes) if p.status != "ok"]
        if failed:
            return f"probe {'; '.join(failed)}"
        if self.not_applied is not None:
            return self.not_applied
        if self.status == "unstable":
            shaky = [str(i + 1) for i, probe in enumerate(self.probes) if not probe.stable]
            return f"probe {', '.join(shaky)} disagreed across repeats"
        return self.unhealthy if self.status == "incomplete" else None

    def to_record(self) -> CanaryRecord:
        """The ``kb canary --json`` entry (also the sweep report's ``canary[]``)."""
        subject = self.member.subject
        record = CanaryRecord(
            model=subject.model,
            effort=subject.effort or None,
            fingerprint=self.fingerprint,
            all_ok=self.all_ok,
            probes=tuple(ProbeRecord(prompt=p.prompt, status=p.status) for p in self.probes),
            status=self.status,
            reason=self.reason,
            flipped=self.flipped,
            version=self.version,
            sensitive=sensitive_record(self.sensitive) if self.sensitive is not None else None,
        )
        return cut_texts(record, lambda text: cut_secrets(text, self.secrets))


@dataclass(frozen=True)
class CanaryOptions:
    """How a canary runs and commits, whether from ``kb canary`` or inside a sweep."""

    prompts: tuple[str, ...]
    repeats: int
    canary_usd: float | None
    committer: str
    label: str | None
    """Shown in the commit subject after ``kb: canary`` (a sweep's report id), if any."""
    commit: bool = True
    push: bool = False
    attempts: int = DEFAULT_ATTEMPTS

    @classmethod
    def from_spec(
        cls,
        spec: SweepSpec,
        *,
        label: str | None,
        commit: bool = True,
        push: bool = False,
        attempts: int = DEFAULT_ATTEMPTS,
        repeats: int | None = None,
    ) -> CanaryOptions:
        """The options a sweep spec's ``[canary]`` gives (``repeats`` overrides the spec's)."""
        if spec.canary is None:
            raise ConfigError(str(spec.path), 'no canary configured ([canary] or canary = "...")')
        return cls(
            prompts=tuple(spec.canary.prompts),
            repeats=repeats or spec.canary.repeats,
            canary_usd=spec.budgets.canary_usd,
            committer=spec.sweep.committer,
            label=label,
            commit=commit,
            push=push,
            attempts=attempts,
        )


def probe_phase(
    members: Sequence[ModelSpec],
    prompts: Sequence[str],
    repeats: int,
    canary_usd: float | None,
    sensitive: Sequence[PlannedRun] = (),
) -> Phase:
    """Every probe for every member, declaration order, each ``repeats`` times, temperature 0.

    Then the sensitive tier's samples and readings (:func:`kb.sweep.sensitive.tier_runs`).
    """
    exact = tuple(
        PlannedRun(
            label=f"canary:{member.key}/{p_index}" + (f"#{k + 1}" if repeats > 1 else ""),
            kind="canary",
            spec=member,
            request=build_request(member, prompt, overrides={"temperature": 0}),
            ceiling_usd=canary_usd,
        )
        for member in members
        for p_index, prompt in enumerate(prompts)
        for k in range(repeats)
    )
    return Phase("canary", exact + tuple(sensitive))


@dataclass(frozen=True)
class SensitiveTier:
    """What the sensitive tier needs to judge a night: the probes, settings and baselines."""

    probes: SensitiveProbes
    settings: SensitiveSettings
    baselines: CanaryBaselines


def measure_canaries(
    engine: Engine,
    members: Sequence[ModelSpec],
    prompts: Sequence[str],
    envelope: SpendEnvelope,
    *,
    canary_usd: float | None = None,
    repeats: int = 1,
    probes: Phase | None = None,
    tier: SensitiveTier | None = None,
) -> list[CanaryResult]:
    """Run the probes of ``members`` and compute each fingerprint (nothing is written).

    ``probes`` is the job's planned phase (:func:`probe_phase` of the same
    members, prompts and repeats, and the sensitive samples when ``tier``);
    without it the phase is built here (exact probes only). With ``tier``
    each result carries the sensitive tier's judgement.
    """
    if probes is None:
        probes = probe_phase(members, prompts, repeats, canary_usd)
    results = engine.run(probes.runs, envelope)
    canaries = []
    per_member = len(prompts) * repeats
    sampled = results[len(members) * per_member :]
    for m_index, member in enumerate(members):
        runs = results[m_index * per_member : (m_index + 1) * per_member]
        found = []
        for p_index, prompt in enumerate(prompts):
            repeat_runs = runs[p_index * repeats : (p_index + 1) * repeats]
            status = next((r.status for r in repeat_runs if r.status != "ok"), "ok")
            answers = tuple(probe_output(r) for r in repeat_runs)
            found.append(ProbeResult(prompt, status, answers, tuple(repeat_runs)))
        outputs = [p.outputs[0] if p.status == "ok" else f"!{p.status}" for p in found]
        all_ok = all(p.status == "ok" for p in found)
        canaries.append(
            CanaryResult(
                member,
                tuple(found),
                fingerprint(len(prompts), outputs),
                all_ok,
                secrets=engine.secrets,
            )
        )
    if tier is not None:
        canaries = _judged(canaries, sampled, tier)
    return canaries


def _judged(
    canaries: Sequence[CanaryResult], sampled: Sequence[RunResult], tier: SensitiveTier
) -> list[CanaryResult]:
    """Each result with its sensitive tier (``sampled`` in :func:`tier_runs` order)."""
    out = []
    start = 0
    for result in canaries:
        prompts = tier.probes.models.get(result.member.key, ())
        size = runs_per_member(result.member, len(prompts), tier.settings)
        mine = sampled[start : start + size]
        start += size
        known = tier.baselines.subjects.get(result.member.key)
        if not prompts and known is not None and known.sensitive:
            # a CI runner without the private probes file would go blind without a word
            missing = "is missing" if not tier.probes.path.exists() else "has no probes for it"
            why = (
                f"the probes file {tier.probes.path} {missing}, but the baselines "
                f"hold {len(known.sensitive)}: restore the file (or calibrate again)"
            )
            blind = SensitiveResult("uncalibrated", (), tier.settings.alpha, why=why)
            out.append(replace(result, sensitive=blind))
            continue
        judged = judge_member(
            prompts,
            mine,
            known.sensitive if known is not None else {},
            tier.settings,
            member_secrets(result.member),
            known.logprobs if known is not None else {},
        )
        if result.unhealthy is not None and judged.status != "uncalibrated":
            # the exact probes saw an outage (empty answers, one error page): so did these
            # answers; only whole logprob readings can still say the model moved
            judged = outage_judged(judged, result.unhealthy)
        out.append(replace(result, sensitive=judged))
    return out


def _fingerprinted(snapshot: Snapshot, member: ModelSpec) -> list[ClaimEntry]:
    """Active eval-measured claims of the member that recorded a canary fingerprint."""
    return [
        claim
        for claim in snapshot.entries
        if claim.status == "active"
        and claim.claim_class == "eval-measured"
        and claim.model == member.ref
        and claim.effort == member.effort
        and claim.canary_fingerprint is not None
    ]


@dataclass(frozen=True)
class CanaryChange(Change):
    """The flips and baselines one canary commits, and what it found per member."""

    outcomes: Mapping[str, tuple[CanaryStatus, tuple[str, ...]]] = field(default_factory=dict)
    """Member key → (status, ids of the claims flipped stale)."""


def canary_change(
    canaries: Sequence[CanaryResult],
    snapshot: Snapshot,
    baselines_file: BaselinesFile,
    prompts: Sequence[str],
) -> CanaryChange:
    """What the canary commits against ``snapshot`` and the baselines file (a pure function).

    Only an all-ok, stable fingerprint is judged; a changed probe set is
    re-baselined and flips nothing (see :mod:`kb.store.baselines`).
    """
    existing = baselines_file.data
    before = baselines_file.parsed
    after = before
    probe_set = probe_set_id(prompts)
    ops: list[Op] = []
    outcomes: dict[str, tuple[CanaryStatus, tuple[str, ...]]] = {}
    for result in canaries:
        key = result.member.key
        if not result.all_ok or result.unhealthy:  # missing evidence, not a changed model
            outcomes[key] = ("incomplete", ())
            continue
        if not result.stable:
            outcomes[key] = ("unstable", ())
            continue
        claims = _fingerprinted(snapshot, result.member)
        verdict = judge(
            before.subjects.get(key),
            probe_set,
            result.fingerprint,
            [c.canary_fingerprint for c in claims if c.canary_fingerprint],
        )
        # A drift drops the sensitive baselines (judge does): they described the old
        # model, and one night's 16 samples and 4 readings would make a baseline that can
        # never alarm (4 + 4 readings: p >= 1/70). The tier is uncalibrated until
        # kb canary --calibrate runs again, and says so.
        updated = verdict.updated
        after = after.with_subject(key, prompts, updated)
        flipped: tuple[str, ...] = ()
        if verdict.status != "rebaselined":
            flipped = tuple(c.id for c in claims if c.canary_fingerprint not in verdict.current)
        ops += [MarkStale(claim_id) for claim_id in flipped]
        status: CanaryStatus = "drift" if flipped else verdict.status
        outcomes[key] = (status, flipped)
    rendered = after.render()
    changed = rendered != existing and after.subjects
    files = {baselines_file.path.name: rendered} if changed else {}
    note = "canary baselines" if files else None
    return CanaryChange(tuple(ops), files, note, outcomes=outcomes)


def classified(
    canaries: Sequence[CanaryResult],
    change: CanaryChange,
    version: int | None = None,
    held_back: Mapping[str, str] | None = None,
) -> list[CanaryResult]:
    """Each result with its status and the claims it flipped (in commit ``version``).

    ``held_back``: members whose canary was judged but not applied, each with why
    (an older night: the store holds a newer one).
    """
    out = []
    for result in canaries:
        status, flipped = change.outcomes.get(result.member.key, ("incomplete", ()))
        why = (held_back or {}).get(result.member.key)
        out.append(
            replace(
                result,
                status=status,
                flipped=flipped,
                version=version if flipped else None,
                not_applied=why,
            )
        )
    return out


def settle_canaries(
    canaries: Sequence[CanaryResult], store: KnowledgeStore, options: CanaryOptions
) -> list[CanaryResult]:
    """The one ending of every canary: commit flips and baselines in one CAS commit.

    Without ``options.commit`` nothing is written and each result says what
    it would do against the current store.
    """
    baselines = store.home.canary_baselines

    def build(snapshot: Snapshot) -> CanaryChange:
        return canary_change(canaries, snapshot, BaselinesFile.read(baselines), options.prompts)

    if not options.commit:
        return classified(canaries, build(store.read()))
    result = store.commit_with_rebase(
        build,
        CommitContext("canary", options.committer, label=options.label),
        attempts=options.attempts,
        push=options.push,
    )
    if result is None:
        return classified(canaries, build(store.read()))
    assert isinstance(result.change, CanaryChange)
    return classified(canaries, result.change, result.snapshot.version)


@dataclass(frozen=True)
class CanaryPlan:
    """``kb canary`` before its first call: who is probed, and the one phase of probes."""

    members: tuple[ModelSpec, ...]
    options: CanaryOptions
    job: JobPlan
    probes: SensitiveProbes | None = None
    """The border probes of the sensitive tier (``None``: the canary has none)."""


def plan_canary(
    spec: SweepSpec, snapshot: Snapshot, *, at: int, options: CanaryOptions
) -> CanaryPlan:
    """The sweep's measured pool (as of ``at``) and every probe it gets."""
    pool = build_pool(spec.models, snapshot, at)
    members = tuple(member.spec for member in pool if member.measured)
    probes = probes_for(spec)
    sampled: tuple[PlannedRun, ...] = ()
    if probes is not None and spec.canary is not None and spec.canary.sensitive is not None:
        settings = spec.canary.sensitive.settings()
        sampled = tier_runs(members, probes, settings, options.canary_usd, f"canary-{at}")
    phase = probe_phase(members, options.prompts, options.repeats, options.canary_usd, sampled)
    plan = CanaryPlan(members, options, job_plan([phase], spec.budgets.max_total_usd), probes)
    return plan


def run_canary(
    spec: SweepSpec,
    store: KnowledgeStore,
    engine: Engine,
    *,
    at: int,
    repeats: int | None = None,
    commit: bool = True,
    attempts: int = DEFAULT_ATTEMPTS,
    push: bool = False,
    allow_partial: bool = False,
) -> list[CanaryResult]:
    """``kb canary``: probe the sweep's measured pool (as of ``at``); flip drift in one commit.

    Refused before any call when the envelope cannot pay for every probe,
    unless ``allow_partial`` (or ``[sweep] allow_partial``).
    """
    options = CanaryOptions.from_spec(
        spec, label=None, commit=commit, push=push, attempts=attempts, repeats=repeats
    )
    engine.keep_secrets([*spec.models, *judge_models(spec.cases)])
    plan = plan_canary(spec, store.read(), at=at, options=options)
    plan.job.refuse_overspend(allow_partial=allow_partial or spec.sweep.allow_partial)
    envelope = SpendEnvelope.from_usd(spec.budgets.max_total_usd)
    tier = None
    if plan.probes is not None and spec.canary is not None and spec.canary.sensitive is not None:
        known = BaselinesFile.read(store.home.canary_baselines).parsed
        tier = SensitiveTier(plan.probes, spec.canary.sensitive.settings(), known)
    try:
        canaries = measure_canaries(
            engine,
            plan.members,
            options.prompts,
            envelope,
            repeats=options.repeats,
            probes=plan.job.phase("canary"),
            tier=tier,
        )
    finally:
        engine.finish()
    return settle_canaries(canaries, store, options)


def canary_line(result: CanaryResult) -> str:
    """One human line per model (the job's secrets cut: a reason may quote an answer)."""
    return cut_secrets(_canary_line(result), result.secrets)


def _canary_line(result: CanaryResult) -> str:
    head = f"{result.member.key}  {result.fingerprint[:12]}  "
    # the sensitive tier on every line: an exact tier that cannot judge (an outage-looking
    # night) is exactly when its logprob readings may still see the model move
    tier = f"; sensitive: {result.sensitive.describe()}" if result.sensitive is not None else ""
    if result.status == "drift" and result.sensitive is not None and result.sensitive.probes:
        # the drift drops the tier's baselines (they described the old model): say so tonight
        tier += "; its baselines are dropped with the drift: kb canary --calibrate SPEC"
    if result.status == "drift":
        count = len(result.flipped)
        where = f" (store v{result.version})" if result.version is not None else " (not committed)"
        flipped = f"DRIFT, {count} claim{'s' if count != 1 else ''} flipped stale{where}"
        return head + flipped + tier
    if result.status in ("unstable", "incomplete"):
        return head + f"{result.status} ({result.reason})" + tier
    if result.status == "rebaselined":
        return head + "rebaselined (a new probe set: its baseline recorded, nothing flipped)" + tier
    return head + "no drift" + tier
