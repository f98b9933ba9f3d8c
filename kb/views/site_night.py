"""A night on the site: the rates as ``--html`` draws them, a case × model grid, every answer.

The night page leads with what the report shows (each cell's rate with its
interval, the change since the cell's previous night, the trend, the claim
linked to its page, alarm and retired marks, an incomplete cell's cause),
then a dense grid: one row per case, one column per model, each answer a
verdict colour and its latency, with a search box and filters (failures,
errors, flaky, changed since the model's previous night, models that
disagree, a task class). A row's case name opens the case: its full request
(system and user, each as sent up to kb's 4,000-character cut), what the
graders wanted, and every model's answer with grader reasons, a judge's
words, latency, tokens, cost, attempts and params.

Pages stay light: whatever does not fit in :data:`PAGE_BUDGET` bytes goes on
numbered pages — the cases' answers first (``…-cases-2.html`` …), then, for
a night of thousands of cases, the grid's rows (``…-grid-2.html``, the
search and filters working per page). A small night is one page. A case
whose answers alone pass the budget (dozens of models × repeats ×
4,000-character answers) is split between its answers into parts on
consecutive pages, "continued" (v5: no page over the budget, SPEC 14.3).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kb.money import usd
from kb.schema import subject_key
from kb.store.changes import cell_alarms
from kb.store.records import CellRecord, RequestRecord, RunRecord
from kb.views.html import (
    ALARM_LEGEND,
    CellPoint,
    cell_history,
    cell_parts,
    name_html,
    night_lists,
)
from kb.views.report_text import SHIFT, alarm_lines, drift_line, shift_lines
from kb.views.site_models import case_anchor
from kb.views.site_pages import (
    CONTENT_BUDGET,
    Night,
    chunked,
    esc,
    page_html,
    pager,
)

ClaimHref = Callable[[str], "str | None"]


@dataclass(frozen=True)
class PriorAnswer:
    """A model's latest earlier answer to a case: its verdict, that night, a link to it."""

    passed: bool
    observed_at: str
    href: str | None


@dataclass(frozen=True)
class CaseRow:
    """One case of a night: its runs by model, and what the filters ask of it."""

    task_class: str
    case: str
    runs: Mapping[str, tuple[RunRecord, ...]]
    """Target runs by subject key, in the night's model order."""
    was: Mapping[str, bool]
    """Each model's verdict on the case in its latest earlier night (where there is one)."""
    resting: tuple[str, ...]
    """Models measured on the task class tonight that did not run this case."""
    prior: Mapping[str, PriorAnswer] = field(default_factory=dict)
    """The same answers with their night and a link (where the site has that night)."""

    @property
    def anchor(self) -> str:
        return case_anchor(self.task_class, self.case)

    def verdict(self, model: str) -> bool:
        return all(run.passed for run in self.runs[model])

    @property
    def flags(self) -> dict[str, bool]:
        """The filters' facts: ``failed``, ``error``, ``flaky``, ``changed``, ``disagree``."""
        runs = [run for mine in self.runs.values() for run in mine]
        verdicts = {model: self.verdict(model) for model in self.runs}
        return {
            "failed": not all(run.passed for run in runs),
            "error": any(run.status != "ok" for run in runs),
            "flaky": any(len({run.passed for run in mine}) > 1 for mine in self.runs.values()),
            "changed": any(self.was.get(m, v) != v for m, v in verdicts.items()),
            "disagree": len(set(verdicts.values())) > 1,
        }

    @property
    def slowest_ms(self) -> float:
        return max((run.latency_ms or 0.0 for m in self.runs.values() for run in m), default=0.0)


@dataclass(frozen=True)
class NightLayout:
    """Which page of a night holds what: where each case's answers are."""

    page: str
    case_pages: Mapping[tuple[str, str], str] = field(default_factory=dict)

    def href(self, task_class: str, case: str) -> str:
        """The link to a case's answers (``page#anchor``)."""
        holder = self.case_pages.get((task_class, case), self.page)
        return f"{holder}#{case_anchor(task_class, case)}"


PriorAnswers = Mapping[tuple[str, str], PriorAnswer]
"""(subject key, case) → that model's latest earlier answer to the case."""


