"""The HTML report: one self-contained page a reviewer can open, click and share.

Rendered from the report as data (a :class:`ReportFile` with its ``runs``),
so a sweep's page and ``kb report``'s page of the same night are the same page.
No script and no fetch: clicking a heatmap cell follows an in-page link and
CSS ``:target`` reveals that cell's cases (verdict, grader reasons, output,
error). Each cell shows its change since the previous report of the same
cell and a trend over up to ten earlier reports (``history``), and an
incomplete cell shows its cause, never a bare 0.00.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kb.money import usd
from kb.store.canonical import to_fixed_2
from kb.store.changes import CellAlarm, cell_alarms
from kb.store.records import CellRecord, ReportFile, RunRecord

OUTCOME_COLOURS = {
    "strength": "#1a7f37",
    "weakness": "#cf222e",
    "none": "#57606a",
    "incomplete": "#9a6700",
}
TREND_POINTS = 10


@dataclass(frozen=True)
class CellPoint:
    """One earlier report's figure for a cell (for deltas and trends)."""

    observed_at: str
    report_id: str
    pass_rate: float
    complete: bool


History = Mapping[tuple[str, str], Sequence[CellPoint]]
"""(subject key, task class) → earlier points, oldest first."""


def cell_history(reports: Sequence[ReportFile]) -> History:
    """Each cell's earlier points (oldest first) from earlier reports."""
    history: dict[tuple[str, str], list[CellPoint]] = {}
    for report in reports:
        for cell in report.cells:
            history.setdefault((cell.subject_key, cell.task_class), []).append(
                CellPoint(report.observed_at, report.report_id, cell.shown_rate, cell.complete)
            )
    return history


def heat_colour(rate: float) -> str:
    """Red (0) through amber to green (1)."""
    return f"hsl({round(rate * 120)}, 65%, 86%)"


def _sparkline(points: Sequence[float]) -> str:
    """An inline SVG of pass rates over time (the last point is tonight)."""
    if len(points) < 2:
        return ""
    width, height = 80, 18
    step = width / (len(points) - 1)
    coords = " ".join(
        f"{i * step:.1f},{height - 2 - rate * (height - 4):.1f}" for i, rate in enumerate(points)
    )
    last_x, last_y = coords.split()[-1].split(",")
    return (
        f'<svg class="trend" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="trend over {len(points)} reports">'
        f'<polyline points="{coords}" fill="none" stroke="#57606a" stroke-width="1.5"/>'
        f'<circle cx="{last_x}" cy="{last_y}" r="2.5" fill="#1f2328"/></svg>'
    )


def _delta(cell: CellRecord, earlier: Sequence[CellPoint]) -> str:
    measured = [p for p in earlier if p.complete]
    if not measured:
        return '<div class="delta new">first measurement</div>'
    previous = measured[-1]
    change = cell.shown_rate - previous.pass_rate
    if to_fixed_2(abs(change)) == "0.00":  # a change that rounds to nothing is shown as none
        change = 0.0
    arrow = "▲" if change > 0 else "▼" if change < 0 else "="
    sign = "+" if change > 0 else "−" if change < 0 else "±"
    kind = "up" if change > 0 else "down" if change < 0 else "same"
    return (
        f'<div class="delta {kind}" title="previous: {html.escape(previous.report_id)}">'
        f"{arrow} {sign}{to_fixed_2(abs(change))} vs {html.escape(previous.observed_at[:10])}</div>"
    )


def _short_claim(claim_id: str) -> str:
    """``…/local:smollm2/extraction``: the report id is the page's title already."""
    parts = claim_id.split("/", 1)
    return "…/" + parts[1] if len(parts) == 2 else claim_id


ALARM_BACKGROUND = "#ffebe9"
"""An alarm cell's background: never the pass colour its rate would give."""
ALARM_RED = "#cf222e"


def alarm_badge(alarm: CellAlarm) -> str:
    """The badge an alarm cell carries (the report's heatmap and the site's)."""
    return (
        f'<div class="alarm-badge" data-direction="{alarm.direction or "falsified"}" '
        f'title="{html.escape(alarm.explanation)}">{html.escape(alarm.badge)}</div>'
    )


ALARM_LEGEND = (
    f'<li><span class="swatch" style="background:{ALARM_BACKGROUND};'
    f'border:2px solid {ALARM_RED}"></span>ALARM: the change detector alarmed tonight '
    "(▼ a drop, ▲ a rise) or a held claim was falsified; shown in red whatever the rate</li>"
)


