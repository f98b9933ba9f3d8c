"""kb sweep end to end through the CLI, on scripted models with exact pass rates."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from kb.cli import cli
from kb.store.filestore import CommitContext, KnowledgeStore
from kb.store.ttl import parse_instant
from tests.cli_helpers import unwrapped
from tests.conftest import git
from tests.factories import add, eval_claim
from tests.sweep_helpers import scripted_model, write_spec

pytestmark = pytest.mark.usefixtures("initialized_store")

STORE = "rulvar.models.json"
NIGHT = "2026-11-29T02:00:00Z"


def kb(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(cli, list(args), catch_exceptions=False)


def measure_args(spec: Path, *extra: str) -> list[str]:
    """A sweep that reports as JSON and writes nothing."""
    return ["sweep", str(spec), "--json", "--quiet", "--no-commit", "--observed-at", NIGHT, *extra]


def sweep_json(runner: CliRunner, spec: Path, *args: str, observed: str = NIGHT) -> dict[str, Any]:
    result = kb(runner, "sweep", str(spec), "--json", "--quiet", "--observed-at", observed, *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def without_timings(stdout: str) -> str:
    """The report with each run's latency dropped: the one field timing may change."""
    report = json.loads(stdout)
    for run in report["runs"]:
        run.pop("latencyMs")
    return json.dumps(report, sort_keys=True)


def outcomes(report: dict[str, Any]) -> dict[str, str]:
    return {cell["model"]: cell["outcome"] for cell in report["cells"]}


def test_threshold_bands_are_inclusive(runner: CliRunner, isolated: Path) -> None:
    spec = write_spec(
        isolated / "s.toml",
        [scripted_model("nine", 9), scripted_model("five", 5), scripted_model("seven", 7)],
    )
    report = sweep_json(runner, spec)
    assert outcomes(report) == {
        "scripted:nine": "strength",
        "scripted:five": "weakness",
        "scripted:seven": "none",
    }
    claims = {c["subject"]["model"]: c for c in report["claims"]}
    assert set(claims) == {"scripted:nine", "scripted:five"}
    nine = claims["scripted:nine"]
    assert nine["id"] == "kb-sweep-2026-11-29T02:00:00.000Z/scripted:nine/extraction"
    assert nine["statement"] == (
        "sweep passRate 0.90 over 10 extraction cases: at or above the strength band"
    )
    assert claims["scripted:five"]["statement"] == (
        "sweep passRate 0.50 over 10 extraction cases: in the weakness band"
    )
    assert nine["confidence"] == "medium"
    assert nine["metrics"] == {"passRate": 0.9, "n": 10, "graderId": "eval-suite", "cost": 0}
    assert nine["evidence"] == [
        {
            "kind": "eval",
            "reportId": "kb-sweep-2026-11-29T02:00:00.000Z",
            "caseIds": [f"case-{i:02d}" for i in range(10)],
        }
    ]
    assert nine["author"] == {"kind": "eval-pipeline", "id": "ci"}
    assert nine["observedAt"] == "2026-11-29T02:00:00.000Z"
    assert nine["expiresAt"] == "2027-02-27T02:00:00.000Z"
    assert claims["scripted:five"]["expiresAt"] == "2026-12-29T02:00:00.000Z"
    cell = report["cells"][0]
    assert (cell["n"], cell["plannedN"]) == (10, 10)
    assert cell["wilson95"] == pytest.approx([0.5958, 0.9821], abs=1e-4)
    assert report["committedVersion"] == 1
    stored = KnowledgeStore(STORE).read()
    assert [c.id for c in stored.claims] == [c["id"] for c in report["claims"]]


