"""``kb site DIR``: a static report site from the evidence, readable from ``file://``.

Pages (every one self-contained: inline style, a little inline script, no
fetch of anything):

* ``index.html`` — every night newest first (cells, claims, retirements,
  spend, a drift marker), the claims that steer today, and a form that
  compares any two nights;
* ``night-<report>.html`` — one night: model × task class pass rates, then
  every case with its prompt and every model's answer side by side (verdict,
  grader reasons — what was expected —, output, tokens, cost, params), with
  filters: failures only, flaky only, changed since the model's previous
  night;
* ``claim-<id hash>.html`` — one live claim: statement, numbers, its epoch,
  and the nights and cases it rests on;
* ``compare.html?a=…&b=…`` — two nights cell by cell;
* ``models.html`` — every pair of models per task class on their shared cases
  (``kb compare``), each discordant case linked to both answers.

Built from the evidence files in the work tree (``kb-evidence/`` or the
store's recorded evidence directories); a night whose evidence kb cannot
read is left out with a warning, never fatal.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kb.card import usable_claims
from kb.compare import compare_models
from kb.errors import ConfigError
from kb.money import usd
from kb.schema import subject_key
from kb.store.canonical import to_fixed_2
from kb.store.changes import cell_alarms
from kb.store.epochs import EpochsFile
from kb.store.evidence import REPORT_SUFFIX, evidence_stem, load_evidence
from kb.store.filestore import KnowledgeStore
from kb.store.models import ModelClaim
from kb.store.records import CellRecord, ReportFile, RunRecord
from kb.views.decision import claim_interval, newest_first
from kb.views.html import ALARM_BACKGROUND, ALARM_LEGEND, alarm_badge, heat_colour
from kb.views.report_text import EPOCH_WORDS, alarm_lines, drift_line
from kb.views.site_models import MODELS_PAGE, case_anchor, models_page_body

esc = html.escape

STYLE = """
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
  padding: 12px; max-width: 1200px; color: #1f2328; }
