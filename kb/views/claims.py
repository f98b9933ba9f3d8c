"""Text and JSON views of claims, for people reading ``kb list`` and ``kb show``.

Views return strings; printing is the CLI's job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from kb.evidence_index import ClaimNight
from kb.money import usd
from kb.stats import successes_from_rate
from kb.store.audit import ClaimEvent
from kb.store.baselines import CanaryBaselines
from kb.store.canonical import js_stringify, to_fixed_2
from kb.store.diff import StoreDiff, unchanged_line
from kb.store.epochs import EpochsFile, cell_key, suite_grader_id
from kb.store.jsjson import js_plain_value
from kb.store.manifests import is_manifest_ref
from kb.store.models import ModelClaim, metrics_interval, metrics_successes
from kb.store.query import ttl_state
from kb.store.snapshot import Snapshot
from kb.store.ttl import stored_instant
from kb.textwidth import wrapped
from kb.views.report_text import EPOCH_WORDS

_MAX_CASES_SHOWN = 5
_MAX_NIGHTS_SHOWN = 8


def _gate_line(claim: ModelClaim) -> str:
    author = f"{claim.author['kind']}:{claim.author['id']}"
    if claim.claim_class == "eval-measured":
        reports = [ev["reportId"] for ev in claim.evidence if ev["kind"] == "eval"]
        report = f", report {reports[-1]}" if reports else ""  # an epoch's last night
        return f"author {author} (gate eval-committer{report})"
    return f"author {author} (gate human, approver {claim.author['id']})"


def _evidence_lines(claim: ModelClaim) -> list[str]:
    lines = []
    items = list(claim.evidence)
    half = _MAX_NIGHTS_SHOWN // 2
    hidden = len(items) - 2 * half if len(items) > _MAX_NIGHTS_SHOWN else 0
    for index, item in enumerate(items):
        if hidden and half <= index < len(items) - half:  # a long epoch: first and last nights
            if index == half:
                lines.append(f"evidence … {hidden} more nights (kb list --json lists them all)")
            continue
        if item["kind"] == "eval" and is_manifest_ref(item["reportId"]):
            lines.append(
                f"evidence eval {item['reportId']}: the epoch's nights (listed under cases:)"
            )
        elif item["kind"] == "eval":
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
    successes = metrics_successes(metrics)
    low, high = claim.interval or (0.0, 0.0)
    whole = successes_from_rate(rate, n)
    count = f"{whole}/{n}" if abs(whole - successes) < 1e-9 else f"{successes:.2f}/{n}"
    line = (
        f"metrics passRate {to_fixed_2(rate)} ({count}) "
        f"wilson95 [{to_fixed_2(low)}, {to_fixed_2(high)}] grader {metrics['graderId']}"
    )
    if "cost" in metrics:
        line += f" cost {usd(metrics['cost'])}"
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
    # each line wrapped to 80 columns, its continuation indented under it
    return "\n".join([lines[0], *(w for line in lines[1:] for w in wrapped(line[2:], "  "))])


def format_claims(claims: Sequence[ModelClaim], total: int, as_of: int) -> str:
    """The ``kb list`` page: each claim, then a count."""
    blocks = [format_claim(claim, as_of) for claim in claims]
    blocks.append(f"{len(claims)} of {total} claims shown")
    return "\n\n".join(blocks)


def claims_json(snapshot: Snapshot, indexes: Iterable[int], as_of: int) -> str:
    """JSON array of the stored claims (exactly as stored) plus ``ttl`` and ``wilson95``.

    ``wilson95`` (eval claims only) is the 95 % interval of the claim's metrics.

    Python's C encoder prints them when they print the same as in JavaScript
    (see ``kb.store.canonical.fast_canonical_json``); otherwise the
    JavaScript-exact serializer runs.
    """
    items: list[dict[str, Any]] = []
    for index in indexes:
        item = snapshot.wire_at(index)
        item["ttl"] = ttl_state(snapshot.entries[index], as_of)
        interval = metrics_interval(item.get("metrics"))
        if interval is not None:
            item["wilson95"] = list(interval)
        items.append(item)
    if js_plain_value(items):
        return json.dumps(items, indent=2, ensure_ascii=False)
    return js_stringify(items, indent=2)


def format_history(events: Sequence[ClaimEvent] | None) -> str:
    """The ``history:`` block of ``kb show``."""
    if events is None:
        return "history: the store is not in a git work tree"
    if not events:
        return "history: no commit touched this claim yet (uncommitted?)"
    lines = ["history:"]
    for e in events:
        # one line per event within 80 columns: only the commit subject is ever cut (git
        # show COMMIT has it whole), never the change
        head = f"  {e.commit[:12]} {_minute(e.date)} {e.change} — "
        room = max(12, 80 - len(head))
        subject = e.subject if len(e.subject) <= room else e.subject[: room - 1] + "…"
        lines.append(head + subject)
    return "\n".join(lines)


def _minute(date: str) -> str:
    """A git ISO date to the minute (``2026-11-01 00:00``; its offset kept unless UTC)."""
    offset = date[19:]
    return f"{date[:10]} {date[11:16]}" + ("" if offset in ("+00:00", "Z") else offset)


_EXCERPT = 70


def _excerpt(text: str, width: int = _EXCERPT) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def claim_evidence(nights: Sequence[ClaimNight]) -> str:
    """The ``cases:`` block of ``kb show``: every case run behind the claim's measurement."""
    if not nights:
        return "cases: none (an editorial claim points at a journal, not at eval runs)"
    lines = []
    for night in nights:
        report_id, runs = night.report_id, night.runs
        if runs is None and is_manifest_ref(report_id):
            lines += wrapped(
                f"cases: the epoch manifest {report_id} is not in the evidence directory "
                "nor in git history (fetch it, or give --evidence-dir)"
            )
            continue
        if runs is None:
            lines.append(
                f"cases: no evidence file for report {report_id} (a sweep run with "
                "--no-evidence, elsewhere with evidence_dir, or before kb wrote evidence)"
            )
            continue
        passed = sum(1 for run in runs if run.passed)
        unscored = sum(1 for run in runs if run.unscored)
        also = f", {unscored} unscored" if unscored else ""
        lines += wrapped(
            f"cases ({passed} of {len(runs)} runs passed{also}; evidence of {report_id} from "
            f"{night.source}):"
        )
        for run in runs:
            verdict = run.verdict_word
            repeat = f"#{run.repeat + 1}" if run.repeat else ""
            reasons = "; ".join(v.reason for v in run.verdicts if v.passed is not True)
            why = reasons or run.error or ""
            head = f"  {verdict:<5} {run.case}{repeat}  "
            line = head + repr(_excerpt(run.output, max(20, 78 - len(head))))
            if why and len(line) + 4 + len(_excerpt(why)) <= 80:
                lines.append(f"{line}  — {_excerpt(why)}")
            else:  # the grader's reason under the answer, so the line stays within 80 columns
                lines += [line, *(wrapped(f"— {_excerpt(why, 200)}", " " * 8) if why else [])]
    return "\n".join(lines)


