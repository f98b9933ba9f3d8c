"""The site's night page reads why an answer failed (SPEC 13.6), in a real headless Chromium.

A 300-case x 4-model night (three task classes, long prompts and answers, a
system message, one model slow) is built into a site: no page is over 300 KB,
every case in the grid opens its answers (on a numbered page), the search box,
the failure filters and the task-class filter count what they should, and at
390 px the grid's model columns stay on screen. A two-night site shows at
least what ``--html`` shows (interval, change, claim link) and the index's
model x task-class matrix with what the newest night retired.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.cli import cli
from kb.views.site_pages import PAGE_BUDGET
from tests.sweep_helpers import toml_value
from tests.test_html_report import chromium
from tests.test_site import two_nights

pytestmark = pytest.mark.usefixtures("initialized_store")

CLASSES = ("extraction", "arithmetic", "instruction-following")
SYSTEM = "You are terse. Reply with the answer only."
FILLER = " Context: " + "the quick brown fox jumps over the lazy dog; " * 8
TAIL = "-" + "y" * 70  # an expected answer too long for a phone's line, without a space


def big_cases() -> list[tuple[str, str, str, str]]:
    """300 cases (100 per task class): name, task class, prompt, answer."""
    return [
        (f"{cls[:5]}-{i:03d}", cls, f"Question {cls} {i}?{FILLER}", f"answer-{cls}-{i}{TAIL}")
        for cls in CLASSES
        for i in range(100)
    ]


def wrong_on(cases: list[tuple[str, str, str, str]], every: int) -> dict[str, str]:
    """Replies right except on every ``every``-th case (0: always right); each reply long."""
    pad = " (the reply goes on: " + "words " * 40 + ")"
    return {
        prompt: (f"wrong-{i}{pad}" if every and i % every == 0 else answer)
        for i, (_, _, prompt, answer) in enumerate(cases)
    }


def big_night(folder: Path) -> Path:
    cases = big_cases()
    models: list[dict[str, Any]] = [
        {"model": "scripted:always-right", "params": {"responses": wrong_on(cases, 0)}},
        {"model": "scripted:wrong-every-3rd", "params": {"responses": wrong_on(cases, 3)}},
        {"model": "scripted:wrong-every-7th", "params": {"responses": wrong_on(cases, 7)}},
        {
            "model": "scripted:a-slow-model-with-a-long-name",
            "params": {"responses": wrong_on(cases, 0), "latency_ms": 1},
        },
    ]
    lines = ["[sweep]", 'committer = "ci"', 'gate = "interval"', 'sampling = "full"']
    lines += ["concurrency = 16", "max_cases = 100", "", "[budgets]"]
    lines += ["target_usd = 0.01", "max_total_usd = 50.0"]
    for model in models:
        lines += ["", "[[models]]"] + [f"{k} = {toml_value(v)}" for k, v in model.items()]
    for name, cls, prompt, answer in cases:
        lines += [
            "",
            "[[cases]]",
            f'name = "{name}"',
            f'task_class = "{cls}"',
            f"system = {json.dumps(SYSTEM)}",
            f"prompt = {json.dumps(prompt)}",
            f'graders = [{{ kind = "golden", expected = {json.dumps(answer)} }}]',
        ]
    spec = folder / "big.toml"
    spec.write_text("\n".join(lines) + "\n")
    return spec


def failing(indices: range = range(300)) -> int:
    """Cases some model fails: the case's index (0-299, in order) divisible by 3 or by 7."""
    return sum(1 for i in indices if i % 3 == 0 or i % 7 == 0)


def one_night_site(runner: CliRunner, spec: Path, site: Path) -> tuple[Path, dict[str, int]]:
    """Sweep ``spec`` one night, build its site: the site and each page's bytes (none over
    the page budget)."""
    swept = runner.invoke(
        cli, ["sweep", str(spec), "--quiet", "--observed-at", "2026-11-28T02:00:00Z"]
    )
    assert swept.exit_code in (0, 1), swept.stderr
    built = runner.invoke(cli, ["--as-of", "2026-11-28T03:00:00Z", "site", str(site)])
    assert built.exit_code == 0, built.stderr
    sizes = {p.name: p.stat().st_size for p in site.glob("*.html")}
    assert max(sizes.values()) <= PAGE_BUDGET, sizes
    return site, sizes


