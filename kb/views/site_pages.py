"""The shell every page of ``kb site`` shares: style, the page frame, names of pages.

Pages are self-contained (inline style, a little inline script, nothing
fetched) and readable from ``file://``.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from kb.store.evidence import evidence_stem
from kb.store.records import ReportFile, RunRecord

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
.unscored { color: #57606a; font-weight: 600; }
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
.prompt { background: #f6f8fa; padding: 0.4em; white-space: pre-wrap; overflow-wrap: anywhere; }
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
[hidden] { display: none !important; }
/* a rates cell, as the --html report draws it */
#rates td.cell, #rates td.incomplete { min-width: 9em; }
.rate { font-size: 1.3em; font-weight: 600; } .rate.muted { color: #57606a; font-size: 1em; }
.note, .why, .claim, .delta { font-size: 0.82em; color: #424a53; }
.outcome { font-weight: 700; text-transform: uppercase; font-size: 0.8em; }
.delta.up { color: #1a7f37; } .delta.down { color: #cf222e; }
.claim { max-width: 22em; } .claim.retired { color: #a40e26; }
.why { color: #9a6700; overflow-wrap: anywhere; max-width: 22em; }
.trend { display: block; margin: 2px 0; }
/* the case x model grid: a verdict colour and a latency per answer */
#grid { font-size: 0.9em; }
#grid th, #grid td { padding: 2px 6px; }
#grid th.case { font-weight: normal; max-width: 18em; overflow: hidden;
  text-overflow: ellipsis; white-space: nowrap; }
#grid th.model span { display: block; max-width: 10em; overflow: hidden;
  text-overflow: ellipsis; white-space: nowrap; }
#grid tr.group th { background: #eaeef2; }
#grid td.v { text-align: center; white-space: nowrap; min-width: 4.5em; font-weight: 700; }
#grid td.v i { display: block; font-style: normal; font-weight: normal; font-size: 0.75em;
  color: #424a53; }
td.v.ok { background: #dafbe1; color: #1a7f37; } td.v.no { background: #ffebe9; color: #cf222e; }
td.v.err { background: #fff8c5; color: #9a6700; } td.v.rest { color: #8c959f; }
td.v[data-was] { box-shadow: inset 0 0 0 2px #0969da; }
.filters input[type=search] { width: 18em; max-width: 100%; font: inherit; padding: 2px 4px; }
.filters .boxes { margin: 0.3em 0; }
ul.reasons { margin: 0; padding-left: 1.1em; } ul.reasons li.no { color: #cf222e; }
ul.reasons li.judge { color: #57606a; }
ul.changed { color: #0550ae; }
small.before { display: block; font-weight: normal; }
small.label-cmd { display: block; font-weight: normal; color: #57606a; margin-top: 0.3em; }
small.label-cmd code { user-select: all; }
small.label-cmd span.w { white-space: nowrap; }
.banner.alarm { background: #ffebe9; border-left-color: #cf222e; }
small.id-small { display: block; }
table.answers td[data-label=output] { min-width: 14em; }
th.row-name { white-space: nowrap; }
.pager a, .pager b { padding: 0 0.3em; }
@media (max-width: 640px) {  /* a phone: each answer a card, the answer itself on screen */
  #grid th.case { max-width: 8.5em; }
  /* model names read upwards: every model's column stays narrow and named */
  #grid th.model { vertical-align: bottom; }
  #grid th.model span { writing-mode: vertical-rl; transform: rotate(180deg); max-height: 11em;
    max-width: none; }
  th.row-name { white-space: normal; max-width: 7em; font-size: 0.85em; }
  #nights th, #nights td { padding: 3px 4px; font-size: 0.9em; }
  #matrix td, #rates td { min-width: 6.5em; }
  #grid td.v { min-width: 3em; padding: 2px 3px; }
  #nights small.id-small { font-size: 0.75em; }
  .name { font-size: 0.85em; }
  h1 { font-size: 1.1em; }
  table.answers thead { display: none; }
  table.answers, table.answers tbody, table.answers tr, table.answers td {
    display: block; width: 100%; }
  table.answers tr { border-top: 2px solid #d0d7de; }
  table.answers td { border: none; padding: 2px 4px; text-align: left; }
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


PAGE_BUDGET = 300_000
"""No page of the site is larger (bytes, SPEC 13.6)."""
CONTENT_BUDGET = 280_000
"""What a page's own content may take: the rest is its style, script and frame (~10 KB)."""


def chunked(parts: Sequence[str], budget: int) -> list[list[str]]:
    """``parts`` in order, cut into runs of at most ``budget`` bytes (one part at least)."""
    chunks: list[list[str]] = [[]]
    size = 0
    for part in parts:
        length = len(part.encode())
        if chunks[-1] and size + length > budget:
            chunks.append([])
            size = 0
        chunks[-1].append(part)
        size += length
    return chunks


def pager(pages: Sequence[str], current: int, label: str) -> str:
    if len(pages) < 2:
        return ""
    links = " ".join(
        f"<b>{i + 1}</b>" if i == current else f'<a href="{esc(p)}">{i + 1}</a>'
        for i, p in enumerate(pages)
    )
    return f'<p class="pager">{label}: {links}</p>'


GENERATOR = "kb site"
"""The ``<meta name="generator">`` of every page: what tells a kb site from other files."""


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


def page_html(title: str, body: str, script: str = "") -> str:
    tail = f"<script>{script}</script>" if script else ""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="{GENERATOR}">\n'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>\n"
        f"{body}\n{tail}</body></html>\n"
    )