def format_diff(changes: StoreDiff, list_all: bool = False) -> str:
    """``kb diff`` as text: one line per change, what changed a belief first.

    Falsified, flipped stale, added, archived (other reasons), expired, superseded;
    re-measurements that changed no belief are one count line (``list_all``: one
    line each, ``= re-measured``). See :mod:`kb.store.diff` for the order.
    """
    before, after = changes.before, changes.after
    lines = [
        f"store v{before.version} ({before.heading()}) -> v{after.version} ({after.heading()})",
    ]
    for old, new in changes.falsified:  # first: a belief the evidence turned against
        if new is None:
            held = f"{old.polarity}, passRate {_number(old)}" if old.metrics else old.polarity
            lines += _change("- archived", f"{old.id} (falsified: was {held})")
        else:
            lines += _change(
                "~ superseded",
                f"{old.id} by {new.id} ({old.polarity} -> {new.polarity}, "
                f"passRate {_number(old)} -> {_number(new)})",
            )
    for claim in changes.staled:  # a drift: the provider changed the model
        then = {"superseded": "; re-measured since", "archived": "; archived since"}
        lines += _change(
            "! stale",
            f"{claim.id} (canary drift: the provider changed the model"
            f"{then.get(claim.status, '')})",
        )
    for claim in changes.added:
        lines += _change("+ added", f"{claim.id} ({claim.polarity}, {_rate(claim)})")
    for claim, reason in changes.lost:
        lines += _change("- archived", f"{claim.id} ({reason or 'reason not recorded'})")
    for claim in changes.expired:
        lines += _change("x expired", f"{claim.id} (at {claim.expires_at})")
    for old, maybe in changes.remeasured:
        by = f" by {maybe.id} (passRate {_number(old)} -> {_number(maybe)})" if maybe else ""
        lines += _change("~ superseded", f"{old.id}{by}")
    unchanged = changes.unchanged
    if list_all:
        for old, new in unchanged:
            lines += _change(
                "= re-measured",
                f"{old.id} by {new.id} (passRate {_number(old)} -> {_number(new)})",
            )
    elif unchanged:
        said = f"{unchanged_line(len(unchanged))} (kb diff --all lists them)"
        lines += wrapped(f"=\xa0{said}", "  ", "    ")
    if changes.compacted:
        count = len(changes.compacted)
        lines += _change(
            ". compacted",
            f"{count} superseded/archived claim{'s' if count != 1 else ''} "
            "left the file (in git history; kb show ID)",
        )
    if changes.empty:
        lines.append("  no claim changed")
    return "\n".join(lines)


