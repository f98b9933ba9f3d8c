"""Text and JSON views of claims, for people reading ``kb list`` and ``kb show``.

Views return strings; printing is the CLI's job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from kb.stats import successes_from_rate, wilson_interval
from kb.store.audit import ClaimEvent
from kb.store.canonical import js_stringify, to_fixed_2
from kb.store.models import ModelClaim
from kb.store.query import ttl_state
from kb.store.snapshot import Snapshot

_MAX_CASES_SHOWN = 5


def _gate_line(claim: ModelClaim) -> str:
    author = f"{claim.author['kind']}:{claim.author['id']}"
    if claim.claim_class == "eval-measured":
        reports = [ev["reportId"] for ev in claim.evidence if ev["kind"] == "eval"]
        report = f", report {reports[0]}" if reports else ""
        return f"author {author} (gate eval-committer{report})"
    return f"author {author} (gate human, approver {claim.author['id']})"


def _evidence_lines(claim: ModelClaim) -> list[str]:
    lines = []
    for item in claim.evidence:
        if item["kind"] == "eval":
            case_ids = item["caseIds"]
            cases = case_ids[:_MAX_CASES_SHOWN]
            more = len(case_ids) - len(cases)
            shown = ", ".join(cases) + (f" (+{more} more)" if more > 0 else "")
            lines.append(f"evidence eval {item['reportId']}: {len(case_ids)} cases: {shown}")
        else:
            lines.append(f"evidence journal {item['runId']} entry {item['entryRef']}")
    return lines


def metrics_line(claim: ModelClaim) -> str | None:
    """``passRate 0.93 (14/15) wilson95 [0.70, 0.99] grader eval-suite cost $0.0120``.

    The interval is the one the gate used: Wilson over ``n`` cases of the
    stored mean case score (a fractional count when the cases were repeated).
    """
    metrics = claim.metrics
    if metrics is None:
        return None
    n = metrics["n"]
    rate = metrics["passRate"]
    successes = min(float(n), max(0.0, rate * n))
    low, high = wilson_interval(successes, n)
    whole = successes_from_rate(rate, n)
    count = f"{whole}/{n}" if abs(whole - successes) < 1e-9 else f"{successes:.2f}/{n}"
    line = (
        f"metrics passRate {to_fixed_2(rate)} ({count}) "
        f"wilson95 [{to_fixed_2(low)}, {to_fixed_2(high)}] grader {metrics['graderId']}"
    )
    if "cost" in metrics:
        line += f" cost ${metrics['cost']:.4f}"
    if "baseline" in metrics:
        baseline = metrics["baseline"]
        line += f" baseline {baseline['model']} {to_fixed_2(baseline['passRate'])}"
    return line


def format_claim(claim: ModelClaim, as_of: int) -> str:
    """A multi-line human view of one claim at instant ``as_of``."""
    kind = (
        "editorial note, no metrics, not confirmed by evals"
        if claim.claim_class == "human-editorial"
        else "eval-measured"
    )
    lines = [
        claim.id,
        f"  {claim.status} · ttl {ttl_state(claim, as_of)} · observed {claim.observed_at}"
        f" · expires {claim.expires_at}",
        f"  {claim.subject_key} · {claim.polarity} · {claim.task_class} · {kind}"
        f" · confidence {claim.confidence}",
        f"  statement: {claim.statement}",
        f"  {_gate_line(claim)}",
    ]
    lines += [f"  {line}" for line in _evidence_lines(claim)]
    metrics = metrics_line(claim)
    if metrics:
        lines.append(f"  {metrics}")
    if claim.canary_fingerprint:
        lines.append(f"  canary {claim.canary_fingerprint[:16]}")
    if claim.supersedes:
        lines.append(f"  supersedes {claim.supersedes}")
    return "\n".join(lines)


def format_claims(claims: Sequence[ModelClaim], total: int, as_of: int) -> str:
    """The ``kb list`` page: each claim, then a count."""
    blocks = [format_claim(claim, as_of) for claim in claims]
    blocks.append(f"{len(claims)} of {total} claims shown")
    return "\n\n".join(blocks)


def claims_json(snapshot: Snapshot, indexes: Iterable[int], as_of: int, *, plain: bool) -> str:
    """JSON array of the stored claims (exactly as stored) plus ``"ttl"``.

    ``plain`` says the data prints identically through Python's C encoder
    (see ``kb.store.canonical.fast_canonical_json``); otherwise the
    JavaScript-exact serializer runs.
    """
    items: list[dict[str, Any]] = []
    for index in indexes:
        item = dict(snapshot.wire[index])
        item["ttl"] = ttl_state(snapshot.claims[index], as_of)
        items.append(item)
    if plain:
        return json.dumps(items, indent=2, ensure_ascii=False)
    return js_stringify(items, indent=2)


def format_history(events: Sequence[ClaimEvent] | None) -> str:
    """The ``history:`` block of ``kb show``."""
    if events is None:
        return "history: the store is not in a git work tree"
    if not events:
        return "history: no commit touched this claim yet (uncommitted?)"
    lines = ["history:"]
    lines += [f"  {e.commit[:12]} {e.date} {e.change} — {e.subject}" for e in events]
    return "\n".join(lines)
