"""Batch mode (SPEC 12.5) through real litellm against a loopback files + batches server."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.cli import cli
from kb.engine.budget import SpendEnvelope
from kb.engine.journal import RunJournal, read_journal
from kb.engine.requests import ModelSpec
from kb.engine.scheduler import Engine, EngineConfig
from tests.cli_helpers import unwrapped
from tests.engine_helpers import engine_for, plan, scripted
from tests.fake_batches import BatchSeen, fake_batch_server
from tests.sweep_helpers import loopback_model, responses, scripted_model, write_spec

pytestmark = pytest.mark.usefixtures("initialized_store")

BATCH = EngineConfig(batch=True, batch_poll_s=0.01, batch_poll_max_s=0.02, timeout_s=10.0)
PROMPTS = ["one", "two", "three", "four"]
NIGHT = "2026-11-28T02:00:00Z"
REPORT = "kb-sweep-2026-11-28T02:00:00.000Z"
# gpt-4o-mini in litellm's table: $0.15/$0.60 per Mtok live, $0.075/$0.30 batched;
# the fake counts 5 prompt and 2 completion tokens per answer
LIVE_COST = 5 * 0.15e-6 + 2 * 0.60e-6
BATCH_COST = 5 * 0.075e-6 + 2 * 0.30e-6


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_TEST_KEY", "sk-test-batch")


def openai(base: str, name: str = "gpt-4o-mini") -> ModelSpec:
    return ModelSpec(f"openai:{name}", params={"api_base": base, "api_key_env": "KB_TEST_KEY"})


def test_a_batch_answers_every_run_at_the_batch_price_and_nothing_goes_live() -> None:
    with fake_batch_server() as (base, seen):
        results = Engine.build(BATCH).run(plan(openai(base), PROMPTS), SpendEnvelope(cap=None))
        live = Engine(EngineConfig()).run(plan(openai(base), PROMPTS), SpendEnvelope(cap=None))
    assert [r.output for r in results] == [f"echo: {p}" for p in PROMPTS]  # in plan order
    assert [r.output for r in results] == [r.output for r in live]
    assert all(r.status == "ok" and r.price_source == "litellm" for r in results)
    assert [r.cost_usd for r in results] == pytest.approx([BATCH_COST] * 4)
    assert [r.cost_usd for r in live] == pytest.approx([LIVE_COST] * 4)
    assert seen.calls("POST", "/v1/batches") == 1 and seen.calls("POST", "/v1/files") == 1
    assert seen.calls("POST", "/v1/chat/completions") == 4  # the live engine's, none batched
    (batch,) = seen.batches.values()
    assert batch["status"] == "completed" and batch["request_counts"]["total"] == 4


def test_one_batch_per_model_and_other_providers_run_live() -> None:
    with fake_batch_server() as (base, seen):
        runs = [
            *plan(openai(base, "gpt-4o-mini"), PROMPTS[:2]),
            *plan(scripted("here", responses={"x": "y"}), ["x"]),
            *plan(openai(base, "gpt-4.1-mini"), PROMPTS[2:]),
        ]
        results = Engine.build(BATCH).run(runs, SpendEnvelope(cap=None))
    assert [r.output for r in results] == [
        "echo: one",
        "echo: two",
        "y",
        "echo: three",
        "echo: four",
    ]
    assert seen.calls("POST", "/v1/batches") == 2
    models = sorted(
        {line["body"]["model"] for f in seen.files.values() for line in _lines(f) if "body" in line}
    )
    assert models == ["gpt-4.1-mini", "gpt-4o-mini"]


def test_a_failed_batch_settles_each_run_as_an_error_with_its_reason() -> None:
    with fake_batch_server(BatchSeen(scenario="fail")) as (base, _):
        results = Engine.build(BATCH).run(plan(openai(base), PROMPTS), SpendEnvelope(cap=None))
    assert {r.status for r in results} == {"error"}
    assert all("the batch batch_1 failed: model not batchable" in (r.error or "") for r in results)
    assert all(r.cost_usd == 0 for r in results)


def test_an_expired_batch_keeps_what_it_answered() -> None:
    with fake_batch_server(BatchSeen(scenario="expire", answered=2)) as (base, _):
        results = Engine.build(BATCH).run(plan(openai(base), PROMPTS), SpendEnvelope(cap=None))
    assert [r.status for r in results] == ["ok", "ok", "error", "error"]
    assert results[0].output == "echo: one"
    assert (results[2].error or "").startswith(
        "batch batch_1: expired (its 24 h window) before this request ran ("
    )


def test_partial_results_fail_only_the_rejected_requests() -> None:
    prompts = ["fine", "reject this", "also fine"]
    with fake_batch_server(BatchSeen(scenario="partial")) as (base, _):
        results = Engine.build(BATCH).run(plan(openai(base), prompts), SpendEnvelope(cap=None))
    assert [r.status for r in results] == ["ok", "error", "ok"]
    assert "HTTP 400: this prompt was rejected" in (results[1].error or "")


def test_a_literal_api_key_authenticates_every_batch_call_as_a_live_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sentinel-must-not-be-sent")
    literal = "sk-literal-batch-key-0123"
    with fake_batch_server() as (base, seen):
        spec = ModelSpec("openai:gpt-4o-mini", params={"api_base": base, "api_key": literal})
        results = Engine.build(BATCH).run(plan(spec, PROMPTS), SpendEnvelope(cap=None))
    assert [r.output for r in results] == [f"echo: {p}" for p in PROMPTS], results[0].error
    assert (
        seen.calls("POST", "/v1/batches") == 1 and seen.calls("POST", "/v1/chat/completions") == 0
    )
    # upload, create, every poll and the downloads: the spec's key, never the environment's
    assert set(seen.authorization) == {f"Bearer {literal}"}
    assert all(literal.encode() not in body for _, _, body in seen.requests)  # not in the file


def test_an_unreachable_batch_endpoint_is_an_error_not_a_crash() -> None:
    with fake_batch_server() as (base, _):
        pass  # the server is gone: nothing listens on its port any more
    results = Engine.build(BATCH).run(plan(openai(base), PROMPTS[:1]), SpendEnvelope(cap=None))
    assert results[0].status == "error" and "uploading the batch file" in (results[0].error or "")


def test_a_journaled_batch_is_polled_again_not_sent_again(tmp_path: Path) -> None:
    path = tmp_path / "night.journal.jsonl"
    seen = BatchSeen(polls_to_finish=10**9)  # never finishes while the first engine waits
    with fake_batch_server(seen) as (base, _):
        journal = RunJournal.open(path, "r1", "2026-11-01T02:00:00.000Z", spec="s.toml")
        stopper = engine_for(BATCH, journal=journal)
        stopper.on_batch = lambda state: stopper.cancel() if state.status == "in_progress" else None
        first = stopper.run(plan(openai(base), PROMPTS), SpendEnvelope(cap=None))
        journal.close()
        assert {r.status for r in first} == {"cancelled"}
        state = read_journal(path)
        assert state is not None and list(state.batches.values()) == ["batch_1"]
        seen.polls_to_finish = 0  # the provider finishes the batch while kb was stopped
        results = engine_for(BATCH, settled=state).run(
            plan(openai(base), PROMPTS), SpendEnvelope(cap=None)
        )
    assert [r.output for r in results] == [f"echo: {p}" for p in PROMPTS]
    assert seen.calls("POST", "/v1/batches") == 1  # the same batch, paid once


def test_a_batch_that_ended_is_never_waited_on_again(tmp_path: Path) -> None:
    path = tmp_path / "night.journal.jsonl"
    with fake_batch_server(BatchSeen(scenario="fail")) as (base, seen):
        journal = RunJournal.open(path, "r1", "2026-11-01T02:00:00.000Z", spec="s.toml")
        engine_for(BATCH, journal=journal).run(plan(openai(base), PROMPTS), SpendEnvelope(cap=None))
        journal.close()
        state = read_journal(path)
        assert state is not None and state.batches == {}
        seen.scenario = "complete"
        again = engine_for(BATCH, settled=state).run(
            plan(openai(base), PROMPTS), SpendEnvelope(cap=None)
        )
    assert {r.status for r in again} == {"ok"}
    assert seen.calls("POST", "/v1/batches") == 2  # a new batch for what the failed one lost


def _lines(blob: bytes) -> list[dict[str, object]]:
    import json

    return [json.loads(line) for line in blob.splitlines() if line.strip()]


# -- a sweep in batch mode, through the CLI ---------------------------------------------------


def answers(model: str, prompt: str) -> str:
    """9 of the 10 cases right (a strength), the same live and batched."""
    return responses(9).get(prompt, "a steady answer")


def batch_spec(path: Path, base: str, batch: bool) -> Path:
    return write_spec(
        path,
        [loopback_model("openai:gpt-4o-mini", base), scripted_model("here", 9)],
        extra_sweep=f"batch = {'true' if batch else 'false'}\nbatch_poll_s = 0.01",
    )


def costless(value: Any) -> Any:
    """A report or claim without what batching changes on purpose: costs, timings, the
    batch that answered."""
    if isinstance(value, dict):
        return {
            k: costless(v)
            for k, v in value.items()
            if "cost" not in k.lower()
            and "spent" not in k.lower()
            and k not in ("latencyMs", "priceSource", "batch")
        }
    if isinstance(value, list):
        return [costless(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"cost \$[0-9.]+", "cost $…", value)
    return value


def test_a_batched_sweep_claims_and_reports_what_a_live_sweep_does(
    runner: CliRunner, isolated: Path
) -> None:
    with fake_batch_server(BatchSeen(answer=answers)) as (base, seen):
        found = {}
        for batch in (False, True):
            spec = batch_spec(isolated / f"s-{batch}.toml", base, batch)
            result = runner.invoke(
                cli,
                ["sweep", str(spec), "--json", "--quiet", "--no-commit", "--observed-at", NIGHT],
            )
            assert result.exit_code == 0, result.stderr
            found[batch] = json.loads(result.stdout)
    live, batched = found[False], found[True]
    assert seen.calls("POST", "/v1/batches") == 1  # the batched night's 10 target runs
    assert seen.calls("POST", "/v1/chat/completions") == 10  # the live night's, no more
    assert len(live["claims"]) == 2  # a strength of each model
    assert [c["statement"] for c in batched["claims"]] == [c["statement"] for c in live["claims"]]
    assert costless(batched) == costless(live)
    cost = {
        b: next(c for c in r["cells"] if c["model"] == "openai:gpt-4o-mini")
        for b, r in found.items()
    }
    assert cost[True]["totalCostUsd"] == pytest.approx(cost[False]["totalCostUsd"] / 2)
    scripted_cells = [c for c in batched["cells"] if c["model"] == "scripted:here"]
    assert scripted_cells[0]["passRate"] == 0.9  # the provider with no batch API ran live


def test_a_failed_batch_leaves_its_cell_incomplete_and_the_store_as_it_was(
    runner: CliRunner, isolated: Path
) -> None:
    store = isolated / "rulvar.models.json"
    before = store.read_bytes()
    with fake_batch_server(BatchSeen(scenario="fail", answer=answers)) as (base, _):
        spec = batch_spec(isolated / "s.toml", base, True)
        result = runner.invoke(cli, ["sweep", str(spec), "--quiet", "--observed-at", NIGHT])
    assert result.exit_code == 1
    assert "openai:gpt-4o-mini extraction" in result.stderr
    assert "the batch batch_1 failed: model not batchable" in result.stderr
    report = json.loads(runner.invoke(cli, ["report", REPORT, "--json"]).stdout)
    (cell,) = [c for c in report["cells"] if c["model"] == "openai:gpt-4o-mini"]
    assert cell["outcome"] == "incomplete"
    committed = json.loads(store.read_text())
    assert [c["subject"]["model"] for c in committed["claims"]] == ["scripted:here"]  # not openai
    assert before != store.read_bytes()  # the complete cell was committed, the batch's was not


def test_an_interrupted_batched_sweep_resumes_the_same_batch(repo: Path) -> None:
    import signal
    import subprocess
    import sys

    seen = BatchSeen(answer=answers, polls_to_finish=10**9)
    with fake_batch_server(seen) as (base, _):
        spec = batch_spec(repo / "s.toml", base, True)
        night = [sys.executable, "-m", "kb", "sweep", str(spec), "--quiet", "--observed-at", NIGHT]
        env = {**os.environ, "KB_TEST_KEY": "sk-test-batch"}
        proc = subprocess.Popen(night, cwd=repo, env=env, stderr=subprocess.PIPE, text=True)
        assert seen.polled.wait(120), "the sweep never polled its batch"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        # the provider bills an open batch: the stop says so, and so does a restart
        assert "batch batch_1 is still open at the provider" in err
        assert "kb sweep --resume collects it" in err
        journal = read_journal(repo / "kb-evidence" / f"{REPORT}.journal.jsonl")
        assert journal is not None and list(journal.batches.values()) == ["batch_1"]
        dry = subprocess.run(
            [*night, "--dry-run"], cwd=repo, env=env, capture_output=True, text=True
        )
        assert "left batch batch_1 open at the provider" in " ".join(dry.stderr.split())
        # the next night, run without --resume, is told too: its plain sweep would pay a
        # second batch while the first is billed
        later = [*night[:-1], "2026-11-29T02:00:00Z", "--dry-run"]
        told = subprocess.run(later, cwd=repo, env=env, capture_output=True, text=True)
        assert f"the stopped night {REPORT} left batch batch_1 open at the provider" in " ".join(
            told.stderr.split()
        ), told.stderr
        seen.polls_to_finish = 0  # the provider finished it while kb was stopped
        resumed = subprocess.run(
            [*night, "--resume"], cwd=repo, env=env, capture_output=True, text=True
        )
    assert resumed.returncode == 0, resumed.stderr
    assert seen.calls("POST", "/v1/batches") == 1 and seen.calls("POST", "/v1/files") == 1
    store = json.loads((repo / "rulvar.models.json").read_text())
    assert {c["subject"]["model"] for c in store["claims"]} == {
        "openai:gpt-4o-mini",
        "scripted:here",
    }


def test_the_dry_run_says_which_runs_go_as_batches(runner: CliRunner, isolated: Path) -> None:
    spec = batch_spec(isolated / "s.toml", "http://127.0.0.1:9/v1", True)
    result = runner.invoke(cli, ["sweep", str(spec), "--dry-run", "--observed-at", NIGHT])
    assert result.exit_code == 0, result.stderr
    said = unwrapped(result.stdout)
    assert "batch mode: 10 of the 20 target runs go through the provider's batch API" in said
    assert "judges" not in said  # this night has no judge to send
    live = runner.invoke(
        cli, ["sweep", str(spec), "--dry-run", "--no-batch", "--observed-at", NIGHT]
    )
    assert "batch mode" not in live.stdout


def test_batch_settings_in_the_spec_are_checked(runner: CliRunner, isolated: Path) -> None:
    spec = batch_spec(isolated / "s.toml", "http://127.0.0.1:9/v1", True)
    spec.write_text(spec.read_text().replace("batch = true", 'batch = "yes"'))
    result = runner.invoke(cli, ["sweep", str(spec), "--dry-run"])
    assert result.exit_code == 2 and "sweep.batch" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_canary_probes_stay_live_in_batch_mode() -> None:
    from kb.engine.requests import build_request
    from kb.engine.scheduler import PlannedRun

    with fake_batch_server() as (base, seen):
        spec = openai(base)
        probe = PlannedRun("canary:p", "canary", spec, build_request(spec, "Ping?"))
        (result,) = Engine.build(BATCH).run([probe], SpendEnvelope(cap=None))
    assert result.output == "echo: Ping?"
    assert seen.calls("POST", "/v1/chat/completions") == 1 and seen.batches == {}


def test_a_replay_says_batch_mode_is_off(runner: CliRunner, isolated: Path) -> None:
    with fake_batch_server(BatchSeen(answer=answers)) as (base, _):
        spec = batch_spec(isolated / "s.toml", base, False)
        record = ["sweep", str(spec), "--no-commit", "--quiet", "--observed-at", NIGHT]
        assert runner.invoke(cli, [*record, "--record", "c.jsonl"]).exit_code == 0
    replay = ["sweep", str(spec), "--no-commit", "--batch", "--replay", "c.jsonl"]
    result = runner.invoke(cli, [*replay, "--observed-at", NIGHT])
    assert result.exit_code == 0, result.stderr
    assert "batch mode: off for --replay (no provider is called)" in result.stdout
    assert "go through the provider's batch API" not in result.stdout


def test_each_batched_runs_evidence_names_its_batch(runner: CliRunner, isolated: Path) -> None:
    with fake_batch_server(BatchSeen(answer=answers)) as (base, _):
        spec = batch_spec(isolated / "s.toml", base, True)
        result = runner.invoke(cli, ["sweep", str(spec), "--quiet", "--observed-at", NIGHT])
    assert result.exit_code == 0, result.stderr
    # half the declared $1/$2 per Mtok on 5 + 2 tokens, ten times
    said = "batched: 10 runs in 1 batch (batch_1), 10 answered; $0.000045 at the batch price"
    assert said in unwrapped(result.stdout)
    lines = (isolated / "kb-evidence" / f"{REPORT}.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    targets = [r for r in records if r["kind"] == "target"]
    assert {r["batch"] for r in targets if r["model"] == "openai:gpt-4o-mini"} == {"batch_1"}
    assert all("batch" not in r for r in records if r["model"] == "scripted:here")  # live
    site = isolated / "public"
    built = runner.invoke(cli, ["--as-of", "2026-11-28T03:00:00Z", "site", str(site)])
    assert built.exit_code == 0, built.stderr
    night = "".join(p.read_text() for p in site.glob("*.html") if REPORT[9:19] in p.name)
    assert night.count("batch batch_1") == 10  # beside each batched answer's cost


def test_a_journaled_batched_run_keeps_its_batch_when_reused(tmp_path: Path) -> None:
    path = tmp_path / "night.journal.jsonl"
    with fake_batch_server() as (base, _):
        journal = RunJournal.open(path, "r1", "2026-11-01T02:00:00.000Z", spec="s.toml")
        first = engine_for(BATCH, journal=journal).run(
            plan(openai(base), PROMPTS), SpendEnvelope(None)
        )
        journal.close()
    assert {r.batch_id for r in first} == {"batch_1"}
    state = read_journal(path)
    assert state is not None
    reused = [state.reusable(r.label, r.request.key) for r in first if r.request is not None]
    assert [r.batch_id for r in reused if r is not None] == ["batch_1"] * 4


def test_a_live_run_names_no_batch() -> None:
    with fake_batch_server() as (base, _):
        (live,) = Engine(EngineConfig()).run(plan(openai(base), ["one"]), SpendEnvelope(None))
    assert live.status == "ok" and live.batch_id is None


def test_the_dry_run_json_counts_the_batched_runs(runner: CliRunner, isolated: Path) -> None:
    spec = batch_spec(isolated / "s.toml", "http://127.0.0.1:9/v1", True)
    dry = ["sweep", str(spec), "--dry-run", "--json", "--observed-at", NIGHT]
    planned = json.loads(runner.invoke(cli, dry).stdout)
    assert planned["batch"] == {"targetRuns": 20, "batched": 10, "live": 10, "reused": 0}
    assert json.loads(runner.invoke(cli, [*dry, "--no-batch"]).stdout)["batch"] is None


def test_a_poll_interval_without_batch_mode_is_told(runner: CliRunner, isolated: Path) -> None:
    spec = batch_spec(isolated / "s.toml", "http://127.0.0.1:9/v1", False)  # batch_poll_s set
    told = "warning: [sweep] batch_poll_s has no effect: batch mode is off"
    off = runner.invoke(cli, ["sweep", str(spec), "--dry-run", "--observed-at", NIGHT])
    assert off.exit_code == 0 and told in unwrapped(off.stderr)
    on = runner.invoke(cli, ["sweep", str(spec), "--dry-run", "--batch", "--observed-at", NIGHT])
    assert on.exit_code == 0 and "batch_poll_s" not in on.stderr
    batching = batch_spec(isolated / "b.toml", "http://127.0.0.1:9/v1", True)
    tonight_off = ["sweep", str(batching), "--dry-run", "--no-batch", "--observed-at", NIGHT]
    chosen = runner.invoke(cli, tonight_off)  # the spec batches; this night the user said no
    assert chosen.exit_code == 0 and "batch_poll_s" not in chosen.stderr


def test_a_long_batch_id_wraps_on_the_night_page_at_both_widths(
    runner: CliRunner, isolated: Path
) -> None:
    from tests.test_html_report import chromium

    long_id = "batch_" + "6743f0a2b1c94e5d8f7a" * 3  # longer than OpenAI's 38 characters
    seen = BatchSeen(scenario="fail", answer=answers, id_prefix=long_id)
    with fake_batch_server(seen) as (base, _):
        spec = batch_spec(isolated / "s.toml", base, True)
        runner.invoke(cli, ["sweep", str(spec), "--quiet", "--observed-at", NIGHT])
    site = isolated / "public"
    built = runner.invoke(cli, ["--as-of", "2026-11-28T03:00:00Z", "site", str(site)])
    assert built.exit_code == 0, built.stderr
    (night,) = [p for p in site.glob("*.html") if REPORT[9:19] in p.name]
    text = night.read_text()
    assert f"batch {long_id}1" in text  # beside the cost and in the error
    # the failed cell says why, never a bare 0.00
    assert '<td class="cell incomplete"><div class="rate muted">no result</div>' in text
    assert re.search(r'<div class="why">[^<]+</div>', text)  # its cause in words
    assert "0.00 n=0" not in text
    with chromium() as browser:
        for width in (1280, 390):
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(night.as_uri())
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            overflowing = page.eval_on_selector_all(
                ".scroll",
                "els => els.filter(e => e.scrollWidth > e.clientWidth + 1).length",
            )
            assert overflowing == 0, f"a case table scrolls sideways at {width} px"
            cost = page.eval_on_selector_all(
                "td[data-label=cost]", "els => Math.max(...els.map(e => e.offsetWidth))"
            )
            assert cost <= (width if width < 640 else 200), (width, cost)
            page.screenshot(path=str(isolated / f"night-{width}.png"), full_page=True)


def test_the_batch_line_of_a_resumed_night_counts_what_is_still_to_send() -> None:
    from kb.engine.batch import BatchForecast

    line = BatchForecast(asked=1, batched=1, reused=1, judged=True).text
    assert line == (
        "batch mode: the 1 target run still to send goes through the provider's batch API "
        "at the batch price (OpenAI and Anthropic models) (1 more served from the journal); "
        "judges of those models likewise"
    )
    assert BatchForecast(3, 1, 0).text == (
        "batch mode: 1 of the 3 target runs go through the provider's batch API at the batch "
        "price (OpenAI and Anthropic models), the others run live (at the live price)"
    )
    assert BatchForecast(2, 0, 0).text.endswith("every run is live")


def test_a_result_line_nested_too_deep_is_a_request_the_batch_did_not_answer() -> None:
    from kb.engine.batch import read_results

    answered = {
        "custom_id": "kb-0",
        "response": {
            "status_code": 200,
            "body": {"choices": [{"message": {"content": "fine"}}], "usage": {}},
        },
    }
    output = (json.dumps(answered) + "\n" + "[" * 3000 + "]" * 3000 + "\n").encode()
    found = read_results(output, None)
    assert list(found) == ["kb-0"] and found["kb-0"].text == "fine"


def test_a_reply_with_a_unicode_line_separator_is_one_answer() -> None:
    from kb.engine.batch import read_results

    said = "one\u2028two\x85three"
    answered = {
        "custom_id": "kb-0",
        "response": {"status_code": 200, "body": {"choices": [{"message": {"content": said}}]}},
    }
    found = read_results((json.dumps(answered, ensure_ascii=False) + "\n").encode(), None)
    assert found["kb-0"].text == said
