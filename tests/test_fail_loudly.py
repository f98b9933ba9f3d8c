"""Failures are loud: refused spends, incomplete sweeps, missing stores, signals, pipes.

Every test asserts the exit code, the message, and that nothing was written
where nothing should be (the store's bytes and git HEAD).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kb.cli import cli
from tests.cli_helpers import unwrapped
from tests.conftest import git
from tests.fake_openai import fake_openai_server
from tests.sweep_helpers import CASES, responses, scripted_model, write_spec

STORE = "rulvar.models.json"
NIGHT = "2026-11-29T02:00:00Z"
ROOT = Path(__file__).resolve().parents[1]


def kb(runner: CliRunner, *args: str, **env: str) -> Result:
    return runner.invoke(cli, list(args), catch_exceptions=False, env=env or None)


def init(runner: CliRunner) -> None:
    assert kb(runner, "init").exit_code == 0


def state(repo: Path) -> tuple[bytes, str]:
    return (repo / STORE).read_bytes(), git(repo, "rev-parse", "HEAD")


def sweep(runner: CliRunner, spec: Path, *args: str) -> Result:
    return kb(runner, "sweep", str(spec), "--observed-at", NIGHT, *args)


# -- 1. a spend the envelope cannot cover is refused before any call ---------------


def test_an_uncoverable_spend_is_refused_before_any_call(runner: CliRunner, repo: Path) -> None:
    init(runner)
    models = [scripted_model(f"m{i}", 10, cost_usd=0.001) for i in range(4)]  # 40 runs
    spec = write_spec(repo / "s.toml", models, budgets={"target_usd": 0.01, "max_total_usd": 0.2})
    before = state(repo)
    result = sweep(runner, spec, "--quiet")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "Error: budgets.max_total_usd: worst-case authorized spend $0.4000 exceeds the cap "
        "$0.2000: 20 of 40 runs would be refused; raise budgets.max_total_usd, or pass "
        "--allow-partial to run anyway and refuse the overflow"
    ]
    assert state(repo) == before
    dry = sweep(runner, spec, "--dry-run")
    assert dry.exit_code == 2
    assert "worst-case authorized spend: $0.4000 (cap $0.2000): EXCEEDS the cap" in dry.stdout
    partial = sweep(runner, spec, "--allow-partial", "--json", "--quiet")
    assert partial.exit_code == 1  # ran; two cells refused, so incomplete
    report = json.loads(partial.stdout)
    assert [c["outcome"] for c in report["cells"]] == ["strength"] * 2 + ["incomplete"] * 2
    assert "2 of 4 cells incomplete" in partial.stderr
    assert report["committedVersion"] == 1


# -- 2. an incomplete sweep exits 1 and says why ------------------------------------------------


def test_provider_failures_exit_one_with_the_first_error(runner: CliRunner, repo: Path) -> None:
    init(runner)
    broken = scripted_model("broken", 10, errors=[prompt for _, prompt, _ in CASES])
    spec = write_spec(
        repo / "s.toml", [scripted_model("fine", 10), broken], extra_sweep="max_retries = 0"
    )
    result = sweep(runner, spec, "--quiet")
    assert result.exit_code == 1
    assert "    first error: ServiceUnavailableError" in result.stdout
    assert result.stderr.startswith(
        "Error: 1 of 2 cells incomplete, e.g. scripted:broken extraction: 10 target runs "
        "failed at the provider; first error: ServiceUnavailableError"
    )
    assert "the complete cell is committed (store v1)" in result.stderr
    again = kb(
        runner,
        "sweep",
        str(spec),
        "--observed-at",
        "2026-11-30T02:00:00Z",
        "--json",
        "--quiet",
        "--allow-incomplete",
        "--strict",
    )
    assert again.exit_code == 0  # --strict is accepted and does nothing
    cell = json.loads(again.stdout)["cells"][1]
    assert cell["firstError"].startswith("ServiceUnavailableError")


def test_a_refused_connection_is_named(runner: CliRunner, repo: Path) -> None:
    init(runner)
    model = {
        "model": "openai:gpt-4o-mini",
        "params": {"api_base": "http://127.0.0.1:9/v1", "api_key": "sk-none", "cost_usd": 0},
    }
    spec = write_spec(repo / "s.toml", [model], extra_sweep="max_retries = 0\ntimeout_s = 5")
    before = state(repo)
    result = sweep(runner, spec, "--json", "--quiet")
    assert result.exit_code == 1
    cell = json.loads(result.stdout)["cells"][0]
    assert "Connection" in cell["firstError"]
    assert "sk-none" not in result.stdout + result.stderr
    assert state(repo) == before  # nothing measured: nothing committed


@pytest.mark.parametrize(
    ("model", "issue"),
    [
        (
            "opnai:gpt-4o",
            "models[0].model: provider 'opnai' is neither kb's own (scripted, local) "
            "nor known to litellm; did you mean 'openai'?",
        ),
        ("scripted:m", "models[0].params.api_key_env: KB_TEST_UNSET_KEY is not set"),
    ],
)
def test_validation_refuses_before_the_plan(
    runner: CliRunner, repo: Path, model: str, issue: str
) -> None:
    init(runner)
    entry = {"model": model, "params": {"api_key_env": "KB_TEST_UNSET_KEY"}}
    if model.startswith("opnai"):
        entry = {"model": model}
    spec = write_spec(repo / "s.toml", [entry])
    for args in ((), ("--dry-run",)):
        result = sweep(runner, spec, *args)
        assert result.exit_code == 2
        assert issue in result.stderr
        assert result.stdout == ""  # refused before the plan is printed
        assert "Warning" not in result.stderr


def test_replaying_needs_no_key(runner: CliRunner, repo: Path) -> None:
    init(runner)
    spec = write_spec(repo / "s.toml", [scripted_model("m", 10, api_key_env="KB_TEST_KEY")])
    recorded = kb(
        runner,
        "sweep",
        str(spec),
        "--observed-at",
        NIGHT,
        "--quiet",
        "--record",
        "c.jsonl",
        KB_TEST_KEY="secret-value-123",
    )
    assert recorded.exit_code == 0, recorded.stderr
    replayed = sweep(runner, spec, "--replay", "c.jsonl", "--no-commit", "--quiet")
    assert replayed.exit_code == 0, replayed.stderr  # same report id, key unset


def test_a_model_left_to_an_unset_default_key_is_a_warning_before_the_plan(
    runner: CliRunner, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    init(runner)
    judge = '{ kind = "judge", model = "anthropic:claude-3-5-haiku-latest", instructions = "Ok?" }'
    models = [
        {"model": "openai:gpt-4o-mini", "params": {"cost_usd": 0.001}},
        {"model": "openai:gpt-4o", "params": {"api_key_env": "KB_TEST_SET_KEY", "cost_usd": 0}},
        {"model": "openai:local", "params": {"api_base": "http://127.0.0.1:9/v1", "cost_usd": 0}},
    ]
    spec = write_spec(
        repo / "s.toml",
        models,
        graders=judge,
        budgets={"target_usd": 0.01, "judge_usd": 0.01, "max_total_usd": 5.0},
        extra_sweep="allow_unpriced = true",
    )
    before = state(repo)
    result = kb(runner, "sweep", str(spec), "--dry-run", KB_TEST_SET_KEY="sk-set-0123456789")
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        "warning: openai:gpt-4o-mini: no api_key_env and OPENAI_API_KEY is not set; its "
        "calls will likely fail (set params.api_key_env and kb checks it before any call)",
        "warning: judge anthropic:claude-3-5-haiku-latest (case 'case-00' and 9 more): "
        "no api_key_env and none of ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN is set; its calls "
        "will likely fail (set params.api_key_env and kb checks it before any call)",
    ]  # not the model naming its key variable, nor the one with its own endpoint
    replay = kb(runner, "sweep", str(spec), "--dry-run", "--replay", "none.jsonl")
    assert "warning: " not in replay.stderr  # a replay calls no provider
    assert state(repo) == before
    # either variable will do; set, there is nothing to warn of
    quiet = kb(
        runner,
        "sweep",
        str(spec),
        "--dry-run",
        KB_TEST_SET_KEY="sk-set-0123456789",
        OPENAI_API_KEY="sk-openai-0123456789",
        ANTHROPIC_AUTH_TOKEN="token-0123456789",
    )
    assert quiet.exit_code == 0 and "warning: " not in quiet.stderr


def test_a_canary_warns_of_its_models_keys_not_of_judges_it_never_calls(
    runner: CliRunner, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL"):  # were a call made: loopback, refused
        monkeypatch.setenv(name, "http://127.0.0.1:9/v1")
    init(runner)
    judge = '{ kind = "judge", model = "anthropic:claude-3-5-haiku-latest", instructions = "Ok?" }'
    spec = write_spec(
        repo / "s.toml",
        [{"model": "openai:gpt-4o-mini", "params": {"cost_usd": 0.001}}],
        graders=judge,
        budgets={"target_usd": 0.01, "judge_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 5.0},
        extra_sweep="allow_unpriced = true\nmax_retries = 0",
        extra='\n[canary]\nprompts = ["Ping?"]\n',
    )
    result = kb(runner, "canary", str(spec), "--no-commit")
    assert result.exit_code == 0, result.stderr  # the probe failed: the canary says so
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert [w.split(":")[1:3] for w in warnings] == [[" openai", "gpt-4o-mini"]], warnings


def regrade(spec: Path, first: str, rest: str, *, split: int = 1) -> None:
    """Grade the spec's first ``split`` cases with ``first``, the others with ``rest``."""
    lines = spec.read_text().split("\n")
    at = [i for i, line in enumerate(lines) if line.startswith("graders = ")]
    for index, line_no in enumerate(at):
        lines[line_no] = f"graders = [{first if index < split else rest}]"
    spec.write_text("\n".join(lines))


