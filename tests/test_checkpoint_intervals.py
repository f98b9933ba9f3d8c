"""The checkpoint decides with intervals (SPEC 13.3): each verdict, its exit code, the controls."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from kb.checkpoint import (
    PROFILE,
    Arm,
    CheckpointOptions,
    CheckpointReport,
    StartRungCell,
    checkpoint_options,
    compare,
    paired_decision,
)
from kb.checkpoint.arms import controls, pooled
from kb.checkpoint.rules import PROFILE_INTERVAL, START_RUNG_INTERVAL
from kb.engine.runs import RunResult
from kb.errors import ConfigError
from kb.evals.suite import CaseVerdict
from kb.paired import PairedScores
from tests.test_checkpoint import one_line, run, seed_store, write_world

# -- each verdict through the CLI, with scripted models ----------------------------


def test_passed_when_the_interval_says_better_and_criterion_two_is_not_applicable(
    runner: CliRunner, isolated: Path
) -> None:
    """The cheap rung is right on 12 cases the start rung gets wrong: better, exit 0.

    The routed cases are of a task class the card says nothing about: criterion 2 is
    not applicable, so it neither passes nor fails the checkpoint.
    """
    seed_store()
    world = write_world(
        isolated / "cp.toml", cheap_right=True, mid_right=False, cases=12, routed_class="summary"
    )
    result = run(runner, world, "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "passed" and report["passed"] is True
    c1, c2 = report["criterion1"], report["criterion2"]
    assert c1["verdict"] == "passed" and c1["reason"].startswith("better [")
    assert c1["difference"]["low"] > 0 and c1["difference"]["discordantTreatment"] == 12
    assert c2["verdict"] == "not applicable"
    assert c2["reason"] == "the card says nothing about summary"
    assert c2["notApplicableClasses"] == ["summary"] and c2["applicableClasses"] == []
    assert (c1["cells"][0]["verdict"]["verdict"], c1["cells"][0]["passed"]) == ("passed", True)
    # The controls: the top rung, run once per case, is right everywhere too.
    controls_ = c1["controls"]
    assert controls_["n"] == 12 and controls_["strongestPassRate"] == 1
    assert controls_["qualityRetained"]["value"] == 1
    assert controls_["costSavedVsStrongest"] == {"value": 0.975, "low": 0.975, "high": 0.975}
    assert controls_["costSavedVsStart"]["value"] == pytest.approx(0.9)
    assert "no mix of the two matches it" in controls_["costMatchedMix"]["unavailable"]
    table = one_line(run(runner, world).stdout)
    assert "criterion 2: not applicable: the card says nothing about summary" in table
    assert "quality retained vs always-strongest 100% [" in table
    assert "cost saved vs always-strongest 98% [98%, 98%], vs the start tier 90%" in table
    assert table.rstrip().endswith("checkpoint: PASSED")


def test_not_passed_exits_1_and_inconclusive_exits_4(runner: CliRunner, isolated: Path) -> None:
    seed_store()
    worse = write_world(isolated / "worse.toml", cheap_right=False, routed_class="summary")
    result = run(runner, worse)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: checkpoint not passed: criterion 1: failed (inferior")
    assert len(result.stderr.strip().splitlines()) == 1
    equal = write_world(isolated / "equal.toml", cheap_right=True, routed_class="summary")
    result = run(runner, equal)
    assert result.exit_code == 4
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("checkpoint inconclusive: criterion 1 needs about ")  # no "Error:"
    assert "Error" not in result.stderr  # inconclusive is not a failure
    assert line.endswith(" more cases")
    assert "criterion 1: inconclusive: [-0.49, +0.49] spans -0.03; " in one_line(result.stdout)


def test_sequential_stops_as_soon_as_the_confidence_sequence_decides(
    runner: CliRunner, isolated: Path
) -> None:
    seed_store()
    world = write_world(
        isolated / "cp.toml",
        cheap_right=True,
        mid_right=False,
        cases=40,
        routed_class="summary",
        max_total=10.0,
    )
    result = run(runner, world, "--json", "--sequential")
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    seq = report["sequential"]
    assert seq["stoppedEarly"] is True and seq["casesPlanned"] == 40
    assert seq["cases"] == 5 * seq["rounds"] < 40
    # Three arms (baseline, treatment, always-strongest) per case; golden graders: no judges.
    assert seq["calls"] == 3 * seq["cases"] and seq["callsPlanned"] == 120
    assert seq["callsSaved"] == 120 - seq["calls"]
    assert seq["interval"]["method"] == "confidence sequence"
    c1 = report["criterion1"]
    assert c1["verdict"] == "passed" and c1["difference"] == seq["interval"]
    assert report["criterion1"]["pooled"]["treatment"]["n"] == seq["cases"]
    table = run(runner, world, "--sequential", "--round", "10").stdout
    assert "10 of 40 cases, 30 of 120 calls (90 saved)" in table
    assert table.rstrip().endswith("checkpoint: PASSED")
    # The same spec runs its cases in the same (shuffled) order every time.
    again = json.loads(run(runner, world, "--json", "--sequential").stdout)
    assert again["sequential"] == seq


def test_dry_run_plans_the_always_strongest_arm(runner: CliRunner, isolated: Path) -> None:
    seed_store()
    world = write_world(isolated / "cp.toml", cheap_right=True, max_total=0.3)
    result = run(runner, world, "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "criterion 1: 4 baseline, 4 treatment, 4 strongest target runs" in result.stdout
    assert "general / extraction: baseline tier 1, treatment tier 0, strongest tier 2" in (
        result.stdout
    )
    assert "worst-case authorized spend: $1.0800 (cap $0.3000): EXCEEDS the cap" in result.stdout
    assert not (isolated / "kb-evidence").exists()


BAD_FLAGS = {
    "rule": (["--rule", "point"], "Error: --rule: must be one of interval, rulvar, got 'point'"),
    "margin": (["--margin", "1.5"], "Error: --margin: must be at least 0 and below 1, got 1.5"),
    "negative-margin": (["--margin", "-0.1"], "Error: --margin: must be at least 0"),
    "round-alone": (["--round", "5"], "Error: --round: only with --sequential"),
    "round-zero": (["--sequential", "--round", "0"], "Error: --round: must be a positive"),
    "sequential-rulvar": (
        ["--sequential", "--rule", "rulvar"],
        "Error: --sequential: decides with intervals; rulvar's point rule has none",
    ),
}


@pytest.mark.parametrize("bad", BAD_FLAGS, ids=list(BAD_FLAGS))
def test_a_bad_flag_is_one_line_and_exit_2(runner: CliRunner, isolated: Path, bad: str) -> None:
    seed_store()
    world = write_world(isolated / "cp.toml", cheap_right=True)
    flags, expected = BAD_FLAGS[bad]
    result = run(runner, world, *flags)
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(expected)
    assert not (isolated / "work" / "kb-evidence").exists()


# -- the rules and the report without the CLI ---------------------------------------


def verdict(name: str, passed: bool, cost: float, task_class: str = "t") -> CaseVerdict:
    target = RunResult(label=name, kind="target", model="m", status="ok", cost_usd=cost)
    return CaseVerdict(name, task_class, target, (), (), False, passed)


def routing(cost: float) -> RunResult:
    return RunResult(label="router", kind="target", model="r", status="ok", cost_usd=cost)


def test_the_cards_prompt_tokens_never_fail_criterion_two() -> None:
    """Real use: both arms chose the same profile; the card made the informed router
    call $0.0008 against $0.0006. The seed's rule failed that (1.33x > 1.05x)."""
    names = [f"c{i}" for i in range(200)]
    informed = Arm("informed", [verdict(n, True, 0.001) for n in names])
    blind = Arm("blind", [verdict(n, True, 0.001) for n in names])
    informed.routing = {n: routing(0.0008) for n in names}
    blind.routing = {n: routing(0.0006) for n in names}
    decision = compare(informed, blind, PROFILE_INTERVAL, with_routing=False)
    assert decision.cost_ratio == pytest.approx(1.0)
    assert decision.verdict == "passed"  # 200 equal cases: non-inferior at 1.00x
    with_card = compare(informed, blind, PROFILE_INTERVAL, with_routing=True)
    assert with_card.verdict == "failed"  # what counting the card's tokens would do
    assert not PROFILE.verdict(informed, blind)  # and what the seed's rule does


