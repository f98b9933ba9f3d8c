"""A sweep's report as text: the human summary, the failing line, the step-summary markdown.

Each reads a :class:`ReportFile` (the same object a sweep's ``--json``
prints and ``kb report`` reads back), so tonight's summary and a past
night's re-render are the same text. Views return strings; printing is the
CLI's job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kb.markdown import code_span, table_code
from kb.money import usd, usd_or_unbounded
from kb.store.canonical import to_fixed_2
from kb.store.records import CanaryRecord, CellRecord, EpochRecord, ReportFile
from kb.textwidth import fit, wrapped

CANARY_WORDS = {
    "no-drift": "no drift",
    "drift": "DRIFT",
    "rebaselined": "rebaselined (new probe set)",
    "incomplete": "incomplete",
    "unstable": "unstable",
}


def _count(cell: CellRecord) -> str:
    """``7/8 of 8`` cases passed of measured of planned; with repeats, the flaky count too."""
    n, planned = cell.n, cell.planned_n
    if cell.repeats is None:
        return f"{round(cell.pass_rate * n)}/{n} of {planned}"
    flaky = sum(1 for case in cell.cases or () if case.stability == "flaky")
    return f"{n} of {planned} cases x{cell.repeats}, {flaky} flaky"


EPOCH_WORDS = {
    "first": "first measurement",
    "suite": "the cases changed",
    "drift": "canary drift",
    "alarm": "detector alarm",
    "manual": "--new-epoch",
    "resync": "the store and the epochs file disagreed",
}


def epoch_text(epoch: EpochRecord) -> str:
    """One line: the epoch the gate decided on, and why tonight ran the cases it ran."""
    nights = f"{epoch.nights} night{'s' if epoch.nights != 1 else ''}"
    alarm = {
        "down": "; ALARM: a drop (the strength is retired)",
        "up": "; ALARM: a rise (the weakness is retired)",
        None: "",
    }[epoch.alarm]
    return (
        f"epoch: {epoch.n} cases over {nights} since {epoch.started_at[:10]} "
        f"({EPOCH_WORDS[epoch.reason]}); ran {epoch.ran} of {epoch.pool}: {epoch.why}{alarm}"
    )


def drift_line(report: ReportFile, name: Callable[[str], str] = str) -> str | None:
    """What the canary saw tonight, in words (``None``: no drift); ``name`` formats a model."""
    drifted = [c for c in report.canary if c.status == "drift"]
    if not drifted:
        return None
    flipped = sum(len(c.flipped) for c in drifted)
    names = ", ".join(name(c.subject_key) for c in drifted)
    return (
        f"the canary saw the provider change the model behind {names}; "
        f"{flipped} claim{'s' if flipped != 1 else ''} flipped stale"
    )


SHIFT = "canary: distribution shift"


def shift_lines(report: ReportFile, name: Callable[[str], str] = str) -> list[str]:
    """Per model whose canary's sensitive tier saw its answers shift tonight: what it saw.

    Each line follows ``canary: distribution shift — MODEL:`` (:data:`SHIFT`): the
    probe, its p-value and what it does. A shift flips no claim; the model's
    cells were measured in full.
    """
    return [
        f"{name(c.subject_key)}: {c.sensitive.line.removeprefix('distribution shift: ')}"
        for c in report.canary
        if c.sensitive is not None and c.sensitive.status == "shift"
    ]


def alarm_lines(report: ReportFile, name: Callable[[str], str] = str) -> list[str]:
    """One line per cell whose change detector alarmed tonight (no canary needed).

    ``name`` formats a model or a task class (a code span in markdown).
    """
    found = []
    for cell in report.cells:
        epoch = cell.epoch
        if epoch is None or epoch.alarm is None:
            continue
        change, held = ("drop", "strength") if epoch.alarm == "down" else ("rise", "weakness")
        mine = f"/{cell.subject_key}/{cell.task_class}"
        retired = any(r.claim_id.endswith(mine) and r.reason == "falsified" for r in report.retired)
        said = (
            f"a held {held} is retired and a new epoch began"
            if retired
            else ("a new epoch began (no claim was held)")
        )
        found.append(
            f"the change detector saw a {change} in {name(cell.subject_key)} · "
            f"{name(cell.task_class)} (now {to_fixed_2(epoch.pass_rate)} over {epoch.n} cases); "
            f"{said}"
        )
    return found


def report_header(report: ReportFile) -> str:
    """What the sweep printed before its first call: the report id, the pool, the spend bound."""
    lines = [f"sweep {report.report_id} at {report.observed_at}", "pool:"]
    lines += [
        f"  {member.model}  ({member.origin})"
        + (f"  SKIPPED: {member.skipped}" if member.skipped else "")
        for member in report.pool
    ]
    lines.append(f"worst-case authorized spend: {usd_or_unbounded(report.worst_case_usd)}")
    return fit("\n".join(lines))


def answered(cell: CellRecord) -> str:
    """``12/30 answered``: the cases an incomplete cell measured, of those it asked."""
    unscored = f", {cell.unscored_n} unscored" if cell.unscored_n else ""
    repeats = f" x{cell.repeats}" if cell.repeats else ""
    return f"{cell.n + (cell.unscored_n or 0)}/{cell.planned_n} answered{repeats}{unscored}"


def _numbers(cell: CellRecord) -> str:
    """A cell's numbers: what it counted, its rate and interval (none for an outage), its cost."""
    total = cell.total_cost_usd
    cost = "unpriced" if cell.unpriced_runs or total is None else usd(total)
    if not cell.complete:
        found = cell.answered_estimate
        if found is None:
            return f"{answered(cell)}  {cost}"
        rate, (low, high) = found
        return (
            f"{answered(cell)}: passRate {to_fixed_2(rate)} "
            f"[{to_fixed_2(low)}, {to_fixed_2(high)}] over those  {cost}"
        )
    low, high = cell.wilson95
    interval = f"[{to_fixed_2(low)}, {to_fixed_2(high)}]"
    epoch = cell.epoch
    if epoch is not None:
        # tonight's count, then what the gate decided on: the epoch's pooled estimate
        counted = f"tonight {_count(cell).partition(' of ')[0]}"
        return f"{counted}  epoch {to_fixed_2(epoch.pass_rate)} {interval} n={epoch.n}  {cost}"
    return f"{_count(cell)}  passRate {to_fixed_2(cell.pass_rate)} {interval}  {cost}"