def test_a_300_case_night_is_paged_searchable_and_readable_at_both_widths(
    runner: CliRunner, isolated: Path
) -> None:
    spec = big_night(isolated)
    site, sizes = one_night_site(runner, spec, isolated / "public")
    (night,) = [site / n for n in sizes if n.startswith("night-") and "-cases-" not in n]
    answer_pages = sorted(n for n in sizes if "-cases-" in n)
    assert len(answer_pages) >= 2  # 1,200 long answers do not fit one page
    text = night.read_text()
    links = re.findall(r'<th class="case"><a href="([^"#]*)#(case-[0-9a-f]{16})"', text)
    assert len(links) == 300 and len({anchor for _, anchor in links}) == 300
    for page, anchor in links:  # every case opens its answers, wherever they are
        assert f'id="{anchor}"' in (site / page).read_text(), (page, anchor)
    wrong_answers = sum((i % 3 == 0) + (i % 7 == 0) for i in range(300))
    assert text.count('class="v no"') == wrong_answers  # each wrong answer red in the grid
    assert re.search(r'class="v ok">✓<i>\d+ ms</i>', text)  # each answer's latency

    # models.html links each pair's page, which links each discordant case to both
    # answers, on whichever page holds them
    overview = (site / "models.html").read_text()
    pairs = re.findall(r'<a href="(pair-[0-9a-f]{16}\.html)">', overview)
    assert len(pairs) == 18  # 4 models: 6 pairs on each of the 3 task classes
    models = "".join((site / p).read_text() for p in pairs)
    answers = re.findall(r'<a href="([^"#]*-cases-\d+\.html)#(case-[0-9a-f]{16})"', models)
    assert len(answers) >= 100
    for page, anchor in answers:
        assert f'id="{anchor}"' in (site / page).read_text(), (page, anchor)
    with chromium() as browser:
        for width in (1280, 390):
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(night.as_uri())
            shown = page.locator("#shown")
            assert shown.inner_text() == "300 of 300 cases"
            page.fill("#search", "arith-042")
            assert shown.inner_text() == "1 of 300 cases"
            page.fill("#search", "question instruction-following 4")  # the prompt's words
            assert shown.inner_text() == "11 of 300 cases"  # 4 and 40-49
            page.fill("#search", "")
            page.check("#only-failed")
            assert shown.inner_text() == f"{failing()} of 300 cases"
            page.check("#only-disagree")  # the always-right models agree with none of those
            assert shown.inner_text() == f"{failing()} of 300 cases"
            page.select_option("#task-class", "arithmetic")
            assert shown.inner_text() == f"{failing(range(100, 200))} of 300 cases"
            assert page.locator("#grid tr.group:not([hidden])").count() == 1
            page.uncheck("#only-failed")
            page.uncheck("#only-disagree")
            assert shown.inner_text() == "100 of 300 cases"
            page.select_option("#sort", "slow")  # slowest answers first, none lost
            assert page.locator("#grid tr.case-row:not([hidden])").count() == 100
            # the page never scrolls sideways, and every model's column stays on screen
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            right = page.eval_on_selector_all(
                "#grid thead th",
                "els => Math.max(...els.map(e => e.getBoundingClientRect().right))",
            )
            assert right <= width, (width, right)
            page.screenshot(path=str(isolated / f"grid-{width}.png"))
            # a failing answer's whole story is one click away
            page.check("#only-failed")
            page.locator("#grid tr.case-row:not([hidden]) th a").first.click()
            target = page.locator("section.case:target")
            story = target.inner_text()
            assert "system" in story and SYSTEM in story
            assert "Question arithmetic" in story and "the quick brown fox" in story
            assert "does not match exact 'answer-arithmetic-" in story  # the grader said why
            assert "before: not asked in an earlier night of this site" in story
            assert "FAIL" in story and "PASS" in story
            assert "expected" in story
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            page.screenshot(path=str(isolated / f"answers-{width}.png"))
            page.close()