def test_two_cases_judging_with_one_model_are_each_checked_for_a_price(
    runner: CliRunner, repo: Path
) -> None:
    init(runner)
    priced = (
        '{ kind = "judge", model = "openai:judge-x", instructions = "Ok?", '
        'params = { cost_usd = 0.001, api_base = "http://127.0.0.1:9/v1" } }'
    )
    unpriced = (
        '{ kind = "judge", model = "openai:judge-x", instructions = "Ok?", '
        'params = { api_base = "http://127.0.0.1:9/v1" } }'
    )
    for first, second in ((priced, unpriced), (unpriced, priced)):  # whichever comes first
        spec = write_spec(
            repo / "s.toml",
            [scripted_model("m", 10)],
            budgets={"target_usd": 0.01, "judge_usd": 0.01, "max_total_usd": 5.0},
        )
        regrade(spec, first, second)
        result = sweep(runner, spec, "--dry-run")
        assert result.exit_code == 2, (first, result.stderr)
        assert "openai:judge-x: has no price" in result.stderr


def test_each_judge_configuration_brings_its_secret_to_the_evidence_cut(tmp_path: Path) -> None:
    from kb.sweep.evidence import EvidenceContext
    from kb.sweep.spec import judge_models, load_spec

    def judge(key: str) -> str:
        return (
            f'{{ kind = "judge", model = "openai:judge-x", instructions = "Ok?", params = {{ '
            f'api_key = "{key}", cost_usd = 0.001, api_base = "http://127.0.0.1:9/v1" }} }}'
        )

    spec = write_spec(
        tmp_path / "s.toml",
        [scripted_model("m", 10)],
        budgets={"target_usd": 0.01, "judge_usd": 0.01, "max_total_usd": 5.0},
    )
    regrade(spec, judge("sk-first-0123456789"), judge("sk-later-0123456789"), split=5)
    judges = judge_models(load_spec(spec).cases)
    assert len(judges) == 2  # one model, two configurations
    secrets = EvidenceContext.of(judges).secrets
    assert {"sk-first-0123456789", "sk-later-0123456789"} <= set(secrets)