def test_a_single_case_statement_is_singular(runner: CliRunner, isolated: Path) -> None:
    spec = write_spec(
        isolated / "s.toml", [scripted_model("m", 1)], cases=[("only", "Question 0?", "answer-0")]
    )
    raw = kb(runner, *measure_args(spec))
    assert '"passRate": 1,' in raw.stdout  # numbers as JavaScript prints them, like the store
    (claim,) = sweep_json(runner, spec)["claims"]
    assert (
        claim["statement"]
        == "sweep passRate 1.00 over 1 extraction case: at or above the strength band"
    )
    assert claim["confidence"] == "low"


INCOMPLETE = [
    (
        "envelope",
        {"cost_usd": 0.001},
        {"target_usd": 0.01, "max_total_usd": 0.055},
        "envelopeExhausted",
        "the spend envelope refused",
    ),
    ("provider errors", {"errors": ["Question 3?"]}, {}, "nonOkRuns", "failed at the provider"),
]


@pytest.mark.parametrize(
    ("why", "params", "budgets", "key", "reason"), INCOMPLETE, ids=[i[0] for i in INCOMPLETE]
)
def test_incomplete_cells_emit_nothing_and_touch_nothing(
    runner: CliRunner,
    isolated: Path,
    why: str,
    params: dict[str, Any],
    budgets: dict[str, float],
    key: str,
    reason: str,
) -> None:
    prior = eval_claim("prior", subject={"model": "scripted:m"}, observedAt="2026-11-28")
    KnowledgeStore(STORE).commit([add(prior)], 0, CommitContext("seed", "t"))
    budgets = budgets or {"target_usd": 0.01, "max_total_usd": 5.0}
    spec = write_spec(
        isolated / "s.toml",
        [scripted_model("m", 10, **params)],
        budgets=budgets,
        extra_sweep="max_retries = 0",
    )
    failed = kb(runner, "sweep", str(spec), "--quiet", "--allow-partial", "--observed-at", NIGHT)
    assert failed.exit_code == 1 and "1 of 1 cells incomplete" in failed.stderr
    report = sweep_json(runner, spec, "--allow-incomplete", "--allow-partial")
    (cell,) = report["cells"]
    assert cell["outcome"] == "incomplete" and key in cell
    assert reason in cell["incompleteReason"]
    assert report["claims"] == [] and report["retired"] == []
    assert "committedVersion" not in report
    assert KnowledgeStore(STORE).read().get("prior").status == "active"  # type: ignore[union-attr]


def test_a_run_over_its_ceiling_leaves_the_cell_incomplete(
    runner: CliRunner, isolated: Path
) -> None:
    """A price per token is known only once the reply's tokens are (a declared cost_usd above
    the ceiling is refused when the spec loads): here 2 tokens at $20,000 per million."""
    from tests.fake_openai import fake_openai_server

    prior = eval_claim("prior", subject={"model": "openai:m"}, observedAt="2026-11-28")
    KnowledgeStore(STORE).commit([add(prior)], 0, CommitContext("seed", "t"))
    with fake_openai_server() as (base, _seen):
        price = {"input_per_mtok": 0, "output_per_mtok": 20000}
        model = {
            "model": "openai:m",
            "params": {"api_base": base, "api_key": "none", "price": price},
        }
        spec = write_spec(
            isolated / "s.toml",
            [model],
            budgets={"target_usd": 0.01, "max_total_usd": 5.0},
            extra_sweep="max_retries = 0",
        )
        failed = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT)
        assert failed.exit_code == 1 and "1 of 1 cells incomplete" in failed.stderr
        report = sweep_json(runner, spec, "--allow-incomplete")
    (cell,) = report["cells"]
    assert cell["outcome"] == "incomplete" and cell["exhaustedRuns"] == 10
    assert "exceeded the per-run ceiling" in cell["incompleteReason"]
    assert report["claims"] == [] and report["retired"] == []
    assert KnowledgeStore(STORE).read().get("prior").status == "active"  # type: ignore[union-attr]


