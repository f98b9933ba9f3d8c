"""``kb site`` is incremental (SPEC 14.3): a night's pages are written once.

A site built night by night is, page for page and byte for byte, the site
built at once from the same nights; the pages of the nights an earlier build
drew are not written again (and their runs are not read for them); a night
compacted away, a page deleted, a broken ledger or new site code each draw
again exactly what they must.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.cli import cli
from kb.evidence_index import RecordedReport
from kb.store.filestore import KnowledgeStore
from kb.store.records import RunRecord
from kb.views import site as site_module
from kb.views.site import build_site
from kb.views.site_ledger import LEDGER_FILE
from tests.sweep_helpers import responses, scripted_model, write_spec
from tests.test_site import night, two_nights

pytestmark = pytest.mark.usefixtures("initialized_store")

AS_OF = 1_796_000_000_000  # 2026-12-01


def pages(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.html"))}


def third_night(runner: CliRunner, folder: Path) -> None:
    models = [
        scripted_model("steady-model-with-a-long-name", 10),
        scripted_model("weak", 3),
        {"model": "scripted:shifty", "params": {"responses": responses(9) | {"Ping?": "pong v2"}}},
    ]
    spec = write_spec(
        folder / "n3.toml",
        models,
        extra='\n[canary]\nprompts = ["Ping?"]\n',
        budgets={"target_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 5.0},
    )
    night(runner, spec, 30)


def test_a_site_built_night_by_night_is_the_site_built_at_once(
    runner: CliRunner, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = KnowledgeStore(isolated / "rulvar.models.json")
    two_nights(runner, isolated)
    site = isolated / "site"
    first = build_site(store, site, AS_OF)
    assert first.kept == 0
    before = {p.name: p.stat().st_mtime_ns for p in site.glob("night-*.html")}
    third_night(runner, isolated)

    reads: list[str] = []
    runs = RecordedReport.runs

    def counted(self: RecordedReport) -> tuple[RunRecord, ...]:
        reads.append(self.report.report_id)
        return runs(self)

    for_pages: list[str] = []
    drawing = site_module.write_nights

    def drawn(*args: Any, **kwargs: Any) -> Any:
        start = len(reads)
        found = drawing(*args, **kwargs)
        for_pages.extend(reads[start:])
        return found

    monkeypatch.setattr(RecordedReport, "runs", counted)
    monkeypatch.setattr(site_module, "write_nights", drawn)
    second = build_site(store, site, AS_OF)
    assert second.kept == 2  # the two earlier nights' pages hold
    assert for_pages == ["kb-sweep-2026-11-30T02:00:00.000Z"]  # only tonight's runs read
    for name, stamp in before.items():  # and not written again
        assert (site / name).stat().st_mtime_ns == stamp, name
    written = {path.name for path in second.written}
    assert not written & set(before)

    monkeypatch.undo()
    fresh = isolated / "fresh"
    assert build_site(store, fresh, AS_OF).kept == 0
    assert pages(site) == pages(fresh)  # byte for byte, every page
    assert json.loads((site / LEDGER_FILE).read_text()) == json.loads(
        (fresh / LEDGER_FILE).read_text()
    )


def test_what_changed_is_drawn_again_and_only_that(runner: CliRunner, isolated: Path) -> None:
    store = KnowledgeStore(isolated / "rulvar.models.json")
    two_nights(runner, isolated)
    site = isolated / "site"
    build_site(store, site, AS_OF)
    full = pages(site)
    night_pages = sorted(n for n in full if n.startswith("night-"))
    assert len(night_pages) == 2

    (site / night_pages[1]).unlink()  # a page of a night is gone: that night is drawn again
    again = build_site(store, site, AS_OF)
    assert again.kept == 1 and pages(site) == full

    (site / LEDGER_FILE).write_text("{not json")  # a broken ledger: every night again
    rebuilt_whole = build_site(store, site, AS_OF)
    assert rebuilt_whole.kept == 0 and pages(site) == full
    assert rebuilt_whole.warnings == [
        f"{site / LEDGER_FILE}: cannot be read (Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1)): every night's pages are drawn again"
    ]

    ledger = json.loads((site / LEDGER_FILE).read_text())
    ledger["code"] = "an older kb"  # another kb's site code: every night again
    (site / LEDGER_FILE).write_text(json.dumps(ledger))
    assert build_site(store, site, AS_OF).kept == 0 and pages(site) == full

    # the first night's evidence gone (compacted, moved): the second night reads no
    # "before" from it any more, so it is drawn again, and its old page goes
    evidence = isolated / "kb-evidence"
    for path in evidence.glob("kb-sweep-2026-11-28*"):
        path.unlink()
    rebuilt = build_site(store, site, AS_OF)
    assert rebuilt.kept == 0
    fresh = isolated / "fresh"
    build_site(store, fresh, AS_OF)
    assert pages(site) == pages(fresh)
    assert night_pages[0] not in pages(site)


def test_the_cli_says_how_many_nights_it_kept(runner: CliRunner, isolated: Path) -> None:
    two_nights(runner, isolated)
    args = ["--as-of", "2026-12-01T00:00:00Z", "site", "public"]
    first = runner.invoke(cli, args)
    assert first.exit_code == 0, first.stderr
    assert "nights kept" not in first.stdout
    second = runner.invoke(cli, args)
    assert second.exit_code == 0, second.stderr
    assert "pages to public (2 nights' pages kept from the earlier build)" in second.stdout
    wrote = [int(r.stdout.split()[1]) for r in (first, second)]
    assert wrote[0] == len(list((isolated / "public").glob("*.html")))  # pages: html only
    assert wrote[1] == wrote[0] - 2  # the two night pages, not written again
    newest = sorted((isolated / "public").glob("night-*.html"))[-1]
    newest.unlink()  # that night is drawn again, the other kept
    one = runner.invoke(cli, args)
    assert "(1 night's pages kept from the earlier build)" in one.stdout


def test_the_index_lists_the_newest_nights_and_pages_the_older(
    runner: CliRunner, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    two_nights(runner, isolated)
    third_night(runner, isolated)
    monkeypatch.setattr(site_module, "NIGHTS_PER_PAGE", 2)  # a year is 365 nights: 100 a page
    site = isolated / "site"
    build_site(KnowledgeStore(isolated / "rulvar.models.json"), site, AS_OF)
    index = (site / "index.html").read_text()
    older = (site / "nights-2.html").read_text()
    newest, middle, oldest = ("2026-11-30T02:00", "2026-11-29T02:00", "2026-11-28T02:00")
    table = index.split('id="nights"')[1].split("</table>")[0]
    assert newest in table and middle in table and oldest not in table
    assert oldest in older and newest not in older.split('id="nights"')[1]
    assert 'href="nights-2.html"' in index and 'href="index.html"' in older
    assert not (site / "nights-3.html").exists()
    # the compare form and page hold the nights the index lists (kb diff compares any two)
    compare = (site / "compare.html").read_text()
    assert "2026-11-30T02:00" in compare and "2026-11-28T02:00" not in compare
    form = index.split('id="compare"')[1].split("</form>")[0]
    assert newest in form and oldest not in form


def test_a_hand_edited_ledger_names_no_other_page_and_no_script(
    runner: CliRunner, isolated: Path
) -> None:
    store = KnowledgeStore(isolated / "rulvar.models.json")
    two_nights(runner, isolated)
    site = isolated / "site"
    build_site(store, site, AS_OF)
    full = pages(site)
    ledger = json.loads((site / LEDGER_FILE).read_text())
    for tampered in (
        {"fold": [["scripted:weak", "case-00", True, "2026", "javascript:alert(1)"]]},
        {"nights": {n: v | {"pages": ["../outside.html"]} for n, v in ledger["nights"].items()}},
        {"nights": {n: v | {"claims": [7]} for n, v in ledger["nights"].items()}},
    ):
        (site / LEDGER_FILE).write_text(json.dumps(ledger | tampered))
        rebuilt = build_site(store, site, AS_OF)
        assert rebuilt.kept == 0 and rebuilt.warnings[0].endswith(
            "every night's pages are drawn again"
        )
        assert pages(site) == full and "javascript:" not in "".join(
            p.decode() for p in pages(site).values()
        )