def test_no_failure_line_asks_for_a_rate_above_1() -> None:
    informed = Arm("informed", [verdict("a", True, 2.0), verdict("b", False, 2.0)])
    blind = Arm("blind", [verdict(n, n != "j", 1.0) for n in "abcdefghij"])  # 0.90
    line = PROFILE.failure(informed, blind)
    assert ">= 1.05" not in line
    assert line.endswith("(beating 0.90 by 0.15 is impossible)")
    numbers = [float(w) for w in line.replace("(", " ").split() if w.replace(".", "").isdigit()]
    assert all(n <= 1 for n in numbers if "." in str(n))


def test_repeats_of_a_case_average_into_its_score() -> None:
    """The case is the unit: two repeats (pass, fail) are one case scoring 0.5."""
    treatment = Arm("treatment", [verdict("a", True, 1.0), verdict("a", False, 1.0)])
    treatment.verdicts.append(verdict("b", True, 1.0))
    baseline = Arm("baseline", [verdict("a", True, 2.0), verdict("b", True, 2.0)])
    assert treatment.case_scores() == {"a": 0.5, "b": 1.0}
    assert treatment.case_costs() == {"a": 1.0, "b": 1.0}
    decision = compare(treatment, baseline, START_RUNG_INTERVAL)
    assert decision.difference is not None
    assert decision.difference.n == 2 and decision.difference.method == "bootstrap"
    assert decision.difference.difference == pytest.approx(-0.25)
    assert decision.cost_ratio == pytest.approx(0.5)