def test_a_script_declaring_a_cost_above_the_ceiling_is_refused_at_load(
    runner: CliRunner, isolated: Path
) -> None:
    (isolated / "m.json").write_text('{"default": "x", "cost_usd": 0.02}')
    model = {"model": "scripted:m", "params": {"script": "m.json"}}
    spec = write_spec(
        isolated / "s.toml", [model], budgets={"target_usd": 0.01, "max_total_usd": 5.0}
    )
    result = kb(runner, "sweep", str(spec), "--dry-run")
    assert result.exit_code == 2
    assert "cost_usd = 0.02 per call is above budgets.target_usd = 0.01" in result.stderr


def test_a_judge_over_its_budget_leaves_the_cell_incomplete(
    runner: CliRunner, isolated: Path
) -> None:
    judge = (
        '{ kind = "judge", model = "scripted:judge", instructions = "correct", '
        'params = { default = "{\\"passed\\": true, \\"reason\\": \\"ok\\"}", cost_usd = 0.05 } }'
    )
    spec = write_spec(
        isolated / "s.toml",
        [scripted_model("m", 10)],
        graders=judge,
        budgets={"target_usd": 0.01, "judge_usd": 0.01, "max_total_usd": 5.0},
    )
    (cell,) = sweep_json(runner, spec, "--allow-incomplete")["cells"]
    assert cell["outcome"] == "incomplete" and cell["judgeIncompleteRuns"] == 10
    assert "10 judge verdicts missing" in cell["incompleteReason"]


def test_the_pool_is_configured_plus_weaknesses_plus_the_queue(
    runner: CliRunner, isolated: Path
) -> None:
    KnowledgeStore(STORE).commit(
        [
            add(
                eval_claim(
                    "weak",
                    subject={"model": "scripted:old", "effort": "low"},
                    polarity="weakness",
                    observedAt="2026-11-20",
                )
            ),
            add(eval_claim("due", subject={"model": "scripted:due"}, observedAt="2026-07-01")),
            add(eval_claim("fresh", subject={"model": "scripted:fresh"}, observedAt="2026-11-20")),
        ],
        0,
        CommitContext("seed", "t"),
    )
    spec = write_spec(isolated / "s.toml", [scripted_model("m", 10), scripted_model("old", 5)])
    result = kb(runner, "sweep", str(spec), "--dry-run", "--observed-at", NIGHT)
    assert result.exit_code == 0
    assert "  scripted:m  (configured)" in result.stdout
    # Pulled in with the params of the configured scripted:old entry: measured.
    assert "  scripted:old@low  (active weakness claim weak)\n" in result.stdout
    # No entry gives scripted:due its params: listed, not measured.
    assert (
        "scripted:due (remeasurement queue due) SKIPPED: no [[models]] entry for "
        "scripted:due gives the params it was measured with"
    ) in unwrapped(result.stdout)
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    assert "scripted:fresh" not in result.stdout
    assert "planned: 30 target runs" in result.stdout
    assert "worst-case authorized spend: $0.3000 (cap $5.0000)" in result.stdout
    assert "target:scripted:old@low/case-09  ceiling $0.0100" in result.stdout
    assert "canary:" not in result.stdout  # no canary configured
    assert KnowledgeStore(STORE).read().version == 1  # a dry run writes nothing


def invariants(store: KnowledgeStore) -> None:
    active = [c for c in store.read().claims if c.status == "active"]
    per_subject = Counter((c.subject_key, c.task_class) for c in active)
    assert max(per_subject.values(), default=0) <= 1


