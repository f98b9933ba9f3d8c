"""The summary of an incomplete cell (SPEC 13.1 "Smaller"): answered/asked, an honest rate.

v3 printed an incomplete cell's rate over tonight's answered cases beside the interval
of its epoch's estimate after a night the sampler had discarded (``1.00`` beside
``0.00–0.09``), and a bare ``0.00`` when nothing answered. Now the text summary and the
``--summary`` markdown show ``answered/asked``, and a rate only with the interval of the
same answered cases; none when nothing answered or the answers look like an outage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.store.records import ReportFile
from kb.views.report_text import summary_text
from tests.cli_helpers import kb, unwrapped
from tests.test_epochs import POOL, model, spec

pytestmark = pytest.mark.usefixtures("initialized_store")

FULL = 'sampling = "full"\nmax_retries = 0'
ODD = [prompt for i, (_, prompt, _) in enumerate(POOL) if i % 2]
TENTHS = set(range(0, 60, 10))  # 54 of 60 right: 0.90


def night(runner: CliRunner, path: Path, day: int) -> tuple[dict[str, Any], str, str]:
    """The report, its text summary (what the sweep prints without ``--json``, and ``kb
    report`` re-renders) and its ``--summary`` markdown."""
    observed = f"2026-11-{day:02d}T02:00:00Z"
    args = ["--json", "--quiet", "--allow-incomplete", "--summary", "s.md"]
    result = kb(runner, "sweep", str(path), *args, "--observed-at", observed)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    text = summary_text(ReportFile.model_validate(report))
    return report, unwrapped(text), Path("s.md").read_text()


def row(markdown: str) -> list[str]:
    """The cells table's one data row."""
    lines = [line for line in markdown.splitlines() if line.startswith("| `scripted:m`")]
    assert len(lines) == 1, markdown
    return [cell.strip() for cell in lines[0].strip("|").split(" | ")]


def test_a_partial_outage_shows_answered_of_asked_and_an_interval_holding_its_rate(
    runner: CliRunner, isolated: Path
) -> None:
    night(runner, spec(isolated / "a.toml", model(TENTHS), extra_sweep=FULL), 1)
    broken = model(TENTHS, errors=ODD)  # every odd case fails at the provider
    report, text, markdown = night(runner, spec(isolated / "b.toml", broken, extra_sweep=FULL), 2)
    (cell,) = report["cells"]
    assert cell["outcome"] == "incomplete" and (cell["n"], cell["plannedN"]) == (30, 60)
    # tonight's answered cases: the even ones, wrong on 0, 10, …, 50: 24/30
    assert cell["passRate"] == 0.8
    low, high = cell["wilson95"]
    assert low <= cell["passRate"] <= high  # v3: the discarded epoch night's [0.00, 0.09]
    assert "30/60 answered: passRate 0.80 [0.63, 0.90] over those" in text
    model_name, task_class, rate, interval, count, outcome = row(markdown)
    assert (rate, interval, count) == ("0.80", "0.63–0.90", "30/60 answered")
    assert outcome == "incomplete: `30 target runs failed at the provider`"


@pytest.mark.parametrize(
    ("params", "answered"),
    [
        ({"errors": [prompt for _, prompt, _ in POOL]}, "0/60 answered"),  # nothing answered
        ({"responses": {}, "default": "<html>502 Bad Gateway</html>"}, "60/60 answered"),
    ],
    ids=["every-call-failed", "an-error-page-for-every-prompt"],
)
def test_an_outage_shows_no_rate_never_a_bare_zero(
    runner: CliRunner, isolated: Path, params: dict[str, Any], answered: str
) -> None:
    night(runner, spec(isolated / "a.toml", model(TENTHS), extra_sweep=FULL), 1)
    down = model(TENTHS) | {"params": params}
    report, text, markdown = night(runner, spec(isolated / "b.toml", down, extra_sweep=FULL), 2)
    assert report["cells"][0]["outcome"] == "incomplete"
    assert f"{answered} $0.0000 " in text  # the count, then the cost: no rate at all
    assert row(markdown)[2:5] == ["—", "—", answered]
