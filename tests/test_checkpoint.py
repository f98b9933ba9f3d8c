"""The value checkpoint: the two rules at their boundaries, and scripted worlds end to end."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from kb.checkpoint import profile_rule, start_rung_rule
from kb.cli import cli
from kb.errors import ConfigError
from kb.store.filestore import CommitContext, KnowledgeStore
from tests.factories import add, eval_claim
from tests.sweep_helpers import toml_value

# -- the rules ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t_rate", "t_cost", "b_rate", "b_cost", "passes"),
    [
        (0.8, 0.90, 0.8, 1.0, True),  # equal rate at exactly 90 % cost
        (0.8, 0.9001, 0.8, 1.0, False),  # a hair over 90 %
        (0.7999, 0.5, 0.8, 1.0, False),  # a hair worse, however cheap
        (0.85, 1.00, 0.8, 1.0, True),  # exactly 5 points better at exactly equal cost
        (0.8499, 1.00, 0.8, 1.0, False),  # just short of 5 points at full cost
        (0.85, 1.0001, 0.8, 1.0, False),  # better but dearer
        (0.7 + 0.1, 0.9, 0.8, 1.0, True),  # 0.7 + 0.1 != 0.8 in floats: the tolerance
        (0.0, 0.0, 0.0, 0.0, True),  # free and equal: matches at <= 90 % of nothing
    ],
)
def test_start_rung_rule_boundaries(
    t_rate: float, t_cost: float, b_rate: float, b_cost: float, passes: bool
) -> None:
    assert start_rung_rule(t_rate, t_cost, b_rate, b_cost) is passes


@pytest.mark.parametrize(
    ("i_rate", "i_cost", "b_rate", "b_cost", "passes"),
    [
        (0.6, 1.05, 0.6, 1.0, True),
        (0.6, 1.0501, 0.6, 1.0, False),
        (0.75, 1.15, 0.6, 1.0, True),
        (0.7499, 1.15, 0.6, 1.0, False),
        (0.75, 1.1501, 0.6, 1.0, False),
        (0.0, 0.5, 0.0, 1.0, False),  # an informed arm at pass rate 0 fails outright
    ],
)
def test_profile_rule_boundaries(
    i_rate: float, i_cost: float, b_rate: float, b_cost: float, passes: bool
) -> None:
    assert profile_rule(i_rate, i_cost, b_rate, b_cost) is passes


rates = st.floats(0, 1)
costs = st.floats(0, 100)


@given(rates, costs, rates, costs)
def test_start_rung_rule_properties(
    t_rate: float, t_cost: float, b_rate: float, b_cost: float
) -> None:
    verdict = start_rung_rule(t_rate, t_cost, b_rate, b_cost)
    if verdict:  # never worse and never dearer than the baseline
        assert t_rate >= b_rate - 1e-9 and t_cost <= b_cost + 1e-9
    if t_rate >= b_rate and t_cost <= 0.9 * b_cost:
        assert verdict
    assert start_rung_rule(b_rate, b_cost, b_rate, b_cost) is (b_cost <= 1e-8)


@given(rates, costs, rates, costs)
def test_profile_rule_properties(
    i_rate: float, i_cost: float, b_rate: float, b_cost: float
) -> None:
    verdict = profile_rule(i_rate, i_cost, b_rate, b_cost)
    if verdict:
        assert i_rate > 0 and i_rate >= b_rate - 1e-9 and i_cost <= 1.15 * b_cost + 1e-9
    if i_rate > 1e-9:
        assert profile_rule(i_rate, b_cost, i_rate, b_cost)  # the same arm matches itself


# -- scripted worlds ----------------------------------------------------------------

EXTRACTION = [(f"ck-{i}", f"Checkpoint question {i}?", f"right-{i}") for i in range(4)]
ROUTED = [(f"route-{i}", f"Routed task {i}?", f"routed-{i}") for i in range(4)]


def answers(correct: bool, cases: list[tuple[str, str, str]]) -> dict[str, str]:
    # a wrong model's own wrong answers, one per case (one text to every prompt is an
    # outage's pattern: the health rule makes such an arm contaminated, SPEC 14.7)
    return {prompt: (answer if correct else f"not {answer}") for _, prompt, answer in cases}


def write_world(
    path: Path,
    *,
    cheap_right: bool,
    max_total: float = 5.0,
    informed_profile: str = "fast",
    cases: int = 4,
    mid_right: bool = True,
    routed_class: str = "extraction",
    cheap_cost: float = 0.001,
    cheap_replies: dict[str, str] | None = None,
) -> Path:
    """Ladder cheap < mid < top (start tier 1: mid); profiles fast (cheap), careful (top).

    ``cases`` extraction cases for criterion 1 (the first four are :data:`EXTRACTION`),
    four orchestrated cases of ``routed_class`` for criterion 2.
    """
    extraction = EXTRACTION + [
        (f"ck-{i}", f"Checkpoint question {i}?", f"right-{i}") for i in range(4, cases)
    ]
    extraction = extraction[:cases]

    def model(name: str, responses: dict[str, str], cost: float, **extra: Any) -> str:
        params = {"responses": responses, "cost_usd": cost, **extra}
        return f'[[models]]\nmodel = "scripted:{name}"\nparams = {toml_value(params)}\n'

    right = answers(True, extraction) | answers(True, ROUTED)
    cheap = answers(cheap_right, extraction) | answers(True, ROUTED) | (cheap_replies or {})
    mid = answers(mid_right, extraction) | answers(True, ROUTED)
    lines = [
        "[checkpoint]",
        'orchestrator = "scripted:router"',
        "",
        "[budgets]",
        "target_usd = 0.05",
        "orchestrator_usd = 0.01",
        f"max_total_usd = {max_total}",
        "",
        model("cheap", cheap, cheap_cost),
        model("mid", mid, 0.01),
        model("top", right, 0.04),
        model(
            "router",
            {},
            0.0005,
            contains={"Knowledge card:": json.dumps({"profile": informed_profile})},
            default=json.dumps({"profile": "careful"}),
        ),
        "[[ladders]]",
        'name = "general"',
        "start_tier = 1",
        'rungs = [{ model = "scripted:cheap" }, { model = "scripted:mid" }, '
        '{ model = "scripted:top" }]',
        "",
        "[[profiles]]",
        'name = "fast"',
        'model = "scripted:cheap"',
        'task_class = "extraction"',
        "",
        "[[profiles]]",
        'name = "careful"',
        'model = "scripted:top"',
        'task_class = "extraction"',
        "",
    ]
    for section, table, task_class in (
        ("cases", extraction, "extraction"),
        ("orchestrated", ROUTED, routed_class),
    ):
        for name, prompt, answer in table:
            lines += [
                f"[[{section}]]",
                f'name = "{name}"',
                f'task_class = "{task_class}"',
                f'prompt = "{prompt}"',
                f'graders = [{{ kind = "golden", expected = "{answer}" }}]',
                "",
            ]
    path.write_text("\n".join(lines))
    return path


def seed_store() -> None:
    """The sweep found the cheap rung strong at extraction (on other cases)."""
    claim = eval_claim(
        "seed/cheap/extraction",
        subject={"model": "scripted:cheap"},
        observedAt="2026-11-20T00:00:00.000Z",
        evidence=[{"kind": "eval", "reportId": "seed", "caseIds": ["s1", "s2"]}],
    )
    KnowledgeStore("rulvar.models.json").commit([add(claim)], 0, CommitContext("seed", "t"))


def one_line(text: str) -> str:
    """The table's text with its 80-column wrapping undone, to find a phrase in it."""
    return " ".join(text.split())


