"""``kb compare`` (SPEC 13.3): two models on the cases both measured, paired, through the real CLI.

Scripted models with exact answers, costs and latencies under the interval
gate; every number checked against :mod:`kb.paired` computed by hand from
the same cases.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.compare import wanted_pairs
from kb.paired import (
    PairedScores,
    bonferroni_z,
    newcombe_paired_interval,
    paired_difference,
    seed_from,
)
from kb.store.epochs import read_epochs
from tests.cli_helpers import kb, unwrapped
from tests.sweep_helpers import write_spec
from tests.test_hostile_text import assert_inert, tables

pytestmark = pytest.mark.usefixtures("initialized_store")

STORE = "rulvar.models.json"
EPOCHS = "rulvar.models.epochs.json"
POOL = [(f"case-{i:02d}", f"Question {i}?", f"answer-{i}") for i in range(40)]


def model(name: str, wrong: set[int], cost: float, latency: float, **params: Any) -> dict:
    answers = {
        prompt: (f"wrong-{i}" if i in wrong else answer)
        for i, (_, prompt, answer) in enumerate(POOL)
    }
    return {
        "model": f"scripted:{name}",
        "params": {
            "responses": answers,
            "default": "a steady answer",
            "cost_usd": cost,
            "latency_ms": latency,
            **params,
        },
    }


# Comparisons here need every case measured on the night (the nightly rule's cold start
# stops once the interval is clear): "full" runs them all.
EVERY_CASE = 'sampling = "full"'


def spec(path: Path, *models: dict, task_class: str = "extraction", extra_sweep: str = "") -> Path:
    return write_spec(
        path,
        list(models),
        cases=POOL,
        gate="interval",
        task_class=task_class,
        extra_sweep=f"{EVERY_CASE}\n{extra_sweep}",
        budgets={"target_usd": 0.05, "canary_usd": 0.05, "max_total_usd": 50.0},
    )


def night(runner: CliRunner, path: Path, day: int = 1, *args: str) -> None:
    observed = f"2026-11-{day:02d}T02:00:00Z"
    result = kb(runner, "sweep", str(path), "--quiet", "--observed-at", observed, *args)
    assert result.exit_code in (0, 1), result.stderr


CHEAP = model("cheap", {3, 17, 25, 31}, cost=0.001, latency=1.0)
DEAR = model("dear", {25}, cost=0.01, latency=30.0)


def compare_json(runner: CliRunner, *args: str) -> list[dict[str, Any]]:
    result = kb(runner, "compare", "--json", *args)
    assert result.exit_code == 0, result.stderr
    found: list[dict[str, Any]] = json.loads(result.stdout)
    return found


def test_two_models_are_compared_paired_on_their_shared_cases(
    runner: CliRunner, isolated: Path
) -> None:
    night(runner, spec(isolated / "s.toml", DEAR, CHEAP))
    (group,) = compare_json(runner)
    assert group["taskClass"] == "extraction" and group["margin"] == 0.03
    (pair,) = group["pairs"]
    # The cheaper model comes first: the reading answers "is the cheap one as good?"
    assert (pair["a"], pair["b"]) == ("scripted:cheap", "scripted:dear")
    assert pair["n"] == 40 and pair["method"] == "newcombe"
    # cheap passes 36, dear 39; case-25 both fail; 3, 17, 31 only dear passes
    assert pair["difference"] == pytest.approx(-3 / 40)
    low, high = newcombe_paired_interval(36, 0, 3, 1)
    assert pair["interval"] == [pytest.approx(low), pytest.approx(high)]
    assert pair["reading"] == "inconclusive" and pair["detectable"] > 0
    assert [c["case"] for c in pair["discordant"]] == ["case-03", "case-17", "case-31"]
    assert all(c["a"] == 0 and c["b"] == 1 for c in pair["discordant"])
    assert pair["costs"]["a"]["costPerCaseUsd"] == pytest.approx(0.001)
    assert pair["costs"]["b"]["costPerCaseUsd"] == pytest.approx(0.01)
    assert pair["costRatio"] == pytest.approx(0.1)
    # nearest rank over the ok runs: a latency that occurred
    (evidence,) = (isolated / "kb-evidence").glob("*.jsonl")
    runs = [json.loads(line) for line in evidence.read_text().splitlines()]
    for side, name in (("a", "scripted:cheap"), ("b", "scripted:dear")):
        seen = sorted(
            r["latencyMs"]
            for r in runs
            if r["kind"] == "target" and r["model"] == name and r["status"] == "ok"
        )
        assert pair["costs"][side]["okRuns"] == 40
        assert pair["costs"][side]["p50Ms"] == seen[19] and pair["costs"][side]["p90Ms"] == seen[35]
    assert pair["passRate"] == {"a": pytest.approx(0.9), "b": pytest.approx(0.975)}


def test_the_text_names_the_reading_the_cost_and_the_discordant_cases(
    runner: CliRunner, isolated: Path
) -> None:
    night(runner, spec(isolated / "s.toml", DEAR, CHEAP))
    result = kb(runner, "compare")
    assert result.exit_code == 0, result.stderr
    text = unwrapped(result.stdout)
    assert "scripted:cheap vs scripted:dear n=40 shared cases" in text
    assert "difference -0.07 [" in text and "inconclusive: these 40 cases could detect" in text
    assert "$0.0010/case vs $0.010/case (0.10x)" in text
    assert "scripted:dear higher on case-03, case-17, case-31" in text


def test_a_cheaper_model_as_good_reads_non_inferior(runner: CliRunner, isolated: Path) -> None:
    cheap = model("cheap", set(), cost=0.001, latency=0.0)
    dear = model("dear", set(), cost=0.01, latency=0.0)
    big = [(f"case-{i:03d}", f"Q{i}?", f"a-{i}") for i in range(300)]
    path = write_spec(
        isolated / "s.toml",
        [
            {**m, "params": {**m["params"], "responses": {q: a for _, q, a in big}}}
            for m in (cheap, dear)
        ],
        cases=big,
        gate="interval",
        extra_sweep=f"{EVERY_CASE}\nmax_cases = 300",
        budgets={"target_usd": 0.05, "canary_usd": 0.05, "max_total_usd": 50.0},
    )
    night(runner, path)
    (group,) = compare_json(runner)
    (pair,) = group["pairs"]
    assert pair["n"] == 300 and pair["interval"][0] >= -0.03
    assert pair["reading"] == "non-inferior" and not pair["lower"]
    wider = compare_json(runner, "--margin", "0.001")
    assert wider[0]["pairs"][0]["reading"] == "inconclusive"


def test_three_models_are_bonferroni_adjusted_over_the_pairs_shown(
    runner: CliRunner, isolated: Path
) -> None:
    third = model("third", {1, 2, 3, 4, 5, 6}, cost=0.002, latency=0.0)
    night(runner, spec(isolated / "s.toml", DEAR, CHEAP, third))
    (group,) = compare_json(runner)
    assert len(group["pairs"]) == 3 and group["z"] == pytest.approx(bonferroni_z(3))
    (one,) = compare_json(runner, "--model", "scripted:cheap")
    assert len(one["pairs"]) == 2 and one["z"] == pytest.approx(bonferroni_z(2))
    assert all("scripted:cheap" in (p["a"], p["b"]) for p in one["pairs"])
    (two,) = compare_json(runner, "--model", "scripted:third", "--model", "scripted:dear")
    assert len(two["pairs"]) == 1 and two["z"] == pytest.approx(bonferroni_z(1))


def test_repeats_make_fractional_scores_compared_by_a_seeded_bootstrap(
    runner: CliRunner, isolated: Path
) -> None:
    # one of the two runs of each of the first 8 cases fails: right and wrong in turn
    answers = {q: ([a, f"wrong-{i}"] if i < 8 else a) for i, (_, q, a) in enumerate(POOL)}
    flaky = {
        "model": "scripted:flaky",
        "params": {"responses": answers, "default": "a steady answer", "cost_usd": 0.001},
    }
    path = spec(isolated / "s.toml", DEAR, flaky, extra_sweep="repeats = 2")
    night(runner, path)
    first = kb(runner, "compare", "--json").stdout
    assert kb(runner, "compare", "--json").stdout == first  # the same evidence, the same bytes
    (group,) = json.loads(first)
    (pair,) = group["pairs"]
    assert pair["method"] == "bootstrap"
    epochs = read_epochs(isolated / EPOCHS)
    a_cell = epochs.cells[f"{pair['a']}|extraction"]
    b_cell = epochs.cells[f"{pair['b']}|extraction"]
    a = [s / c for s, c in zip(a_cell.scores, a_cell.counts, strict=True)]
    b = [s / c for s, c in zip(b_cell.scores, b_cell.counts, strict=True)]
    expected = paired_difference(
        PairedScores.of(a, b), seed=seed_from(*sorted((a_cell.suite, b_cell.suite)))
    )
    assert pair["interval"] == [pytest.approx(expected.low), pytest.approx(expected.high)]
    assert any(0 < c["a"] < 1 or 0 < c["b"] < 1 for c in pair["discordant"])


def test_a_night_without_evidence_leaves_cost_unknown_not_zero(
    runner: CliRunner, isolated: Path
) -> None:
    night(runner, spec(isolated / "s.toml", DEAR, CHEAP), 1, "--no-evidence")
    (group,) = compare_json(runner)
    (pair,) = group["pairs"]
    assert pair["costs"]["a"]["costPerCaseUsd"] is None and pair["costRatio"] is None
    assert "cost unknown vs cost unknown" in unwrapped(kb(runner, "compare").stdout)


def test_the_markdown_is_inert_whatever_the_names(runner: CliRunner, isolated: Path) -> None:
    hostile = "[click](http://evil.example) @octocat <img src=//evil.example/p.png> a|b"
    night(runner, spec(isolated / "s.toml", DEAR, CHEAP, task_class=hostile))
    result = kb(runner, "compare", "--markdown")
    assert result.exit_code == 0, result.stderr
    spans = assert_inert(result.stdout)
    assert hostile in spans
    (table,) = tables(result.stdout)
    assert table[1][:3] == ["scripted:cheap", "scripted:dear", "40"]


def test_nothing_measured_says_so(runner: CliRunner) -> None:
    result = kb(runner, "compare")
    assert result.exit_code == 0 and result.stdout.startswith("nothing to compare")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--task-class", "nope"), "--task-class: no model measured 'nope' (measured: extraction)"),
        (("--model", "scripted:other"), "--model: scripted:other: not measured in a current epoch"),
        (("--model", "scripted:cheap", "--model", "scripted:cheap"), "a model is named twice"),
        (("--margin", "1.5"), "Invalid value for '--margin'"),
        (("--margin", "-0.1"), "Invalid value for '--margin'"),
    ],
)
def test_bad_input_is_one_line_and_touches_nothing(
    runner: CliRunner, isolated: Path, args: tuple[str, ...], message: str
) -> None:
    night(runner, spec(isolated / "s.toml", DEAR, CHEAP))
    before = (isolated / STORE).read_bytes(), (isolated / EPOCHS).read_bytes()
    result = kb(runner, "compare", *args)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert (isolated / STORE).read_bytes(), (isolated / EPOCHS).read_bytes() == before


def test_which_pairs_are_shown() -> None:
    subjects = ["a", "b", "c"]
    assert wanted_pairs(subjects, ()) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert wanted_pairs(subjects, ("b",)) == [("b", "a"), ("b", "c")]
    assert wanted_pairs(subjects, ("c", "a")) == [("a", "c")]
    assert wanted_pairs(subjects, ("z",)) == []


def test_matrix_cost_marks_the_cheapest_model_as_good_as_the_best(
    runner: CliRunner, isolated: Path
) -> None:
    three_models_on_300_cases(runner, isolated, mid_wrong=0)
    result = kb(runner, "matrix", "--cost", "--json")
    assert result.exit_code == 0, result.stderr
    costs = {c["model"]: c for c in json.loads(result.stdout)["costs"]}
    assert costs["scripted:dear"]["nonInferiorToBest"]  # the best itself
    assert (
        costs["scripted:mid"]["nonInferiorToBest"]
        and not costs["scripted:cheap"]["nonInferiorToBest"]
    )
    assert [m for m, c in costs.items() if c["cheapestNonInferior"]] == ["scripted:mid"]
    assert costs["scripted:cheap"]["costPerCaseUsd"] == pytest.approx(0.001)
    text = unwrapped(kb(runner, "matrix", "--cost").stdout)
    assert (
        "$0.0050/case" in text and "◆ the cheapest model non-inferior to the class's best" in text
    )
    assert text.count("◆") == 2  # the cell and the legend
    plain = kb(runner, "matrix").stdout
    assert "◆" not in plain and "/case" not in plain
    markdown = kb(runner, "matrix", "--cost", "--markdown").stdout
    assert_inert(markdown)
    assert "$0.0050/case" in markdown


def test_the_site_links_each_discordant_case_to_both_answers(
    runner: CliRunner, isolated: Path
) -> None:
    night(runner, spec(isolated / "s.toml", DEAR, CHEAP))
    result = kb(runner, "site", str(isolated / "site"))
    assert result.exit_code == 0, result.stderr
    overview = (isolated / "site" / "models.html").read_text()
    assert "scripted:cheap</span> vs <span" in overview and "n=40 shared cases" in overview
    (pair_page,) = re.findall(r'<a href="(pair-[0-9a-f]{16}\.html)">', overview)
    page = (isolated / "site" / pair_page).read_text()  # the pair's own page: its cases
    assert "n=40 shared cases" in page and 'href="models.html"' in page
    links = re.findall(r'<a href="([^"#]+)#([^"]+)" title="([^"]+)">([^<]+)</a>', page)
    # three discordant cases, each linked to both models' answers
    assert len(links) == 6
    for target, anchor, model, text in links:
        night_page = (isolated / "site" / html.unescape(target)).read_text()
        found = rf'<section class="case" id="{anchor}"[^>]*>(.*?)</section>'
        section = re.search(found, night_page)
        assert section is not None, (target, anchor)
        assert html.unescape(model) in section.group(1)
        assert text.endswith("— answer")
    # each model's pass rate and cost per case, as kb compare prints them
    assert '<td class="name">scripted:cheap</td><td class="num">0.90</td>' in page
    assert "$0.0010" in page and "$0.010" in page  # two significant digits
    assert "models.html" in (isolated / "site" / "index.html").read_text()


EVIDENCE_LADDERS = """
[[ladders]]
name = "scripted"
start_tier = 0
rungs = [{ model = "scripted:cheap" }, { model = "scripted:mid" }, { model = "scripted:dear" }]
"""


def three_models_on_300_cases(runner: CliRunner, isolated: Path, mid_wrong: int) -> None:
    """One night of dear ($0.01, all right), mid ($0.005, ``mid_wrong`` wrong) and cheap
    ($0.001, 60 wrong) on 300 cases: enough for a 0.03 margin to be provable."""
    big = [(f"case-{i:03d}", f"Q{i}?", f"a-{i}") for i in range(300)]

    def on_big(name: str, wrong: int, cost: float) -> dict:
        answers = {q: (f"wrong-{i}" if i < wrong else a) for i, (_, q, a) in enumerate(big)}
        return {
            "model": f"scripted:{name}",
            "params": {"responses": answers, "default": "a steady answer", "cost_usd": cost},
        }

    path = write_spec(
        isolated / "s.toml",
        [on_big("dear", 0, 0.01), on_big("mid", mid_wrong, 0.005), on_big("cheap", 60, 0.001)],
        cases=big,
        gate="interval",
        extra_sweep=f"{EVERY_CASE}\nmax_cases = 300",
        budgets={"target_usd": 0.05, "canary_usd": 0.05, "max_total_usd": 50.0},
    )
    night(runner, path)


def three_rungs_measured(runner: CliRunner, isolated: Path) -> None:
    three_models_on_300_cases(runner, isolated, mid_wrong=1)
    (isolated / "ladders.toml").write_text(EVIDENCE_LADDERS)


def test_route_by_evidence_goes_to_the_cheapest_rung_as_good_as_the_best(
    runner: CliRunner, isolated: Path
) -> None:
    three_rungs_measured(runner, isolated)
    as_of = ("--as-of", "2026-11-02")
    card = kb(runner, *as_of, "route", "ladders.toml", "--format", "json")
    assert card.exit_code == 0, card.stderr
    (by_card,) = [r for r in json.loads(card.stdout)["routes"] if r["taskClass"] == "extraction"]
    # the card's rule keeps the start tier: the cheap rung earned no claim either way
    assert by_card["model"] == "scripted:cheap" and by_card["why"].startswith("card rule")
    found = kb(runner, *as_of, "route", "ladders.toml", "--format", "json", "--policy", "evidence")
    assert found.exit_code == 0, found.stderr
    (chosen,) = [r for r in json.loads(found.stdout)["routes"] if r["taskClass"] == "extraction"]
    assert chosen["model"] == "scripted:mid" and chosen["tier"] == 1
    assert [f["model"] for f in chosen["fallbacks"]] == ["scripted:dear"]
    assert chosen["why"].startswith(
        "tier 0 -> 1 (up from the start rung scripted:cheap, worse against the best: -0.20 ["
    )
    assert (
        "): evidence: scripted:mid is the cheapest rung non-inferior to the best measured "
        "(scripted:dear) on 300 shared cases"
    ) in chosen["why"]
    yaml_text = kb(runner, *as_of, "route", "ladders.toml", "--policy", "evidence").stdout
    lines = yaml_text.splitlines()
    at = lines.index('  - model_name: "kb/extraction"')
    assert lines[at - 1].startswith("  # tier 0 -> 1 (up from the start rung scripted:cheap")
    assert "# Policy evidence (margin 0.03)" in yaml_text


def test_route_by_evidence_keeps_the_card_rule_where_nothing_was_measured(
    runner: CliRunner, isolated: Path
) -> None:
    three_rungs_measured(runner, isolated)
    (isolated / "ladders.toml").write_text(
        EVIDENCE_LADDERS
        + '\n[[ladders]]\nname = "other"\nstart_tier = 0\ntask_class = "planning"\n'
        'rungs = [{ model = "scripted:x" }, { model = "scripted:y" }]\n'
    )
    found = kb(
        runner,
        "--as-of",
        "2026-11-02",
        "route",
        "ladders.toml",
        "--format",
        "json",
        "--policy",
        "evidence",
    )
    assert found.exit_code == 0, found.stderr
    (planning,) = [r for r in json.loads(found.stdout)["routes"] if r["taskClass"] == "planning"]
    assert planning["model"] == "scripted:x"
    assert planning["why"].endswith("(evidence policy: no rung measured in a current epoch)")


def test_route_policy_and_margin_are_checked(runner: CliRunner, isolated: Path) -> None:
    (isolated / "ladders.toml").write_text(EVIDENCE_LADDERS)
    bad = kb(runner, "route", "ladders.toml", "--policy", "cheapest")
    assert bad.exit_code == 2 and "Invalid value for '--policy'" in bad.stderr
    bad = kb(runner, "route", "ladders.toml", "--policy", "evidence", "--margin", "2")
    assert bad.exit_code == 2 and "Invalid value for '--margin'" in bad.stderr


def test_without_evidence_nothing_is_marked_cheapest_and_each_command_says_why(
    runner: CliRunner, isolated: Path
) -> None:
    three_rungs_measured(runner, isolated)
    shutil.rmtree(isolated / "kb-evidence")
    matrix = kb(runner, "--as-of", "2026-11-02", "matrix", "--cost", "--json")
    assert matrix.exit_code == 0, matrix.stderr
    assert not any(c["cheapestNonInferior"] for c in json.loads(matrix.stdout)["costs"])
    assert "warning: no evidence for 1 night (kb-sweep-2026-11-01T02:00:00.000Z)" in (matrix.stderr)
    compared = kb(runner, "compare")
    assert compared.exit_code == 0 and "warning: no evidence for 1 night" in compared.stderr
    route = kb(
        runner,
        "--as-of",
        "2026-11-02",
        "route",
        "ladders.toml",
        "--format",
        "json",
        "--policy",
        "evidence",
    )
    assert route.exit_code == 0, route.stderr
    (chosen,) = [r for r in json.loads(route.stdout)["routes"] if r["taskClass"] == "extraction"]
    # no cost known: the safe side, the best measured rung, and the reason says so
    assert chosen["model"] == "scripted:dear"
    assert (
        "no cost is known (no evidence files), so no cheaper rung can be chosen" in (chosen["why"])
    )
    assert "warning: no evidence for 1 night" in route.stderr


def test_matrix_margin_without_cost_is_refused(runner: CliRunner, isolated: Path) -> None:
    result = kb(runner, "matrix", "--margin", "0.1")
    assert result.exit_code == 2
    assert "--margin: applies to --cost and --pareto only" in result.stderr


def test_a_task_class_typo_gets_a_suggestion_and_two_formats_are_refused(
    runner: CliRunner, isolated: Path
) -> None:
    night(runner, spec(isolated / "s.toml", DEAR, CHEAP))
    typo = kb(runner, "compare", "--task-class", "extractoin")
    assert typo.exit_code == 2 and "did you mean 'extraction'?" in typo.stderr
    for command in (("compare",), ("matrix",), ("diff",)):
        both = kb(runner, *command, "--json", "--markdown")
        assert both.exit_code == 2, command
        assert "--json: choose one of --json and --markdown" in both.stderr


def test_family_all_holds_the_whole_table_together_over_every_class(
    runner: CliRunner, isolated: Path
) -> None:
    third = model("third", {1, 2, 3, 4, 5, 6}, cost=0.002, latency=0.0)
    night(runner, spec(isolated / "a.toml", DEAR, CHEAP, third))
    night(runner, spec(isolated / "b.toml", DEAR, CHEAP, task_class="planning"), 2)
    per_class = {g["taskClass"]: g for g in compare_json(runner)}
    assert per_class["extraction"]["z"] == pytest.approx(bonferroni_z(3))
    assert per_class["planning"]["z"] == pytest.approx(bonferroni_z(1))
    assert per_class["planning"]["family"] == {"scope": "class", "pairs": 1}
    every = {g["taskClass"]: g for g in compare_json(runner, "--family", "all")}
    for group in every.values():  # 3 + 1 pairs shown: one family, wider intervals
        assert group["z"] == pytest.approx(bonferroni_z(4))
        assert group["family"] == {"scope": "all", "pairs": 4}
    low = per_class["planning"]["pairs"][0]["interval"][0]
    assert every["planning"]["pairs"][0]["interval"][0] < low
    text = unwrapped(kb(runner, "compare").stdout)
    assert "95% intervals per class (Bonferroni over 3 pairs" in text
    wide = unwrapped(kb(runner, "compare", "--family", "all").stdout)
    assert "95% intervals holding together over all 4 pairs shown (Bonferroni, z 2.50)" in wide
    assert (
        "the whole table holds 95 % of the time"
        in kb(runner, "compare", "--family", "all", "--markdown").stdout
    )
