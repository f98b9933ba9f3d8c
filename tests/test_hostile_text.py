"""Hostile text in CI comments (SPEC 13.1): what a model, a dataset or a spec chose stays inert.

``kb sweep --summary`` and ``kb diff --markdown`` are pasted into pull requests and
``$GITHUB_STEP_SUMMARY``. A task class, a model name, a report id, a reply quoted in an
incomplete cell's reason or a commit trailer's reason must not become a link, an image,
HTML, a mention or a new table column there. Every output is parsed with a real
CommonMark + GFM-tables parser (markdown-it-py), and the literal text must still read
back from the code spans. The HTML report and the site are held to the same strings.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from kb.markdown import code_span, table_code
from kb.store.diff import Side, StoreDiff, diff_markdown
from kb.store.records import EpochRecord, parse_report
from kb.views.decision import ClaimMatrix, MatrixCell, matrix_markdown
from kb.views.report_text import sweep_markdown
from tests.cli_helpers import kb
from tests.factories import eval_claim
from tests.sweep_helpers import responses, write_spec

HOSTILE = "[click](http://evil.example) @octocat </script><img src=//evil.example/p.png> a|b"
MODEL = "scripted:[m](http://evil.example)@octocat|x`y"
EFFORT = "<img src=x>|@e"
SUBJECT = f"{MODEL}@{EFFORT}"
REPORT_ID = "r`[x](e)<b>|@u"  # a report id may hold anything but '/'
REPLY = "[x](http://e) @user <img src=x> a|b ``tick`` `one`"
STRINGS = [
    "[x](http://e)",
    "<img src=x>",
    "@user",
    "a|b",
    "x\\|y and a\\\\|b",
    "``tick`` and `one`",
    "`edge`",
    " spaced ",
    "line one\nline two\r\nthree\rfour",
    "![i](http://e/p.png) <script>alert(1)</script> https://e.example *b* _i_ #12",
    "\\",
]
ACTIVE = {"link_open", "image", "html_inline", "html_block", "code_block", "fence"}

# GitHub's parser (cmark-gfm) with its table extension; markdown-it's "gfm-like" preset adds
# linkify, which needs linkify-it-py: bare URLs are checked instead by assert_inert, which
# finds none in any text node (where GitHub's autolinker and mentions look).
GFM = MarkdownIt("commonmark").enable("table")


def inline(tokens: list[Token]) -> list[Token]:
    return [child for token in tokens for child in token.children or ()]


def rendered(token: Token) -> str:
    """An inline token's text as shown: code spans' content and plain text."""
    return "".join(child.content for child in token.children or ())


def tables(markdown: str) -> list[list[list[str]]]:
    """Each table's rows (the header row first), each row its cells as shown."""
    found: list[list[list[str]]] = []
    inside = False
    for token in GFM.parse(markdown):
        if token.type in ("table_open", "table_close"):
            inside = token.type == "table_open"
            found += [[]] if inside else []
        elif token.type == "tr_open":
            found[-1].append([])
        elif token.type == "inline" and inside:
            found[-1][-1].append(rendered(token))
    return found


def assert_inert(markdown: str) -> list[str]:
    """No link, image, HTML or code block anywhere; nothing hostile outside a code span.

    Returns the code spans' contents. GitHub links bare URLs and mentions in text
    nodes only (never in ``<code>``), so plain text must hold neither.
    """
    tokens = GFM.parse(markdown)
    kinds = {token.type for token in [*tokens, *inline(tokens)]}
    assert not kinds & ACTIVE, kinds & ACTIVE
    prose = " ".join(t.content for t in inline(tokens) if t.type == "text")
    for marker in ("evil", "http", "@", "<", ">", "`"):
        assert marker not in prose, (marker, prose)
    return [t.content for t in inline(tokens) if t.type == "code_inline"]


def shown(text: str) -> str:
    """What a code span shows of ``text``: line endings as spaces (NUL as the parser does)."""
    flat = text.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")
    return flat.replace("\0", "\ufffd")


def one_row(cell: str) -> str:
    return f"| a | b | c |\n|---|---|---|\n| left | {cell} | right |\n"


# -- the helper ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", STRINGS)
def test_a_table_cell_shows_the_text_and_nothing_else(text: str) -> None:
    (table,) = tables(one_row(table_code(text)))
    assert table[1] == ["left", shown(text), "right"]  # one cell, read back literally
    assert assert_inert(one_row(table_code(text))) == [shown(text)]