def answers_of(
    night: Night, layout: NightLayout | None = None
) -> dict[tuple[str, str], PriorAnswer]:
    """Each model's verdict on each case this night (all repeats passed), linked via ``layout``.

    :func:`kb.views.site.build_site` folds these night by night, oldest first, so each
    night's page knows every model's previous answer without reading every earlier night.
    """
    verdicts: dict[tuple[str, str], bool] = {}
    case_class: dict[tuple[str, str], str] = {}
    for run in night.runs:
        if run.kind == "target":
            key = (subject_key(run.model, run.effort), run.case)
            verdicts[key] = verdicts.get(key, True) and run.passed
            case_class[key] = run.task_class or ""
    return {
        key: PriorAnswer(
            passed,
            night.report.observed_at,
            layout.href(case_class[key], key[1]) if layout is not None else None,
        )
        for key, passed in verdicts.items()
    }


def case_rows(night: Night, previous: PriorAnswers | None = None) -> list[CaseRow]:
    """The night's cases in task-class order, each with its runs and last verdicts.

    ``previous``: every model's latest earlier answer to each case (:func:`answers_of`).
    """
    previous = previous or {}
    report = night.report
    members = list(dict.fromkeys(c.subject_key for c in report.cells))
    measured = {
        (c.task_class, c.subject_key) for c in report.cells if c.outcome != "incomplete" or c.n
    }
    by_case: dict[tuple[str, str], dict[str, list[RunRecord]]] = {}
    for run in night.runs:
        if run.kind == "target":
            mine = by_case.setdefault((run.task_class or "", run.case), {})
            mine.setdefault(run.subject_key, []).append(run)
    classes = list(dict.fromkeys(c.task_class for c in report.cells))
    order = {name: i for i, name in enumerate(classes)}
    rows = []
    for (task_class, case), found in sorted(
        by_case.items(), key=lambda item: (order.get(item[0][0], len(order)), item[0])
    ):
        ordered = {m: tuple(found[m]) for m in members if m in found}
        ordered |= {m: tuple(runs) for m, runs in found.items() if m not in ordered}
        resting = tuple(m for m in members if (task_class, m) in measured and m not in found)
        prior = {m: previous[(m, case)] for m in ordered if (m, case) in previous}
        was = {m: answer.passed for m, answer in prior.items()}
        rows.append(CaseRow(task_class, case, ordered, was, resting, prior))
    return rows


def _folded(earlier: Sequence[Night]) -> dict[tuple[str, str], PriorAnswer]:
    found: dict[tuple[str, str], PriorAnswer] = {}
    for before in earlier:
        found |= answers_of(before)
    return found


def _latency(ms: float | None) -> str:
    if ms is None:
        return "—"
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _grid_cell(row: CaseRow, model: str) -> str:
    mine = row.runs.get(model)
    if mine is None:
        resting = model in row.resting
        return '<td class="v rest" title="not sampled tonight">·</td>' if resting else "<td></td>"
    passes = sum(run.passed for run in mine)
    if any(run.status != "ok" for run in mine):
        kind, glyph = "err", "!"
    elif any(run.unscored for run in mine):
        kind, glyph = "err", "?"  # no verdict: neither a pass nor a fail
    elif passes == len(mine):
        kind, glyph = "ok", "✓"
    else:
        kind, glyph = "no", "✗"
    if len(mine) > 1:
        glyph = f"{passes}/{len(mine)}"
    slowest = max((run.latency_ms for run in mine if run.latency_ms is not None), default=None)
    was = row.was.get(model)
    changed = ' data-was="1"' if was is not None and was != row.verdict(model) else ""
    return f'<td class="v {kind}"{changed}>{glyph}<i>{_latency(slowest)}</i></td>'


def _search_text(row: CaseRow) -> str:
    first = next(iter(row.runs.values()))[0]
    prompt = first.request.user[:120] if first.request is not None else ""
    return f"{row.case} {row.task_class} {prompt}".lower()


def grid_rows(rows: Sequence[CaseRow], models: Sequence[str], layout: NightLayout) -> list[str]:
    """One ``<tr>`` per case: the case's link, then each model's verdict and latency.

    ``data-f`` holds the filters' facts, ``data-m`` the columns of the models that failed.
    """
    out = []
    for row in rows:
        flags = " ".join(name for name, on in row.flags.items() if on)
        failing = " ".join(
            str(i) for i, m in enumerate(models) if m in row.runs and not row.verdict(m)
        )
        out.append(
            f'<tr class="case-row" data-ms="{row.slowest_ms:.0f}" '
            f'data-text="{esc(_search_text(row))}" data-f="{flags}" data-m="{failing}">'
            f'<th class="case"><a href="{esc(layout.href(row.task_class, row.case))}" '
            f'title="{esc(row.case)}">{esc(row.case)}</a></th>'
            + "".join(_grid_cell(row, model) for model in models)
            + "</tr>"
        )
    return out