def run(runner: CliRunner, spec: Path, *args: str) -> Result:
    return runner.invoke(
        cli, ["--as-of", "2026-11-30", "checkpoint", str(spec), *args], catch_exceptions=False
    )


def test_a_world_where_the_knowledge_pays(runner: CliRunner, isolated: Path) -> None:
    seed_store()
    world = write_world(isolated / "cp.toml", cheap_right=True)
    # SPEC 13.3 changed the default: four equal cases cannot tell equal from 3 points
    # worse, so the interval rule says inconclusive (exit 4), not passed ...
    result = run(runner, world, "--json")
    assert result.exit_code == 4, result.stdout
    report = json.loads(result.stdout)
    assert report["verdict"] == "inconclusive" and report["passed"] is False
    assert report["verdicts"] == {"interval": "inconclusive", "rulvar": "passed"}
    c1 = report["criterion1"]
    assert c1["verdict"] == "inconclusive" and c1["casesToDecide"] > 0
    assert c1["difference"]["n"] == 4 and c1["difference"]["low"] < -0.03
    assert c1["costRatio"] == pytest.approx(0.1)
    # Inconclusive is not a failure: its stderr line has no "Error:" prefix (still exit 4).
    assert result.stderr.strip().startswith("checkpoint inconclusive: criterion 1 needs")
    # ... and the seed's point rule, kept under --rule rulvar, passes it as before.
    result = run(runner, world, "--json", "--rule", "rulvar")
    assert result.exit_code == 0, result.stdout
    report = json.loads(result.stdout)
    assert report["rule"] == "rulvar" and report["verdicts"]["interval"] == "inconclusive"
    (cell,) = report["criterion1"]["cells"]
    assert (cell["defaultTier"], cell["recommendedTier"], cell["passed"]) == (1, 0, True)
    assert cell["treatment"]["passRate"] == cell["baseline"]["passRate"] == 1.0
    assert cell["treatment"]["costUsd"] == pytest.approx(0.004)  # at a tenth of the cost
    assert cell["baseline"]["costUsd"] == pytest.approx(0.04)
    assert report["criterion1"]["holds"] and report["criterion2"]["holds"]
    informed, blind = report["criterion2"]["informed"], report["criterion2"]["blind"]
    assert informed["passRate"] == blind["passRate"] == 1.0
    assert informed["costUsd"] == pytest.approx(4 * 0.0005 + 4 * 0.001)  # router calls count
    assert blind["costUsd"] == pytest.approx(4 * 0.0005 + 4 * 0.04)
    assert report["passed"] is True
    table = run(runner, world, "--rule", "rulvar").stdout
    assert "  general  extraction  1->0   1.00 $0.0400  1.00 $0.0040  pass" in table
    assert table.rstrip().endswith("checkpoint: PASSED")
    assert "(by intervals: inconclusive)" in table
    table = run(runner, world).stdout
    assert table.rstrip().endswith("checkpoint: INCONCLUSIVE")
    assert "(by rulvar's point rule: passed)" in table


