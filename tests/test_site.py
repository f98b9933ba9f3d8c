"""``kb site DIR`` (SPEC 12.4) in a real headless Chromium, at desktop and phone width.

Two nights of three scripted models (on the second, the provider behind ``shifty`` swaps
the model: its canary answers change and it starts failing two cases); the site is opened
from ``file://``, its filters clicked, two nights compared, a claim page followed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from playwright.sync_api import Page

from kb.cli import cli
from tests.sweep_helpers import responses, scripted_model, write_spec
from tests.test_html_report import chromium

pytestmark = pytest.mark.usefixtures("initialized_store")

CANARY = '\n[canary]\nprompts = ["Ping?"]\n'


def night(runner: CliRunner, spec: Path, day: int) -> dict[str, Any]:
    observed = f"2026-11-{day:02d}T02:00:00Z"
    result = runner.invoke(
        cli, ["sweep", str(spec), "--json", "--quiet", "--observed-at", observed]
    )
    assert result.exit_code in (0, 1), result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def two_nights(runner: CliRunner, folder: Path, gate: str = "point") -> None:
    def shifty(correct: int, pong: str) -> dict[str, Any]:
        answers = responses(correct) | {"Ping?": pong}
        return {"model": "scripted:shifty", "params": {"responses": answers}}

    steady = [scripted_model("steady-model-with-a-long-name", 10), scripted_model("weak", 2)]
    budgets = {"target_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 5.0}
    for name, day, swapped in (("n1", 28, shifty(10, "pong v1")), ("n2", 29, shifty(8, "pong v2"))):
        spec = write_spec(
            folder / f"{name}.toml", [*steady, swapped], extra=CANARY, budgets=budgets, gate=gate
        )
        night(runner, spec, day)


def single_line_names(page: Page) -> list[str]:
    """Names (models, ids, task classes) drawn on more than one line: broken mid-word."""
    broken: list[str] = page.eval_on_selector_all(
        ".name",
        "els => els.filter(e => e.getClientRects().length > 1).map(e => e.textContent)",
    )
    return broken


def test_the_site_from_file_at_desktop_and_phone_width(runner: CliRunner, isolated: Path) -> None:
    two_nights(runner, isolated)
    site = isolated / "public"
    built = runner.invoke(cli, ["--as-of", "2026-11-29T03:00:00Z", "site", str(site)])
    assert built.exit_code == 0, built.stderr
    assert "wrote" in built.stdout and (site / "index.html").exists()
    for text in (p.read_text() for p in site.glob("*.html")):
        assert "http://" not in text and "https://" not in text  # nothing fetched
    with chromium() as browser:
        for width, height in ((1280, 900), (390, 844)):
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto((site / "index.html").as_uri())
            rows = page.locator("#nights tbody tr")
            assert rows.count() == 2
            assert "drift: scripted:shifty" in rows.first.inner_text()
            assert page.locator("#claims tbody tr").count() >= 2
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            assert single_line_names(page) == []
            page.screenshot(path=str(isolated / f"index-{width}.png"), full_page=True)

            page.locator("#nights a").first.click()  # the newest night
            assert "Drift:" in page.locator(".banner").inner_text()
            sections = page.locator("section.case")
            assert sections.count() == 10
            first = sections.first
            assert "Question 0?" in first.locator(".prompt.user").inner_text()
            assert first.locator(".expected").inner_text() == "expected exact 'answer-0'"
            rates = page.locator("#rates").inner_text()
            assert "n=10 · 95% [0.72, 1.00]" in rates  # the interval, as --html draws it
            assert first.locator("tbody tr").count() == 3  # every model side by side
            page.check("#only-failed")
            # weak passes cases 0 and 1 only, shifty fails 8 and 9: eight cases hold a failure
            assert page.locator("#shown").inner_text() == "8 of 10 cases"
            page.check("#only-changed")
            # shifty got cases 8 and 9 wrong tonight; it passed them last night
            visible = page.locator("section.case:not([hidden]) h3").all_inner_texts()
            assert [v.split()[0] for v in visible] == ["case-08", "case-09"]
            assert (
                "does not match exact 'answer-8'"
                in page.locator("section.case:not([hidden])").first.inner_text()
            )
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            assert single_line_names(page) == []
            page.screenshot(path=str(isolated / f"night-{width}.png"), full_page=True)

            page.goto((site / "index.html").as_uri())
            page.locator("#compare button").click()
            page.wait_for_selector("#diff tbody tr")
            compared = page.locator("#diff tbody").inner_text()
            assert "scripted:shifty · extraction" in compared and "-0.20" in compared
            assert "DRIFT in B" in compared  # the swap is told where the drop is seen
            assert page.evaluate("document.documentElement.scrollWidth") <= width

            page.goto((site / "compare.html").as_uri() + "?a=nope&b=nope")
            assert "no such night here" in page.locator("#which").inner_text()

            page.goto((site / "index.html").as_uri())
            page.locator("#claims a").first.click()
            assert page.locator("#timeline li").count() >= 1  # the cell's nights drawn
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            page.screenshot(path=str(isolated / f"claim-{width}.png"), full_page=True)
            evidence = page.locator("#evidence a")
            assert evidence.count() >= 1
            evidence.first.click()
            assert page.locator("section.case").count() == 10
            page.close()


def test_a_claim_page_draws_every_night_of_its_cell(runner: CliRunner, isolated: Path) -> None:
    two_nights(runner, isolated, gate="interval")
    site = isolated / "public"
    assert runner.invoke(cli, ["--as-of", "2026-11-29T03:00:00Z", "site", str(site)]).exit_code == 0
    pages = [p for p in site.glob("claim-*.html") if "scripted:weak</span>" in p.read_text()]
    # the live claim's page (the first night's claim, superseded, keeps its page: the
    # first night links it)
    (weak,) = [p for p in pages if '<p class="meta">active · ' in p.read_text()]
    assert len(pages) == 2
    (retired,) = [p for p in pages if p != weak]  # its timeline: the nights it rests on
    assert retired.read_text().count('<li class="night') == 1
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 390, "height": 844})
        page.goto(weak.as_uri())
        nights = page.locator("#timeline li")
        assert nights.count() == 2  # both nights measured it on extraction
        first, second = nights.nth(0).inner_text(), nights.nth(1).inner_text()
        assert "2026-11-28" in first and "epoch began: first measurement" in first
        assert "tonight 2/10" in first and "rests on it" in first
        assert "2026-11-29" in second and "epoch began" not in second  # the same epoch
        assert "epoch 0.20 n=10" in second and "rests on it" in second
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        assert single_line_names(page) == []
        page.screenshot(path=str(isolated / "claim-weak-390.png"), full_page=True)
        nights.nth(1).locator("a").click()
        assert page.locator("section.case").count() == 10
        # weak held its weakness and ran 5 of its 10 cases: the other 5 say so
        resting = page.locator("p.meta", has_text="not sampled tonight").filter(
            has_text="scripted:weak"
        )
        assert resting.count() == 5


def test_the_timeline_marks_the_night_a_drift_began_an_epoch(
    runner: CliRunner, isolated: Path
) -> None:
    from kb.store.filestore import KnowledgeStore
    from kb.views.site import claim_timeline, collect_nights
    from tests.factories import eval_claim

    two_nights(runner, isolated, gate="interval")
    nights, _ = collect_nights(KnowledgeStore(isolated / "rulvar.models.json"))
    first_night = nights[0].report.report_id
    evidence = [{"kind": "eval", "reportId": first_night, "caseIds": ["case-00"]}]
    claim = eval_claim("s", subject={"model": "scripted:shifty"}, evidence=evidence)
    before, after = claim_timeline(claim, nights)
    assert before.evidence and not before.drift and before.new_epoch
    assert after.drift and after.new_epoch and not after.evidence
    assert after.cell.epoch is not None and after.cell.epoch.reason == "drift"


def test_a_directory_of_other_files_is_refused(runner: CliRunner, isolated: Path) -> None:
    (isolated / "notes").mkdir()
    (isolated / "notes" / "mine.txt").write_text("keep me")
    result = runner.invoke(cli, ["site", "notes"])
    assert result.exit_code == 2 and "holds other files" in result.stderr
    assert (isolated / "notes" / "mine.txt").read_text() == "keep me"


def test_a_page_kb_did_not_write_is_never_overwritten(runner: CliRunner, isolated: Path) -> None:
    (isolated / "www").mkdir()
    (isolated / "www" / "index.html").write_text("<html>my page</html>")
    result = runner.invoke(cli, ["site", "www"])
    assert result.exit_code == 2
    assert "www/index.html was not written by kb site" in result.stderr
    assert (isolated / "www" / "index.html").read_text() == "<html>my page</html>"
    # a site kb built is rebuilt in place
    assert runner.invoke(cli, ["site", "public"]).exit_code == 0
    again = runner.invoke(cli, ["site", "public"])
    assert again.exit_code == 0, again.stderr


def test_a_site_where_nothing_can_be_written_is_a_clear_error(
    runner: CliRunner, isolated: Path
) -> None:
    (isolated / "afile").write_text("x")
    result = runner.invoke(cli, ["site", "afile/sub"])
    assert result.exit_code == 2 and result.stderr.startswith(
        "Error: site: cannot create afile/sub: Not a directory"
    )
    assert len(result.stderr.splitlines()) == 1