def _request_html(request: RequestRecord | None, label: str = "") -> str:
    if request is None:
        return '<p class="prompt meta">the request was not recorded (evidence before v2)</p>'
    cut = " <small>(cut at 4,000 characters)</small>"
    system = (
        f'<p class="prompt"><b>{label}system</b>{cut if request.system_sha256 else ""} '
        f"{esc(request.system)}</p>"
        if request.system
        else f'<p class="prompt meta"><b>{label}system</b> none (only the user message)</p>'
    )
    user = (
        f'<p class="prompt user"><b>{label}user</b>{cut if request.user_sha256 else ""} '
        f"{esc(request.user)}</p>"
    )
    return system + user


def _before(prior: PriorAnswer | None) -> str:
    """The model's previous answer to the case, in words, linked where the site has it."""
    if prior is None:
        return (
            '<small class="before meta">before: not asked in an earlier night of this site</small>'
        )
    said = f"{'PASS' if prior.passed else 'FAIL'} on {esc(prior.observed_at[:10])}"
    shown = f'<a href="{esc(prior.href)}">{said}</a>' if prior.href else said
    return f'<small class="before">before: {shown}</small>'


def label_commands(report_id: str, run: RunRecord) -> list[str]:
    """The ``kb label`` lines a person copies to correct this answer's verdict.

    One, the opposite of kb's verdict; both for an unscored answer (it has none).
    """
    verdicts = ["pass", "fail"] if run.unscored else ["fail" if run.passed else "pass"]
    repeat = f" --repeat {run.repeat + 1}" if run.repeat else ""
    words = " ".join(shlex.quote(part) for part in (report_id, run.case, run.subject_key))
    return [f'kb label {words} {verdict}{repeat} --why "..."' for verdict in verdicts]


def _reason_class(passed: bool | None) -> str:
    """A grader's line: green for a pass, red for a fail, grey for no verdict."""
    return "ok" if passed else "meta" if passed is None else "no"


def _command_html(command: str) -> str:
    """A shell line that may wrap anywhere but inside its ``--why`` flag.

    One span, not one per word: a team's night has tens of thousands of answers.
    """
    head, flag, tail = command.partition(" --why ")
    if not flag:
        return esc(command)
    return f'{esc(head)} <span class="w">--why {esc(tail)}</span>'


def _answer_row(
    model: str,
    run: RunRecord,
    shown: int,
    judges: Sequence[RunRecord],
    case_request: str,
    prior: PriorAnswer | None = None,
    report_id: str | None = None,
) -> str:
    if run.status != "ok":
        status = f'<span class="error">{esc(run.status.upper())}</span>'
    else:
        word = run.verdict_word
        status = f'<span class="{word.lower()}">{word}</span>'
    reasons = "".join(
        f'<li class="{_reason_class(v.passed)}">{esc(v.grader)}: {esc(v.reason)}</li>'
        for v in run.verdicts
    )
    for judge in judges:
        who = f"judge {judge.subject_key}" if len(judges) > 1 else "judge"
        reasons += f'<li class="judge">{esc(who)} said: {esc(judge.output)}</li>'
    if run.error:
        reasons += f'<li class="no">error: {esc(run.error)}</li>'
    tokens = f"{run.usage.prompt_tokens} / {run.usage.completion_tokens}" if run.usage else "—"
    params = json.dumps(run.params, sort_keys=True) if run.params else "—"
    own = _request_html(run.request, "")
    request = (
        f"<details><summary>its own request</summary>{own}</details>"
        if run.request is not None and own != case_request
        else ""
    )
    cut = "<small>(cut at 4,000 characters)</small>" if run.output_sha256 else ""
    batch = f'<small class="meta breakable">batch {esc(run.batch)}</small>' if run.batch else ""
    repeat = f" #{run.repeat + 1}" if shown > 1 else ""
    label = (
        '<small class="label-cmd">wrong? '
        + " or ".join(
            f'<code class="breakable">{_command_html(command)}</code>'
            for command in label_commands(report_id, run)
        )
        + "</small>"
        if report_id is not None and run.status == "ok"
        else ""
    )
    return (
        f'<tr><td class="name" data-label="model">{esc(model)}{repeat}</td>'
        f'<td data-label="verdict">{status}{_before(prior) if run.repeat == 0 else ""}'
        f"{label}</td>"
        f'<td class="breakable" data-label="graders"><ul class="reasons">{reasons}</ul>'
        f"{request}</td>"
        f'<td data-label="output"><pre>{esc(run.output)}</pre>{cut}</td>'
        f'<td class="num" data-label="latency">{_latency(run.latency_ms)}'
        f"{f' · {run.attempts} tries' if run.attempts > 1 else ''}</td>"
        f'<td class="num" data-label="tokens">{tokens}</td>'
        f'<td class="num" data-label="cost">{esc(usd(run.cost_usd))}{batch}</td>'
        f'<td data-label="params"><pre class="params">{esc(params)}</pre></td></tr>'
    )