def summary_text(report: ReportFile, git_commit: str | None = None) -> str:
    """The human summary of a report: cells, claims, retirements, commit, spend."""
    lines = ["cells:"]
    for cell in report.cells:
        lines += _cell_lines(cell)
    claims, retired = report.claims, report.retired
    if report.reused_runs:
        lines.append(
            f"reused {report.reused_runs} journaled run{'s' if report.reused_runs != 1 else ''} "
            "(paid by an earlier, unfinished sweep of this night)"
        )
    lines += _batched_lines(report)
    lines.append(f"claims: {len(claims)}")
    for claim in claims:
        lines += wrapped(f"+\xa0{claim['id']}: {claim['statement']}", "  ", "      ")
    archived = [entry for entry in retired if entry.action == "archived"]
    lines.append(f"retired: {len(report.retired_beliefs)} (beliefs that changed)")
    for entry in archived:
        lines += wrapped(f"-\xa0{entry.claim_id}: archived ({entry.reason})", "  ", "      ")
    if report.remeasured:
        count = len(report.remeasured)
        lines.append(
            f"re-measured: {count} claim{'s' if count != 1 else ''} renewed by tonight's, "
            "the same belief"
        )
    for canary in report.canary:
        lines += _canary_lines(canary)
    if report.committed_version is not None:
        git = f" [git {git_commit[:12]}]" if git_commit else ""
        lines.append(f"committed: store v{report.committed_version}{git}")
    elif claims or retired:
        lines.append("not committed")
    else:
        lines.append("nothing to commit")
    unpriced = sum(cell.unpriced_runs or 0 for cell in report.cells)
    lines.append(
        f"spend: {usd(report.spent_usd)} debited"
        + (
            f" (+ {unpriced} unpriced run{'s' if unpriced != 1 else ''}, cost unknown)"
            if unpriced
            else ""
        )
        + f"; worst case authorized {usd_or_unbounded(report.worst_case_usd)}"
    )
    return fit("\n".join(lines))


def _cell_lines(cell: CellRecord) -> list[str]:
    """A cell's name, then its numbers, each wrapped to 80 columns.

    (A model id of 30 characters and a task class of 20 would push one long line past
    any terminal.)
    """
    head = f"{cell.subject_key} · {cell.task_class}: {cell.outcome}"
    if cell.incomplete_reason:
        head += f" ({cell.incomplete_reason})"
    if cell.newer_night:
        head += f" (not decided: the store holds a newer night, {cell.newer_night})"
    for prior in cell.prior_stands or ():
        head += f"; prior {prior.polarity} stands: {prior.claim_id}"
    lines = wrapped(head, "  ", "      ") + wrapped(_numbers(cell), "    ")
    if cell.epoch is not None:
        lines += wrapped(epoch_text(cell.epoch), "    ")
    if cell.first_error:
        lines += wrapped(f"first error: {cell.first_error}", "    ")
    return lines


def _canary_lines(canary: CanaryRecord) -> list[str]:
    """What a member's canary said tonight (and its sensitive tier, when it has one)."""
    count = len(canary.flipped)
    flipped = f", {count} claim{'s' if count != 1 else ''} flipped stale" if count else ""
    words = CANARY_WORDS.get(canary.status, canary.status)
    why = f" ({canary.reason})" if canary.reason else ""
    lines = [f"canary {canary.subject_key}: {words}{why}{flipped}"]
    if canary.sensitive is not None:
        dropped = (
            "; its baselines are dropped with the drift: kb canary --calibrate SPEC"
            if canary.status == "drift" and canary.sensitive.probes
            else ""
        )
        lines += wrapped(f"sensitive: {canary.sensitive.line}{dropped}", "  ", "    ")
    return lines


