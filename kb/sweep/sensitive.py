"""The canary's sensitive tier: border probes whose answer distribution is watched (SPEC 13.4).

The exact tier (:mod:`kb.sweep.canary`) hashes temperature-0 answers to
probes whose right answers never change; a quantized, re-prompted or
re-templated model still spells "necessary". This tier asks **border
probes** — prompts where the model's first answer word is near-tied, chosen
per model by ``kb canary --calibrate`` — ``samples`` times (16) at
temperature 1, reduces each reply to its first word (lowercased, NFC,
JavaScript whitespace; ``(empty)`` for none), and tests tonight's counts
against the model's baseline counts with an exact permutation test
(:mod:`kb.distribution_shift`). Where the provider gives logprobs (OpenAI's
API and compatible servers, kb's bundled ``local:`` model), each probe is
also **read** ``readings`` times (4) at temperature 0 for one token with its
top-``logprobs`` (5) alternatives, and tonight's readings are tested against
the 16 baseline readings (total-variation distance, exact permutation test;
:func:`kb.distribution_shift.logprob_shift`). Every answer test and logprob
test of a model is one Bonferroni family, which keeps the false alarms per
model-night at most ``alpha`` (0.01).

An outage is never a shift: a failed sample or reading, a reading without
logprobs, every sample one word, or exact probes that look like an error page
make the night ``incomplete`` — unless every probe's readings came back whole
and moved (:func:`outage_judged`): an error page has no logprobs, a model
answering every prompt alike under a broken chat template does.

What an alarm does (``distribution shift``): the model's cells are
suspicious tonight — the nightly rule escalates them to their pool, as a
suspicious detector does, without touching any detector's state — and the
report says which probe and its p-value. It never flips a claim: only the
exact fingerprint does. A shift is evidence that the answer distribution
moved, not that quality did; tonight's full measurement of the cells says
whether it did.

Where things live: the probes (prompts per model) in a JSON file named by
the canary's ``[sensitive] probes`` — keep it outside the repository to keep
probes private —, their baselines (answer counts per probe id, a hash of the
prompt) in the canary baselines file beside the store, committed and merged
with the exact tier's. An exact drift drops the model's sensitive baselines
(they describe the old model): the tier says "uncalibrated since the exact
fingerprint drifted" until ``kb canary --calibrate`` runs again.

Each sample carries its own ``seed`` where the provider takes one, derived
from the night, the model, the probe and the sample's number: a provider
that honours seeds gives K different draws, and the same night replays.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from kb.distribution_shift import bonferroni_alarm, logprob_shift, shift_p_value
from kb.engine.known_params import PROVIDER_PARAMS
from kb.engine.requests import (
    ModelSpec,
    build_request,
    credentials_of,
    cut_secrets,
    secrets_to_cut,
)
from kb.engine.runs import PlannedRun, RunResult
from kb.errors import ConfigError
from kb.logprobs import TopLogprobs, cut_tokens
from kb.sidefile import SideFormat
from kb.store.canonical import js_stringify, normalize_output, sha256_hex
from kb.store.records import SensitiveRecord, ShiftProbeRecord
from kb.sweep.spec import SensitiveSettings, SweepSpec

SensitiveStatus = Literal["steady", "shift", "uncalibrated", "incomplete"]
PROBES = SideFormat("sensitive probes", key="format")
LABEL_MARK = "canary~"
"""Sensitive-tier run labels start ``canary~`` (exact probes: ``canary:``)."""
READING_MARK = "@lp#"
"""A logprob reading's label: ``canary~MODEL/PROBEID@lp#K`` (a sample's: ``…/PROBEID#K``)."""
CALIBRATION_READINGS = 16
"""Logprob readings per kept probe in its baseline (4 a night: 1 / C(20, 4) = 1 / 4,845 is
the smallest p-value a change can reach, under 0.01 / 16 tests)."""
_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
_SHORT = 24