def test_a_world_where_it_must_fail(runner: CliRunner, isolated: Path) -> None:
    seed_store()
    world = write_world(isolated / "cp.toml", cheap_right=False)
    for rule in ("interval", "rulvar"):
        result = run(runner, world, "--json", "--rule", rule)
        assert result.exit_code == 1
        report = json.loads(result.stdout)
        assert report["criterion1"]["cells"][0]["passed"] is False
        assert report["criterion1"]["holds"] is False and report["passed"] is False
        assert report["verdict"] == "not passed"
        assert "checkpoint not passed" in result.stderr
    # By the intervals: 0 of 4 against 4 of 4 is inferior throughout.
    c1 = report["criterion1"]
    assert c1["verdict"] == "failed" and c1["reason"].startswith("inferior [")
    assert c1["difference"]["high"] < -0.03
    assert report["verdicts"] == {"interval": "not passed", "rulvar": "not passed"}


def test_an_envelope_refusal_contaminates_its_arm(runner: CliRunner, isolated: Path) -> None:
    seed_store()
    # Baseline (4 x 0.05) + treatment (4 x 0.05) reservations already exceed 0.3.
    world = write_world(isolated / "cp.toml", cheap_right=True, max_total=0.3)
    refused = run(runner, world)
    assert refused.exit_code == 2  # refused before any call ...
    # $0.88 before SPEC 13.3 plus the always-strongest control arm's 4 x $0.05.
    assert "worst-case authorized spend $1.0800 exceeds the cap $0.3000" in refused.stderr
    result = run(runner, world, "--json", "--allow-partial")  # ... unless partial is allowed
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    treatment = report["criterion1"]["cells"][0]["treatment"]
    assert treatment["contamination"].startswith("refused run target:scripted:cheap/")
    assert report["criterion1"]["cells"][0]["passed"] is False
    assert report["criterion1"]["verdict"] == "contaminated"
    assert report["criterion1"]["reason"].startswith("treatment arm contaminated: refused run")
    assert report["verdict"] == "not passed"
    assert "criterion 1: contaminated (treatment arm contaminated" in result.stderr
    table = one_line(run(runner, world, "--allow-partial").stdout)
    assert "treatment CONTAMINATED: refused run" in table
    assert "contaminated: treatment arm contaminated: refused run target:scripted:cheap/" in table
    table = one_line(run(runner, world, "--allow-partial", "--rule", "rulvar").stdout)
    assert "FAIL: treatment arm contaminated: refused run target:scripted:cheap/" in table