def case_section(
    row: CaseRow,
    judges: Mapping[tuple[str, str, int], Sequence[RunRecord]],
    grid: str,
    budget: int = CONTENT_BUDGET,
    report_id: str | None = None,
) -> list[str]:
    """One case: its full request, what was expected, then each model's answer.

    One section, or — when its answers alone pass ``budget`` bytes (dozens of
    models × repeats × long answers) — several, in order: the first holds the
    request and the first answers, each next one the following answers under
    "continued" (SPEC 14.3: no page over 300 KB).
    """
    first = next(iter(row.runs.values()))[0]
    request = _request_html(first.request)
    answers = [
        _answer_row(
            model,
            run,
            len(mine),
            judges.get((model, row.case, run.repeat), ()),
            request,
            row.prior.get(model),
            report_id,
        )
        for model, mine in row.runs.items()
        for run in mine
    ]
    expected = next(
        (run.expected for mine in row.runs.values() for run in mine if run.expected), None
    )
    expected_line = (
        f'<p class="prompt expected"><b>expected</b> {esc(expected)}</p>'
        if expected
        else '<p class="prompt expected meta"><b>expected</b> not recorded (evidence '
        "written before v3): the graders' reasons below say what was wanted</p>"
    )
    was = "".join(
        f'<li><span class="name">{esc(m)}</span>: {"passed" if v else "failed"} in its previous '
        f"night, {'passes' if row.verdict(m) else 'fails'} tonight</li>"
        for m, v in row.was.items()
        if v != row.verdict(m)
    )
    changed = f'<ul class="changed">{was}</ul>' if was else ""
    resting = (
        '<p class="meta">not sampled tonight: '
        + ", ".join(f'<span class="name">{esc(m)}</span>' for m in row.resting)
        + " (adaptive sampling asks each cell part of its cases a night: the cell's epoch "
        "says why)</p>"
        if row.resting
        else ""
    )
    flags = " ".join(name for name, on in row.flags.items() if on)
    head = f"{request}{expected_line}{changed}"
    parts = chunked(answers, max(budget - len(head.encode()) - 2_000, 1))
    sections = []
    for number, part in enumerate(parts, start=1):
        anchor = row.anchor if number == 1 else f"{row.anchor}-{number}"
        more = f" (continued, part {number} of {len(parts)})" if number > 1 else ""
        sections.append(
            f'<section class="case" id="{anchor}" data-f="{flags}">'
            f'<h3><span class="name">{esc(row.case)}</span>{more} '
            f'<small class="meta name">{esc(row.task_class)}</small> '
            f'<small><a href="{esc(grid)}">↑ grid</a></small></h3>'
            + (head if number == 1 else "")
            + '<div class="scroll"><table class="answers"><thead><tr><th>model</th>'
            "<th>verdict</th><th>graders (what was expected)</th><th>output</th>"
            "<th>latency (incl. kb's queueing)</th><th>tokens in / out</th><th>cost</th>"
            "<th>params</th></tr></thead>"
            f"<tbody>{''.join(part)}</tbody></table></div>"
            + (resting if number == len(parts) else "")
            + (f'<p class="meta">continued in part {number + 1}</p>' if number < len(parts) else "")
            + "</section>"
        )
    return sections