def short_answer(text: str, secrets: Sequence[str] = ()) -> str:
    """A reply as the tier counts it: its first word, lowercased (``(empty)``: no word).

    ``secrets`` (:func:`kb.engine.requests.secrets_to_cut`) are cut from the whole
    reply first: counts are committed, and a provider echoing a key must not put
    its first 24 characters there.
    """
    found = _WORD.search(normalize_output(cut_secrets(text, secrets)).lower())
    return found.group(0)[:_SHORT] if found else "(empty)"


def probe_id(prompt: str) -> str:
    """A probe's id in the baselines file: 16 hex of the sha256 of its prompt (never the text)."""
    return sha256_hex(js_stringify([prompt]))[:16]


def sample_seed(night: str, member: str, prompt: str, k: int) -> int:
    """Sample ``k``'s seed: a function of the night, the model and the probe (31 bits)."""
    digest = hashlib.sha256(f"{night}\0{member}\0{prompt}\0{k}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def takes_seed(spec: ModelSpec) -> bool:
    """Whether the provider accepts a ``seed`` param (the bundled model does)."""
    return spec.provider == "local" or "seed" in PROVIDER_PARAMS.get(spec.provider, frozenset())


def takes_logprobs(spec: ModelSpec) -> bool:
    """Whether the provider takes ``logprobs`` and ``top_logprobs``.

    OpenAI's and compatible servers do (llama.cpp's among them), and so does kb's
    bundled ``local:`` model (llama.cpp in-process).
    """
    if spec.provider == "local":
        return True
    known = PROVIDER_PARAMS.get(spec.provider, frozenset())
    return "logprobs" in known and "top_logprobs" in known


@dataclass(frozen=True)
class SensitiveProbes:
    """The probes file: each model's border probes (written by ``kb canary --calibrate``)."""

    path: Path
    models: Mapping[str, tuple[str, ...]]

    @classmethod
    def read(cls, path: Path) -> SensitiveProbes:
        """The file at ``path``; none yet is no probes (the tier is uncalibrated)."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls(path, {})
        except OSError as exc:
            raise ConfigError(str(path), f"cannot read the probes: {exc.strerror or exc}") from None
        data = PROBES.load(raw, str(path))
        models = data.get("models")
        if not isinstance(models, dict) or not all(
            isinstance(prompts, list) and all(isinstance(p, str) and p.strip() for p in prompts)
            for prompts in models.values()
        ):
            raise ConfigError(
                str(path), "not a probes file: models must map each model to a list of prompts"
            )
        return cls(path, {str(key): tuple(prompts) for key, prompts in models.items()})

    def with_model(self, key: str, prompts: Sequence[str]) -> SensitiveProbes:
        return SensitiveProbes(self.path, {**self.models, key: tuple(prompts)})

    def render(self) -> bytes:
        document: dict[str, Any] = {
            **PROBES.stamp(),
            "models": {key: list(self.models[key]) for key in sorted(self.models)},
        }
        return (js_stringify(document, indent=2) + "\n").encode("utf-8")


def probes_for(spec: SweepSpec) -> SensitiveProbes | None:
    """The canary's border probes file as it is now (``None``: no ``[sensitive]``)."""
    if spec.canary is None or spec.canary.sensitive is None:
        return None
    return SensitiveProbes.read(Path(spec.canary.sensitive.probes))


def probe_run(
    member: ModelSpec,
    prompt: str,
    mark: str,
    overrides: Mapping[str, Any],
    canary_usd: float | None,
) -> PlannedRun:
    """One call of the tier: ``canary~MODEL/PROBEID`` + ``mark`` (``#K`` or ``@lp#K``)."""
    return PlannedRun(
        label=f"{LABEL_MARK}{member.key}/{probe_id(prompt)}{mark}",
        kind="canary",
        spec=member,
        request=build_request(member, prompt, overrides=overrides),
        ceiling_usd=canary_usd,
    )


def sample_runs(
    members: Sequence[ModelSpec],
    probes: SensitiveProbes,
    settings: SensitiveSettings,
    canary_usd: float | None,
    night: str,
    samples: int | None = None,
) -> tuple[PlannedRun, ...]:
    """Every sample of every member's probes: temperature 1, short, each with its seed."""
    count = settings.samples if samples is None else samples
    runs = []
    for member in members:
        for prompt in probes.models.get(member.key, ()):
            for k in range(count):
                overrides: dict[str, Any] = {"temperature": 1.0, "max_tokens": settings.max_tokens}
                if takes_seed(member):
                    overrides["seed"] = sample_seed(night, member.key, prompt, k)
                runs.append(probe_run(member, prompt, f"#{k + 1}", overrides, canary_usd))
    return tuple(runs)


def reading_runs(
    members: Sequence[ModelSpec],
    probes: SensitiveProbes,
    settings: SensitiveSettings,
    canary_usd: float | None,
    readings: int | None = None,
) -> tuple[PlannedRun, ...]:
    """Every logprob reading of every member that takes logprobs: temperature 0, one token."""
    count = settings.readings if readings is None else readings
    if settings.logprobs <= 0 or count <= 0:
        return ()
    overrides: dict[str, Any] = {
        "temperature": 0,
        "max_tokens": 1,
        "logprobs": True,
        "top_logprobs": settings.logprobs,
    }
    return tuple(
        probe_run(member, prompt, f"{READING_MARK}{k + 1}", overrides, canary_usd)
        for member in members
        if takes_logprobs(member)
        for prompt in probes.models.get(member.key, ())
        for k in range(count)
    )


def tier_runs(
    members: Sequence[ModelSpec],
    probes: SensitiveProbes,
    settings: SensitiveSettings,
    canary_usd: float | None,
    night: str,
) -> tuple[PlannedRun, ...]:
    """A night's sensitive tier: each member's samples, then its logprob readings."""
    return tuple(
        run
        for member in members
        for run in (
            *sample_runs([member], probes, settings, canary_usd, night),
            *reading_runs([member], probes, settings, canary_usd),
        )
    )


def runs_per_member(member: ModelSpec, prompts: int, settings: SensitiveSettings) -> int:
    """How many runs :func:`tier_runs` plans for ``member`` with ``prompts`` probes."""
    reads = settings.readings if settings.logprobs > 0 and takes_logprobs(member) else 0
    return prompts * (settings.samples + max(reads, 0))


def first_token(run: RunResult, secrets: Sequence[str] = ()) -> Mapping[str, float] | None:
    """A reading's first-token top-k (``None``: the reply carried no logprobs).

    ``secrets`` are cut from every token first: readings are committed as baselines.
    """
    if run.status != "ok" or not run.logprobs or not run.logprobs[0]:
        return None
    (token,) = cut_tokens(run.logprobs[:1], lambda text: cut_secrets(text, secrets))
    return token


@dataclass(frozen=True)
class ProbeShift:
    """One probe tonight: its answers' counts against its baseline's."""

    prompt: str
    counts: Mapping[str, int]
    baseline: Mapping[str, int] | None
    p_value: float | None
    """``None``: no baseline, or a sample did not settle."""
    failed: str | None = None
    """The first status other than ``ok`` among its samples."""
    readings: tuple[Mapping[str, float], ...] = ()
    """Tonight's logprob readings (first-token top-k), when the tier takes them."""
    logprob_p: float | None = None
    """The readings' p-value against the baseline readings (``None``: not tested)."""
    logprob_distance: float | None = None
    """How far tonight's mean top-k moved (total variation, 0-1)."""

    @property
    def id(self) -> str:
        return probe_id(self.prompt)


Test = tuple[int, Literal["answers", "logprobs"], float]
"""One test of the night's Bonferroni family: probe index, what was tested, its p-value."""


@dataclass(frozen=True)
class SensitiveResult:
    """The sensitive tier of one model tonight."""

    status: SensitiveStatus
    probes: tuple[ProbeShift, ...]
    alpha: float
    runs: tuple[RunResult, ...] = ()
    why: str | None = None
    """Why the tier is uncalibrated, when kb knows better than "not yet"."""

    @property
    def tests(self) -> tuple[Test, ...]:
        """The night's family: each probe's answer test and logprob test that ran."""
        found: list[Test] = []
        for index, p in enumerate(self.probes):
            if p.p_value is not None:
                found.append((index, "answers", p.p_value))
            if p.logprob_p is not None:
                found.append((index, "logprobs", p.logprob_p))
        return tuple(found)

    @property
    def alarm_test(self) -> Test | None:
        """The test that alarmed (Bonferroni over the family), if any."""
        tests = self.tests
        found = bonferroni_alarm([t[2] for t in tests], self.alpha)
        return tests[found] if found is not None else None

    @property
    def alarm(self) -> ProbeShift | None:
        """The probe that alarmed (a shift), if any."""
        test = self.alarm_test
        return self.probes[test[0]] if test is not None else None

    @property
    def min_p(self) -> float | None:
        values = [t[2] for t in self.tests]
        return min(values) if values else None

    def describe(self) -> str:
        """One line: what the tier saw (for the sweep output, summary and pages)."""
        tests = self.tests
        tested = len(tests)
        family = f"{tested} test{'s' if tested != 1 else ''}"
        test = self.alarm_test
        if self.status == "shift" and test is not None:
            index, what, p_value = test
            probe = self.probes[index]
            moved = (
                f"its top-{len(probe.readings[0]) if probe.readings else 0} logprobs moved "
                f"{probe.logprob_distance:.3f}, "
                if what == "logprobs" and probe.logprob_distance is not None
                else "its answers moved, "
            )
            # the probe by number and id, never its prompt: probes may be private, and this
            # line goes into the committed report and the CI summary
            return (
                f"distribution shift: probe {index + 1} of {len(self.probes)} (id {probe.id}), "
                f"{moved}p = {p_value:.2g} (alarm below {self.alpha:g} / {family}); "
                "a sweep escalates its cells that night"
            )
        if self.status == "uncalibrated":
            if self.why is not None:
                return f"uncalibrated: {self.why}"
            if self.probes:
                return (
                    f"no baselines for its {len(self.probes)} border probes (dropped when the "
                    "exact fingerprint drifted, or never made): kb canary --calibrate SPEC"
                )
            return "no border probes or baselines yet (kb canary --calibrate SPEC)"
        if self.status == "incomplete":
            failed = next((p.failed for p in self.probes if p.failed), "no answer")
            return f"incomplete ({failed}): nothing judged"
        shown = f", smallest p = {self.min_p:.2g}" if self.min_p is not None else ""
        return f"steady over {family} of {len(self.probes)} probes{shown}"


def readings_of(
    runs: Sequence[RunResult], secrets: Sequence[str]
) -> tuple[tuple[Mapping[str, float], ...], str | None]:
    """The first-token top-k of each reading, and why a reading cannot be used (if one cannot)."""
    found = []
    for run in runs:
        if run.status != "ok":
            return (), f"a logprob reading settled {run.status}"
        token = first_token(run, secrets)
        if token is None:
            return (), "a logprob reading came back without logprobs"
        found.append(token)
    return tuple(found), None


def judge_member(
    prompts: Sequence[str],
    runs: Sequence[RunResult],
    baselines: Mapping[str, Mapping[str, int]],
    settings: SensitiveSettings,
    secrets: Sequence[str] = (),
    reading_baselines: Mapping[str, Sequence[Mapping[str, float]]] | None = None,
) -> SensitiveResult:
    """Test each probe against its baselines; ``runs`` as :func:`tier_runs` makes them.

    The samples' first words are counted against ``baselines`` (answer counts);
    the logprob readings, if any ran, against ``reading_baselines`` (a probe
    without baseline readings is not tested on logprobs). ``secrets``: cut from
    each reply before it is counted (see :func:`short_answer`).
    """
    if not prompts:
        return SensitiveResult("uncalibrated", (), settings.alpha)
    samples = [r for r in runs if READING_MARK not in r.label]
    readings = [r for r in runs if READING_MARK in r.label]
    per = len(samples) // len(prompts)
    per_reading = len(readings) // len(prompts)
    found = []
    for index, prompt in enumerate(prompts):
        mine = samples[index * per : (index + 1) * per]
        failed: str | None = next((r.status for r in mine if r.status != "ok"), None)
        counts = Counter(short_answer(r.output or "", secrets) for r in mine if r.status == "ok")
        baseline = baselines.get(probe_id(prompt))
        p_value = shift_p_value(baseline, counts) if baseline and failed is None else None
        tonight, unreadable = readings_of(
            readings[index * per_reading : (index + 1) * per_reading], secrets
        )
        known = (reading_baselines or {}).get(probe_id(prompt))
        logprob_p = distance = None
        if unreadable is not None and known:
            failed = failed or unreadable
        elif known and tonight and failed is None:
            logprob_p, distance = logprob_shift(known, tonight)
        found.append(
            ProbeShift(
                prompt, dict(counts), baseline, p_value, failed, tonight, logprob_p, distance
            )
        )
    words = {answer for p in found for answer in p.counts}
    if len(found) >= 2 and len(words) == 1 and not any(p.failed for p in found):
        # every sample of every probe gave one word: an error page or an empty provider
        return outage_judged(
            SensitiveResult("steady", tuple(found), settings.alpha, tuple(runs)),
            f"every sample answered {next(iter(words))!r}",
        )
    if any(p.failed for p in found):
        status: SensitiveStatus = "incomplete"
    elif all(p.baseline is None for p in found):
        status = "uncalibrated"
    else:
        status = "steady"
    result = SensitiveResult(status, tuple(found), settings.alpha, tuple(runs))
    if status == "steady" and result.alarm is not None:
        result = SensitiveResult("shift", tuple(found), settings.alpha, tuple(runs))
    return result


def outage_judged(result: SensitiveResult, outage: str) -> SensitiveResult:
    """The tier on a night whose answers look like an outage (``outage`` says why).

    Answers that look like an error page are no evidence of a change: the answer
    tests are dropped. Logprob readings are different evidence — an error page
    comes without them, so readings that came back whole for every probe are the
    model's own: if they alarm, the night is a ``shift`` (a broken chat template
    makes a model answer every prompt with the same text, and moves its logprobs);
    otherwise ``incomplete``, nothing judged.
    """
    probes = tuple(replace(p, p_value=None) for p in result.probes)
    read = bool(probes) and all(p.logprob_p is not None and p.failed is None for p in probes)
    if read:
        judged = SensitiveResult("steady", probes, result.alpha, result.runs)
        if judged.alarm_test is not None:
            return replace(judged, status="shift")
    gone = tuple(replace(p, logprob_p=None, failed=p.failed or outage) for p in probes)
    return SensitiveResult("incomplete", gone, result.alpha, result.runs)


def entropy_bits(counts: Mapping[str, int]) -> float:
    """Shannon entropy of the answers (bits): how near-tied a probe's first word is."""
    import math

    total = sum(counts.values())
    if total == 0:
        return 0.0
    return -sum((c / total) * math.log2(c / total) for c in counts.values() if c)


def kept_readings(readings: Sequence[Mapping[str, float]]) -> TopLogprobs:
    """Readings as the baselines file keeps them: logprobs to 4 decimals (small diffs)."""
    return tuple({token: round(value, 4) for token, value in r.items()} for r in readings)


def sensitive_record(result: SensitiveResult) -> SensitiveRecord:
    """The report's ``canary[].sensitive``."""
    test = result.alarm_test if result.status == "shift" else None
    return SensitiveRecord(
        status=result.status,
        alpha=result.alpha,
        probe=result.probes[test[0]].id if test is not None else None,
        p_value=test[2] if test is not None else None,
        line=result.describe(),
        probes=tuple(
            ShiftProbeRecord(
                probe=p.id,
                counts=dict(p.counts),
                p_value=p.p_value,
                failed=p.failed,
                logprob_p_value=p.logprob_p,
                logprob_distance=p.logprob_distance,
            )
            for p in result.probes
        ),
    )


def member_secrets(member: ModelSpec) -> tuple[str, ...]:
    """What to cut from the member's replies: its credentials and the environment's."""
    return secrets_to_cut(credentials_of(member.params))