def cell_parts(
    cell: CellRecord,
    earlier: Sequence[CellPoint],
    alarm: CellAlarm | None = None,
    claim_href: Callable[[str], str | None] | None = None,
) -> tuple[str, str]:
    """A heatmap cell as ``(the td's class and style attributes, its content)``.

    What the report's heatmap and the site's pages both draw: the rate the gate
    judged with its interval, the outcome, the change since the previous report,
    the trend, the claim (a link where ``claim_href`` gives a page), a prior
    claim that stands, the claims an alarm retired, and an incomplete cell's
    cause instead of a bare 0.00.
    """
    esc = html.escape
    outcome = cell.outcome
    n, planned = cell.n, cell.planned_n
    low, high = cell.wilson95
    if outcome == "incomplete":
        figure = (
            f'<div class="rate muted">{to_fixed_2(cell.pass_rate)}</div>'
            f'<div class="note">on {n} of {planned} cases: incomplete</div>'
            if n
            else '<div class="rate muted">no result</div>'
        )
        style = (
            ' class="cell incomplete alarm"' if alarm is not None else ' class="cell incomplete"'
        )
        why = f'<div class="why">{esc(cell.incomplete_reason or "")}</div>'
    else:
        rate = cell.shown_rate
        tonight = f"tonight {round(cell.pass_rate * n)}/{n}"
        count = f"epoch n={cell.epoch.n} · {tonight}" if cell.epoch is not None else f"n={n}"
        figure = (
            f'<div class="rate">{to_fixed_2(rate)}</div>'
            f'<div class="note">{count} · 95% [{to_fixed_2(low)}, {to_fixed_2(high)}]</div>'
        )
        background = ALARM_BACKGROUND if alarm is not None else heat_colour(rate)
        marked = "cell alarm" if alarm is not None else "cell"
        style = f' class="{marked}" style="background:{background}"'
        why = ""
    trend = (
        _sparkline([p.pass_rate for p in earlier if p.complete][-TREND_POINTS:] + [cell.shown_rate])
        if outcome != "incomplete"
        else ""
    )
    delta = _delta(cell, earlier) if outcome != "incomplete" else ""
    claim_line = "".join(
        _claim_div(f"claim {name_html(_short_claim(claim))}", claim, claim_href)
        for claim in ([cell.claim_id] if cell.claim_id else [])
    )
    for prior in cell.prior_stands or ():
        hysteresis = " (hysteresis)" if outcome != "incomplete" else ""
        claim_line += _claim_div(
            f"prior {esc(prior.polarity)} stands{hysteresis}", prior.claim_id, claim_href
        )
    for retired in alarm.falsified if alarm is not None else ():
        claim_line += (
            f'<div class="claim retired" title="{esc(retired)}">retired '
            f"{name_html(_short_claim(retired))} (falsified)</div>"
        )
    if cell.repeats:
        flaky = sum(1 for case in cell.cases or () if case.stability == "flaky")
        claim_line = f'<div class="note">x{cell.repeats} repeats · {flaky} flaky</div>' + claim_line
    colour = OUTCOME_COLOURS.get(outcome, "#57606a")
    badge = alarm_badge(alarm) if alarm is not None else ""
    content = (
        f'{badge}{figure}<div class="outcome" style="color:{colour}">{esc(outcome)}</div>'
        f"{delta}{trend}{why}{claim_line}"
    )
    return style, content


_SEPARATOR = re.compile(r"([:/@._-])")


def name_html(text: str) -> str:
    """A name or id, escaped, that may wrap only after a separator (``:`` ``/`` ``-`` …).

    A narrow screen breaks ``scripted:reference-strong`` as ``scripted:`` /
    ``reference-`` / ``strong``, never inside a word.
    """
    return _SEPARATOR.sub(r"\1<wbr>", html.escape(text))


def _claim_div(text: str, claim_id: str, claim_href: Callable[[str], str | None] | None) -> str:
    esc = html.escape
    href = claim_href(claim_id) if claim_href is not None else None
    shown = f'<a href="{esc(href)}">{text}</a>' if href else text
    return f'<div class="claim" title="{esc(claim_id)}">{shown}</div>'