def test_nightly_sweeps_supersede_and_falsify(runner: CliRunner, isolated: Path) -> None:
    store = KnowledgeStore(STORE)
    nights = [9, 10, 5, 7, 2, 9, 9, 6, 10, 4]  # strength, strength, weakness, none, ...
    expected = []
    for night, correct in enumerate(nights):
        spec = write_spec(isolated / f"night{night}.toml", [scripted_model("m", correct)])
        observed = f"2026-11-{night + 10:02d}T02:00:00Z"
        report = sweep_json(runner, spec, observed=observed)
        invariants(store)
        outcome = report["cells"][0]["outcome"]
        expected.append(outcome)
        active = [c for c in store.read().claims if c.status == "active"]
        if outcome == "none":
            assert active == [] and all(r["reason"] == "falsified" for r in report["retired"])
        else:
            assert [c.polarity for c in active] == [outcome]
    assert expected == [
        "strength",
        "strength",
        "weakness",
        "none",
        "weakness",
        "strength",
        "strength",
        "none",
        "strength",
        "weakness",
    ]
    claims = store.read().claims
    statuses = Counter(c.status for c in claims)
    assert statuses == {"superseded": 2, "archived": 5, "active": 1}
    # The supersede chain links consecutive same-band nights.
    by_id = {c.id: c for c in claims}
    night1 = "kb-sweep-2026-11-11T02:00:00.000Z/scripted:m/extraction"
    assert by_id[night1].supersedes == "kb-sweep-2026-11-10T02:00:00.000Z/scripted:m/extraction"
    assert store.read().version == 10  # every night retired or added something: one commit each
    assert verify_ok(runner)


def verify_ok(runner: CliRunner) -> bool:
    return kb(runner, "verify").exit_code == 0


def test_one_sweep_is_one_git_commit_of_the_store_and_its_evidence(
    runner: CliRunner, repo: Path
) -> None:
    (repo / "mine.txt").write_text("staged work\n")
    git(repo, "add", "mine.txt")
    spec = write_spec(repo / "s.toml", [scripted_model("a", 10), scripted_model("b", 0)])
    report = sweep_json(runner, spec)
    assert git(repo, "log", "--format=%s", "-1") == (
        "kb: sweep kb-sweep-2026-11-29T02:00:00.000Z: +2 claims (store v1)\n"
    )
    assert git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", "HEAD").split() == [
        "kb-evidence/kb-sweep-2026-11-29T02:00:00.000Z.jsonl",
        "kb-evidence/kb-sweep-2026-11-29T02:00:00.000Z.report.json",
        STORE,
    ]
    assert git(repo, "diff", "--cached", "--name-only") == "mine.txt\n"
    assert git(repo, "status", "--porcelain", "--", "kb-evidence", STORE) == ""
    body = git(repo, "log", "-1", "--format=%B")
    assert "Kb-Report: kb-sweep-2026-11-29T02:00:00.000Z" in body and "Kb-Committer: ci" in body
    assert report["committedVersion"] == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "[sweep]\ncommitter = 'ci'\nallow_unbounded = true\n",
            "the spec (with its includes) has no cases",
        ),
        ("[sweep]\ncommiter = 'ci'\n", "sweep.commiter: unknown key"),
        (
            "[sweep]\ncommitter = 'ci'\nthresholds = { strength = 0.5, weakness = 0.5 }\n",
            "must be strictly below strength",
        ),
        ("[sweep]\ncommitter = 'ci'\nthresholds = { strength = 1.5 }\n", "finite fraction"),
        (
            "[sweep]\ncommitter = 'ci'\n[budgets]\ntarget_usd = -1\nmax_total_usd = 1\n",
            "budgets.target_usd: Value error, must be a positive",
        ),
        ("[sweep]\ncommitter = 'ci'\n", "budgets: missing"),
        ("[sweep]\ncommitter = 'ci'\nconcurrency = 'many'\n", "sweep.concurrency"),
        ("not toml [", "not valid TOML"),
        (
            "[sweep]\ncommitter = 'ci'\nallow_unbounded = true\n[budgets]\nmax_total_usd = 0.01\n",
            "budgets.target_usd: missing (every target run needs a ceiling)",
        ),
        (
            "[sweep]\ncommitter = 'ci'\n[budgets]\ntarget_usd = 0.1\nmax_total_usd = true\n",
            "budgets.max_total_usd",
        ),
        (
            "[sweep]\ncommitter = 'ci'\nconcurrency = '4'\nallow_unbounded = true\n",
            "sweep.concurrency",
        ),
    ],
)
def test_bad_specs_exit_2_and_write_nothing(
    runner: CliRunner, isolated: Path, body: str, message: str
) -> None:
    path = isolated / "bad.toml"
    path.write_text(body)
    before = (isolated / STORE).read_bytes()
    result = kb(runner, "sweep", str(path))
    assert result.exit_code == 2
    assert str(path) in result.stderr and message.replace("Value error, ", "") in result.stderr
    assert (isolated / STORE).read_bytes() == before


