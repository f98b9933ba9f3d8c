"""The canary's sensitive tier: border probes whose answer distribution is watched (SPEC 13.4).

The exact tier (:mod:`kb.sweep.canary`) hashes temperature-0 answers to
probes whose right answers never change; a quantized, re-prompted or
re-templated model still spells "necessary". This tier asks **border
probes** — prompts where the model's first answer word is near-tied, chosen
per model by ``kb canary --calibrate`` — ``samples`` times (16) at
temperature 1, reduces each reply to its first word (lowercased, NFC,
JavaScript whitespace; ``(empty)`` for none), and tests tonight's counts
against the model's baseline counts with an exact permutation test
(:mod:`kb.distribution_shift`); Bonferroni over the model's probes keeps the
false alarms per model-night at most ``alpha`` (0.01).

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
with the exact tier's. An exact drift re-bases the sensitive baselines from
tonight's samples (the new model's distribution).

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
from typing import TYPE_CHECKING, Any, Literal

from kb.distribution_shift import bonferroni_alarm, shift_p_value
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
from kb.sidefile import SideFormat
from kb.store.canonical import js_stringify, normalize_output, sha256_hex
from kb.store.records import SensitiveRecord, ShiftProbeRecord

if TYPE_CHECKING:
    from kb.sweep.spec import SweepSpec

SensitiveStatus = Literal["steady", "shift", "uncalibrated", "incomplete"]
PROBES = SideFormat("sensitive probes", key="format")
LABEL_MARK = "canary~"
"""Sensitive-tier run labels start ``canary~`` (exact probes: ``canary:``)."""
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


@dataclass(frozen=True)
class SensitiveSettings:
    """How the tier samples: ``[sensitive]`` of the canary (resolved)."""

    probes_path: Path
    samples: int = 16
    alpha: float = 0.01
    max_tokens: int = 8


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
                runs.append(
                    PlannedRun(
                        label=f"{LABEL_MARK}{member.key}/{probe_id(prompt)}#{k + 1}",
                        kind="canary",
                        spec=member,
                        request=build_request(member, prompt, overrides=overrides),
                        ceiling_usd=canary_usd,
                    )
                )
    return tuple(runs)


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

    @property
    def id(self) -> str:
        return probe_id(self.prompt)


@dataclass(frozen=True)
class SensitiveResult:
    """The sensitive tier of one model tonight."""

    status: SensitiveStatus
    probes: tuple[ProbeShift, ...]
    alpha: float
    runs: tuple[RunResult, ...] = ()

    @property
    def alarm(self) -> ProbeShift | None:
        """The probe that alarmed (a shift), if any."""
        tested = [p for p in self.probes if p.p_value is not None]
        found = bonferroni_alarm([p.p_value for p in tested if p.p_value is not None], self.alpha)
        return tested[found] if found is not None else None

    @property
    def min_p(self) -> float | None:
        values = [p.p_value for p in self.probes if p.p_value is not None]
        return min(values) if values else None

    def describe(self) -> str:
        """One line: what the tier saw (for the sweep output, summary and pages)."""
        tested = sum(1 for p in self.probes if p.p_value is not None)
        if self.status == "shift" and self.alarm is not None:
            probe = self.alarm
            number = self.probes.index(probe) + 1
            # the probe by number and id, never its prompt: probes may be private, and this
            # line goes into the committed report and the CI summary
            return (
                f"distribution shift: probe {number} of {len(self.probes)} (id {probe.id}), "
                f"p = {probe.p_value:.2g} (alarm below {self.alpha:g} / {tested} probes); "
                "its cells escalate tonight"
            )
        if self.status == "uncalibrated":
            return "no border probes or baselines yet (kb canary --calibrate SPEC)"
        if self.status == "incomplete":
            failed = next((p.failed for p in self.probes if p.failed), "no answer")
            return f"incomplete ({failed}): nothing judged"
        shown = f", smallest p = {self.min_p:.2g}" if self.min_p is not None else ""
        return f"steady over {tested} probes{shown}"


def judge_member(
    prompts: Sequence[str],
    runs: Sequence[RunResult],
    baselines: Mapping[str, Mapping[str, int]],
    settings: SensitiveSettings,
    secrets: Sequence[str] = (),
) -> SensitiveResult:
    """Test each probe's counts against its baseline; ``runs`` in :func:`sample_runs` order.

    ``secrets``: cut from each reply before it is counted (see :func:`short_answer`).
    """
    if not prompts:
        return SensitiveResult("uncalibrated", (), settings.alpha)
    per = len(runs) // len(prompts)
    found = []
    for index, prompt in enumerate(prompts):
        mine = runs[index * per : (index + 1) * per]
        failed = next((r.status for r in mine if r.status != "ok"), None)
        counts = Counter(short_answer(r.output or "", secrets) for r in mine if r.status == "ok")
        baseline = baselines.get(probe_id(prompt))
        p_value = shift_p_value(baseline, counts) if baseline and failed is None else None
        found.append(ProbeShift(prompt, dict(counts), baseline, p_value, failed))
    words = {answer for p in found for answer in p.counts}
    if len(found) >= 2 and len(words) == 1 and not any(p.failed for p in found):
        # every sample of every probe gave one word: an error page or an empty provider
        found = [
            replace(p, p_value=None, failed=f"every sample answered {next(iter(words))!r}")
            for p in found
        ]
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


def entropy_bits(counts: Mapping[str, int]) -> float:
    """Shannon entropy of the answers (bits): how near-tied a probe's first word is."""
    import math

    total = sum(counts.values())
    if total == 0:
        return 0.0
    return -sum((c / total) * math.log2(c / total) for c in counts.values() if c)


def rebased(result: SensitiveResult) -> dict[str, dict[str, int]]:
    """Baselines from tonight's samples: after an exact drift, the new model's distribution."""
    return {p.id: dict(p.counts) for p in result.probes if p.failed is None and p.counts}


def sensitive_record(result: SensitiveResult) -> SensitiveRecord:
    """The report's ``canary[].sensitive``."""
    alarm = result.alarm if result.status == "shift" else None
    return SensitiveRecord(
        status=result.status,
        alpha=result.alpha,
        probe=alarm.id if alarm is not None else None,
        p_value=alarm.p_value if alarm is not None else None,
        line=result.describe(),
        probes=tuple(
            ShiftProbeRecord(probe=p.id, counts=dict(p.counts), p_value=p.p_value, failed=p.failed)
            for p in result.probes
        ),
    )


def member_secrets(member: ModelSpec) -> tuple[str, ...]:
    """What to cut from the member's replies: its credentials and the environment's."""
    return secrets_to_cut(credentials_of(member.params))