def test_only_the_cases_both_arms_ran_are_compared() -> None:
    treatment = Arm("treatment", [verdict(n, True, 1.0) for n in "abc"])
    baseline = Arm("baseline", [verdict(n, False, 9.0) for n in "bcd"])
    decision = compare(treatment, baseline, START_RUNG_INTERVAL)
    assert decision.difference is not None and decision.difference.n == 2
    assert decision.cost_ratio == pytest.approx(1 / 9)


def test_a_contaminated_arm_never_passes() -> None:
    names = [f"c{i}" for i in range(50)]
    treatment = Arm("treatment", [verdict(n, True, 1.0) for n in names])
    baseline = Arm("baseline", [verdict(n, False, 2.0) for n in names])
    assert compare(treatment, baseline, START_RUNG_INTERVAL).verdict == "passed"
    bad = RunResult(label="target:x/c0", kind="target", model="m", status="refused")
    treatment.verdicts[0] = CaseVerdict("c0", "t", bad, (), (), False, False)
    decision = compare(treatment, baseline, START_RUNG_INTERVAL)
    assert decision.verdict == "contaminated"
    assert decision.reason == "treatment arm contaminated: refused run target:x/c0"


def report_of(c1: tuple[Arm, Arm], c2: tuple[Arm, Arm], classes: set[str]) -> CheckpointReport:
    cell = StartRungCell("l", "t", 1, 0, c1[1], c1[0])
    return CheckpointReport(
        cells=[cell],
        pooled_baseline=pooled("baseline", [c1[1]]),
        pooled_treatment=pooled("treatment", [c1[0]]),
        informed=c2[0],
        blind=c2[1],
        card="",
        spent_usd=0.0,
        card_classes=frozenset(classes),
    )


