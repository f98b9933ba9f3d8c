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

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kb.engine.budget import SpendEnvelope
from kb.engine.requests import ModelSpec, build_request
from kb.engine.runs import RunResult
from kb.engine.scheduler import Engine, PlannedRun
from kb.store.canonical import js_stringify, sha256_hex
from kb.store.filestore import CommitContext, KnowledgeStore
from kb.store.ops import MarkStale, Op
from kb.store.snapshot import Snapshot

CanaryStatus = Literal["no-drift", "drift", "incomplete", "unstable"]

#: JavaScript's ``\s`` (WhiteSpace + LineTerminator), which ``String.prototype.trim`` also uses.
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_JS_SPACE_RUN = re.compile(f"[{re.escape(JS_WHITESPACE)}]+")


def normalize_output(text: str) -> str:
    """NFC, trim, collapse whitespace runs — with JavaScript's whitespace set."""
    text = unicodedata.normalize("NFC", text).strip(JS_WHITESPACE)
    return _JS_SPACE_RUN.sub(" ", text)


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

    @property
    def stable(self) -> bool:
        """Every repeat gave the same normalized answer."""
        return len(set(self.outputs)) <= 1


@dataclass
class CanaryResult:
    """The canary of one member, and what it did to the store."""

    member: ModelSpec
    probes: list[ProbeResult]
    fingerprint: str
    all_ok: bool
    status: CanaryStatus = "no-drift"
    flipped: list[str] = field(default_factory=list)
    version: int | None = None

    @property
    def stable(self) -> bool:
        """No probe disagreed with itself across repeats."""
        return all(probe.stable for probe in self.probes)

    def to_json(self) -> dict[str, Any]:
        """The ``kb canary --json`` entry (also the sweep report's ``canary[]``)."""
        entry: dict[str, Any] = self.member.subject
        entry.update(
            fingerprint=self.fingerprint,
            allOk=self.all_ok,
            probes=[{"prompt": p.prompt, "status": p.status} for p in self.probes],
            status=self.status,
            flipped=list(self.flipped),
        )
        if self.version is not None:
            entry["version"] = self.version
        return entry


def plan_probes(
    members: Sequence[ModelSpec], prompts: Sequence[str], repeats: int, canary_usd: float | None
) -> list[PlannedRun]:
    """Every probe for every member, declaration order, each ``repeats`` times, temperature 0."""
    return [
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
    ]


def measure_canaries(
    engine: Engine,
    members: Sequence[ModelSpec],
    prompts: Sequence[str],
    envelope: SpendEnvelope,
    *,
    canary_usd: float | None,
    repeats: int = 1,
) -> list[CanaryResult]:
    """Run the probes and compute each member's fingerprint (nothing is written)."""
    results = engine.run(plan_probes(members, prompts, repeats, canary_usd), envelope)
    canaries = []
    per_member = len(prompts) * repeats
    for m_index, member in enumerate(members):
        runs = results[m_index * per_member : (m_index + 1) * per_member]
        probes = []
        for p_index, prompt in enumerate(prompts):
            repeat_runs = runs[p_index * repeats : (p_index + 1) * repeats]
            status = next((r.status for r in repeat_runs if r.status != "ok"), "ok")
            probes.append(ProbeResult(prompt, status, tuple(probe_output(r) for r in repeat_runs)))
        outputs = [p.outputs[0] if p.status == "ok" else f"!{p.status}" for p in probes]
        all_ok = all(p.status == "ok" for p in probes)
        canaries.append(CanaryResult(member, probes, fingerprint(len(prompts), outputs), all_ok))
    return canaries


def drifted_claims(snapshot: Snapshot, member: ModelSpec, fresh: str) -> list[str]:
    """Active eval-measured claims of the member whose recorded fingerprint differs."""
    return [
        claim.id
        for claim in snapshot.claims
        if claim.status == "active"
        and claim.claim_class == "eval-measured"
        and claim.model == member.ref
        and claim.effort == member.effort
        and claim.canary_fingerprint is not None
        and claim.canary_fingerprint != fresh
    ]