def test_criterion_two_needs_the_card_to_change_the_choice(
    runner: CliRunner, isolated: Path
) -> None:
    seed_store()
    same = write_world(isolated / "cp.toml", cheap_right=True, informed_profile="careful")
    report = json.loads(run(runner, same, "--json", "--rule", "rulvar").stdout)
    # Both arms pick "careful": equal, and the informed arm is not dearer: still holds.
    assert report["criterion2"]["holds"] is True
    # By the intervals four equal cases decide nothing, and nothing fails.
    report = json.loads(run(runner, same, "--json").stdout)
    assert report["criterion2"]["verdict"] == "inconclusive"
    assert report["criterion2"]["costRatio"] == pytest.approx(1.0)
    wrong = write_world(isolated / "cp2.toml", cheap_right=True, informed_profile="nonexistent")
    for rule in ("rulvar", "interval"):
        report = json.loads(run(runner, wrong, "--json", "--rule", rule).stdout)
        assert report["criterion2"]["informed"]["invalidChoices"] == 4
        assert report["criterion2"]["informed"]["costUsd"] == pytest.approx(4 * 0.0005)
        assert report["criterion2"]["holds"] is False  # informed pass rate 0 fails outright
    assert report["criterion2"]["verdict"] == "failed"
    assert "passed nothing" in report["criterion2"]["reason"]


def test_seeding_cases_are_refused_as_leakage(runner: CliRunner, isolated: Path) -> None:
    seed_store()
    spec = write_world(isolated / "cp.toml", cheap_right=True)
    spec.write_text(spec.read_text().replace('name = "ck-0"', 'name = "s1"'))
    result = run(runner, spec)
    assert result.exit_code == 2
    assert "cases[0].name: 's1' is a case that produced the store's claims" in result.stderr


def test_a_bad_checkpoint_spec_is_a_config_error(runner: CliRunner, isolated: Path) -> None:
    (isolated / "bad.toml").write_text('[checkpoint]\norchestrator = "nocolon"\n')
    result = run(runner, isolated / "bad.toml")
    assert result.exit_code == 2 and "checkpoint.orchestrator" in result.stderr


def test_cells_without_a_recommendation_stay_out_of_the_pool() -> None:
    from kb.checkpoint import Arm, CheckpointReport, StartRungCell
    from kb.checkpoint.arms import pooled
    from kb.engine.runs import RunResult
    from kb.evals.suite import CaseVerdict

    def arm(name: str, cost: float) -> Arm:
        run = RunResult(label=name, kind="target", model="m", status="ok", cost_usd=cost)
        return Arm(name, [CaseVerdict("c", "t", run, (), (), False, True)])

    tested = StartRungCell("l", "a", 1, 0, arm("baseline", 0.50), arm("treatment", 0.25))
    untested = StartRungCell("l", "b", 1, None, arm("baseline", 5.0), arm("treatment", 5.0))
    report = CheckpointReport(
        cells=[tested, untested],
        pooled_baseline=pooled("baseline", [tested.baseline]),
        pooled_treatment=pooled("treatment", [tested.treatment]),
        informed=arm("informed", 1.0),
        blind=arm("blind", 1.0),
        card="",
        spent_usd=0.0,
    )
    assert untested.passed is None and report.criterion1_rulvar
    # By the intervals the one case each decides nothing; the untested cell stays out.
    assert report.criterion1.verdict == "inconclusive"
    assert report.criterion1.difference is not None and report.criterion1.difference.n == 1
    assert report.criterion1.cost_ratio == pytest.approx(0.5)