def test_the_default_key_variables_are_the_pinned_litellms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The snapshot kb warns from (so a plan never imports litellm) must not go stale."""
    from kb.engine.adapter import load_litellm
    from kb.engine.known_providers import DEFAULT_KEY_ENV

    litellm = load_litellm()
    model = {
        "anthropic": "claude-3-5-sonnet-20241022",
        "cerebras": "llama3.1-8b",
        "cohere": "command-r",
        "deepseek": "deepseek-chat",
        "gemini": "gemini-1.5-flash",
        "groq": "llama3-8b-8192",
        "mistral": "mistral-small",
        "openai": "gpt-4o-mini",
        "openrouter": "openai/gpt-4o",
        "xai": "grok-2",
    }
    assert set(model) == set(DEFAULT_KEY_ENV)

    def keys_found(ref: str) -> bool:
        # litellm's lazy imports of a provider's types can raise pydantic's UserWarning, which
        # pytest makes an error; validate_environment would swallow it and guess the provider
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            assert litellm.get_llm_provider(model=ref)[1] == ref.split("/")[0]
            return bool(litellm.validate_environment(model=ref)["keys_in_environment"])

    calls = inspect.getsource(importlib.import_module("litellm.main"))
    for provider, names in DEFAULT_KEY_ENV.items():
        for name in names:
            monkeypatch.delenv(name, raising=False)
        ref = f"{provider}/{model[provider]}"
        assert keys_found(ref) is False, provider
        accepted = []
        for name in names:  # any one of them is enough for litellm
            monkeypatch.setenv(name, "k")
            if keys_found(ref):
                accepted.append(name)
            else:  # not in validate_environment: an older name litellm's calls still read
                assert f'get_secret_str("{name}")' in calls or f'get_secret("{name}")' in calls
            monkeypatch.delenv(name)
        assert accepted, provider


def test_concurrency_and_timeouts_are_checked_first(runner: CliRunner, repo: Path) -> None:
    init(runner)
    spec = write_spec(repo / "s.toml", [scripted_model("m", 10)])
    result = sweep(runner, spec, "--concurrency", "-3")
    assert result.exit_code == 2 and result.stdout == ""
    assert "--concurrency: must be a positive integer, got -3" in result.stderr
    long = write_spec(repo / "t.toml", [scripted_model("m", 10)], extra_sweep="timeout_s = 1e300")
    result = sweep(runner, long, "--dry-run")
    assert result.exit_code == 2 and "sweep.timeout_s" in result.stderr
    slow = write_spec(repo / "u.toml", [scripted_model("m", 10, timeout_s=90000)])
    result = sweep(runner, slow, "--dry-run")
    assert result.exit_code == 2
    assert "models[0].params.timeout_s: at most 86400 seconds (got 90000)" in result.stderr


def test_duplicate_case_names_are_refused_with_both_places(runner: CliRunner, repo: Path) -> None:
    init(runner)
    cases = [("km-to-m", "q1?", "a"), ("km-to-m", "q2?", "b")]
    spec = write_spec(repo / "s.toml", [scripted_model("m", 1)], cases=cases)
    result = sweep(runner, spec, "--dry-run")
    assert result.exit_code == 2
    assert "'km-to-m' is defined twice (s.toml: cases[0] and s.toml: cases[1])" in result.stderr


# -- 3. no implicit stores ------------------------------------------------


def test_a_missing_store_is_refused_never_created(runner: CliRunner, repo: Path) -> None:
    init(runner)
    spec = write_spec(repo / "s.toml", [scripted_model("m", 10)])
    result = kb(runner, "--store", "rulvar.model.json", "sweep", str(spec), "--observed-at", NIGHT)
    assert result.exit_code == 2
    assert result.stderr.strip() == "Error: no store at rulvar.model.json (run kb init)"
    assert not (repo / "rulvar.model.json").exists()
    for command in (["list"], ["verify"], ["queue"], ["show", "x"], ["deprecate", "a:b"]):
        refused = kb(runner, "--store", "nope.json", *command)
        assert refused.exit_code == 2 and "no store at nope.json (run kb init)" in refused.stderr
    assert not (repo / "nope.json").exists()


def test_the_store_is_found_in_a_parent_up_to_the_git_top(runner: CliRunner, repo: Path) -> None:
    init(runner)
    (repo / "sweeps" / "deep").mkdir(parents=True)
    os.chdir(repo / "sweeps" / "deep")
    listed = kb(runner, "list")
    assert listed.exit_code == 0 and "0 claims shown (0 in the store)" in listed.stdout
    outside = repo.parent / "elsewhere"
    outside.mkdir()
    os.chdir(outside)
    assert kb(runner, "list").exit_code == 2


# -- 4. options in either place ------------------------------------------------


def test_store_and_as_of_after_the_subcommand(runner: CliRunner, repo: Path) -> None:
    init(runner)
    os.rename(repo / STORE, repo / "other.json")
    result = kb(runner, "list", "--as-of", "2027-01-01", "--store", "other.json")
    assert result.exit_code == 0, result.stderr
    assert kb(runner, "list", "--as-of", "yesterday", "--store", "other.json").exit_code == 2


# -- 5. replay ------------------------------------------------


def test_a_replay_miss_names_the_run(runner: CliRunner, repo: Path) -> None:
    init(runner)
    spec = write_spec(repo / "s.toml", [scripted_model("m", 10)])
    assert sweep(runner, spec, "--record", "c.jsonl", "--quiet").exit_code == 0
    changed = write_spec(
        repo / "s2.toml",
        [scripted_model("m", 10)],
        cases=CASES[:9] + [("case-new", "A new question?", "x")],
    )
    result = sweep(runner, changed, "--replay", "c.jsonl", "--no-commit", "--quiet")
    assert result.exit_code == 2
    assert "replay miss for target:scripted:m/case-new" in result.stderr


# -- 6. pipes, conflicts, cards, checkpoints ------------------------------------------------


def test_a_closed_stdout_ends_quietly(repo: Path) -> None:
    from kb.store.filestore import CommitContext, KnowledgeStore
    from tests.factories import add, eval_claim

    claims = [add(eval_claim(f"c{i:03d}", taskClass=f"t{i}")) for i in range(300)]
    KnowledgeStore(repo / STORE).commit(claims, 0, CommitContext("seed", "t"))
    done = subprocess.run(
        f"{sys.executable} -m kb list --all | head -1",
        shell=True,
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert done.stdout == "c000\n"
    assert done.stderr == ""  # not "Error: Broken pipe"


def test_a_merge_conflict_in_the_store_is_named(runner: CliRunner, repo: Path) -> None:
    init(runner)
    text = (repo / STORE).read_text()
    (repo / STORE).write_text("<<<<<<< HEAD\n" + text + "=======\n" + text + ">>>>>>> branch\n")
    result = kb(runner, "list")
    assert result.exit_code == 2
    assert "unresolved git merge conflict (markers at lines 1-" in result.stderr
    assert "kb merge-driver --install" in result.stderr
    assert "not valid JSON" not in result.stderr


def test_the_cell_line_and_the_claim_round_alike(runner: CliRunner, repo: Path) -> None:
    init(runner)
    cases = [(f"c{i}", f"Q{i}?", "a") for i in range(8)]
    model = {"model": "scripted:m", "params": {"responses": responses(1, cases)}}
    spec = write_spec(repo / "s.toml", [model], cases=cases)
    result = sweep(runner, spec, "--quiet")
    assert result.exit_code == 0, result.stderr
    assert "passRate 0.13 " in result.stdout  # 1/8 = 0.125: toFixed(2) gives 0.13
    assert "sweep passRate 0.13 over 8 extraction cases" in unwrapped(result.stdout)


def test_card_warns_about_a_profile_task_class_nothing_knows(runner: CliRunner, repo: Path) -> None:
    init(runner)
    (repo / "l.toml").write_text(
        '[[ladders]]\nname = "g"\nstart_tier = 0\nrungs = [{ model = "a:b" }]\n\n'
        '[[profiles]]\nname = "fast"\nmodel = "a:b"\ntask_class = "extracton"\n'
    )
    result = kb(runner, "card", "l.toml")
    assert result.exit_code == 0
    assert (
        "warning: profile 'fast': task class 'extracton' matches no ladder and no claim"
        in result.stderr
    )


# -- 7. signals ------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_sweep_commits_nothing_and_says_what_was_spent(
    repo: Path, sig: signal.Signals
) -> None:
    subprocess.run([sys.executable, "-m", "kb", "init"], cwd=repo, check=True, capture_output=True)
    before = state(repo)
    # The hanging call is held until the test releases it, so kb can only exit by
    # cancelling the call in flight (waiting for it would never end).
    with fake_openai_server(latency_s=0.0, hang_s=None) as (base, seen):
        model = {
            "model": "openai:m",
            "params": {"api_base": base, "api_key": "x", "cost_usd": 0.001},
        }
        cases = [(f"c{i}", f"q{i}", f"echo: q{i}") for i in range(3)] + [("h", "hang", "x")]
        # One call at a time, in plan order: when the hanging call arrives, the three
        # before it have settled, so what was spent is known exactly.
        spec = write_spec(repo / "s.toml", [model], cases=cases, extra_sweep="concurrency = 1")
        proc = subprocess.Popen(
            [sys.executable, "-m", "kb", "sweep", str(spec), "--observed-at", NIGHT, "--quiet"],
            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not any("hang" in json.dumps(r) for r in list(seen.requests)):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)  # polling the server's log, not synchronizing on time
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)  # a hang guard, not a speed bound
        still_held = not seen.release.is_set()
    assert proc.returncode == 130
    assert err.strip().splitlines() == [
        f"Error: interrupted by {sig.name}: nothing committed, the store is unchanged; "
        "$0.0030 spent on the runs that finished; 1 call was in flight (cut short, possibly "
        "billed by the provider; kb sweep --resume asks it again)"
    ]
    assert "Traceback" not in err and "Warning" not in err and out == ""
    assert still_held  # kb stopped while the server still held the call: cancelled, not awaited
    assert state(repo) == before


# -- 8. what a newcomer tripped over ------------------------------------------------


def test_a_backdated_committing_sweep_is_refused(runner: CliRunner, repo: Path) -> None:
    init(runner)
    spec = write_spec(repo / "s.toml", [scripted_model("m", 2)])
    assert sweep(runner, spec, "--quiet").exit_code == 0
    before = state(repo)
    old = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", "2026-10-15T02:00:00Z")
    assert old.exit_code == 2
    assert "sweep instant: 2026-10-15T02:00:00.000Z is older than 1 live claim" in old.stderr
    assert state(repo) == before
    replay = kb(
        runner,
        "sweep",
        str(spec),
        "--quiet",
        "--no-commit",
        "--observed-at",
        "2026-10-15T02:00:00Z",
    )
    assert replay.exit_code == 0  # an old night may be measured again without committing


def test_note_evidence_keeps_the_colons_of_a_report_id(runner: CliRunner, repo: Path) -> None:
    init(runner)
    result = kb(
        runner, "note", "--model", "a:b", "--task-class", "t", "--polarity", "weakness",
        "--statement", "s", "--approver", "x", "--ruled-out", "prompt",
        "--evidence", "eval:kb-sweep-2026-11-02T02:00:00.000Z#capitals-1,capitals-2",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    stored = json.loads((repo / STORE).read_text())["claims"][0]["evidence"][0]
    assert stored == {
        "kind": "eval",
        "reportId": "kb-sweep-2026-11-02T02:00:00.000Z",
        "caseIds": ["capitals-1", "capitals-2"],
    }


def test_typos_in_model_names_are_refused(runner: CliRunner, repo: Path) -> None:
    init(runner)
    spec = write_spec(repo / "s.toml", [scripted_model("m", 2)])
    assert sweep(runner, spec, "--quiet").exit_code == 0
    before = state(repo)
    typo = kb(runner, "deprecate", "scripted:nonexistent")
    assert typo.exit_code == 2 and "no claim in the store is about 'scripted:nonexistent'" in (
        typo.stderr
    )
    assert kb(runner, "list", "--model", "scripted:m@").exit_code == 2
    assert kb(runner, "list", "--model", "gpt").exit_code == 2
    assert state(repo) == before


def test_show_names_why_a_claim_was_archived(runner: CliRunner, repo: Path) -> None:
    init(runner)
    spec = write_spec(repo / "s.toml", [scripted_model("m", 2)])
    (claim,) = json.loads(sweep(runner, spec, "--quiet", "--json").stdout)["claims"]
    assert kb(runner, "archive", claim["id"], "--reason", "rejected").exit_code == 0
    shown = kb(runner, "show", claim["id"]).stdout
    assert "status active → archived (rejected)" in shown
    again = kb(runner, "archive", claim["id"], "--reason", "rejected")
    assert again.exit_code == 2 and f"claim {claim['id']!r} is already archived" in again.stderr


def test_verify_checks_the_canary_baselines_file(runner: CliRunner, repo: Path) -> None:
    init(runner)
    (repo / "rulvar.models.canary.json").write_text("{broken")
    result = kb(runner, "verify")
    assert result.exit_code == 2 and "rulvar.models.canary.json: not valid JSON" in result.stderr


def test_dry_run_json_shows_every_rendered_prompt(runner: CliRunner, repo: Path) -> None:
    init(runner)
    spec = write_spec(repo / "s.toml", [scripted_model("m", 2)])
    result = sweep(runner, spec, "--dry-run", "--json")
    assert result.exit_code == 0
    plan = json.loads(result.stdout)
    assert len(plan["runs"]) == 10 and plan["refusedRuns"] == 0
    assert plan["runs"][0] == {
        "label": "target:scripted:m/case-00",
        "model": "scripted:m",
        "ceilingUsd": 0.01,
        "messages": [{"role": "user", "content": "Question 0?"}],
    }


def test_a_cell_that_measured_nothing_says_so(runner: CliRunner, repo: Path) -> None:
    init(runner)
    broken = scripted_model("broken", 10, errors=[prompt for _, prompt, _ in CASES])
    spec = write_spec(repo / "s.toml", [broken], extra_sweep="max_retries = 0")
    result = sweep(runner, spec, "--quiet")
    assert "0/10 answered" in result.stdout
    assert "passRate 0.00" not in result.stdout.split("first error")[0]