def rates_table(
    night: Night, history: Mapping[tuple[str, str], Sequence[CellPoint]], claim_href: ClaimHref
) -> str:
    """Model × task class, each cell as the ``--html`` report draws it."""
    report = night.report
    classes = list(dict.fromkeys(c.task_class for c in report.cells))
    members = list(dict.fromkeys(c.subject_key for c in report.cells))
    cells = {(c.subject_key, c.task_class): c for c in report.cells}
    drifted = {c.subject_key for c in report.canary if c.status == "drift"}
    alarms = cell_alarms(report)
    rows = []
    for member in members:
        mark = ' <span class="drift">drift</span>' if member in drifted else ""
        tds = [f'<th class="row-name">{name_html(member)}{mark}</th>']
        for task_class in classes:
            cell: CellRecord | None = cells.get((member, task_class))
            if cell is None:
                tds.append('<td class="meta">not measured</td>')
                continue
            earlier = history.get((member, task_class), ())
            style, content = cell_parts(cell, earlier, alarms.get((member, task_class)), claim_href)
            tds.append(f"<td{style}>{content}</td>")
        rows.append("<tr>" + "".join(tds) + "</tr>")
    head = "".join(f'<th class="name">{esc(t)}</th>' for t in classes)
    return (
        '<div class="scroll"><table id="rates">'
        f"<thead><tr><th>model</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        f'</div><ul class="legend">{ALARM_LEGEND}<li>▲/▼ change since the cell\'s previous '
        "night · line: up to 10 earlier nights · the claim links to its page</li></ul>"
    )


FILTER_SCRIPT = (
    "(function(){var $=function(i){return document.getElementById(i);};"
    "var rows=[].slice.call(document.querySelectorAll('tr.case-row'));"
    "var boxes=['failed','error','flaky','changed','disagree'];"
    "var key='kb-filters:'+location.pathname;"
    "function has(r,b){return (' '+r.dataset.f+' ').indexOf(' '+b+' ')>=0;}"
    "function save(){try{sessionStorage.setItem(key,JSON.stringify({q:$('search').value,"
    "c:$('task-class').value,m:$('failed-by').value,s:$('sort').value,"
    "b:boxes.filter(function(b){return $('only-'+b).checked;})}));}catch(e){}}"
    "function restore(){try{var v=JSON.parse(sessionStorage.getItem(key)||'null');"
    "if(!v)return;$('search').value=v.q||'';$('task-class').value=v.c||'';"
    "$('failed-by').value=v.m||'';$('sort').value=v.s||'case';"
    "boxes.forEach(function(b){$('only-'+b).checked=v.b.indexOf(b)>=0;});}catch(e){}}"
    "function apply(){var q=$('search').value.trim().toLowerCase(),c=$('task-class').value,"
    "m=$('failed-by').value,n=0;"
    "var on=boxes.filter(function(b){return $('only-'+b).checked;}),shown={};"
    "rows.forEach(function(r){var ok=(!c||r.parentNode.dataset.class===c)&&"
    "(!q||r.dataset.text.indexOf(q)>=0)&&on.every(function(b){return has(r,b);})&&"
    "(!m||(' '+r.dataset.m+' ').indexOf(' '+m+' ')>=0);"
    "r.hidden=!ok;if(ok){n++;shown[r.querySelector('a').hash.slice(1)]=1;}});"
    "document.querySelectorAll('section.case').forEach(function(s){"
    "s.hidden=!shown[s.id];});"
    "document.querySelectorAll('#grid tbody').forEach(function(b){"
    "b.querySelector('tr.group').hidden=!b.querySelector('tr.case-row:not([hidden])');});"
    "$('shown').textContent=n+' of '+rows.length+' cases';save();}"
    "function order(){var slow=$('sort').value==='slow';"
    "document.querySelectorAll('#grid tbody').forEach(function(b){"
    "[].slice.call(b.querySelectorAll('tr.case-row')).sort(function(x,y){return slow?"
    "(+y.dataset.ms)-(+x.dataset.ms):(+x.dataset.i)-(+y.dataset.i);})"
    ".forEach(function(r){b.appendChild(r);});});save();}"
    "rows.forEach(function(r,i){r.dataset.i=i;});"
    "boxes.forEach(function(b){$('only-'+b).addEventListener('change',apply);});"
    "$('search').addEventListener('input',apply);$('task-class').addEventListener('change',apply);"
    "$('failed-by').addEventListener('change',apply);$('sort').addEventListener('change',order);"
    # the Back button restores the controls after this script ran: apply what they say
    "window.addEventListener('pageshow',function(){apply();order();});"
    "restore();apply();order();})();"
)