def test_the_checkpoint_verdict_from_its_criteria() -> None:
    names = [f"c{i}" for i in range(30)]
    better = (
        Arm("treatment", [verdict(n, True, 1.0) for n in names]),
        Arm("baseline", [verdict(n, False, 1.0) for n in names]),
    )
    equal = (
        Arm("informed", [verdict(n, True, 1.0) for n in names[:5]]),
        Arm("blind", [verdict(n, True, 1.0) for n in names[:5]]),
    )
    assert report_of(better, equal, {"t"}).verdict == "inconclusive"  # criterion 2 open
    assert report_of(better, equal, set()).verdict == "passed"  # criterion 2 not applicable
    worse = (better[1], better[0])
    assert report_of(worse, equal, set()).verdict == "not passed"
    report = report_of(better, equal, {"t"})
    report.options = CheckpointOptions(rule="rulvar")
    assert report.verdict == "passed" and report.interval_verdict == "inconclusive"


def test_the_cost_matched_mix_costs_what_the_treatment_costs() -> None:
    names = [f"c{i}" for i in range(20)]
    treatment = Arm("treatment", [verdict(n, i < 18, 2.0) for i, n in enumerate(names)])
    baseline = Arm("baseline", [verdict(n, i < 14, 1.0) for i, n in enumerate(names)])
    strongest = Arm("strongest", [verdict(n, True, 5.0) for n in names])
    found = controls(treatment, baseline, strongest)
    assert found is not None
    assert found.mix_share == pytest.approx(0.25)  # 0.75 x $1 + 0.25 x $5 = $2
    assert found.mix_rate == pytest.approx(0.75 * 0.7 + 0.25 * 1.0)
    assert found.versus_mix is not None
    assert found.versus_mix.difference == pytest.approx(0.9 - 0.775)
    assert found.quality_retained is not None and found.quality_retained.value == 0.9
    assert found.cost_saved_vs_strongest is not None
    assert found.cost_saved_vs_strongest.value == pytest.approx(0.6)
    assert found.cost_saved_vs_start is not None
    assert found.cost_saved_vs_start.value == pytest.approx(-1.0)  # it costs twice the start


def test_checkpoint_options_defaults() -> None:
    options = checkpoint_options()
    assert (options.rule, options.margin, options.sequential) == ("interval", 0.03, None)
    sequential = checkpoint_options(sequential=True, round_size=7).sequential
    assert sequential is not None and sequential.round_size == 7
    with pytest.raises(ConfigError):
        checkpoint_options(rule="RULVAR")


def test_forty_cases_keep_equal_arms_inconclusive_and_worse_ones_out() -> None:
    """SPEC 13.3's bar, by the CLI's own decision function (bench/paired_sim.py checkpoint
    measures it over 2,000+ seeds): equal arms inconclusive on >= 90 %, a treatment 5
    points worse passes on <= 5 % (baseline 0.90, cost ratio 0.5, 5 % flipping)."""
    rng = np.random.default_rng(31)
    seeds, n = 300, 40
    for delta, psi, check in ((0.0, 0.05, "equal"), (-0.05, 0.10, "worse")):
        p10, p01 = (psi + delta) / 2, (psi - delta) / 2
        p_treat = 0.90 + delta
        probs = [p_treat - p10, p10, p01, 1 - p_treat - p01]
        kinds = rng.choice(4, size=(seeds, n), p=probs)
        treat = ((kinds == 0) | (kinds == 1)).astype(float)
        base = ((kinds == 0) | (kinds == 2)).astype(float)
        verdicts = [paired_decision(PairedScores(treat[s], base[s]), 0.5)[1] for s in range(seeds)]
        passed = sum(v.verdict == "passed" for v in verdicts) / seeds
        inconclusive = sum(v.verdict == "inconclusive" for v in verdicts) / seeds
        if check == "equal":
            assert inconclusive >= 0.90
        else:
            assert passed <= 0.05


def test_sequential_stops_at_the_first_contaminated_round(
    runner: CliRunner, isolated: Path
) -> None:
    seed_store()
    world = write_world(isolated / "cp.toml", cheap_right=True, cases=20, max_total=0.3)
    result = run(runner, world, "--json", "--sequential", "--allow-partial")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["criterion1"]["verdict"] == "contaminated"
    assert (report["sequential"]["rounds"], report["sequential"]["cases"]) == (1, 5)
    assert report["sequential"]["callsSaved"] == 60 - 15