h1 { font-size: 1.3em; margin: 0.2em 0 0.4em; overflow-x: auto; }
.id { display: block; overflow-x: auto; white-space: nowrap; }
h2 { font-size: 1.1em; margin-top: 1.4em; }
section.pair h3 { font-size: 1em; }
a { color: #0550ae; }
.name { white-space: nowrap; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 0.4em 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; white-space: nowrap; }
.meta { color: #57606a; }
.pass { color: #1a7f37; font-weight: 600; } .fail { color: #cf222e; font-weight: 600; }
.error { color: #9a6700; font-weight: 600; }
.drift { color: #8a4500; font-weight: 600; }
.banner { background: #fff4e5; border-left: 4px solid #b35900; padding: 0.5em 0.8em; }
td.alarm { box-shadow: inset 0 0 0 3px #cf222e; }
.alarm-badge { display: block; width: fit-content; margin: 0 0 2px auto; background: #cf222e;
  color: #fff; font-weight: 700; font-size: 0.75em; letter-spacing: 0.04em; padding: 0 0.45em;
  border-radius: 3px; white-space: nowrap; }
ul.legend { list-style: none; padding: 0; font-size: 0.85em; color: #424a53; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; vertical-align: -0.1em;
  margin-right: 0.3em; }
pre { white-space: pre-wrap; overflow-wrap: break-word; margin: 0; max-height: 14em;
  overflow-y: auto; font-size: 0.9em; }
pre.params { overflow-wrap: normal; overflow-x: auto; }
section.case { border-top: 1px solid #d0d7de; padding-top: 0.4em; }
.filters label { margin-right: 1em; white-space: nowrap; }
.prompt { background: #f6f8fa; padding: 0.4em; white-space: pre-wrap; }
.prose { overflow-wrap: break-word; }
/* ids and errors quoting them (a batch id, a provider's message) wrap anywhere rather
   than widen their column past the screen */
.breakable { overflow-wrap: anywhere; white-space: normal; }
small.batch { display: block; text-align: left; }
td.incomplete { background: repeating-linear-gradient(45deg, #f6f8fa, #f6f8fa 6px,
  #eaeef2 6px, #eaeef2 12px); max-width: 22em; }
ol.timeline { display: flex; flex-wrap: wrap; gap: 6px; list-style: none; padding: 0; }
ol.timeline li { width: 11em; border-left: 3px solid #d0d7de; padding: 2px 6px; }
ol.timeline li.new-epoch { border-left-color: #0550ae; }
ol.timeline li.evidence { background: #f6f8fa; }
ol.timeline .bar { background: #eaeef2; height: 8px; margin: 3px 0; }
ol.timeline .bar span { display: block; height: 100%; background: #2da44e; }
ol.timeline .epoch-mark { color: #0550ae; font-size: 0.85em; }
@media (max-width: 640px) {  /* a phone: each answer a card, the answer itself on screen */
  .name { font-size: 0.85em; }
  h1 { font-size: 1.1em; }
  table.answers thead { display: none; }
  table.answers, table.answers tbody, table.answers tr, table.answers td {
    display: block; width: 100%; }
  table.answers tr { border-top: 2px solid #d0d7de; }
  table.answers td { border: none; padding: 2px 4px; }
  table.answers td::before { content: attr(data-label) ": "; font-weight: 600; color: #57606a; }
}
"""


@dataclass(frozen=True)
class Night:
    """One night's report with its runs, and its page."""

    report: ReportFile
    runs: tuple[RunRecord, ...]

    @property
    def stem(self) -> str:
        """The file-safe form of the report id."""
        return evidence_stem(self.report.report_id)

    @property
    def page(self) -> str:
        """The night's page, its name safe in a relative link.

        ``:`` and other URL-significant characters are replaced: ``night-x-2026-11-29T02:00…``
        would otherwise read as a URL scheme.
        """
        return "night-" + re.sub(r"[^A-Za-z0-9._-]", "_", self.stem) + ".html"


def claim_page(claim_id: str) -> str:
    """The page of a claim (ids hold ``/`` and ``:``: the page is named by a hash)."""
    return f"claim-{hashlib.sha256(claim_id.encode()).hexdigest()[:16]}.html"


def collect_nights(store: KnowledgeStore) -> tuple[list[Night], list[str]]:
    """Every night with readable evidence in the store's evidence directories, oldest first."""
    nights: list[Night] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for directory in store.home.evidence_dirs():
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob(f"*{REPORT_SUFFIX}")):
            try:
                report_id = json.loads(path.read_text("utf-8"))["reportId"]
                found = load_evidence(store, str(report_id), directory)
            except (OSError, ValueError, KeyError, TypeError, RecursionError, ConfigError) as exc:
                warnings.append(f"{path.name}: left out ({str(exc)[:160]})")
                continue
            if found is None or found.report is None or report_id in seen:
                continue
            seen.add(report_id)
            nights.append(Night(found.report, tuple(found.runs)))
    nights.sort(key=lambda n: n.report.observed_at)
    return nights, warnings


GENERATOR = "kb site"
"""The ``<meta name="generator">`` of every page: what tells a kb site from other files."""


def site_directory_issue(directory: Path) -> str | None:
    """Why ``kb site`` must not write into ``directory`` (``None``: it may).

    An absent or empty directory, or one whose ``index.html`` kb wrote, may be
    (re)built; anything else — a user's own page called ``index.html`` too —
    is refused, so a site never overwrites what kb did not write.
    """
    if not directory.exists():
        return None
    if not directory.is_dir():
        return f"{directory} is a file, not a directory"
    try:
        if not any(directory.iterdir()):
            return None
        index = (directory / "index.html").read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return f"{directory} holds other files and no kb site: give an empty directory"
    except OSError as exc:
        return f"{directory} cannot be read: {exc.strerror or exc}"
    if f'<meta name="generator" content="{GENERATOR}">' in index[:2000]:
        return None
    return (
        f"{directory}/index.html was not written by kb site: give an empty directory "
        "(kb never overwrites a page it did not write)"
    )


def script_json(value: object) -> str:
    r"""JSON that is inert inside a ``<script>``: no ``</script>``, no ``<!--``, no markup.

    ``<``, ``>`` and ``&`` (and U+2028/U+2029, which end a line in older
    JavaScript) are written as ``\u`` escapes (``\u003c`` …), which JSON and
    JavaScript read back as the same characters.
    """
    text = json.dumps(value, sort_keys=True)
    for raw, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, escaped)
    return text


def _page(title: str, body: str, script: str = "") -> str:
    tail = f"<script>{script}</script>" if script else ""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="{GENERATOR}">\n'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>\n"
        f"{body}\n{tail}</body></html>\n"
    )


def _tonight(cell: CellRecord) -> str:
    """Tonight's own count of a cell (``tonight 18/20``), beside the epoch's pooled rate."""
    return f"tonight {round(cell.pass_rate * cell.n)}/{cell.n}" if cell.n else "no result"


def _drifted(report: ReportFile) -> list[str]:
    return [c.subject_key for c in report.canary if c.status == "drift"]


def index_page(nights: Sequence[Night], claims: Sequence[ModelClaim], as_of: int) -> str:
    """The site's front page."""
    rows = []
    for night in reversed(nights):
        r = night.report
        drift = _drifted(r)
        mark = f' <span class="drift">drift: {esc(", ".join(drift))}</span>' if drift else ""
        alarms = cell_alarms(r)
        if alarms:
            cells = f"{len(alarms)} cell{'s' if len(alarms) != 1 else ''}"
            mark += f' <span class="drift">alarm: {cells}</span>'
        rows.append(
            f'<tr><td class="name"><a href="{esc(night.page)}">{esc(r.report_id)}</a>{mark}</td>'
            f'<td class="name">{esc(r.observed_at[:16])}</td><td class="num">{len(r.cells)}</td>'
            f'<td class="num">{len(r.claims)}</td><td class="num">{len(r.retired)}</td>'
            f'<td class="num">{esc(usd(r.spent_usd))}</td></tr>'
        )
    live = newest_first(usable_claims(claims, as_of))
    claim_rows = []
    for claim in live:
        interval = claim_interval(claim)
        rate = to_fixed_2(claim.metrics["passRate"]) if claim.metrics else "note"
        shown = f"[{to_fixed_2(interval[0])}, {to_fixed_2(interval[1])}]" if interval else "—"
        n = str(claim.metrics["n"]) if claim.metrics else "—"
        claim_rows.append(
            f'<tr><td class="name"><a href="{claim_page(claim.id)}">{esc(claim.subject_key)}</a>'
            f'</td><td class="name">{esc(claim.task_class)}</td><td>{esc(claim.polarity)}</td>'
            f'<td class="num">{rate}</td><td class="num">{shown}</td><td class="num">{n}</td>'
            f'<td class="name">{esc(claim.expires_at[:10])}</td></tr>'
        )
    options = "".join(
        f'<option value="{esc(n.stem)}">{esc(n.report.report_id)}</option>'
        for n in reversed(nights)
    )
    body = (
        "<h1>kb: what the store knows</h1>"
        f'<p class="meta">{len(nights)} nights · {len(live)} claims steer today</p>'
        "<h2>Nights</h2>"
        '<div class="scroll"><table id="nights"><thead><tr><th>report</th><th>observed</th>'
        "<th>cells</th><th>claims</th><th>retired</th><th>spent</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
        f'<p><a href="{MODELS_PAGE}">Models compared</a>: every pair on the cases both measured, '
        "with its interval and the cases where they disagree.</p>"
        '<h2>Compare two nights</h2><form id="compare" action="compare.html">'
        f'<select name="a">{options}</select> <select name="b">{options}</select> '
        '<button type="submit">compare</button></form>'
        "<h2>Claims that steer today</h2>"
        '<div class="scroll"><table id="claims"><thead><tr><th>model</th><th>task class</th>'
        "<th>claim</th><th>rate</th><th>95% interval</th><th>n</th><th>expires</th></tr>"
        "</thead><tbody>" + "".join(claim_rows) + "</tbody></table></div>"
    )
    script = (
        "var s=document.querySelectorAll('#compare select');"
        "if(s.length>1&&s[0].options.length>1){s[0].selectedIndex=1;}"  # A older, B newest
    )
    return _page("kb site", body, script)


def _run_key(run: RunRecord) -> tuple[str, str]:
    return (subject_key(run.model, run.effort), run.case)


def night_page(night: Night, earlier: Sequence[Night]) -> str:
    """One night: the rates, then every case with every model's answer side by side."""
    r = night.report
    previous: dict[tuple[str, str], bool] = {}
    for before in earlier:  # the model's latest earlier verdict on the same case
        for run in before.runs:
            if run.kind == "target":
                previous[_run_key(run)] = run.passed
    classes = list(dict.fromkeys(c.task_class for c in r.cells))
    members = list(dict.fromkeys(c.subject_key for c in r.cells))
    rates = {(c.subject_key, c.task_class): c for c in r.cells}
    drifted = set(_drifted(r))
    alarms = cell_alarms(r)
    head = "".join(f'<th class="name">{esc(t)}</th>' for t in classes)
    grid = []
    for member in members:
        mark = ' <span class="drift">drift</span>' if member in drifted else ""
        tds = [f'<th class="name">{esc(member)}{mark}</th>']
        for task_class in classes:
            cell = rates.get((member, task_class))
            if cell is None:
                tds.append("<td>·</td>")
                continue
            if cell.outcome == "incomplete":  # its cause, never a bare 0.00 (as kb report --html)
                counted = f"on {cell.n} of {cell.planned_n} cases" if cell.n else "no result"
                tds.append(
                    f'<td class="incomplete breakable"><b>{counted}</b> · incomplete<br>'
                    f"<small>{esc(cell.incomplete_reason or '')}</small></td>"
                )
                continue
            rate = cell.shown_rate
            tonight = _tonight(cell)
            pooled = (
                f"epoch {to_fixed_2(rate)} n={cell.epoch.n}"
                if cell.epoch is not None
                else f"{to_fixed_2(rate)} n={cell.n}"
            )
            alarm = alarms.get((member, task_class))
            shown = (
                f'class="num alarm" style="background:{ALARM_BACKGROUND}"'
                if alarm is not None
                else f'class="num" style="background:{heat_colour(rate)}"'
            )
            tds.append(
                f"<td {shown}>{alarm_badge(alarm) if alarm is not None else ''}{pooled}<br>"
                f"<small>{tonight} · {esc(str(cell.outcome))}</small></td>"
            )
        grid.append("<tr>" + "".join(tds) + "</tr>")
    by_case: dict[tuple[str, str], list[RunRecord]] = {}
    for run in night.runs:
        if run.kind == "target":
            by_case.setdefault((run.task_class or "", run.case), []).append(run)
    sections = []
    measured = {
        task_class: [c.subject_key for c in r.cells if c.task_class == task_class]
        for task_class in classes
    }
    for (task_class, case), runs in sorted(by_case.items()):
        ran = {_run_key(run)[0] for run in runs}
        resting = [m for m in measured.get(task_class, []) if m not in ran]
        sections.append(_case_section(task_class, case, runs, previous, resting))
    drift = drift_line(r, esc)
    banner = f'<p class="banner"><strong>Drift:</strong> {drift}.</p>' if drift else ""
    banner += "".join(
        f'<p class="banner alarm"><strong>Alarm:</strong> {esc(line)}.</p>'
        for line in alarm_lines(r)
    )
    body = (
        f'<p><a href="index.html">← all nights</a></p><h1>Night <span class="name">'
        f"{esc(r.report_id)}</span></h1>"
        f'<p class="meta">observed {esc(r.observed_at)} · spent {esc(usd(r.spent_usd))} · '
        f"{len(r.claims)} claims · {len(r.retired)} retired</p>{banner}"
        '<h2>Pass rate by model and task class</h2><p class="meta">What the gate judged: '
        "the epoch's pooled rate over its n cases (several nights), then tonight's own count."
        '</p><div class="scroll"><table id="rates">'
        f"<thead><tr><th>model</th>{head}</tr></thead><tbody>{''.join(grid)}</tbody></table>"
        f'</div><ul class="legend">{ALARM_LEGEND}</ul><h2>Cases</h2>'
        '<p class="filters"><label><input type="checkbox" id="only-failed"> failures only'
        '</label><label><input type="checkbox" id="only-flaky"> flaky only</label>'
        '<label><input type="checkbox" id="only-changed"> changed since the previous night'
        '</label> <span id="shown" class="meta"></span></p>' + "".join(sections)
    )
    script = (
        "function apply(){var f=document.getElementById('only-failed').checked,"
        "k=document.getElementById('only-flaky').checked,"
        "c=document.getElementById('only-changed').checked,n=0,"
        "all=document.querySelectorAll('section.case');"
        "all.forEach(function(s){var show=(!f||s.dataset.failed==='1')&&"
        "(!k||s.dataset.flaky==='1')&&(!c||s.dataset.changed==='1');"
        "s.hidden=!show;if(show)n++;});"
        "document.getElementById('shown').textContent=n+' of '+all.length+' cases';}"
        "['only-failed','only-flaky','only-changed'].forEach(function(i){"
        "document.getElementById(i).addEventListener('change',apply);});apply();"
    )
    return _page(f"kb night {r.report_id}", body, script)


def _case_section(
    task_class: str,
    case: str,
    runs: Sequence[RunRecord],
    previous: Mapping[tuple[str, str], bool],
    resting: Sequence[str] = (),
) -> str:
    """One case: its prompt and expected answer, then each model's answer side by side.

    ``resting``: models measured on this task class tonight that did not run this
    case (an adaptive night runs a rotating part of the cases of a settled cell).
    """
    first = runs[0]
    prompt = first.request.user if first.request is not None else ""
    system = first.request.system if first.request is not None else None
    by_model: dict[str, list[RunRecord]] = {}
    for run in runs:
        by_model.setdefault(_run_key(run)[0], []).append(run)
    failed = flaky = changed = False
    rows = []
    for model, mine in by_model.items():
        verdicts = [run.passed for run in mine]
        failed |= not all(verdicts)
        flaky |= len(set(verdicts)) > 1
        was = previous.get((model, case))
        changed |= was is not None and was != all(verdicts)
        for run in mine:
            status = (
                '<span class="pass">PASS</span>'
                if run.passed
                else '<span class="fail">FAIL</span>'
                if run.status == "ok"
                else f'<span class="error">{esc(run.status.upper())}</span>'
            )
            reasons = "<br>".join(f"{esc(v.grader)}: {esc(v.reason)}" for v in run.verdicts) or esc(
                run.error or ""
            )
            tokens = (
                f"{run.usage.prompt_tokens} / {run.usage.completion_tokens}"
                if run.usage is not None
                else "—"
            )
            params = json.dumps(run.params, sort_keys=True) if run.params else "—"
            repeat = f" #{run.repeat + 1}" if len(mine) > 1 else ""
            batched = (
                f'<small class="meta batch breakable">batch {esc(run.batch)}</small>'
                if run.batch
                else ""
            )
            rows.append(
                f'<tr><td class="name" data-label="model">{esc(model)}{repeat}</td>'
                f'<td data-label="verdict">{status}</td>'
                f'<td class="breakable" data-label="graders">{reasons}</td>'
                f'<td data-label="output"><pre>{esc(run.output)}</pre></td>'
                f'<td class="num" data-label="tokens">{tokens}</td>'
                f'<td class="num" data-label="cost">{esc(usd(run.cost_usd))}{batched}</td>'
                f'<td data-label="params"><pre class="params">{esc(params)}</pre></td></tr>'
            )
    system_line = f'<p class="prompt"><b>system</b> {esc(system)}</p>' if system else ""
    expected = next((run.expected for run in runs if run.expected), None)
    expected_line = (
        f'<p class="prompt expected"><b>expected</b> {esc(expected)}</p>'
        if expected
        else '<p class="prompt expected meta"><b>expected</b> not recorded (evidence '
        "written before v3): the graders' reasons below say what was wanted</p>"
    )
    flags = f'data-failed="{int(failed)}" data-flaky="{int(flaky)}" data-changed="{int(changed)}"'
    return (
        f'<section class="case" id="{case_anchor(task_class, case)}" {flags}>'
        f'<h3><span class="name">{esc(case)}</span> '
        f'<small class="meta name">{esc(task_class)}</small></h3>{system_line}'
        f'<p class="prompt"><b>prompt</b> {esc(prompt)}</p>{expected_line}'
        '<div class="scroll"><table '
        'class="answers">'
        "<thead><tr><th>model</th><th>verdict</th><th>graders (what was expected)</th>"
        "<th>output</th><th>tokens in / out</th><th>cost</th><th>params</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>{_resting_line(resting)}</section>"
    )


def _resting_line(resting: Sequence[str]) -> str:
    if not resting:
        return ""
    names = ", ".join(f'<span class="name">{esc(m)}</span>' for m in resting)
    return (
        f'<p class="meta">not sampled tonight: {names} (a settled cell runs a rotating '
        "part of its cases each night)</p>"
    )


@dataclass(frozen=True)
class TimelineNight:
    """One night of a claim's cell, as the claim page draws it."""

    night: Night
    cell: CellRecord
    evidence: bool
    """The claim rests on this night's runs."""
    drift: bool
    """The canary saw the cell's model change this night."""

    @property
    def new_epoch(self) -> bool:
        """An epoch began this night."""
        epoch = self.cell.epoch
        return epoch is not None and epoch.started_at == self.night.report.observed_at


def claim_timeline(claim: ModelClaim, nights: Sequence[Night]) -> list[TimelineNight]:
    """Every night (oldest first) that measured the claim's model on its task class."""
    rests_on = {e["reportId"] for e in claim.evidence if e["kind"] == "eval"}
    found = []
    for night in nights:
        for cell in night.report.cells:
            if cell.subject_key == claim.subject_key and cell.task_class == claim.task_class:
                drift = any(
                    c.subject_key == claim.subject_key and c.status == "drift"
                    for c in night.report.canary
                )
                found.append(TimelineNight(night, cell, night.report.report_id in rests_on, drift))
    return found


def _timeline_html(points: Sequence[TimelineNight]) -> str:
    """The nights as a row of cards: a bar of the rate the gate judged, epoch starts marked."""
    if not points:
        return '<p class="meta">no night of this cell has evidence here</p>'
    items = []
    for point in points:
        cell, epoch = point.cell, point.cell.epoch
        rate = cell.shown_rate
        tonight = _tonight(cell)
        pooled = f" · epoch {to_fixed_2(rate)} n={epoch.n}" if epoch is not None else ""
        mark = (
            f'<div class="epoch-mark">epoch began: {esc(EPOCH_WORDS[epoch.reason])}</div>'
            if point.new_epoch and epoch is not None
            else ""
        )
        flags = [
            *(['<span class="drift">DRIFT</span>'] if point.drift else []),
            *(
                [f'<span class="drift">ALARM ({esc(epoch.alarm)})</span>']
                if epoch is not None and epoch.alarm
                else []
            ),
            *(["rests on it"] if point.evidence else []),
        ]
        classes = " ".join(
            name
            for name, on in (
                ("night", True),
                ("new-epoch", point.new_epoch),
                ("evidence", point.evidence),
            )
            if on
        )
        items.append(
            f'<li class="{classes}">{mark}'
            f'<a href="{esc(point.night.page)}">{esc(point.night.report.observed_at[:10])}</a>'
            f'<div class="bar" title="{to_fixed_2(rate)}"><span style="width:{rate * 100:.0f}%">'
            f"</span></div><div>{tonight}{pooled}</div>"
            f'<div class="meta">{esc(str(cell.outcome))}'
            + (f" · {' · '.join(flags)}" if flags else "")
            + "</div></li>"
        )
    return f'<ol class="timeline" id="timeline">{"".join(items)}</ol>'


def claim_page_html(
    claim: ModelClaim,
    nights: Mapping[str, Night],
    epoch_line: str | None,
    paged: frozenset[str] = frozenset(),
    timeline: Sequence[TimelineNight] = (),
) -> str:
    """One claim: what it says, its numbers, its epoch, its timeline, the nights and cases."""
    interval = claim_interval(claim)
    numbers = (
        f"passRate {to_fixed_2(claim.metrics['passRate'])} over {claim.metrics['n']} cases, "
        f"95% [{to_fixed_2(interval[0])}, {to_fixed_2(interval[1])}]"
        if claim.metrics and interval
        else "an editorial note: no metrics, not confirmed by evals"
    )
    items = []
    for entry in claim.evidence:
        if entry["kind"] != "eval":
            items.append(f"<li>journal {esc(str(entry.get('runId')))}</li>")
            continue
        report_id = entry["reportId"]
        night = nights.get(report_id)
        label = (
            f'<a href="{esc(night.page)}" class="name">{esc(report_id)}</a>'
            if night is not None
            else f'<span class="name">{esc(report_id)}</span> (no evidence here)'
        )
        cases = ", ".join(f'<span class="name">{esc(c)}</span>' for c in entry["caseIds"])
        items.append(f"<li>{label}: {len(entry['caseIds'])} cases — {cases}</li>")
    supersedes = ""
    if claim.supersedes:  # only live claims have pages: a retired one is named, not linked
        shown = (
            f'<a href="{claim_page(claim.supersedes)}">{esc(claim.supersedes)}</a>'
            if claim.supersedes in paged
            else esc(claim.supersedes)
        )
        supersedes = f'<p class="id">supersedes {shown}</p>'
    epoch = f'<p class="meta prose">{esc(epoch_line)}</p>' if epoch_line else ""
    body = (
        '<p><a href="index.html">← the site</a></p>'
        f'<h1><span class="name">{esc(claim.subject_key)}</span> · {esc(claim.polarity)} · '
        f'<span class="name">{esc(claim.task_class)}</span></h1>'
        f'<p class="meta id">{esc(claim.id)}</p>'
        f"<p>{esc(claim.statement)}</p><p>{esc(numbers)}</p>"
        f'<p class="meta">{esc(claim.status)} · observed {esc(claim.observed_at)} · expires '
        f"{esc(claim.expires_at)}</p>{epoch}{supersedes}"
        "<h2>Timeline: every night of this cell, epochs marked</h2>"
        f"{_timeline_html(timeline)}"
        f'<h2>The nights it rests on</h2><ul id="evidence">{"".join(items)}</ul>'
    )
    return _page(f"kb claim {claim.id}", body)


def compare_page(nights: Sequence[Night]) -> str:
    """Two nights side by side, chosen by ``?a=…&b=…`` (rendered in the browser)."""
    data = {
        n.stem: {
            "id": n.report.report_id,
            "observedAt": n.report.observed_at,
            "drift": _drifted(n.report),
            "cells": {
                f"{c.subject_key} · {c.task_class}": {
                    "rate": c.shown_rate,
                    "outcome": str(c.outcome),
                }
                for c in n.report.cells
            },
        }
        for n in nights
    }
    body = (
        '<p><a href="index.html">← all nights</a></p><h1>Two nights compared</h1>'
        '<p class="banner" id="which"></p><div class="scroll"><table id="diff"><thead><tr>'
        "<th>cell</th><th>A</th><th>B</th><th>change</th></tr></thead><tbody></tbody></table>"
        "</div>"
    )
    script = (
        f"var D={script_json(data)};"
        "var q=new URLSearchParams(location.search),a=D[q.get('a')],b=D[q.get('b')];"
        "var t=document.querySelector('#diff tbody');"
        "if(!a||!b){document.getElementById('which').textContent="
        "(q.get('a')||q.get('b')?'no such night here: ':'')+"
        "'pick two nights on the index page (compare two nights)';}else{"
        "document.getElementById('which').textContent='A '+a.id+' · B '+b.id;"
        "var keys=Object.keys(Object.assign({},a.cells,b.cells)).sort();"
        "keys.forEach(function(k){var x=a.cells[k],y=b.cells[k],tr=document.createElement('tr');"
        "function cell(v){return v?v.rate.toFixed(2)+' '+v.outcome:'·';}"
        "var d=(x&&y)?(y.rate-x.rate):null;"
        "var m=k.split(' · ')[0],dr=b.drift.indexOf(m)>=0?' · DRIFT in B: the canary saw '"
        "+'the model change':'';"
        "[k,cell(x),cell(y),(d===null?'':(d>0?'+':'')+d.toFixed(2)+"
        "(x&&y&&x.outcome!==y.outcome?' ('+x.outcome+' → '+y.outcome+')':''))+dr]"
        ".forEach(function(v,i){var td=document.createElement('td');td.textContent=v;"
        "if(i===0)td.className='name';tr.appendChild(td);});t.appendChild(tr);});}"
    )
    return _page("kb: two nights compared", body, script)


def build_site(
    store: KnowledgeStore,
    directory: Path,
    as_of: int,
    epochs: EpochsFile | None = None,
) -> tuple[list[Path], list[str]]:
    """Write the site into ``directory``; the files written and any warnings."""
    from kb.views.claims import format_epoch

    issue = site_directory_issue(directory)
    if issue is not None:
        raise ConfigError("site", issue)
    nights, warnings = collect_nights(store)
    claims = list(store.read().claims)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("site", f"cannot create {directory}: {exc.strerror or exc}") from None
    written: list[Path] = []

    def write(name: str, text: str) -> None:
        path = directory / name
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError("site", f"cannot write {path}: {exc.strerror or exc}") from None
        written.append(path)

    write("index.html", index_page(nights, claims, as_of))
    for index, night in enumerate(nights):
        write(night.page, night_page(night, nights[:index]))
    write("compare.html", compare_page(nights))
    pages = {n.report.report_id: n.page for n in nights}
    runs = {n.report.report_id: list(n.runs) for n in nights}
    chosen = epochs if epochs is not None else EpochsFile()
    found = compare_models(chosen, runs.get)
    write(MODELS_PAGE, _page("kb models compared", models_page_body(found, chosen, pages)))
    by_id = {n.report.report_id: n for n in nights}
    paged = frozenset(c.id for c in claims if c.status in ("active", "stale"))
    for claim in claims:
        if claim.id in paged:
            line = format_epoch(claim, epochs) if epochs is not None else None
            timeline = claim_timeline(claim, nights)
            write(claim_page(claim.id), claim_page_html(claim, by_id, line, paged, timeline))
    return written, warnings