def test_bad_cases_and_models_are_named_with_their_path(runner: CliRunner, isolated: Path) -> None:
    spec = write_spec(
        isolated / "s.toml",
        [{"model": "gpt-4o"}, scripted_model("a", 1), scripted_model("a", 2)],
        graders='{ kind = "rubric", criteria = [{ name = "x", contains = "a" }], '
        "pass_threshold = 2.0 }",
    )
    result = kb(runner, "sweep", str(spec))
    assert result.exit_code == 2
    for fragment in (
        "models[0].model: ",
        "must be 'provider:model'",
        "cases[0].graders[0].pass_threshold",
        "models[2]: duplicates models[1]",
    ):
        assert fragment in result.stderr, result.stderr


def test_concurrency_never_changes_the_report(runner: CliRunner, isolated: Path) -> None:
    models = [scripted_model(f"m{i}", i, latency_ms=3, cost_usd=0.0007) for i in range(0, 11, 2)]
    spec = write_spec(
        isolated / "s.toml", models, budgets={"target_usd": 0.001, "max_total_usd": 0.03}
    )
    one, eight = (
        without_timings(
            kb(runner, *measure_args(spec, "--concurrency", level, "--allow-partial")).stdout
        )
        for level in ("1", "8")
    )
    assert one == eight
    assert '"envelopeExhausted": true' in one  # the envelope bites mid-sweep in both


def test_a_recorded_sweep_replays_without_any_provider(runner: CliRunner, isolated: Path) -> None:
    spec = write_spec(
        isolated / "s.toml", [scripted_model("a", 9, cost_usd=0.001), scripted_model("b", 3)]
    )
    cassette = isolated / "night.jsonl"
    recorded = kb(runner, *measure_args(spec, "--record", str(cassette))).stdout
    args = measure_args(spec, "--replay", str(cassette))
    code = (
        "import sys\nfrom kb.cli import cli\n"
        f"try:\n    cli.main(args={args!r}, prog_name='kb')\n"
        "except SystemExit:\n    pass\n"
        "print('LITELLM', 'litellm' in sys.modules, file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=isolated
    )
    assert "LITELLM False" in proc.stderr, proc.stderr
    assert without_timings(proc.stdout) == without_timings(recorded)
    edited = write_spec(isolated / "s.toml", [scripted_model("a", 8), scripted_model("b", 3)])
    miss = kb(runner, "sweep", str(edited), "--quiet", "--replay", str(cassette))
    assert miss.exit_code == 2 and "replay miss" in miss.stderr


def test_no_commit_and_an_incomplete_cell(runner: CliRunner, isolated: Path) -> None:
    spec = write_spec(
        isolated / "s.toml",
        [scripted_model("m", 10, errors=["Question 1?"])],
        extra_sweep="max_retries = 0",
    )
    before = Path(STORE).read_bytes()
    result = kb(runner, "sweep", str(spec), "--no-commit", "--quiet")
    assert result.exit_code == 1
    assert "1 target run failed at the provider" in result.stderr
    assert Path(STORE).read_bytes() == before


def test_observed_at_must_be_an_instant(runner: CliRunner, isolated: Path) -> None:
    spec = write_spec(isolated / "s.toml", [scripted_model("m", 10)])
    result = kb(runner, "sweep", str(spec), "--observed-at", "tonight")
    assert result.exit_code == 2 and "--observed-at: 'tonight'" in result.stderr