def test_relative_model_paths_resolve_against_the_checkpoint_spec(isolated: Path) -> None:
    from kb.checkpoint import load_checkpoint_spec

    (isolated / "specs").mkdir()
    world = write_world(isolated / "specs" / "cp.toml", cheap_right=True).read_text()
    world += '\n[[models]]\nmodel = "local:smollm2"\nparams = { model_path = "w/model.gguf" }\n'
    (isolated / "specs" / "cp.toml").write_text(world)
    spec = load_checkpoint_spec(isolated / "specs" / "cp.toml")  # cwd is elsewhere
    resolved = spec.model("local:smollm2").params["model_path"]
    assert resolved == str((isolated / "specs" / "w" / "model.gguf").resolve())


def test_checkpoint_model_entries_are_the_sweeps(isolated: Path) -> None:
    from kb.checkpoint import load_checkpoint_spec

    world = write_world(isolated / "cp.toml", cheap_right=True).read_text()
    for extra, issue in (
        ('model = "openai:"', "models[4].model: 'openai:' must be 'provider:model'"),
        ('model = "scripted:mid"', "models[4]: duplicates models[1] (scripted:mid)"),
        ('model = "scripted:x"\nparams = { cost_usd = -1 }', "models[4].params.cost_usd"),
    ):
        (isolated / "cp.toml").write_text(world + f"\n[[models]]\n{extra}\n")
        with pytest.raises(ConfigError) as caught:
            load_checkpoint_spec(isolated / "cp.toml")
        assert any(issue in i for i in caught.value.issues), caught.value.issues


# -- include: more cases from other files, exactly as in a sweep spec ----------------------


def include_world(folder: Path, include: str, *, in_section: bool = False) -> Path:
    """The world with its [[cases]] moved to ``cases/extraction.toml``, included back."""
    world = write_world(folder / "cp.toml", cheap_right=True).read_text()
    head, _, tail = world.partition("[[cases]]")
    cases, _, orchestrated = ("[[cases]]" + tail).partition("[[orchestrated]]")
    (folder / "cases").mkdir(exist_ok=True)
    (folder / "cases" / "extraction.toml").write_text(cases)
    if in_section:  # written after [checkpoint], TOML puts it there
        head = head.replace("[checkpoint]\n", f"[checkpoint]\ninclude = {include}\n", 1)
    else:
        head = f"include = {include}\n" + head
    (folder / "cp.toml").write_text(head + "[[orchestrated]]" + orchestrated)
    return folder / "cp.toml"


@pytest.mark.parametrize("in_section", [False, True], ids=["top-level", "in-checkpoint"])
def test_a_checkpoint_spec_includes_case_files_as_a_sweep_spec_does(
    runner: CliRunner, isolated: Path, in_section: bool
) -> None:
    from kb.checkpoint import load_checkpoint_spec

    spec = include_world(isolated, '["cases/*.toml"]', in_section=in_section)
    assert "[[cases]]" not in spec.read_text()
    assert [case.name for case in load_checkpoint_spec(spec).cases] == [
        name for name, _, _ in EXTRACTION
    ]
    seed_store()
    result = run(runner, spec, "--json", "--rule", "rulvar")
    assert result.exit_code == 0, result.stderr
    (cell,) = json.loads(result.stdout)["criterion1"]["cells"]
    assert cell["passed"] is True and cell["treatment"]["costUsd"] == pytest.approx(0.004)


BAD_INCLUDES = {
    "not-a-list": ('"cases/*.toml"', None, "include: must be a list of glob patterns"),
    "matches-nothing": ('["nothing/*.toml"]', None, "include: 'nothing/*.toml' matches no file"),
    "unknown-key": ('["cases/*.toml"]', "[sweep]\nx = 1\n", "unknown keys sweep"),
    "bad-case": ('["cases/*.toml"]', "[[cases]]\nname = 1\n", "extra.toml: cases[0]"),
}


