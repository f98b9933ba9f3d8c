"""Canary baselines per probe set: editing the probes is not drift.

A fingerprint (rulvar's: the outputs, not the prompts) only means something
next to a fingerprint made from the **same probe set** (same prompts, same
order). kb keeps, beside the store, a small tracked file
(``rulvar.models.canary.json`` next to ``rulvar.models.json``) that says, per
subject:

* ``baselines`` — for each probe set (by id) the fingerprint the current
  model gives under it;
* ``current`` — every fingerprint known to describe the current model, under
  any probe set. A claim whose recorded ``modelEpoch.canaryFingerprint`` is
  not among them was measured on an earlier model.

Judging a fresh, usable fingerprint F under probe set P:

* P has a baseline and F equals it → ``no-drift``;
* P has a baseline and F differs → ``drift``: the model changed; ``current``
  becomes {F} and P's baseline F (other probe sets' baselines described the
  old model and are dropped, so switching back to one re-baselines it);
* P has no baseline but the subject has → ``rebaselined``: F joins
  ``current`` and becomes P's baseline; nothing is flipped (a real change
  under the new probe set is drift on the next run);
* the subject has no baselines at all (a store older than this file): F is
  P's baseline; if some active claim carries F the probe set evidently
  produced it and the rest are judged as before (``no-drift``/``drift``),
  else ``rebaselined`` with the claims' fingerprints adopted as current.

Claims keep rulvar's fingerprint in ``modelEpoch.canaryFingerprint``; only
this file knows about probe sets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kb.atomicfile import write_atomic
from kb.errors import ConfigError, MergeConflict
from kb.logprobs import TopLogprobs, parse_top_logprobs
from kb.sidefile import SideFormat
from kb.store.canonical import js_stringify, sha256_hex
from kb.store.merge import leave_textual_conflict, read_sides

BaselineStatus = Literal["no-drift", "drift", "rebaselined"]
BASELINES = SideFormat("canary baselines", key="version")


def probe_set_id(prompts: Sequence[str]) -> str:
    """The probe set's identity: its prompts, in order (16 hex digits of a sha256)."""
    return sha256_hex(js_stringify(list(prompts)))[:16]


@dataclass(frozen=True)
class SubjectBaselines:
    """One subject's baselines."""

    baselines: Mapping[str, str] = field(default_factory=dict)
    """Probe-set id → the fingerprint the current model gives under it."""
    current: frozenset[str] = frozenset()
    """Fingerprints that describe the current model (under any probe set)."""
    sensitive: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """The sensitive tier's baselines: probe id → answer counts (:mod:`kb.sweep.sensitive`)."""
    logprobs: Mapping[str, TopLogprobs] = field(default_factory=dict)
    """The sensitive tier's logprob readings: probe id → each reading's first-token top-k."""

    def with_sensitive(
        self,
        sensitive: Mapping[str, Mapping[str, int]],
        logprobs: Mapping[str, TopLogprobs] | None = None,
    ) -> SubjectBaselines:
        """A copy with the sensitive baselines replaced (the logprob readings too, if given)."""
        readings = self.logprobs if logprobs is None else logprobs
        return SubjectBaselines(self.baselines, self.current, sensitive, readings)

    def sensitive_only(self) -> SubjectBaselines:
        """Only the sensitive tier's baselines (what a judged fingerprint keeps)."""
        return SubjectBaselines({}, frozenset(), self.sensitive, self.logprobs)


@dataclass(frozen=True)
class Judgement:
    """What a fresh fingerprint says about a subject, and the subject's next baselines."""

    status: BaselineStatus
    current: frozenset[str]
    """Claims whose fingerprint is not in here were measured on another model."""
    updated: SubjectBaselines