def classify(canaries: Sequence[CanaryResult], snapshot: Snapshot) -> None:
    """Set each result's status and the claims it would flip (against ``snapshot``)."""
    for result in canaries:
        if not result.all_ok:  # a failed probe is missing evidence, whatever the repeats say
            result.status, result.flipped = "incomplete", []
        elif not result.stable:
            result.status, result.flipped = "unstable", []
        else:
            result.flipped = drifted_claims(snapshot, result.member, result.fingerprint)
            result.status = "drift" if result.flipped else "no-drift"


def flip_ops(canaries: Sequence[CanaryResult], snapshot: Snapshot) -> list[Op]:
    """``mark_stale`` for every drifted claim, recomputed from ``snapshot``."""
    classify(canaries, snapshot)
    return [MarkStale(claim_id) for result in canaries for claim_id in result.flipped]


def commit_flips(
    canaries: Sequence[CanaryResult],
    store: KnowledgeStore,
    *,
    committer: str,
    label: str,
    attempts: int = 3,
    push: bool = False,
) -> int | None:
    """One CAS commit of every flip; the committed version (``None``: nothing drifted)."""
    result = store.commit_with_rebase(
        lambda snapshot: flip_ops(canaries, snapshot),
        CommitContext("canary", committer, label=label),
        attempts=attempts,
        push=push,
    )
    if result is None:
        return None
    for canary in canaries:
        if canary.flipped:
            canary.version = result.snapshot.version
    return result.snapshot.version


def run_canary(
    spec: Any,
    store: KnowledgeStore,
    engine: Engine,
    *,
    at: int,
    repeats: int | None = None,
    commit: bool = True,
    attempts: int = 3,
    push: bool = False,
) -> list[CanaryResult]:
    """``kb canary``: probe the sweep's pool (as of ``at``) and flip drift in one commit."""
    from kb.errors import ConfigError
    from kb.sweep.run import build_pool

    section = spec.canary
    if section is None:
        raise ConfigError(str(spec.path), 'no canary configured ([canary] or canary = "...")')
    members = [member.spec for member in build_pool(spec.models, store.read(), at)]
    envelope = SpendEnvelope.from_usd(spec.budgets.max_total_usd)
    canaries = measure_canaries(
        engine,
        members,
        section.prompts,
        envelope,
        canary_usd=spec.budgets.canary_usd,
        repeats=repeats or section.repeats,
    )
    engine.finish()
    if commit:
        commit_flips(
            canaries,
            store,
            committer=spec.sweep.committer,
            label="canary",
            attempts=attempts,
            push=push,
        )
    else:
        classify(canaries, store.read())
    return canaries


def canary_line(result: CanaryResult) -> str:
    """One human line per model."""
    head = f"{result.member.key}  {result.fingerprint[:12]}  "
    if result.status == "drift":
        count = len(result.flipped)
        where = f" (store v{result.version})" if result.version is not None else " (not committed)"
        return head + f"DRIFT, {count} claim{'s' if count != 1 else ''} flipped stale{where}"
    if result.status == "unstable":
        shaky = [str(i + 1) for i, probe in enumerate(result.probes) if not probe.stable]
        return head + f"unstable (probe {', '.join(shaky)} disagreed across repeats)"
    if result.status == "incomplete":
        failed = [f"{i + 1}: {p.status}" for i, p in enumerate(result.probes) if p.status != "ok"]
        return head + f"incomplete (probe {'; '.join(failed)})"
    return head + "no drift"


def sweep_canary_step(
    plan: Any,
    engine: Engine,
    envelope: SpendEnvelope,
    store: KnowledgeStore,
    commit: bool,
    push: bool = False,
    attempts: int = 3,
) -> list[dict[str, Any]]:
    """The canary inside ``kb sweep``: probe every pool member, flip drift before measuring."""
    section = plan.spec.canary
    canaries = measure_canaries(
        engine,
        plan.members,
        section.prompts,
        envelope,
        canary_usd=plan.spec.budgets.canary_usd,
        repeats=section.repeats,
    )
    if commit:
        commit_flips(
            canaries,
            store,
            committer=plan.spec.sweep.committer,
            label=plan.report_id,
            push=push,
            attempts=attempts,
        )
    else:
        classify(canaries, store.read())
    return [canary.to_json() for canary in canaries]