@pytest.mark.parametrize("bad", BAD_INCLUDES, ids=list(BAD_INCLUDES))
def test_a_bad_include_is_the_sweep_specs_error(
    runner: CliRunner, isolated: Path, bad: str
) -> None:
    from kb.checkpoint import load_checkpoint_spec
    from kb.sweep.spec import load_spec
    from tests.sweep_helpers import write_spec

    include, extra_file, expected = BAD_INCLUDES[bad]
    spec = include_world(isolated, include)
    if extra_file is not None:
        (isolated / "cases" / "extra.toml").write_text(extra_file)
    sweep = isolated / "sweep.toml"
    write_spec(sweep, [{"model": "scripted:cheap"}])
    sweep.write_text(f"include = {include}\n" + sweep.read_text())
    with pytest.raises(ConfigError) as from_sweep:
        load_spec(sweep)
    with pytest.raises(ConfigError) as from_checkpoint:
        load_checkpoint_spec(spec)
    told = [issue for issue in from_sweep.value.issues if expected in issue]
    assert told and set(told) <= set(from_checkpoint.value.issues)
    result = run(runner, spec)
    assert result.exit_code == 2 and expected in result.stderr
    assert "Traceback" not in result.stderr


def test_an_include_inside_a_case_table_names_the_checkpoint_section(isolated: Path) -> None:
    from kb.checkpoint import load_checkpoint_spec

    world = write_world(isolated / "cp.toml", cheap_right=True)
    text = world.read_text().replace('name = "ck-3"', 'name = "ck-3"\ninclude = ["x/*.toml"]')
    world.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_checkpoint_spec(world)
    assert list(caught.value.issues) == [
        "cases[3].include: unknown key; put include = [...] at the top of the file (before "
        "any table) or in [checkpoint]"
    ]


# -- refused before any call: what the checkpoint would drop or run blind -----------------


def served_world(folder: Path, *, cases: str = "extraction", routed: str = "extraction") -> Path:
    """The world with its ladder serving only extraction; cases and routed cases re-classed."""
    world = write_world(folder / "cp.toml", cheap_right=True, routed_class=routed)
    text = world.read_text().replace(
        'name = "general"', 'name = "general"\ntask_class = "extraction"'
    )
    text = text.replace(
        'task_class = "extraction"\nprompt = "Checkpoint',
        f'task_class = "{cases}"\nprompt = "Checkpoint',
    )
    world.write_text(text)
    return world


@pytest.mark.parametrize(
    ("cases", "routed", "issue"),
    [
        (
            "extractoin",
            "extraction",
            "cases: task class 'extractoin' (4 cases: ck-0, ck-1, ck-2, ...) matches no ladder "
            "(ladder 'general' serves 'extraction'); did you mean 'extraction'?",
        ),
        (
            "extraction",
            "extractoin",
            "orchestrated: task class 'extractoin' (4 cases: route-0, route-1, route-2, ...) "
            "matches no ladder and no profile (ladder 'general' serves 'extraction'; profiles "
            "are for 'extraction'); did you mean 'extraction'?",
        ),
    ],
    ids=["cases", "orchestrated"],
)
def test_cases_of_a_task_class_no_ladder_serves_are_refused_before_any_call(
    runner: CliRunner, isolated: Path, cases: str, routed: str, issue: str
) -> None:
    """They used to be dropped: a dry run printed ``criterion 1:  target runs (cells: 0)``."""
    seed_store()
    world = served_world(isolated, cases=cases, routed=routed)
    for args in (["--dry-run"], [], ["--json"]):
        result = run(runner, world, *args)
        assert result.exit_code == 2 and result.stdout == ""
        assert result.stderr.splitlines() == [f"Error: {world}: {issue}"]
    assert not (isolated / "kb-evidence").exists()


def test_a_routed_case_may_be_of_a_class_only_a_profile_serves(isolated: Path) -> None:
    from kb.checkpoint import load_checkpoint_spec

    world = served_world(isolated, routed="summary")
    world.write_text(
        world.read_text().replace(
            'name = "careful"\nmodel = "scripted:top"\ntask_class = "extraction"',
            'name = "careful"\nmodel = "scripted:top"\ntask_class = "summary"',
        )
    )
    assert len(load_checkpoint_spec(world).orchestrated) == 4