@pytest.mark.parametrize("text", STRINGS)
def test_a_code_span_in_prose_shows_the_text_and_nothing_else(text: str) -> None:
    markdown = f"before {code_span(text)} after\n"
    assert assert_inert(markdown) == [shown(text)]
    (paragraph,) = [t for t in GFM.parse(markdown) if t.type == "inline"]
    assert [c.type for c in paragraph.children or ()] == ["text", "code_inline", "text"]


MARKUP = st.sampled_from(list("`|\\ \n\r\t<>[]()!@*_#:/&;"))


@given(st.text(st.one_of(MARKUP, st.characters()), max_size=80))
def test_any_text_is_exactly_one_inert_table_cell(text: str) -> None:
    markdown = one_row(table_code(text))
    (table,) = tables(markdown)
    assert table[1] == ["left", shown(text), "right"]
    tokens = GFM.parse(markdown)
    assert not {t.type for t in [*tokens, *inline(tokens)]} & ACTIVE
    cell = [t for t in tokens if t.type == "inline"][4]  # a, b, c, left, then the cell
    assert [c.type for c in cell.children or ()] in ([], ["code_inline"])


# -- kb sweep --summary and kb diff --markdown -------------------------------------------------

CANARY = '\n[canary]\nprompts = ["Ping?"]\n'
BUDGETS = {"target_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 5.0}


def hostile_model(pong: str) -> dict[str, Any]:
    return {
        "model": MODEL,
        "effort": EFFORT,
        "params": {"responses": responses(10) | {"Ping?": pong}},
    }


def hostile_nights(runner: CliRunner, repo: Path) -> dict[str, Any]:
    """Night 1 measures the hostile model; night 2 (report id REPORT_ID) its canary drifts
    and a stuck provider answers REPLY to every prompt (an incomplete cell quoting it)."""
    assert kb(runner, "init").exit_code == 0
    first = write_spec(
        repo / "a.toml", [hostile_model("v1")], task_class=HOSTILE, extra=CANARY, budgets=BUDGETS
    )
    night = ["--quiet", "--json", "--observed-at"]
    assert kb(runner, "sweep", str(first), *night, "2026-11-01T02:00:00Z").exit_code == 0
    stuck = {"model": "scripted:stuck", "params": {"default": REPLY}}
    second = write_spec(
        repo / "b.toml",
        [hostile_model("v2"), stuck],
        task_class=HOSTILE,
        extra=CANARY,
        budgets=BUDGETS,
        extra_sweep=f"report_id = {json.dumps(REPORT_ID)}",
    )
    args = ["--allow-incomplete", "--summary", "s.md", "--html", "r.html"]
    result = kb(runner, "sweep", str(second), *night, "2026-11-02T02:00:00Z", *args)
    assert result.exit_code == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_the_summary_renders_every_hostile_string_inert(runner: CliRunner, repo: Path) -> None:
    report = hostile_nights(runner, repo)
    reason = report["cells"][1]["incompleteReason"]
    assert "[x](http://e) @user <img src=x> a|b" in reason  # the reply, quoted
    summary = (repo / "s.md").read_text()
    codes = assert_inert(summary)
    assert codes[0] == REPORT_ID  # the heading
    assert summary.splitlines()[2].startswith("> **Drift:**") and SUBJECT in codes
    stale, superseded, cells, canary = tables(summary)  # what the commit changed leads
    assert cells[1:] == [
        [SUBJECT, HOSTILE, "1.00", "0.72–1.00", "10/10", "strength"],
        ["scripted:stuck", HOSTILE, "—", "—", "10/10 answered", f"incomplete: {reason}"],
    ]
    assert [row[0] for row in canary[1:]] == [SUBJECT, "scripted:stuck"]
    assert canary[1][1:] == ["DRIFT", "1"]
    assert stale[1] == [f"{SUBJECT} · {HOSTILE}", "strength", "superseded"]
    assert superseded[1] == [f"{SUBJECT} · {HOSTILE}", "strength", "1.00 → 1.00"]


def test_kb_diff_markdown_renders_every_hostile_string_inert(runner: CliRunner, repo: Path) -> None:
    hostile_nights(runner, repo)
    markdown = kb(runner, "diff", "--markdown").stdout
    codes = assert_inert(markdown)
    assert codes[2] == REPORT_ID  # "… (night REPORT_ID)": a report id naming no date
    stale, superseded = tables(markdown)
    assert stale[1][0] == superseded[1][0] == f"{SUBJECT} · {HOSTILE}"
    changes = markdown.split("\n", 3)[3]  # under the header naming the two revisions
    assert changes in (repo / "s.md").read_text()


def test_kb_matrix_markdown_renders_hostile_names_inert(runner: CliRunner, repo: Path) -> None:
    hostile_nights(runner, repo)
    markdown = kb(runner, "--as-of", "2026-11-03", "matrix", "--markdown").stdout
    assert_inert(markdown)
    (table,) = tables(markdown)
    assert table[0] == ["model", HOSTILE]
    assert table[1][0] == SUBJECT and table[1][1].startswith("S 1.00 [0.72, 1.00] n=10")


def test_alarm_lines_and_every_diff_table_are_inert() -> None:
    claim = eval_claim(
        f"{REPORT_ID}/{SUBJECT}/{HOSTILE}",
        subject={"model": MODEL, "effort": EFFORT},
        taskClass=HOSTILE,
        status="archived",
    )
    reason = "[why](http://e)<img|@u"
    side = Side("<b>|`HEAD`", 1, 0, night=REPORT_ID)
    changes = StoreDiff(
        side,
        side,
        added=(claim,),
        superseded=((claim, None),),
        archived=((claim, reason), (claim, "falsified")),
        staled=(claim,),
        expired=(claim,),
        compacted=(claim,),
    )
    markdown = diff_markdown(changes)
    codes = assert_inert(markdown)
    assert codes[:3] == [side.label, REPORT_ID, side.label] and codes[-1] == claim.id
    falsified, stale, added, archived, expired, superseded = tables(markdown)
    for table in (falsified, stale, added, archived, expired, superseded):
        assert table[1][0] == f"{SUBJECT} · {HOSTILE}"
    assert added[1][4] == claim.id and archived[1][2] == reason
    matrix = ClaimMatrix(0, (SUBJECT,), (HOSTILE,), {})
    cell = MatrixCell(SUBJECT, HOSTILE, (), False, retired=claim, retired_reason=reason)
    matrix.cells[SUBJECT, HOSTILE] = cell
    assert_inert(matrix_markdown(matrix))
    assert tables(matrix_markdown(matrix))[0][1] == [SUBJECT, f"x retired ({reason})"]


def test_an_alarm_line_names_its_cell_inert(runner: CliRunner, repo: Path) -> None:
    hostile_nights(runner, repo)
    report = parse_report(
        (repo / "kb-evidence" / f"{REPORT_ID}.report.json").read_bytes(), "report"
    )
    alarm = EpochRecord(
        reason="alarm",
        started_at="2026-11-02T02:00:00.000Z",
        started_in=REPORT_ID,
        nights=1,
        n=10,
        pass_rate=0.4,
        down=6.0,
        up=0.0,
        alarm="down",
        pool=10,
        ran=10,
        why="the detector alarmed",
    )
    cells = (report.cells[0].model_copy(update={"epoch": alarm}), *report.cells[1:])
    markdown = sweep_markdown(report.model_copy(update={"cells": cells}), None)
    assert_inert(markdown)
    (line,) = [t for t in GFM.parse(markdown) if t.type == "inline" and "Alarm:" in t.content]
    spans = [c.content for c in line.children or () if c.type == "code_inline"]
    assert spans == [SUBJECT, HOSTILE]


# -- the HTML report and the site --------------------------------------------------------------


class Page(HTMLParser):
    """The tags a page opens, the addresses it links or loads, and its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.addresses: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.addresses += [value or "" for name, value in attrs if name in ("href", "src")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def read_page(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text())
    return page


def test_the_html_report_and_the_site_escape_the_same_strings(
    runner: CliRunner, repo: Path
) -> None:
    hostile_nights(runner, repo)
    assert kb(runner, "site", "site").exit_code == 0
    pages = [repo / "r.html", *sorted((repo / "site").rglob("*.html"))]
    assert len(pages) > 3
    seen = ""
    for path in pages:
        page = read_page(path)
        assert not page.tags & {"img", "iframe"}, path  # (the compare page has its own script)
        assert not any("evil" in value or "http://e" in value for value in page.addresses), path
        seen += "".join(page.text)
    for text in (HOSTILE, SUBJECT, REPORT_ID, "[x](http://e) @user <img src=x> a|b"):
        assert text in seen  # shown as written, tags and all