def column_labels(models: Sequence[str]) -> list[str]:
    """Each model's grid header: without its provider (``openai:``) where that stays unique.

    The full name is the header's title; a grid of four columns must fit a phone.
    """
    short = [m.split(":", 1)[-1] for m in models]
    return short if len(set(short)) == len(short) else list(models)


def _grid_html(rows_html: Sequence[str], rows: Sequence[CaseRow], models: Sequence[str]) -> str:
    """The grid with its controls (search, filters, a task class, an order)."""
    classes = list(dict.fromkeys(row.task_class for row in rows))
    options = "".join(f'<option value="{esc(c)}">{esc(c)}</option>' for c in classes)
    heads = "".join(
        f'<th class="model" title="{esc(m)}"><span>{esc(label)}</span></th>'
        for m, label in zip(models, column_labels(models), strict=True)
    )
    bodies = []
    for task_class in classes:
        mine = [
            html for html, row in zip(rows_html, rows, strict=True) if row.task_class == task_class
        ]
        bodies.append(
            f'<tbody data-class="{esc(task_class)}"><tr class="group">'
            f'<th colspan="{len(models) + 1}" class="name">'
            f"{esc(task_class)}</th></tr>{''.join(mine)}</tbody>"
        )
    failed_by = "".join(
        f'<option value="{i}">failed by {esc(m)}</option>' for i, m in enumerate(models)
    )
    boxes = "".join(
        f'<label><input type="checkbox" id="only-{name}"> {label}</label>'
        for name, label in (
            ("failed", "failures"),
            ("error", "errors"),
            ("flaky", "flaky"),
            ("changed", "changed since the previous night"),
            ("disagree", "models disagree"),
        )
    )
    return (
        '<div class="filters"><input type="search" id="search" placeholder="search cases and '
        'prompts" aria-label="search cases and prompts"> '
        f'<select id="task-class" aria-label="task class"><option value="">every task class'
        f"</option>{options}</select> "
        '<select id="sort" aria-label="order"><option value="case">case order</option>'
        '<option value="slow">slowest first (in each task class)</option></select> '
        '<select id="failed-by" aria-label="failed by"><option value="">failed by any or '
        f"none</option>{failed_by}</select>"
        f'<div class="boxes">{boxes}</div><span id="shown" class="meta"></span></div>'
        '<div class="scroll"><table id="grid"><thead><tr><th>case</th>'
        f"{heads}</tr></thead>{''.join(bodies)}</table></div>"
        '<p class="meta">✓ pass · ✗ fail · ! error · ? unscored (no verdict) · · not sampled '
        "tonight · 2/3 passes of "
        "repeats · the time is the answer's latency (the slowest repeat)</p>"
    )


def night_files(
    night: Night,
    earlier: Sequence[Night],
    claim_href: ClaimHref,
    previous: PriorAnswers | None = None,
) -> tuple[NightLayout, dict[str, str]]:
    """The night's pages (file name → html) and which page holds each case.

    One page when everything fits in :data:`PAGE_BUDGET`; otherwise the answers
    go on numbered pages of their own, and the grid's rows, if they alone do
    not fit beside the rates, on numbered grid pages.
    """
    report = night.report
    rows = case_rows(night, previous if previous is not None else _folded(earlier))
    models = list(
        dict.fromkeys([c.subject_key for c in report.cells] + [m for r in rows for m in r.runs])
    )
    models = [m for m in models if any(m in row.runs for row in rows)]  # as the rates table
    judges: dict[tuple[str, str, int], list[RunRecord]] = {}
    for run in night.runs:
        if run.judged is not None:
            judges.setdefault((run.judged, run.case, run.repeat), []).append(run)
    head = _night_head(night, earlier, claim_href)
    lists = night_lists(report, claim_href)
    grid_budget = CONTENT_BUDGET - len(head.encode()) - len(lists.encode()) - 4_000  # controls
    sections = [
        case_section(row, judges, f"{night.page}#cases", report_id=report.report_id) for row in rows
    ]
    flat = [part for parts in sections for part in parts]
    single = NightLayout(night.page)
    row_html = grid_rows(rows, models, single)
    layout, answer_pages = _place_answers(night, rows, row_html, sections, grid_budget)
    if answer_pages:  # the rows link to the answer pages now
        row_html = grid_rows(rows, models, layout)
    grid_chunks = chunked(row_html, grid_budget)
    stem = night.page.removesuffix(".html")
    grid_pages = [night.page] + [f"{stem}-grid-{i + 1}.html" for i in range(1, len(grid_chunks))]
    files: dict[str, str] = {}
    start = 0
    for i, (page, chunk) in enumerate(zip(grid_pages, grid_chunks, strict=True)):
        grid = pager(grid_pages, i, "grid pages") + _grid_html(
            chunk, rows[start : start + len(chunk)], models
        )
        start += len(chunk)
        if i == 0:
            here = "" if answer_pages else "".join(flat)
            body = head + grid + here + lists
        else:
            body = _back(night) + f"<h1>Night {esc(report.report_id)}: grid page {i + 1}</h1>"
            body += grid
        files[page] = page_html(f"kb night {report.report_id}", body, FILTER_SCRIPT)
    for i, (page, chunk) in enumerate(answer_pages):
        links = pager([p for p, _ in answer_pages], i, "answer pages")
        body = (
            _back(night) + f'<h1>Night <span class="name">{esc(report.report_id)}</span>: answers, '
            f"page {i + 1} of {len(answer_pages)}</h1>{links}{''.join(chunk)}{links}"
        )
        files[page] = page_html(f"kb night {report.report_id} answers {i + 1}", body)
    return layout, files