def test_a_plan_without_a_cell_prints_no_garbled_line(isolated: Path) -> None:
    from kb.checkpoint import load_checkpoint_spec, plan_checkpoint, plan_text
    from kb.store.ttl import parse_instant

    seed_store()
    spec = load_checkpoint_spec(write_world(isolated / "cp.toml", cheap_right=True))
    store = KnowledgeStore("rulvar.models.json").read_only()
    plan = plan_checkpoint(spec, store, as_of=parse_instant("2026-11-30"))
    text = plan_text(replace(plan, pairs=(), layout=()))
    assert "  criterion 1: no target run (no cell: no case of a task class a ladder serves)" in text
    assert "criterion 1:  " not in text and "(cells: 0)" not in text


SCRIPTED_TYPOS = {
    "rung": (
        'rungs = [{ model = "scripted:cheap" }',
        'rungs = [{ model = "scripted:chep" }',
        "ladder 'general' rung 0: scripted:chep",
        "scripted:cheap",
    ),
    "profile": (
        'name = "careful"\nmodel = "scripted:top"',
        'name = "careful"\nmodel = "scripted:tpo"',
        "profile 'careful': scripted:tpo",
        "scripted:top",
    ),
    "orchestrator": (
        'orchestrator = "scripted:router"',
        'orchestrator = "scripted:ruoter"',
        "checkpoint.orchestrator: scripted:ruoter",
        "scripted:router",
    ),
}


@pytest.mark.parametrize("typo", SCRIPTED_TYPOS, ids=list(SCRIPTED_TYPOS))
def test_a_scripted_model_without_a_models_entry_is_refused(
    runner: CliRunner, isolated: Path, typo: str
) -> None:
    """Without params it would answer "" to everything: 0.00 at $0, "cost saved 100%"."""
    old, new, where, nearest = SCRIPTED_TYPOS[typo]
    seed_store()
    world = write_world(isolated / "cp.toml", cheap_right=True)
    assert old in world.read_text()
    world.write_text(world.read_text().replace(old, new))
    for args in (["--dry-run"], []):
        result = run(runner, world, *args)
        assert result.exit_code == 2 and result.stdout == ""
        (line,) = result.stderr.splitlines()
        assert line == (
            f"Error: {world}: {where} has no [[models]] entry, and a scripted model without "
            f'params answers "" to everything; did you mean {nearest!r}?'
        )


def test_a_scripted_models_entry_without_params_is_taken_as_meant(isolated: Path) -> None:
    from kb.checkpoint import load_checkpoint_spec

    world = write_world(isolated / "cp.toml", cheap_right=True)
    text = world.read_text().replace('{ model = "scripted:cheap" }', '{ model = "scripted:blank" }')
    world.write_text(text + '\n[[models]]\nmodel = "scripted:blank"\n')
    assert load_checkpoint_spec(world).model("scripted:blank").params == {}


# -- the docs' example spec ---------------------------------------------------------

CHECKPOINT_DOC = Path(__file__).resolve().parent.parent / "docs" / "how-to" / "value-checkpoint.md"


def readme_checkpoint_section() -> str:
    return CHECKPOINT_DOC.read_text()


def readme_block(language: str, first_line: str) -> str:
    """The fenced block of ``language`` in the checkpoint section that starts so."""
    blocks = re.findall(rf"```{language}\n(.*?)```", readme_checkpoint_section(), re.S)
    (block,) = [b for b in blocks if b.startswith(first_line)]
    return block