def _batched_lines(report: ReportFile) -> list[str]:
    """What went in batches tonight (batch mode): how many runs, which batches, at what cost.

    The cost has six decimals: a batched night of a small model often costs less than
    the $0.0001 the spend line shows.
    """
    batched = [run for run in report.runs or () if run.batch]
    if not batched:
        return []
    ids = list(dict.fromkeys(run.batch for run in batched if run.batch))
    answered = sum(1 for run in batched if run.status == "ok")
    runs = f"{len(batched)} run{'s' if len(batched) != 1 else ''}"
    batches = f"{len(ids)} batch{'es' if len(ids) != 1 else ''}"
    cost = sum(run.cost_usd for run in batched)
    return wrapped(
        f"batched: {runs} in {batches} ({', '.join(ids)}), {answered} answered; "
        f"${cost:.6f} at the batch price",
        more="  ",
    )


def sweep_markdown(
    report: ReportFile, store_changes: str | None, weak_judges: Sequence[str] = ()
) -> str:
    """``kb sweep --summary``: drifts and alarms, what the commit changed, then the cells.

    ``store_changes`` is ``kb diff --markdown`` of the sweep's own commit
    (``None`` when nothing was committed): it leads with falsified claims,
    drifts, new and lost claims, and counts re-measurements that changed no
    belief in one line. Every name and reason is inert (:mod:`kb.markdown`): a
    model, a dataset or a spec chose them. ``weak_judges``: the lines of
    :func:`kb.judging.weak_judges_of` (judges people's labels say not to trust).
    """
    lines = [f"## kb sweep {code_span(report.report_id)}", ""]
    drift = drift_line(report, code_span)
    if drift is not None:
        lines += [f"> **Drift:** {drift}.", ""]
    for line in alarm_lines(report, code_span):
        lines += [f"> **Alarm:** {line}", ""]
    for line in shift_lines(report, code_span):
        lines += [f"> **{SHIFT}** — {line}", ""]
    for line in weak_judges:
        lines += [f"> **Weak judge:** {code_span(line.removeprefix('weak judge: '))}", ""]
    lines += [f"Observed {report.observed_at}; spent {usd(report.spent_usd)}.", ""]
    lines.append(store_changes if store_changes is not None else "Nothing was committed.\n")
    lines += [
        "### Cells",
        "",
        "| model | task class | pass rate | 95% interval | n | outcome |",
        "|---|---|---:|---|---:|---|",
    ]
    lines += [_markdown_row(cell) for cell in report.cells]
    lines.append("")
    if report.canary:
        tiered = any(c.sensitive is not None for c in report.canary)
        head = "| canary | status | claims flipped stale |"
        head += " sensitive tier |" if tiered else ""
        lines += [head, "|---|---|---:|" + ("---|" if tiered else "")]
        lines += [
            f"| {table_code(c.subject_key)} | {CANARY_WORDS.get(c.status, c.status)} | "
            f"{len(c.flipped)} |"
            + (
                f" {table_code(c.sensitive.line) if c.sensitive is not None else '—'} |"
                if tiered
                else ""
            )
            for c in report.canary
        ]
        lines.append("")
    return "\n".join(lines)


def _markdown_row(cell: CellRecord) -> str:
    """One cell of the summary's table (an incomplete one: answered/asked, see ``_numbers``)."""
    if not cell.complete:
        found = cell.answered_estimate
        rate, interval = ("—", "—") if found is None else _shown(found[0], found[1])
        count = answered(cell)
        reason = cell.incomplete_reason
        outcome = f"incomplete: {table_code(reason)}" if reason else "incomplete"
    elif cell.epoch is not None:  # what the gate decided on: the epoch's pooled estimate
        rate, interval = _shown(cell.epoch.pass_rate, cell.wilson95)
        count, outcome = f"{cell.epoch.n} ({cell.n} tonight)", str(cell.outcome)
    else:
        rate, interval = _shown(cell.pass_rate, cell.wilson95)
        count, outcome = f"{cell.n}/{cell.planned_n}", str(cell.outcome)
    if cell.newer_night:
        outcome += f" (not decided: newer night {table_code(cell.newer_night)})"
    return (
        f"| {table_code(cell.subject_key)} | {table_code(cell.task_class)} | {rate} | "
        f"{interval} | {count} | {outcome} |"
    )


def _shown(rate: float, interval: tuple[float, float]) -> tuple[str, str]:
    low, high = interval
    return to_fixed_2(rate), f"{to_fixed_2(low)}–{to_fixed_2(high)}"
