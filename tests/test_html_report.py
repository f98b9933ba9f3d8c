"""The HTML report in a real headless Chromium: click a cell, read the cases it reveals.

Playwright drives Debian's Chromium (``/usr/bin/chromium``, installed by
``make test``); the page itself loads nothing from anywhere.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from playwright.sync_api import Browser, sync_playwright

from kb.cli import cli
from tests.sweep_helpers import CASES, responses, scripted_model, write_spec

pytestmark = pytest.mark.usefixtures("initialized_store")

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium() -> Iterator[Browser]:
    """Headless Chromium. Opened only after kb has run: Playwright's sync API keeps an
    event loop running in this thread, inside which kb's own asyncio.run cannot start."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "chromium is not installed (make test installs Debian's chromium)"
    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=binary, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def night(runner: CliRunner, spec: Path, day: int, *args: str) -> dict[str, Any]:
    result = runner.invoke(
        cli,
        ["sweep", str(spec), "--json", "--quiet", "--observed-at", f"2026-11-{day:02d}T02:00:00Z"]
        + list(args),
        catch_exceptions=False,
    )
    assert result.exit_code in (0, 1), result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def two_nights(runner: CliRunner, folder: Path) -> tuple[Path, dict[str, Any]]:
    """Night 1, then night 2 where `strong` slips from 10/10 to 8/10 and `flaky` fails a case."""
    long_answer = "x" * 5000
    first = write_spec(
        folder / "n1.toml",
        [scripted_model("strong", 10), scripted_model("weak", 2), scripted_model("flaky", 10)],
        extra_sweep="max_retries = 0",
    )
    night(runner, first, 28)
    strong = responses(8) | {"Question 9?": long_answer}
    second = write_spec(
        folder / "n2.toml",
        [
            {"model": "scripted:strong", "params": {"responses": strong}},
            scripted_model("weak", 2),
            scripted_model("flaky", 10, errors=["Question 4?"]),
        ],
        extra_sweep="max_retries = 0",
    )
    html_path = folder / "report.html"
    report = night(runner, second, 29, "--html", str(html_path))
    return html_path, report


def test_clicking_a_cell_reveals_its_cases(runner: CliRunner, isolated: Path) -> None:
    html_path, report = two_nights(runner, isolated)
    text = html_path.read_text()
    # Self-contained: no script, no stylesheet, image or font fetched from anywhere.
    assert not re.search(r"<script|<link|<img|src=|url\(|https?://", text)
    with chromium() as browser:
        look_and_click(browser, html_path, isolated)
    assert report["cells"][0]["passRate"] == 0.8


def look_and_click(browser: Browser, html_path: Path, folder: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(html_path.as_uri())
    outcomes = page.eval_on_selector_all(
        "#heatmap td[data-outcome]", "tds => tds.map(t => t.dataset.outcome)"
    )
    assert outcomes == ["none", "weakness", "incomplete"]
    strong = page.locator('td[data-outcome="none"]')
    assert "▼ −0.20 vs 2026-11-28" in strong.inner_text()  # 1.00 last night, 0.80 tonight
    assert page.locator("svg.trend").count() >= 2
    cell_id = strong.get_attribute("data-cell")
    section = page.locator(f"section#{cell_id}")
    assert not section.is_visible()  # hidden until clicked
    strong.locator("a").click()
    assert section.is_visible()
    cases = section.inner_text()
    assert "case-00" in cases and "case-08" in cases
    assert "FAIL" in cases and "does not match exact 'answer-8'" in cases
    assert "wrong" in cases  # the model's answer
    assert "cut at 4,000 characters" in cases

    incomplete = page.locator('td[data-outcome="incomplete"]')
    assert "0.00" not in incomplete.inner_text().split("\n")[0]  # never a bare 0.00
    assert "1 target run failed at the provider" in incomplete.inner_text()
    incomplete.locator("a").click()
    revealed = page.locator(f"section#{incomplete.get_attribute('data-cell')}").inner_text()
    assert "ERROR" in revealed and "scripted error for prompt 'Question 4?'" in revealed
    assert "strength" in page.locator(".legend").inner_text()

    wide = folder / "wide.png"
    page.screenshot(path=str(wide), full_page=True)
    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone.goto(html_path.as_uri() + f"#{cell_id}")
    assert phone.locator(f"section#{cell_id}").is_visible()
    narrow = folder / "phone.png"
    phone.screenshot(path=str(narrow), full_page=True)
    # The page fits the phone's width; the heatmap scrolls inside its own box.
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    for shot in (wide, narrow):
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_kb_report_renders_the_same_page_and_json(runner: CliRunner, isolated: Path) -> None:
    html_path, report = two_nights(runner, isolated)
    again = runner.invoke(
        cli,
        ["report", report["reportId"], "--json"],
        catch_exceptions=False,
    )
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout) == report
    rendered = isolated / "again.html"
    runner.invoke(cli, ["report", report["reportId"], "--html", str(rendered)])
    assert rendered.read_text() == html_path.read_text()
    assert len(CASES) == 10