def test_the_readmes_example_spec_parses_and_runs(runner: CliRunner, isolated: Path) -> None:
    from kb.checkpoint import load_checkpoint_spec, plan_checkpoint
    from kb.checkpoint.run import ROUTER_SYSTEM
    from kb.store.ttl import parse_instant

    spec_path = isolated / "cp.toml"
    spec_path.write_text(readme_block("toml", "# cp.toml"))
    spec = load_checkpoint_spec(spec_path)
    assert (len(spec.cases), len(spec.orchestrated), len(spec.params)) == (2, 2, 4)
    # Against an empty store (kb init): the plan, then "not passed" as the docs say.
    assert runner.invoke(cli, ["init"], catch_exceptions=False).exit_code == 0
    result = run(runner, spec_path, "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "general / extraction: baseline tier 1" in result.stdout
    result = run(runner, spec_path, "--json")
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    assert (
        report["criterion1"]["reason"]
        == "no cell has a recommendation: the knowledge moved nothing"
    )
    assert report["criterion2"]["verdict"] == "not applicable"
    # The scripted orchestrator keyed on "Knowledge card:": informed picks fast, blind careful.
    informed, blind = report["criterion2"]["informed"], report["criterion2"]["blind"]
    assert informed["passRate"] == blind["passRate"] == 1 and "invalidChoices" not in informed
    assert informed["costUsd"] == 2 * 0.0005 + 2 * 0.001
    assert blind["costUsd"] == 2 * 0.0005 + 2 * 0.04
    # The orchestrator's prompt as the docs show it (the card itself elided).
    assert readme_block("text", "You route") == ROUTER_SYSTEM + "\n"
    plan = plan_checkpoint(
        spec, KnowledgeStore("rulvar.models.json").read_only(), as_of=parse_instant("2026-11-30")
    )
    request = plan.job.phase("orchestrator").runs[0].request
    assert request.params["temperature"] == 0
    sent = request.messages[-1]["content"].replace(plan.card, "<card>\n")
    shown = re.sub(
        r"# Model knowledge card.*?\.\.\.\n",
        "<card>\n",
        readme_block("text", "Profiles:"),
        flags=re.S,
    )
    assert [line for line in sent.splitlines() if line] == [
        line for line in shown.splitlines() if line
    ]


# -- the sweep's health rule on every arm (SPEC 14.7 item 4) ----------------------------------

OUTAGE = "<html><head><title>503 Service Unavailable</title></head><body>busy</body></html>"


def test_an_arm_answered_by_an_error_page_is_contaminated_never_worse(
    runner: CliRunner, isolated: Path
) -> None:
    seed_store()
    # the cheap rung's provider answers three of its eight cases with one error page
    extraction = EXTRACTION + [(f"ck-{i}", f"Checkpoint question {i}?", "") for i in range(4, 8)]
    paged = {prompt: OUTAGE for _, prompt, _ in extraction[1:4]}
    world = write_world(isolated / "cp.toml", cheap_right=True, cases=8, cheap_replies=paged)
    result = run(runner, world, "--json")
    report = json.loads(result.stdout)
    c1 = report["criterion1"]
    assert c1["verdict"] == "contaminated" and report["passed"] is False
    treatment = c1["cells"][0]["treatment"]
    assert treatment["contamination"].startswith(
        "suspect answers from scripted:cheap · extraction (suspect: 3 of 8 replies were "
    )
    assert "it is an error page or an error object, not words" in treatment["contamination"]
    table = one_line(run(runner, world).stdout)
    assert "treatment CONTAMINATED: suspect answers from scripted:cheap" in table


def test_a_canned_refusal_asked_again_is_the_models_answer_and_scored(
    runner: CliRunner, isolated: Path
) -> None:
    seed_store()
    extraction = EXTRACTION + [(f"ck-{i}", f"Checkpoint question {i}?", "") for i in range(4, 8)]
    refused = {prompt: "I can't help with that." for _, prompt, _ in extraction[1:4]}
    world = write_world(isolated / "cp.toml", cheap_right=True, cases=8, cheap_replies=refused)
    result = run(runner, world, "--json", "--rule", "rulvar")
    report = json.loads(result.stdout)
    (cell,) = report["criterion1"]["cells"]
    assert "contamination" not in cell["treatment"]  # asked again: the same words
    assert cell["treatment"]["passRate"] == pytest.approx(5 / 8)  # its refusals fail, scored
    assert report["criterion1"]["verdict"] != "contaminated"
    assert report["askedAgain"] == [
        'scripted:cheap · extraction: 3 prompts answered "I can\'t help with that." asked '
        "again: the same text, the model's own answer (scored)"
    ]