def _cell_td(
    index: int, cell: CellRecord, earlier: Sequence[CellPoint], alarm: CellAlarm | None = None
) -> str:
    esc = html.escape
    style, content = cell_parts(cell, earlier, alarm)
    return (
        f'<td{style} data-outcome="{esc(cell.outcome)}" data-cell="cell-{index}">'
        f'<a href="#cell-{index}" aria-label="cases of {esc(cell.subject_key)} '
        f'{esc(cell.task_class)}">{content}</a></td>'
    )


def _case_rows(cell: CellRecord, runs: Sequence[RunRecord]) -> str:
    esc = html.escape
    key, task_class = cell.subject_key, cell.task_class
    mine = [
        r
        for r in runs
        if r.kind == "target" and r.subject_key == key and r.task_class == task_class
    ]
    judges: dict[tuple[str, int], list[RunRecord]] = {}
    for r in runs:
        if r.judged == key and r.task_class == task_class:
            judges.setdefault((r.case, r.repeat), []).append(r)
    stability = {c.name: c.stability for c in cell.cases or ()}
    if not mine:
        return '<p class="none">No evidence for these cases (written with --no-evidence?).</p>'
    rows = []
    for run in mine:
        if run.status != "ok":
            verdict, kind = run.status.upper(), "error"
        else:
            verdict, kind = run.verdict_word, run.verdict_word.lower()
        reasons = "".join(
            f'<li class="{"ok" if v.passed else "no"}">{esc(v.grader)}: {esc(v.reason)}</li>'
            for v in run.verdicts
        )
        said = judges.get((run.case, run.repeat), [])
        for judge in said:
            who = f"judge {judge.subject_key}" if len(said) > 1 else "judge"
            reasons += f'<li class="judge">{esc(who)} said: {esc(judge.output)}</li>'
        cut = " (cut at 4,000 characters)" if run.output_sha256 else ""
        error = f'<div class="error">error: {esc(run.error)}</div>' if run.error else ""
        repeat = f" #{run.repeat + 1}" if stability else ""
        label = stability.get(run.case, "")
        rows.append(
            f'<tr class="{kind}"><td class="case">{esc(run.case)}{repeat}'
            + (f'<div class="stability {label}">{label}</div>' if label else "")
            + f'</td><td class="verdict">{verdict}</td><td><ul class="reasons">{reasons}</ul>'
            f'{error}</td><td><pre class="output">{esc(run.output)}</pre>{cut}</td></tr>'
        )
    return (
        '<table class="cases-table"><thead><tr><th>case</th><th>verdict</th>'
        "<th>graders</th><th>output</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


STYLE = """
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em;
       color: #1f2328; max-width: 1400px; }
h1 { font-size: 1.4em; margin: 0 0 .2em; overflow-wrap: anywhere; }
h2 { font-size: 1.1em; margin: 1.6em 0 .5em; }
.meta { color: #57606a; margin: 0 0 1em; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; }
th, td { border: 1px solid #d0d7de; padding: 0; vertical-align: top; text-align: left; }
#heatmap th { padding: .5em .7em; background: #f6f8fa; white-space: nowrap; }
#heatmap td a { display: block; padding: .5em .7em; color: inherit; text-decoration: none;
                min-width: 10em; }
#heatmap td a:hover, #heatmap td a:focus { outline: 2px solid #0969da; outline-offset: -2px; }
th.drifted { box-shadow: inset 4px 0 0 #b35900; }
.drift { color: #8a4500; font-size: 0.8em; font-weight: 600; }
.drift-banner { background: #fff4e5; border-left: 4px solid #b35900; padding: 0.5em 0.8em; }
td.alarm { box-shadow: inset 0 0 0 3px #cf222e; }
.alarm-badge { display: inline-block; background: #cf222e; color: #fff; font-weight: 700;
               font-size: .75em; letter-spacing: .04em; padding: .05em .45em;
               border-radius: 3px; margin-bottom: .2em; }
.claim.retired { color: #a40e26; }
td.incomplete { background: repeating-linear-gradient(45deg, #f6f8fa, #f6f8fa 6px,
                #eaeef2 6px, #eaeef2 12px); }
td.empty { padding: .5em .7em; color: #8c959f; }
.rate { font-size: 1.45em; font-weight: 600; }
.rate.muted { color: #57606a; font-size: 1.1em; }
.note, .why, .claim, .delta { font-size: .82em; color: #424a53; }
.why { color: #9a6700; max-width: 22em; }
.claim { overflow-wrap: anywhere; max-width: 22em; }
.outcome { font-weight: 700; text-transform: uppercase; font-size: .8em; letter-spacing: .03em; }
.delta.up { color: #1a7f37; } .delta.down { color: #cf222e; }
.trend { display: block; margin: .2em 0; }
.legend { display: flex; flex-wrap: wrap; gap: .4em 1.4em; font-size: .85em; color: #424a53;
          margin: .6em 0 0; padding: 0; list-style: none; }
.swatch { display: inline-block; width: .9em; height: .9em; vertical-align: -.1em;
          border: 1px solid #d0d7de; margin-right: .3em; }
section.cases { display: none; border: 1px solid #d0d7de; border-radius: 6px;
                padding: .8em 1em; margin: 1em 0; }
section.cases:target { display: block; }
.hint { color: #57606a; font-size: .9em; }
.cases-table td, .cases-table th { padding: .35em .5em; }
.cases-table tr.pass .verdict { color: #1a7f37; font-weight: 700; }
.cases-table tr.fail .verdict { color: #cf222e; font-weight: 700; }
.cases-table tr.error .verdict { color: #9a6700; font-weight: 700; }
.cases-table tr.unscored .verdict { color: #57606a; font-weight: 700; }
.reasons { margin: 0; padding-left: 1.1em; }
.reasons li.no { color: #cf222e; }
.output { margin: 0; white-space: pre-wrap; overflow-wrap: anywhere; max-width: 40em;
          max-height: 12em; overflow: auto; font-size: .88em; }
.error { color: #9a6700; overflow-wrap: anywhere; }
.stability { font-size: .78em; } .stability.flaky { color: #9a6700; font-weight: 600; }
code { overflow-wrap: anywhere; }
@media (max-width: 700px) {
  body { margin: .8em; font-size: 13px; }
  #heatmap td a { min-width: 8em; }
  #heatmap th[scope=row] { white-space: normal; overflow-wrap: anywhere; max-width: 7em; }
  .output { max-width: 70vw; }
}
"""


def _alarm_banner(report: ReportFile) -> str:
    from kb.views.report_text import alarm_lines

    return "".join(
        f'<p class="drift-banner" role="alert"><strong>Alarm:</strong> {html.escape(line)}.</p>'
        for line in alarm_lines(report)
    )


def _drift_banner(report: ReportFile) -> str:
    from kb.views.report_text import SHIFT, drift_line, shift_lines

    shifts = "".join(
        f'<p class="drift-banner shift" role="alert"><strong>{SHIFT}</strong> — '
        f"{html.escape(line)}.</p>"
        for line in shift_lines(report)
    )
    drift = drift_line(report, html.escape)
    if drift is None:
        return shifts
    return f'<p class="drift-banner" role="alert"><strong>Drift:</strong> {drift}.</p>' + shifts


def night_lists(report: ReportFile, claim_href: Callable[[str], str | None] | None = None) -> str:
    """The night's claims, retirements, canary and pool as headed lists (``<h2>`` each).

    ``claim_href``: where a claim's page is (the site); the report names ids only.
    """
    esc = html.escape

    def claim(claim_id: str) -> str:
        href = claim_href(claim_id) if claim_href is not None else None
        code = f"<code>{name_html(claim_id)}</code>"
        return f'<a href="{esc(href)}">{code}</a>' if href else code

    retired = (
        "".join(
            f"<li>{claim(r.claim_id)} — "
            + (
                f"re-measured: superseded by {claim(r.by)}"
                if r.by
                else f"archived ({esc(r.reason or '')})"
            )
            + "</li>"
            for r in report.retired
        )
        or "<li>none</li>"
    )
    claims = (
        "".join(
            f"<li>{claim(str(c['id']))} — {esc(str(c['statement']))}</li>" for c in report.claims
        )
        or "<li>none</li>"
    )
    canary = "".join(
        f"<li><code>{esc(e.subject_key)}</code> — {esc(e.status)}"
        + (f", flipped {len(e.flipped)} stale" if e.flipped else "")
        + f", fingerprint <code>{esc(e.fingerprint[:16])}</code>"
        + (f"; sensitive tier: {esc(e.sensitive.line)}" if e.sensitive is not None else "")
        + "</li>"
        for e in report.canary
    )
    pool = "".join(
        f"<li><code>{esc(m.model)}</code> — {esc(m.origin)}"
        + (f" <em>(skipped: {esc(m.skipped)})</em>" if m.skipped else "")
        + "</li>"
        for m in report.pool
    )
    return (
        f'<h2>Claims</h2><ul id="night-claims">{claims}</ul>'
        f'<h2>Retired</h2><ul id="night-retired">{retired}</ul>'
        + (f"<h2>Canary</h2><ul>{canary}</ul>" if canary else "")
        + f"<h2>Pool</h2><ul>{pool}</ul>"
    )


def report_html(report: ReportFile, history: History | None = None) -> str:
    """The page for a report with its ``runs`` (``history``: earlier points per cell)."""
    esc = html.escape
    history = history or {}
    cells = list(report.cells)
    runs = list(report.runs or ())
    classes = list(dict.fromkeys(c.task_class for c in cells))
    members = list(dict.fromkeys(c.subject_key for c in cells))
    index_of = {(c.subject_key, c.task_class): i for i, c in enumerate(cells)}
    drifted = {c.subject_key: c for c in report.canary if c.status == "drift"}
    alarms = cell_alarms(report)
    rows = []
    for member in members:
        mark = ""
        if member in drifted:
            flipped = len(drifted[member].flipped)
            mark = (
                '<div class="drift" title="the canary saw the provider change the model">'
                f"drift · {flipped} claim{'s' if flipped != 1 else ''} stale</div>"
            )
        marked = ' class="drifted"' if mark else ""
        tds = [f'<th scope="row"{marked}>{esc(member)}{mark}</th>']
        for task_class in classes:
            found = index_of.get((member, task_class))
            if found is None:
                tds.append('<td class="empty">not measured</td>')
                continue
            earlier = history.get((member, task_class), ())
            alarm = alarms.get((member, task_class))
            tds.append(_cell_td(found, cells[found], earlier, alarm))
        rows.append("<tr>" + "".join(tds) + "</tr>")
    sections = "".join(
        f'<section class="cases" id="cell-{i}"><h3>{esc(c.subject_key)} · '
        f"{esc(c.task_class)}: {esc(c.outcome)}</h3>"
        + (
            f'<p class="why">{esc(c.incomplete_reason)}'
            + (f" — first error: {esc(c.first_error)}" if c.first_error else "")
            + "</p>"
            if c.incomplete_reason
            else ""
        )
        + _case_rows(c, runs)
        + '<p><a href="#heatmap">↑ back to the heatmap</a></p></section>'
        for i, c in enumerate(cells)
    )
    rule = report.gate.describe()
    legend = (
        '<ul class="legend">'
        + "".join(
            f'<li><span class="swatch" style="background:{colour}"></span>{name}</li>'
            for name, colour in OUTCOME_COLOURS.items()
        )
        + '<li><span class="swatch" style="background:linear-gradient(90deg,'
        f'{heat_colour(0)},{heat_colour(0.5)},{heat_colour(1)})"></span>'
        "background: pass rate 0 → 1</li>"
        '<li><span class="swatch" style="background:repeating-linear-gradient(45deg,#f6f8fa,'
        '#f6f8fa 3px,#eaeef2 3px,#eaeef2 6px)"></span>incomplete: no claim, cause shown</li>'
        + ALARM_LEGEND
        + "<li>▲/▼ change since the previous report · line: up to 10 earlier reports</li>"
        f"<li>{esc(rule)}</li></ul>"
    )
    committed = (
        f"store v{report.committed_version}"
        if report.committed_version is not None
        else "not committed"
    )
    header = "<th>model</th>" + "".join(f'<th scope="col">{esc(c)}</th>' for c in classes)
    unpriced_runs = sum(cell.unpriced_runs or 0 for cell in report.cells)
    unpriced = (
        f" (+ {unpriced_runs} unpriced run{'s' if unpriced_runs != 1 else ''}, cost unknown)"
        if unpriced_runs
        else ""
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kb sweep {esc(report.report_id)}</title>
<style>{STYLE}</style></head><body>
<h1>kb sweep <code>{esc(report.report_id)}</code></h1>
<p class="meta">observed {esc(report.observed_at)} · spent {esc(usd(report.spent_usd))}{unpriced}
· {esc(committed)}</p>
{_drift_banner(report)}{_alarm_banner(report)}
<h2>Pass rate by model and task class</h2>
<p class="hint">Click a cell to see its cases: verdicts, grader reasons, outputs, errors.</p>
<div class="scroll"><table id="heatmap"><thead><tr>{header}</tr></thead>
<tbody>{"".join(rows)}</tbody></table></div>
{legend}
{sections}
{night_lists(report)}
</body></html>
"""