def test_the_night_page_shows_what_the_html_report_shows(runner: CliRunner, isolated: Path) -> None:
    two_nights(runner, isolated)
    site = isolated / "public"
    built = runner.invoke(cli, ["--as-of", "2026-11-29T03:00:00Z", "site", str(site)])
    assert built.exit_code == 0, built.stderr
    night = site / "night-kb-sweep-2026-11-29T02_00_00.000Z.html"
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(night.as_uri())
        rates = page.locator("#rates").inner_text()
        assert "▼ −0.20 vs 2026-11-28" in rates  # shifty's change since its previous night
        assert "= ±0.00 vs 2026-11-28" in rates  # the steady ones'
        assert "95% [" in rates
        claim = page.locator("#rates .claim a").first
        href = claim.get_attribute("href")
        assert href is not None and (site / href).exists()  # the claim's own page
        claim.click()
        assert page.locator("#timeline li").count() == 2
        page.goto(night.as_uri())
        page.check("#only-changed")
        assert page.locator("#shown").inner_text() == "2 of 10 cases"
        changed = page.locator("section.case:not([hidden])").first.inner_text()
        assert "scripted:shifty: passed in its previous night, fails tonight" in changed
        assert page.locator("#grid td[data-was]").count() == 2  # marked in the grid too
        assert "Retired" in page.content() and "night-claims" in page.content()

        page.goto((site / "index.html").as_uri())
        matrix = page.locator("#matrix").inner_text()
        for model in ("steady-model-with-a-long-name", "scripted:weak", "scripted:shifty"):
            assert model in matrix
        assert "▼ −0.20" in matrix and "95% [" in matrix
        retired = page.locator("#retired").inner_text()
        assert (
            "scripted:shifty · extraction strength — archived (falsified); flipped stale: the "
            "canary saw the model change" in retired
        )
        # a re-measurement is not a retired belief: counted apart, as kb diff does
        assert "scripted:weak" not in retired
        assert "re-measured: renewed by the night's own" in page.content()
        page.set_viewport_size({"width": 390, "height": 844})
        page.screenshot(path=str(isolated / "index-390.png"), full_page=True)
        nights = page.locator("#nights tbody tr").first
        box = nights.locator("td").last.bounding_box()  # spent: the last key column
        assert box is not None and box["x"] + box["width"] <= 390
        assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_filters_survive_the_back_button_and_a_model_filter_narrows(
    runner: CliRunner, isolated: Path
) -> None:
    two_nights(runner, isolated)
    site = isolated / "public"
    assert runner.invoke(cli, ["--as-of", "2026-11-29T03:00:00Z", "site", str(site)]).exit_code == 0
    night = site / "night-kb-sweep-2026-11-29T02_00_00.000Z.html"
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(night.as_uri())
        page.select_option("#failed-by", label="failed by scripted:shifty")
        assert page.locator("#shown").inner_text() == "2 of 10 cases"  # shifty fails 8 and 9
        page.check("#only-changed")
        page.locator("#grid tr.case-row:not([hidden]) th a").first.click()
        case = page.locator("section.case:target").inner_text()
        # each answer says what the model answered the night before, linked to it
        assert "before: PASS on 2026-11-28" in case
        before = page.locator("section.case:target .before a").first
        href = before.get_attribute("href")
        assert href is not None and href.startswith("night-kb-sweep-2026-11-28")
        page.go_back()
        page.wait_for_function("document.getElementById('shown').textContent === '2 of 10 cases'")
        assert page.locator("#only-changed").is_checked()
        page.goto(night.as_uri())  # a new visit in the same tab keeps them too
        assert page.locator("#shown").inner_text() == "2 of 10 cases"
        # names wrap only after a separator, never inside a word
        styles = page.eval_on_selector_all(
            ".row-name, .claim, .name",
            "els => els.map(e => getComputedStyle(e).overflowWrap + ' ' + getComputedStyle(e)"
            ".wordBreak)",
        )
        assert styles and not [x for x in styles if "anywhere" in x or "break-all" in x]