def judge(
    known: SubjectBaselines | None,
    probe_set: str,
    fresh: str,
    claim_fingerprints: Iterable[str],
) -> Judgement:
    """Judge ``fresh`` (an all-ok, stable fingerprint) under ``probe_set`` (see the module).

    The subject's sensitive baselines are kept, except on a drift: they described
    the old model (the tier is uncalibrated until ``kb canary --calibrate``).
    """
    claimed = frozenset(claim_fingerprints)
    kept = known.sensitive_only() if known is not None else SubjectBaselines()

    def subject(baselines: Mapping[str, str], current: frozenset[str]) -> SubjectBaselines:
        return SubjectBaselines(baselines, current, kept.sensitive, kept.logprobs)

    if known is None or not known.baselines:
        if fresh in claimed or not claimed:
            updated = subject({probe_set: fresh}, frozenset({fresh}))
            status: BaselineStatus = "drift" if claimed - {fresh} else "no-drift"
            return Judgement(status, updated.current, updated)
        updated = subject({probe_set: fresh}, claimed | {fresh})
        return Judgement("rebaselined", updated.current, updated)
    baseline = known.baselines.get(probe_set)
    if baseline is None:
        updated = subject({**known.baselines, probe_set: fresh}, known.current | {fresh})
        return Judgement("rebaselined", updated.current, updated)
    if baseline == fresh:
        current = known.current | {fresh}
        return Judgement("no-drift", current, subject(known.baselines, current))
    updated = SubjectBaselines({probe_set: fresh}, frozenset({fresh}))
    return Judgement("drift", updated.current, updated)


@dataclass(frozen=True)
class CanaryBaselines:
    """The whole file: probe sets by id, and each subject's baselines."""

    probe_sets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    subjects: Mapping[str, SubjectBaselines] = field(default_factory=dict)

    def with_subject(
        self, key: str, prompts: Sequence[str], updated: SubjectBaselines
    ) -> CanaryBaselines:
        """A copy with ``key``'s baselines replaced (and the probe set recorded)."""
        return CanaryBaselines(
            {**self.probe_sets, probe_set_id(prompts): tuple(prompts)},
            {**self.subjects, key: updated},
        )

    def with_subject_only(self, key: str, updated: SubjectBaselines) -> CanaryBaselines:
        """A copy with ``key``'s baselines replaced (no probe set recorded)."""
        return CanaryBaselines(self.probe_sets, {**self.subjects, key: updated})

    def render(self) -> bytes:
        """Deterministic JSON (sorted keys, two-space indent, trailing newline): small diffs."""
        used = {pid for s in self.subjects.values() for pid in s.baselines}
        document: dict[str, Any] = {
            **BASELINES.stamp(),
            "probeSets": {pid: list(p) for pid, p in self.probe_sets.items() if pid in used},
            "subjects": {
                key: {
                    "baselines": dict(s.baselines),
                    "current": sorted(s.current),
                    **(
                        {"sensitive": {k: dict(v) for k, v in s.sensitive.items()}}
                        if s.sensitive
                        else {}
                    ),
                    **(
                        {
                            "sensitiveLogprobs": {
                                k: [dict(reading) for reading in v] for k, v in s.logprobs.items()
                            }
                        }
                        if s.logprobs
                        else {}
                    ),
                }
                for key, s in self.subjects.items()
            },
        }
        return (js_stringify(_sorted(document), indent=2) + "\n").encode("utf-8")


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    return value


@dataclass(frozen=True)
class BaselinesFile:
    """The baselines file as read: its path and bytes (``None``: it does not exist)."""

    path: Path
    data: bytes | None

    @classmethod
    def read(cls, path: Path) -> BaselinesFile:
        """Read ``path`` (a missing file is no baselines yet)."""
        try:
            return cls(path, path.read_bytes())
        except FileNotFoundError:
            return cls(path, None)

    @property
    def parsed(self) -> CanaryBaselines:
        """The baselines it holds (a malformed file is a ``ConfigError``)."""
        return parse_baselines(self.data, str(self.path))


def read_baselines(path: Path) -> CanaryBaselines:
    """The baselines file at ``path`` (empty when absent); a malformed file is a ``ConfigError``."""
    return BaselinesFile.read(path).parsed


def parse_baselines(raw: bytes | None, source: str) -> CanaryBaselines:
    """Baselines from a file's bytes (``None``: no file, no baselines)."""
    if raw is None:
        return CanaryBaselines()
    data = BASELINES.load(raw, source)
    try:
        probe_sets = {
            str(pid): tuple(_strings(prompts)) for pid, prompts in data["probeSets"].items()
        }
        subjects = {
            str(key): SubjectBaselines(
                {str(pid): _string(fp) for pid, fp in entry["baselines"].items()},
                frozenset(_strings(entry["current"])),
                _counts(entry.get("sensitive", {})),
                _readings(entry.get("sensitiveLogprobs", {})),
            )
            for key, entry in data["subjects"].items()
        }
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(source, f"not a canary baselines file: {exc}") from None
    return CanaryBaselines(probe_sets, subjects)


