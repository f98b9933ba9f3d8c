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
  (``kb compare``), one row per pair; ``pair-<hash>.html`` — one pair's
  figures and each discordant case linked to both answers (pages of at most
  300 KB, as every page).

Built from the evidence files in the work tree (``kb-evidence/`` or the
store's recorded evidence directories); a night whose evidence kb cannot
read is left out with a warning, never fatal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kb.card import usable_claims
from kb.compare import compare_models
from kb.errors import ConfigError
from kb.evidence_index import (
    EvidenceIndex,
    NightCostsReader,
    RecordedReport,
    recorded_nights,
    recorded_reports,
)
from kb.judging import weak_judges_of
from kb.money import usd
from kb.store.canonical import to_fixed_2
from kb.store.changes import CellAlarm, cell_alarms
from kb.store.epochs import EpochsFile
from kb.store.filestore import KnowledgeStore
from kb.store.manifests import ClaimEvidence, PooledNight, claim_evidence
from kb.store.models import ModelClaim
from kb.store.records import CellRecord, ReportFile
from kb.views.decision import newest_first
from kb.views.html import ALARM_LEGEND, CellPoint, cell_parts, name_html
from kb.views.report_text import EPOCH_WORDS
from kb.views.site_ledger import (
    LEDGER_FILE,
    NightsWritten,
    NightUnreadable,
    SiteLedger,
    write_nights,
)
from kb.views.site_models import MODELS_PAGE, models_files
from kb.views.site_pages import (
    GENERATOR,
    Night,
    claim_page,
    esc,
    page_html,
    pager,
    script_json,
)


def collect_nights(store: KnowledgeStore) -> tuple[list[Night], list[str]]:
    """Every night with readable evidence (:func:`kb.evidence_index.recorded_nights`) as pages."""
    found, left_out = recorded_nights(store)
    return [Night(night.report, night.runs) for night in found], left_out


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


def _tonight(cell: CellRecord) -> str:
    """Tonight's own count of a cell (``tonight 18/20``), beside the epoch's pooled rate."""
    return f"tonight {round(cell.pass_rate * cell.n)}/{cell.n}" if cell.n else "no result"


def _drifted(report: ReportFile) -> list[str]:
    return [c.subject_key for c in report.canary if c.status == "drift"]


NIGHTS_PER_PAGE = 100
"""The index lists the newest nights; older ones go on ``nights-2.html``, … (a year is 365)."""


def nights_pages(nights: Sequence[Night]) -> list[str]:
    """The pages that list the nights: the index, then ``nights-2.html``, … (oldest last)."""
    count = max(1, -(-len(nights) // NIGHTS_PER_PAGE))
    return ["index.html", *(f"nights-{i + 1}.html" for i in range(1, count))]


def older_nights_files(nights: Sequence[Night]) -> dict[str, str]:
    """``nights-2.html``, …: the nights the index has no room for, newest first."""
    names = nights_pages(nights)
    newest = list(reversed(nights))
    return {
        name: page_html(
            f"kb nights, page {i + 1}",
            '<p><a href="index.html">← the site</a></p>'
            f"<h1>Nights, page {i + 1} of {len(names)}</h1>"
            + pager(names, i, "nights pages")
            + _nights_table(newest[i * NIGHTS_PER_PAGE : (i + 1) * NIGHTS_PER_PAGE]),
        )
        for i, name in enumerate(names)
        if i > 0
    }


def _nights_table(newest_first: Sequence[Night]) -> str:
    """Nights, newest first; the night's link carries its date, so a phone keeps the counts."""
    rows = []
    for night in newest_first:
        r = night.report
        drift = _drifted(r)
        mark = f' <span class="drift">drift: {esc(", ".join(drift))}</span>' if drift else ""
        alarms = cell_alarms(r)
        if alarms:
            cells = f"{len(alarms)} cell{'s' if len(alarms) != 1 else ''}"
            mark += f' <span class="drift">alarm: {cells}</span>'
        shifted = [c.subject_key for c in r.canary if c.shifted]
        if shifted:
            mark += f' <span class="drift">shift: {esc(", ".join(shifted))}</span>'
        rows.append(
            f'<tr><td><a href="{esc(night.page)}" class="name">{esc(r.observed_at[:16])}</a>'
            f'{mark}<small class="meta id-small">{name_html(r.report_id)}</small></td>'
            f'<td class="num">{len(r.cells)}</td><td class="num">{len(r.claims)}</td>'
            f'<td class="num">{len(r.retired_beliefs)}</td>'
            f'<td class="num">{esc(usd(r.spent_usd))}</td></tr>'
        )
    return (
        '<div class="scroll"><table id="nights"><thead><tr><th>night (observed, report)</th>'
        "<th>cells</th><th>claims</th><th>retired (beliefs changed)</th><th>spent</th>"
        "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>"
    )


def matrix_table(nights: Sequence[Night], claims: Sequence[ModelClaim], as_of: int) -> str:
    """Model × task class: each cell's newest night, drawn as the night page draws it."""
    newest: dict[tuple[str, str], tuple[Night, CellRecord]] = {}
    history: dict[tuple[str, str], list[CellPoint]] = {}
    for night in nights:  # oldest first: the newest night of each cell wins
        for cell in night.report.cells:
            key = (cell.subject_key, cell.task_class)
            if key in newest:
                before, earlier = newest[key]
                history.setdefault(key, []).append(
                    CellPoint(
                        before.report.observed_at,
                        before.report.report_id,
                        earlier.shown_rate,
                        earlier.complete,
                    )
                )
            newest[key] = (night, cell)
    if not newest:
        return '<p class="meta">No night with evidence here yet.</p>'
    live = {c.id for c in usable_claims(claims, as_of)}
    alarms: dict[str, Mapping[tuple[str, str], CellAlarm]] = {}  # per night, computed once
    members = list(dict.fromkeys(key[0] for key in newest))
    classes = list(dict.fromkeys(key[1] for key in newest))
    rows = []
    for member in members:
        tds = [f'<th class="row-name">{name_html(member)}</th>']
        for task_class in classes:
            found = newest.get((member, task_class))
            if found is None:
                tds.append('<td class="meta">not measured</td>')
                continue
            night, cell = found
            if night.report.report_id not in alarms:
                alarms[night.report.report_id] = cell_alarms(night.report)
            alarm = alarms[night.report.report_id].get((member, task_class))
            style, content = cell_parts(
                cell,
                history.get((member, task_class), ()),
                alarm,
                lambda claim_id: claim_page(claim_id) if claim_id in live else None,
            )
            tds.append(
                f'<td{style}>{content}<div class="note"><a href="{esc(night.page)}">'
                f"{esc(night.report.observed_at[:10])}</a></div></td>"
            )
        rows.append("<tr>" + "".join(tds) + "</tr>")
    head = "".join(f'<th class="name">{esc(t)}</th>' for t in classes)
    return (
        '<div class="scroll"><table id="matrix">'
        f"<thead><tr><th>model</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def retired_since(nights: Sequence[Night], claims: Sequence[ModelClaim]) -> str:
    """What the newest night retired: superseded, archived, falsified, flipped stale.

    Each line leads with the cell (model · task class) and says what happened;
    the claim's id follows in small type.
    """
    if not nights:
        return '<p class="meta">No night yet.</p>'
    r = nights[-1].report
    known = {c.id: c for c in claims}
    found: dict[str, list[str]] = {}
    for x in r.retired:
        if x.action == "archived":
            found.setdefault(x.claim_id, []).append(f"archived ({esc(x.reason or '')})")
    for alarm in cell_alarms(r).values():
        for claim_id in alarm.falsified:
            if claim_id not in found:
                found[claim_id] = ["falsified tonight"]
    for entry in r.canary:
        for claim_id in entry.flipped:
            found.setdefault(claim_id, []).append("flipped stale: the canary saw the model change")
    items = []
    for claim_id, said in found.items():
        what = "; ".join(said)
        claim = known.get(claim_id)
        cell = (
            f'<span class="name">{esc(claim.subject_key)}</span> · '
            f'<span class="name">{esc(claim.task_class)}</span> {esc(claim.polarity)}'
            if claim is not None
            else "a claim"
        )
        items.append(
            f'<li>{cell} — {what}<small class="meta id-small">{name_html(claim_id)}</small></li>'
        )
    shown = "".join(items) or "<li>none</li>"
    renewed = len(r.remeasured)
    also = (
        f'<p class="meta">and {renewed} claim{"s" if renewed != 1 else ""} re-measured: renewed '
        "by the night's own, the same belief (not retired)</p>"
        if renewed
        else ""
    )
    return (
        f'<p class="meta">by the newest night, <a href="{esc(nights[-1].page)}">'
        f"{esc(r.observed_at[:16])}</a>:</p>"
        f'<ul id="retired">{shown}</ul>{also}'
    )


def _claim_row(claim: ModelClaim) -> str:
    """One row of the front page's "claims that steer today"."""
    interval = claim.interval
    rate = to_fixed_2(claim.metrics["passRate"]) if claim.metrics else "note"
    shown = f"[{to_fixed_2(interval[0])}, {to_fixed_2(interval[1])}]" if interval else "—"
    n = str(claim.metrics["n"]) if claim.metrics else "—"
    return (
        f'<tr><td class="name"><a href="{claim_page(claim.id)}">{esc(claim.subject_key)}</a>'
        f'</td><td class="name">{esc(claim.task_class)}</td><td>{esc(claim.polarity)}</td>'
        f'<td class="num">{rate}</td><td class="num">{shown}</td><td class="num">{n}</td>'
        f'<td class="name">{esc(claim.expires_at[:10])}</td></tr>'
    )


def _left_out_banner(left_out: Sequence[str]) -> str:
    """The alarm banner naming nights whose evidence cannot be read (empty: none)."""
    if not left_out:
        return ""
    return (
        '<div class="banner alarm" role="alert"><strong>'
        f"{len(left_out)} night{'s' if len(left_out) != 1 else ''} left out:</strong> "
        "their evidence cannot be read, so the matrix, the retirements and the nights below "
        "may be older than the store's claims (which are shown as the store holds them)."
        "<ul>"
        + "".join(f'<li class="breakable">{esc(why)}</li>' for why in left_out)
        + "</ul></div>"
    )


def index_page(
    nights: Sequence[Night],
    claims: Sequence[ModelClaim],
    as_of: int,
    left_out: Sequence[str] = (),
    weak_judges: Sequence[str] = (),
) -> str:
    """The site's front page.

    ``left_out``: nights whose evidence could not be read; ``weak_judges``: the
    lines of :func:`kb.judging.weak_judge_lines` (judges labels say not to trust).
    """
    live = newest_first(usable_claims(claims, as_of))
    claim_rows = [_claim_row(claim) for claim in live]
    options = "".join(
        f'<option value="{esc(n.stem)}">{esc(n.report.report_id)}</option>'
        for n in list(reversed(nights))[:NIGHTS_PER_PAGE]
    )
    missing = _left_out_banner(left_out) + "".join(
        f'<p class="banner alarm"><strong>Weak judge:</strong> '
        f"{esc(line.removeprefix('weak judge: '))} (kb judges)</p>"
        for line in weak_judges
    )
    body = (
        "<h1>kb: what the store knows</h1>"
        f'<p class="meta">{len(nights)} night{"s" if len(nights) != 1 else ""} · '
        f"{len(live)} claim{'s' if len(live) != 1 else ''} steer today</p>{missing}"
        "<h2>Models × task classes</h2>"
        '<p class="meta">Each cell as its newest night measured it: the rate the gate judged '
        "with its 95% interval, the change since the night before, the claim.</p>"
        + matrix_table(nights, claims, as_of)
        + f'<ul class="legend">{ALARM_LEGEND}</ul>'
        + "<h2>Retired since the previous night</h2>"
        + retired_since(nights, claims)
        + "<h2>Nights</h2>"
        + (pager(nights_pages(nights), 0, "nights pages") if len(nights) > NIGHTS_PER_PAGE else "")
        + _nights_table(list(reversed(nights))[:NIGHTS_PER_PAGE])
        + f'<p><a href="{MODELS_PAGE}">Models compared</a>: every pair on the cases both '
        "measured, with its interval and the cases where they disagree.</p>"
        '<h2>Compare two nights</h2><form id="compare" action="compare.html">'
        f'<select name="a">{options}</select> <select name="b">{options}</select> '
        '<button type="submit">compare</button></form>'
        "<h2>Claims that steer today</h2>"
        '<div class="scroll"><table id="claims"><thead><tr><th>model</th><th>task class</th>'
        "<th>claim</th><th>rate</th><th>95% interval</th><th>n</th><th>expires</th></tr>"
        "</thead><tbody>"
        + (
            "".join(claim_rows)
            or '<tr><td colspan="7" class="meta">none: no active claim is unexpired</td></tr>'
        )
        + "</tbody></table></div>"
    )
    script = (
        "var s=document.querySelectorAll('#compare select');"
        "if(s.length>1&&s[0].options.length>1){s[0].selectedIndex=1;}"  # A older, B newest
    )
    return page_html("kb site", body, script)


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


def claim_timeline(
    claim: ModelClaim, nights: Sequence[Night], cited: ClaimEvidence | None = None
) -> list[TimelineNight]:
    """Every night (oldest first) that measured the claim's model on its task class.

    ``cited``: the nights the claim rests on, its epoch manifest expanded
    (:func:`kb.store.manifests.claim_evidence`); without it, the nights it names.
    """
    rests_on = (
        set(cited.reports)
        if cited is not None
        else {e["reportId"] for e in claim.evidence if e["kind"] == "eval"}
    )
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


def _evidence_items(
    claim: ModelClaim, nights: Mapping[str, Night], cited: ClaimEvidence | None
) -> list[str]:
    """A claim page's evidence list: each night it rests on, linked, with its cases."""
    items = [
        f"<li>journal {esc(str(entry.get('runId')))}</li>"
        for entry in claim.evidence
        if entry["kind"] != "eval"
    ]
    pooled = (
        cited.nights
        if cited is not None
        else tuple(
            PooledNight(e["reportId"], tuple(e["caseIds"]))
            for e in claim.evidence
            if e["kind"] == "eval"
        )
    )
    for pooled_night in pooled:
        report_id, ran = pooled_night.report_id, pooled_night.cases or ()
        night = nights.get(report_id)
        label = (
            f'<a href="{esc(night.page)}" class="name">{esc(report_id)}</a>'
            if night is not None
            else f'<span class="name">{esc(report_id)}</span> (no evidence here)'
        )
        cases = ", ".join(f'<span class="name">{esc(c)}</span>' for c in ran)
        items.append(f"<li>{label}: {len(ran)} cases — {cases}</li>")
    for ref in cited.missing if cited is not None else ():
        items.append(
            f'<li><span class="name">{esc(ref)}</span>: the epoch manifest is not here '
            "(fetch it: kb show lists its nights)</li>"
        )
    return items


def claim_page_html(
    claim: ModelClaim,
    nights: Mapping[str, Night],
    epoch_line: str | None,
    paged: frozenset[str] = frozenset(),
    timeline: Sequence[TimelineNight] = (),
    cited: ClaimEvidence | None = None,
) -> str:
    """One claim: what it says, its numbers, its epoch, its timeline, the nights and cases."""
    interval = claim.interval
    numbers = (
        f"passRate {to_fixed_2(claim.metrics['passRate'])} over {claim.metrics['n']} cases, "
        f"95% [{to_fixed_2(interval[0])}, {to_fixed_2(interval[1])}]"
        if claim.metrics and interval
        else "an editorial note: no metrics, not confirmed by evals"
    )
    items = _evidence_items(claim, nights, cited)
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
    return page_html(f"kb claim {claim.id}", body)


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
        "if(!a||!b){document.getElementById('diff').hidden=true;"
        "document.getElementById('which').textContent="
        "(q.get('a')||q.get('b')?'no such night here (this page holds the newest "
        f"{NIGHTS_PER_PAGE} nights; kb diff compares any two): ':'')+"
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
    return page_html("kb: two nights compared", body, script)


def _remove_stale_pages(directory: Path, keep: set[str]) -> None:
    """Delete the pages an earlier build wrote that this one did not.

    A night now left out, a claim no longer live: a bookmark must not open a night
    the index says is missing. Only pages kb wrote (its generator tag) are touched.
    """
    for path in directory.glob("*.html"):
        if path.name in keep or path.name == "index.html":
            continue
        try:
            head = path.read_text(encoding="utf-8", errors="replace")[:2000]
        except OSError:
            continue
        if f'<meta name="generator" content="{GENERATOR}">' in head:
            path.unlink(missing_ok=True)


@dataclass(frozen=True)
class SiteBuilt:
    """What ``kb site`` wrote, and what it could not show."""

    written: list[Path]
    warnings: list[str]
    left_out: list[str]
    """Nights whose evidence could not be read (the index says so in a banner)."""
    kept: int = 0
    """Nights whose pages an earlier build wrote and that still hold (not drawn again)."""


def _claim_pages(
    store: KnowledgeStore,
    claims: Sequence[ModelClaim],
    linked: set[str],
    nights: Sequence[Night],
    epochs: EpochsFile | None,
) -> dict[str, str]:
    """A page for every live claim and for every claim a night links (retired ones too)."""
    from kb.views.claims import format_epoch

    live = {c.id for c in claims if c.status in ("active", "stale")}
    paged = frozenset(live | linked)
    by_id = {n.report.report_id: n for n in nights}
    pages: dict[str, str] = {}
    known = set()
    for claim in claims:
        known.add(claim.id)
        if claim.id not in paged:
            continue
        line = format_epoch(claim, epochs) if epochs is not None and claim.id in live else None
        cited = claim_evidence(store.home, store.git, claim)
        # a retired claim's timeline is the nights it rests on: a year of nights times
        # every claim a night ever linked would make each build quadratic
        rests_on = set(cited.reports)
        drawn = (
            nights if claim.id in live else [n for n in nights if n.report.report_id in rests_on]
        )
        timeline = claim_timeline(claim, drawn, cited)
        pages[claim_page(claim.id)] = claim_page_html(claim, by_id, line, paged, timeline, cited)
    for claim_id in sorted(linked - known):
        pages[claim_page(claim_id)] = page_html(
            f"kb claim {claim_id}",
            '<p><a href="index.html">← the site</a></p><h1>A claim no longer in the store</h1>'
            f'<p class="meta id">{esc(claim_id)}</p><p>kb compact removed it; the night '
            "that made it and git history still hold it (kb diff names it).</p>",
        )
    return pages


def _nights_of(
    sources: list[RecordedReport],
    ledger: SiteLedger,
    directory: Path,
    write: Callable[[str, str], None],
    left_out: list[str],
) -> tuple[list[RecordedReport], NightsWritten]:
    """The night pages, drawn or kept; a night whose runs cannot be read is left out."""
    while True:
        try:
            return sources, write_nights(sources, ledger, directory, write)
        except NightUnreadable as exc:
            bad = sources[exc.index].report.report_id
            left_out.append(f"{bad}: {exc.reason}; its night is left out")
            sources = [s for i, s in enumerate(sources) if i != exc.index]


def build_site(
    store: KnowledgeStore,
    directory: Path,
    as_of: int,
    epochs: EpochsFile | None = None,
) -> SiteBuilt:
    """Write the site into ``directory``: the files written, warnings, nights left out.

    Incremental (:mod:`kb.views.site_ledger`): the pages of a night an earlier
    build drew, still current, are kept as they are.
    """
    issue = site_directory_issue(directory)
    if issue is not None:
        raise ConfigError("site", issue)
    sources, left_out = recorded_reports(store)
    claims = list(store.read().claims)
    ledger, unreadable = SiteLedger.read(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("site", f"cannot create {directory}: {exc.strerror or exc}") from None
    try:  # a build that dies half-way leaves no ledger: the next draws every night
        (directory / LEDGER_FILE).unlink(missing_ok=True)
    except OSError as exc:
        raise ConfigError("site", f"cannot write {directory}: {exc.strerror or exc}") from None
    written: list[Path] = []

    def write(name: str, text: str) -> None:
        path = directory / name
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError("site", f"cannot write {path}: {exc.strerror or exc}") from None
        written.append(path)

    sources, drawn = _nights_of(sources, ledger, directory, write, left_out)
    nights = [Night(source.report, ()) for source in sources]
    warnings = (
        []
        if nights or left_out
        else ["no night with evidence yet: the site shows the claims only (kb sweep measures)"]
    ) + ([unreadable] if unreadable else [])
    write("index.html", index_page(nights, claims, as_of, left_out, weak_judges_of(store, None)))
    for name, text in older_nights_files(nights).items():
        write(name, text)
    # the newest nights only: a year's cells would make one page of megabytes (kb diff
    # compares any two)
    write("compare.html", compare_page(nights[-NIGHTS_PER_PAGE:]))
    chosen = epochs if epochs is not None else EpochsFile()
    readable = {source.report.report_id for source in sources}  # not the nights left out
    costs = NightCostsReader(store, only=readable)
    found = compare_models(EvidenceIndex.build(chosen, costs_of=costs))
    for name, text in models_files(found, chosen, drawn.hrefs).items():
        write(name, text)
    for name, text in _claim_pages(store, claims, drawn.linked, nights, epochs).items():
        write(name, text)
    _remove_stale_pages(directory, {path.name for path in written} | set(drawn.kept))
    write(LEDGER_FILE, drawn.ledger.render())
    pages = [path for path in written if path.name != LEDGER_FILE]
    return SiteBuilt(pages, warnings, left_out, len(sources) - drawn.drawn)