def _place_answers(
    night: Night,
    rows: Sequence[CaseRow],
    row_html: Sequence[str],
    sections: Sequence[Sequence[str]],
    grid_budget: int,
) -> tuple[NightLayout, list[tuple[str, list[str]]]]:
    """Where the case sections go: the night page (``[]``) or numbered answer pages.

    ``row_html``: the grid's rows as they read when everything is on the night page;
    ``sections``: each row's section, in parts when it alone is over the budget (a
    case links to the page holding its first part).
    """
    single = NightLayout(night.page)
    grid = sum(len(r.encode()) for r in row_html)
    if grid + sum(len(p.encode()) for parts in sections for p in parts) <= grid_budget:
        return single, []
    stem = night.page.removesuffix(".html")
    owners = [row for row, parts in zip(rows, sections, strict=True) for _ in parts]
    pages: list[tuple[str, list[str]]] = []
    where: dict[tuple[str, str], str] = {}
    index = 0
    flat = [part for parts in sections for part in parts]
    for number, chunk in enumerate(chunked(flat, CONTENT_BUDGET), start=1):
        page = f"{stem}-cases-{number}.html"
        pages.append((page, chunk))
        for row in owners[index : index + len(chunk)]:
            where.setdefault((row.task_class, row.case), page)
        index += len(chunk)
    return NightLayout(night.page, where), pages


def _back(night: Night) -> str:
    return (
        f'<p><a href="index.html">← all nights</a> · <a href="{esc(night.page)}#cases">'
        "← this night's grid</a></p>"
    )


def _night_head(night: Night, earlier: Sequence[Night], claim_href: ClaimHref) -> str:
    report = night.report
    drift = drift_line(report, esc)
    banner = f'<p class="banner"><strong>Drift:</strong> {drift}.</p>' if drift else ""
    banner += "".join(
        f'<p class="banner alarm"><strong>Alarm:</strong> {esc(line)}.</p>'
        for line in alarm_lines(report)
    )
    banner += "".join(
        f'<p class="banner shift"><strong>{SHIFT}</strong> — {esc(line)}.</p>'
        for line in shift_lines(report)
    )
    history = cell_history([n.report for n in earlier])
    return (
        f'<p><a href="index.html">← all nights</a></p><h1>Night <span class="name">'
        f"{esc(report.report_id)}</span></h1>"
        f'<p class="meta">observed {esc(report.observed_at)} · spent {esc(usd(report.spent_usd))}'
        f" · {len(report.claims)} claims · {len(report.retired_beliefs)} retired · "
        f"{len(report.remeasured)} re-measured</p>{banner}"
        '<h2>Pass rate by model and task class</h2><p class="meta">What the gate judged: the '
        "epoch's pooled rate over its n cases (several nights) with its 95% interval, and "
        "tonight's own count.</p>"
        + rates_table(night, history, claim_href)
        + '<h2 id="cases">Cases × models</h2>'
    )