# -- the table reads like every kb table ---------------------------------------------


def test_the_table_fits_80_columns_with_two_decimal_intervals(
    runner: CliRunner, isolated: Path
) -> None:
    seed_store()
    world = write_world(isolated / "cp.toml", cheap_right=True)
    text = world.read_text()
    # A long ladder name: the cells regroup under their ladder.
    world.write_text(
        text.replace('name = "general"', 'name = "general-purpose-ladder-for-every-task"')
    )
    partial = write_world(isolated / "partial.toml", cheap_right=True, max_total=0.3)
    tables = [
        run(runner, world).stdout,
        run(runner, world, "--sequential").stdout,
        run(runner, world, "--rule", "rulvar").stdout,
        run(runner, partial, "--allow-partial").stdout,
    ]
    for table in tables:
        assert max(len(line) for line in table.splitlines()) <= 80, table
        assert not re.search(r"[+-]\d\.\d{3}", table), table  # intervals: two decimals
    plain, _, _, contaminated = tables
    assert "  ladder / task class  tiers  baseline      treatment\n" in plain
    assert "\n  general-purpose-ladder-for-every-task\n    extraction         1->0" in plain
    assert (
        "      inconclusive: [-0.49, +0.49] spans -0.03; about 90 more cases would decide\n"
        "        if the arms are equal (80 % power)\n"
    ) in plain
    assert "pooled treatment - baseline +0.00 [-0.49, +0.49] (newcombe, n 4)" in plain
    assert "0.50 $0.0020 !" in contaminated  # the arm marked, why on the line under it
    assert "      treatment CONTAMINATED: refused run target:scripted:cheap/" in contaminated


def test_sequential_shows_the_interval_that_decided(runner: CliRunner, isolated: Path) -> None:
    """Not a fixed-n interval and its "N more cases" beside the confidence sequence."""
    seed_store()
    world = write_world(isolated / "cp.toml", cheap_right=True, routed_class="summary")
    result = run(runner, world, "--sequential")
    assert result.exit_code == 4
    criterion1 = one_line(result.stdout.split("criterion 2:")[0])
    assert (
        "general extraction 1->0 1.00 $0.0400 1.00 $0.0040 treatment - baseline +0.00 (n 4); "
        "the pooled confidence sequence decides"
    ) in criterion1
    assert "[-0.49, +0.49]" not in criterion1 and "more cases would decide" not in criterion1
    assert (
        "criterion 1: inconclusive: [-1.00, +1.00] spans -0.03 (confidence sequence, n 4); "
        "a fixed-n run would need about 90 more cases (without --sequential) if the arms are "
        "equal"
    ) in criterion1
    assert result.stderr.splitlines() == [
        "checkpoint inconclusive: criterion 1 needs more cases (its confidence sequence spans "
        "the margin after 4; a fixed-n run would need about 90 more)"
    ]


def floats(value: Any, key: str = "") -> list[tuple[str, float]]:
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in floats(v, k)]
    if isinstance(value, list):
        return [pair for v in value for pair in floats(v, key)]
    return [(key, value)] if isinstance(value, float) else []


def test_json_ratios_carry_no_float_noise(runner: CliRunner, isolated: Path) -> None:
    """$0.009 over $0.01 per case is 0.8999999999999999 in floats; the report says 0.9."""
    seed_store()
    world = write_world(isolated / "cp.toml", cheap_right=True, cheap_cost=0.009)
    report = json.loads(run(runner, world, "--json").stdout)
    assert report["criterion1"]["costRatio"] == 0.9
    assert report["criterion1"]["cells"][0]["verdict"]["costRatio"] == 0.9
    assert report["criterion1"]["controls"]["costSavedVsStart"]["value"] == 0.1
    found = floats(report)
    assert found
    for key, value in found:
        digits = 10 if key.endswith("Usd") else 6
        assert value == float(f"{value:.{digits}g}") or key.endswith("Usd"), (key, value)
        if key.endswith("Usd"):
            assert value == round(value, 10), (key, value)
