"""``kb matrix --pareto``: cost per case against pass rate, and a frontier that is not noise.

Through the real CLI on scripted models with exact answers and costs; the
dominance each row states is checked against the paired reading ``kb
compare`` prints for the same pair.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.cli_helpers import kb, unwrapped
from tests.sweep_helpers import write_spec
from tests.test_compare import (
    CHEAP,
    DEAR,
    EVERY_CASE,
    night,
    spec,
    three_models_on_300_cases,
)
from tests.test_hostile_text import assert_inert

pytestmark = pytest.mark.usefixtures("initialized_store")


def pareto(runner: CliRunner, *args: str) -> dict[str, dict[str, Any]]:
    result = kb(runner, "matrix", "--pareto", "--json", *args)
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)
    return {p["model"]: p for c in found["classes"] for p in c["points"]}


def test_a_model_as_good_for_less_takes_the_dearer_one_off_the_frontier(
    runner: CliRunner, isolated: Path
) -> None:
    # dear $0.01 300/300, mid $0.005 300/300, cheap $0.001 240/300
    three_models_on_300_cases(runner, isolated, mid_wrong=0)
    points = pareto(runner)
    assert {m for m, p in points.items() if p["onFrontier"]} == {
        "scripted:cheap",
        "scripted:mid",
    }
    dear = points["scripted:dear"]
    assert dear["dominatedBy"] == "scripted:mid"
    assert dear["versus"]["reading"] == "non-inferior" and dear["versus"]["sharedCases"] == 300
    assert points["scripted:cheap"]["costPerCase"] == pytest.approx(0.001)
    assert points["scripted:cheap"]["passRate"] == pytest.approx(0.8)
    low, high = points["scripted:cheap"]["wilson95"]
    assert low < 0.8 < high
    raw = kb(runner, "matrix", "--pareto").stdout
    assert all(len(line) <= 80 for line in raw.splitlines()), raw
    text = unwrapped(raw)
    assert "scripted:dear — scripted:mid is as good for less (non-inferior, " in text
    assert "on 300 cases)" in text
    assert "non-inferior within 0.03 and strictly cheaper" in text
    assert "Bonferroni over 3 pairs" in text
    # cheapest first
    assert text.index("scripted:cheap") < text.index("scripted:mid") < text.index("scripted:dear")
    markdown = kb(runner, "matrix", "--pareto", "--markdown").stdout
    assert_inert(markdown)
    assert "| `scripted:dear` |" in markdown
    assert "- `scripted:dear`: `scripted:mid` is as good for less" in markdown
    whole = json.loads(kb(runner, "matrix", "--pareto", "--json", "--margin", "0.035").stdout)
    assert whole["margin"] == 0.035
    (only,) = whole["classes"]
    assert only["pairs"] == 3 and only["costKnown"] and only["z"] > 1.96
    assert "within 0.035 " in unwrapped(
        kb(runner, "matrix", "--pareto", "--margin", "0.035").stdout
    )


def test_a_difference_within_the_noise_leaves_both_on_the_frontier(
    runner: CliRunner, isolated: Path
) -> None:
    # 40 cases: cheap misses 4, dear 1 — compare reads it, and the frontier agrees
    night(runner, spec(isolated / "s.toml", DEAR, CHEAP))
    result = kb(runner, "compare", "--json")
    (pair,) = json.loads(result.stdout)[0]["pairs"]
    points = pareto(runner)
    if pair["reading"] in ("inconclusive", "worse"):
        assert all(p["onFrontier"] for p in points.values())
    else:  # the cheap one shown as good: then, and only then, the dear one is dominated
        assert points["scripted:dear"]["dominatedBy"] == "scripted:cheap"
    assert pair["reading"] == "inconclusive"  # what these 40 cases can say


def test_better_at_the_same_price_says_so(runner: CliRunner, isolated: Path) -> None:
    cases = [(f"case-{i:03d}", f"Q{i}?", f"a-{i}") for i in range(200)]

    def model(name: str, wrong: int) -> dict[str, Any]:
        answers = {q: (f"wrong-{i}" if i < wrong else a) for i, (_, q, a) in enumerate(cases)}
        return {
            "model": f"scripted:{name}",
            "params": {"responses": answers, "default": "a steady answer", "cost_usd": 0.002},
        }

    night(
        runner,
        write_spec(
            isolated / "s.toml",
            [model("good", 0), model("poor", 60)],
            cases=cases,
            gate="interval",
            extra_sweep=f"{EVERY_CASE}\nmax_cases = 200",
            budgets={"target_usd": 0.05, "canary_usd": 0.05, "max_total_usd": 50.0},
        ),
    )
    points = pareto(runner)
    assert points["scripted:poor"]["dominatedBy"] == "scripted:good"
    assert points["scripted:poor"]["versus"]["reading"] == "better"
    text = unwrapped(kb(runner, "matrix", "--pareto").stdout)
    assert "scripted:good is better at the same price (better, " in text
    assert "for less" not in text


def test_an_unknown_cost_is_neither_cheap_nor_dominated(runner: CliRunner, isolated: Path) -> None:
    three_models_on_300_cases(runner, isolated, mid_wrong=0)
    shutil.rmtree(isolated / "kb-evidence")
    result = kb(runner, "matrix", "--pareto", "--json")
    assert result.exit_code == 0
    assert "warning: no evidence for 1 night" in result.stderr
    found = json.loads(result.stdout)
    assert [c["costKnown"] for c in found["classes"]] == [False]
    points = {p["model"]: p for c in found["classes"] for p in c["points"]}
    assert all(p["onFrontier"] and p["costPerCase"] is None for p in points.values())
    text = unwrapped(kb(runner, "matrix", "--pareto").stdout)
    assert "no cost is known for any model here" in text
    assert "no frontier can be drawn" in text


def test_pareto_flags_are_checked_and_nothing_measured_says_so(
    runner: CliRunner, isolated: Path
) -> None:
    empty = kb(runner, "matrix", "--pareto")
    assert empty.exit_code == 0 and "no current epoch measured anything yet" in empty.stdout
    refused = kb(runner, "matrix", "--pareto", "--cost")
    assert refused.exit_code == 2 and "--pareto" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    both = kb(runner, "matrix", "--pareto", "--json", "--markdown")
    assert both.exit_code == 2