def test_unreadable_evidence_is_named_shown_on_the_index_and_exits_1(
    runner: CliRunner, isolated: Path
) -> None:
    two_nights(runner, isolated)
    site = isolated / "public"
    assert runner.invoke(cli, ["--as-of", "2026-11-29T03:00:00Z", "site", str(site)]).exit_code == 0
    stale = site / "night-kb-sweep-2026-11-29T02_00_00.000Z.html"
    assert stale.exists()
    broken = isolated / "kb-evidence" / "kb-sweep-2026-11-29T02:00:00.000Z.report.json"
    broken.write_text(broken.read_text()[:500])
    built = runner.invoke(cli, ["--as-of", "2026-11-29T03:00:00Z", "site", str(site)])
    assert built.exit_code == 1, built.stderr
    lines = built.stderr.strip().splitlines()
    assert lines[0].startswith(f"warning: {broken}: not valid JSON (line ")
    assert lines[-1] == (
        "Error: 1 night left out: evidence that cannot be read (the site was written without it)"
    )
    index = (site / "index.html").read_text()
    assert "1 night left out:" in index and "not valid JSON" in index
    assert '<div class="banner alarm"' in index
    assert not stale.exists()  # the earlier build's page of that night: gone, not stale


def test_a_site_directory_that_is_a_file_or_a_store_without_nights(
    runner: CliRunner, isolated: Path
) -> None:
    target = isolated / "taken"
    target.write_text("mine\n")
    refused = runner.invoke(cli, ["site", str(target)])
    assert refused.exit_code == 2
    assert refused.stderr.strip().splitlines() == [
        f"Error: site: {target} is a file, not a directory"
    ]
    assert target.read_text() == "mine\n"
    empty = runner.invoke(cli, ["--as-of", "2026-11-29T03:00:00Z", "site", str(isolated / "s")])
    assert empty.exit_code == 0
    assert "warning: no night with evidence yet" in empty.stderr


def test_one_case_whose_answers_pass_the_limit_continues_over_pages_each_under_it(
    runner: CliRunner, isolated: Path
) -> None:
    prompt = "Describe the fox at length."
    lines = ["[sweep]", 'committer = "ci"', 'sampling = "full"', "repeats = 8", "", "[budgets]"]
    lines += ["target_usd = 0.01", "max_total_usd = 50.0"]
    # evidence keeps 4,000 characters of an answer: 12 models x 8 repeats of ~4.5 KB
    # each on the page are ~430 KB: over the limit
    for index in range(12):
        reply = f"model {index} says: " + "the quick brown fox jumps over the lazy dog " * 100
        lines += ["", "[[models]]", f'model = "scripted:long-{index:02d}"']
        lines += [f"params = {{ responses = {{ {json.dumps(prompt)} = {json.dumps(reply)} }} }}"]
    lines += ["", "[[cases]]", 'name = "the-long-one"', 'task_class = "essays"']
    lines += [f"prompt = {json.dumps(prompt)}", 'graders = [{ kind = "golden", expected = "x" }]']
    spec = isolated / "long.toml"
    spec.write_text("\n".join(lines) + "\n")
    site, _ = one_night_site(runner, spec, isolated / "public")
    pages = sorted(site.glob("night-*.html"))
    text = "".join(p.read_text() for p in pages)
    parts = re.findall(r"continued, part (\d) of (\d)", text)
    assert len(parts) >= 1 and {total for _, total in parts} == {str(len(parts) + 1)}
    for index in range(12):  # every answer is on some page, once per repeat
        assert text.count(f"model {index} says: ") == 8