def _counts(value: Any) -> dict[str, dict[str, int]]:
    """Probe id → answer → count, each count a non-negative integer."""
    if not isinstance(value, dict):
        raise TypeError(f"sensitive: expected an object, got {type(value).__name__}")
    found: dict[str, dict[str, int]] = {}
    for probe, counts in value.items():
        if not isinstance(counts, dict) or not all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts.values()
        ):
            raise TypeError(f"sensitive.{probe}: expected answer counts (integers >= 0)")
        found[str(probe)] = {str(answer): int(c) for answer, c in counts.items()}
    return found


def _readings(value: Any) -> dict[str, TopLogprobs]:
    """Probe id → logprob readings (each ``{token: logprob}``, finite numbers)."""
    if not isinstance(value, dict):
        raise TypeError(f"sensitiveLogprobs: expected an object, got {type(value).__name__}")
    found: dict[str, TopLogprobs] = {}
    for probe, readings in value.items():
        try:
            found[str(probe)] = parse_top_logprobs(readings)
        except ValueError as exc:
            raise TypeError(f"sensitiveLogprobs.{probe}: {exc}") from None
        if any(value > 0 for reading in found[str(probe)] for value in reading.values()):
            raise TypeError(f"sensitiveLogprobs.{probe}: a log-probability above 0")
    return found


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return [_string(item) for item in value]


def merge_baselines(base: Path, ours: Path, theirs: Path, name: str) -> int:
    """Git's merge driver for the baselines file: merge into ``ours`` in place.

    Subject by subject, and within a subject probe by probe
    (:func:`merge_subject`): what one side changed since the base is taken,
    both sides' additions are kept. Only one probe set's fingerprint (or one
    sensitive probe's baseline) changed differently on both sides — each
    branch's canary saw something else — cannot be merged: raises
    :class:`MergeConflict` after leaving git's textual merge in ``ours``.
    Returns how many subjects changed because of theirs.
    """
    was, mine, other = read_sides(base, ours, theirs, name, read_baselines)
    subjects = dict(mine.subjects)
    taken = 0
    for key in sorted(set(was.subjects) | set(other.subjects)):
        before, after, current = was.subjects.get(key), other.subjects.get(key), subjects.get(key)
        try:
            merged = merge_subject(before, current, after)
        except ValueError as clash:
            leave_textual_conflict(base, ours, theirs, name)
            raise MergeConflict(
                name,
                f"the canary baselines of {key} changed on both sides ({clash}); "
                "run kb canary again",
            ) from None
        if merged != current:
            taken += 1
        if merged is None:
            subjects.pop(key, None)
        else:
            subjects[key] = merged
    merged_file = CanaryBaselines({**other.probe_sets, **mine.probe_sets}, subjects)
    write_atomic(ours, merged_file.render())
    return taken


def merge_subject(
    base: SubjectBaselines | None, ours: SubjectBaselines | None, theirs: SubjectBaselines | None
) -> SubjectBaselines | None:
    """Three-way merge of one subject's baselines, probe by probe.

    Raises ``ValueError`` naming the probe when both sides changed one differently.
    """
    if theirs == base or theirs == ours:
        return ours
    if ours == base:
        return theirs
    if ours is None or theirs is None:
        return ours if theirs is None else theirs  # removed on one side, changed on the other
    was = base if base is not None else SubjectBaselines()
    fingerprints = _merge_keys(was.baselines, ours.baselines, theirs.baselines, "probe set")
    # a fingerprint leaves ``current`` when either side's canary dropped it (a drift)
    current = (
        (ours.current & theirs.current)
        | (ours.current - was.current)
        | (theirs.current - was.current)
    )
    sensitive = _merge_keys(was.sensitive, ours.sensitive, theirs.sensitive, "sensitive probe")
    readings = _merge_keys(was.logprobs, ours.logprobs, theirs.logprobs, "logprob probe")
    return SubjectBaselines(fingerprints, frozenset(current), sensitive, readings)


def _merge_keys(
    base: Mapping[str, Any], ours: Mapping[str, Any], theirs: Mapping[str, Any], what: str
) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for key in sorted(set(base) | set(ours) | set(theirs)):
        was, mine, other = base.get(key), ours.get(key), theirs.get(key)
        if mine == other or other == was:
            chosen = mine
        elif mine == was:
            chosen = other
        else:
            raise ValueError(f"{what} {key}")
        if chosen is not None:
            merged[key] = chosen
    return merged