def _change(what: str, text: str) -> list[str]:
    """One change of ``kb diff``, wrapped to 80 columns under its text (ids kept whole)."""
    marker = f"{what:<13}\xa0".replace(" ", "\xa0")  # glued to the id that follows
    return wrapped(marker + text, "  ", " " * 16)


def _number(claim: ModelClaim | None) -> str:
    return to_fixed_2(claim.metrics["passRate"]) if claim and claim.metrics else "-"


def _rate(claim: ModelClaim | None) -> str:
    if claim is None or claim.metrics is None:
        return "editorial"
    return f"passRate {to_fixed_2(claim.metrics['passRate'])}"


def format_epoch(claim: ModelClaim, epochs: EpochsFile) -> str | None:
    """The claim's cell's epoch, as the epochs file holds it (``None``: none there)."""
    if claim.claim_class != "eval-measured":
        return None
    effort = claim.subject.get("effort")
    key = cell_key(
        f"{claim.subject['model']}@{effort}" if effort else claim.subject["model"], claim.task_class
    )
    epoch = epochs.cells.get(key)
    if epoch is None:
        return "epoch: none recorded for this cell"
    start = epoch.start
    rate = to_fixed_2(epoch.successes / epoch.n) if epoch.n else "-"
    nights = len(epoch.nights)
    before = stored_instant(claim.observed_at) < stored_instant(start.observed_at)
    if before and claim.status != "active":
        # a retired claim from an earlier epoch: the cell's epoch now is not the claim's
        return (
            f"epoch: this claim's epoch has ended; the cell's epoch now began "
            f"{start.observed_at} ({EPOCH_WORDS[start.reason]}, {start.report_id})"
        )
    line = (
        f"epoch: began {start.observed_at} ({EPOCH_WORDS[start.reason]}, {start.report_id}); "
        f"{nights} night{'s' if nights != 1 else ''}, {epoch.n} of {len(epoch.cases)} cases, "
        f"passRate {rate}; detectors down {epoch.down:.2f} up {epoch.up:.2f}; "
        f"suite {suite_grader_id(epoch.suite)}"
    )
    lines = wrapped(line)
    if claim.status == "active" and before:
        lines += wrapped(
            "(this claim is from before the epoch: the next complete sweep re-decides it)", "  "
        )
    return "\n".join(lines)


def format_canary_baselines(claim: ModelClaim, baselines: CanaryBaselines) -> str | None:
    """What the canary knows of the claim's model: the exact tier and the sensitive tier."""
    known = baselines.subjects.get(claim.subject_key)
    if known is None:
        return None
    exact = (
        f"exact fingerprint {', '.join(sorted(f[:12] for f in known.current))}"
        if known.current
        else "no exact fingerprint yet"
    )
    if known.sensitive:
        sizes = sorted({sum(counts.values()) for counts in known.sensitive.values()})
        shown = "/".join(str(n) for n in sizes)
        tier = (
            f"sensitive tier: {len(known.sensitive)} border probes calibrated "
            f"({shown} baseline answers each"
        )
        if known.logprobs:
            reads = "/".join(str(n) for n in sorted({len(r) for r in known.logprobs.values()}))
            tier += f"; logprob readings for {len(known.logprobs)}, {reads} each"
        tier += ")"
    else:
        tier = "sensitive tier: not calibrated (kb canary --calibrate SPEC)"
    return "\n".join(wrapped(f"canary baselines of {claim.subject_key}: {exact}; {tier}"))