def test_ids_collide_when_a_report_id_is_reused(runner: CliRunner, isolated: Path) -> None:
    spec = write_spec(isolated / "s.toml", [scripted_model("m", 10)])
    sweep_json(runner, spec, "--report-id", "nightly-1")
    again = kb(runner, "sweep", str(spec), "--quiet", "--report-id", "nightly-1")
    assert again.exit_code == 2 and "'nightly-1' was already used" in again.stderr
    assert "planned:" not in again.stdout  # refused before the plan, let alone a call
    assert parse_instant("2026-11-29") > 0


def test_problems_found_before_any_money_is_spent(runner: CliRunner, repo: Path) -> None:
    spec = write_spec(repo / "s.toml", [scripted_model("m", 10)])
    assert kb(runner, "sweep", str(spec), "--quiet", "--html", "nowhere/r.html").exit_code == 2
    sweep_json(runner, spec)
    path = repo / STORE
    path.write_text(path.read_text() + " ")  # an uncommitted edit
    result = kb(runner, "sweep", str(spec), "--observed-at", "2026-11-30T02:00:00Z")
    assert result.exit_code == 2 and "unstaged changes" in result.stderr
    assert "cells:" not in result.stdout  # refused before measuring


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        ({"model": "openai:x", "params": {"cost_usd": "cheap"}}, "params.cost_usd"),
        ({"model": "openai:x", "params": {"input_cost_per_token": -1}}, "input_cost_per_token"),
    ],
)
def test_declared_prices_are_checked_at_load(
    runner: CliRunner, isolated: Path, model: dict[str, Any], fragment: str
) -> None:
    result = kb(runner, "sweep", str(write_spec(isolated / "s.toml", [model])))
    assert result.exit_code == 2 and fragment in result.stderr


def test_a_task_class_too_long_for_a_statement_is_refused(
    runner: CliRunner, isolated: Path
) -> None:
    spec = write_spec(isolated / "s.toml", [scripted_model("m", 10)], task_class="t" * 101)
    result = kb(runner, "sweep", str(spec))
    assert result.exit_code == 2 and "task_class" in result.stderr


def test_the_dry_run_lists_exactly_the_runs_the_sweep_makes(
    runner: CliRunner, initialized_store: Path, isolated: Path
) -> None:
    judge = (
        '{ kind = "judge", model = "scripted:judge", instructions = "ok?", '
        'params = { default = "{\\"passed\\": true, \\"reason\\": \\"r\\"}" } }'
    )
    spec = write_spec(
        isolated / "s.toml",
        [scripted_model("m", 10), scripted_model("n", 3)],
        graders=f'{{ kind = "golden", expected = "answer", match = "contains" }}, {judge}',
        budgets={"target_usd": 0.01, "judge_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 5},
        extra='\n[canary]\nprompts = ["Ping?", "Pong?"]\n',
    )
    dry = kb(runner, "sweep", str(spec), "--dry-run", "--observed-at", NIGHT)
    listed = [line.split()[0] for line in dry.stdout.splitlines() if line.startswith("  canary:")]
    listed += [line.split()[0] for line in dry.stdout.splitlines() if line.startswith("  target:")]
    assert "(+ up to 20 judge runs, one per judge grader of each target run that settles ok" in (
        unwrapped(dry.stdout)
    )
    done = kb(runner, "sweep", str(spec), "--json", "--quiet", "--observed-at", NIGHT)
    runs = json.loads(done.stdout)["runs"]
    # the same runs (--json lists them in the runs file's case order, the plan in its own)
    assert sorted(r["label"] for r in runs if r["kind"] != "judge") == sorted(listed)
    assert len(listed) == len(set(listed))
    assert sum(1 for r in runs if r["kind"] == "judge") == 20
