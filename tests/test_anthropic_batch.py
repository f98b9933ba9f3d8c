"""Anthropic Message Batches (SPEC 13.5) against a loopback fake of Anthropic's HTTP API.

The live runs these are compared with go through real litellm to the same
server's ``/v1/messages``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from kb.cli import cli
from kb.engine.budget import SpendEnvelope
from kb.engine.journal import RunJournal, read_journal
from kb.engine.requests import ModelSpec, build_request
from kb.engine.runs import PlannedRun
from kb.engine.scheduler import Engine, EngineConfig
from kb.engine.transports.anthropic_batch import (
    AnthropicBatchTransport,
    batch_state,
    message_params,
    read_results,
)
from kb.engine.transports.live import LiveTransport
from tests.engine_helpers import engine_for, plan
from tests.fake_anthropic_batches import AnthropicSeen, fake_anthropic_server
from tests.sweep_helpers import responses, scripted_model, write_spec

pytestmark = pytest.mark.usefixtures("initialized_store")

BATCH = EngineConfig(batch=True, batch_poll_s=0.01, batch_poll_max_s=0.02, timeout_s=10.0)
PROMPTS = ["one", "two", "three", "four"]
KEY = "sk-ant-test-batch-key"
# a declared list price of $3 / $15 per Mtok; the fake counts 5 input and 2 output tokens
LIVE_COST = 5 * 3e-6 + 2 * 15e-6
NIGHT = "2026-11-28T02:00:00Z"


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_TEST_KEY", KEY)


def claude(base: str, **params: Any) -> ModelSpec:
    return ModelSpec(
        "anthropic:claude-sonnet-test",
        params={
            "api_base": base,
            "api_key_env": "KB_TEST_KEY",
            "price": {"input_per_mtok": 3.0, "output_per_mtok": 15.0},
            **params,
        },
    )


def test_a_message_batch_answers_every_run_as_live_calls_do_at_half_the_price() -> None:
    with fake_anthropic_server() as (base, seen):
        results = Engine.build(BATCH).run(plan(claude(base), PROMPTS), SpendEnvelope(cap=None))
        live = Engine(EngineConfig()).run(plan(claude(base), PROMPTS), SpendEnvelope(cap=None))
    assert [r.output for r in live] == [f"echo: {p}" for p in PROMPTS]  # real litellm, live
    assert [r.output for r in results] == [r.output for r in live]  # in plan order
    assert all(r.status == "ok" and r.price_source == "declared" for r in results)
    assert [r.cost_usd for r in live] == pytest.approx([LIVE_COST] * 4)
    assert [r.cost_usd for r in results] == pytest.approx([LIVE_COST / 2] * 4)
    assert {r.batch_id for r in results} == {"msgbatch_1"}
    assert seen.calls("POST", "/v1/messages/batches") == 1
    assert seen.calls("POST", "/v1/messages") == 4  # the live engine's, none batched
    assert seen.calls("GET", r"/v1/messages/batches/msgbatch_1/results") == 1
    assert seen.batches["msgbatch_1"]["request_counts"]["succeeded"] == 4


def test_the_batch_request_is_the_messages_api_body_and_the_key_only_a_header() -> None:
    with fake_anthropic_server() as (base, seen):
        # seed is not a Messages API param: left out, as litellm drops it
        spec = claude(base, temperature=0.2, stop="END", seed=7)
        run = PlannedRun(
            "target:x/0", "target", spec, build_request(spec, "hello", system="be brief")
        )
        (result,) = Engine.build(BATCH).run([run], SpendEnvelope(cap=None))
        Engine(EngineConfig()).run([run], SpendEnvelope(cap=None))  # the same run, live
    assert result.output == "echo: hello"
    live = json.loads(next(body for m, p, body in seen.requests if p == "/v1/messages"))
    (request,) = seen.inputs["msgbatch_1"]
    assert request["params"]["max_tokens"] == live["max_tokens"]  # litellm's default, as live
    assert request == {
        "custom_id": "kb-0",
        "params": {
            "model": "claude-sonnet-test",
            "max_tokens": live["max_tokens"],
            "messages": [{"role": "user", "content": "hello"}],
            "system": "be brief",
            "temperature": 0.2,
            "stop_sequences": ["END"],
        },
    }
    assert set(seen.keys) == {KEY}  # create, every poll, the results
    assert all(KEY.encode() not in body for _, _, body in seen.requests)


def test_errored_and_expired_requests_settle_as_errors_with_their_reason() -> None:
    prompts = ["one", "reject this", "three", "four"]
    with fake_anthropic_server(AnthropicSeen(scenario="expire", answered=3)) as (base, _):
        results = Engine.build(BATCH).run(plan(claude(base), prompts), SpendEnvelope(cap=None))
    assert [r.status for r in results] == ["ok", "error", "ok", "error"]
    assert results[1].error == (
        "batch msgbatch_1: the batch did not answer it (invalid_request_error: prompt rejected)"
    )
    assert results[3].error == (
        "batch msgbatch_1: expired (its 24 h window) before this request ran"
    )
    assert results[1].cost_usd == 0 and results[3].cost_usd == 0  # not debited


def test_a_batch_cancelled_at_the_provider_keeps_what_it_answered(tmp_path: Path) -> None:
    seen = AnthropicSeen(polls_to_finish=10**9, answered=2)
    path = tmp_path / "night.journal.jsonl"

    def cancel_at_first_poll(state: Any) -> None:
        if state.status == "in_progress" and not seen.batches[state.batch_id].get(
            "cancel_initiated_at"
        ):
            httpx.post(
                f"{base}/v1/messages/batches/{state.batch_id}/cancel",
                headers={"anthropic-version": "2023-06-01"},
            )

    with fake_anthropic_server(seen) as (base, _):
        journal = RunJournal.open(path, "r1", "2026-11-01T02:00:00.000Z", spec="s.toml")
        engine = engine_for(BATCH, journal=journal)
        engine.on_batch = cancel_at_first_poll
        results = engine.run(plan(claude(base), PROMPTS), SpendEnvelope(cap=None))
        journal.close()
    assert [r.status for r in results] == ["ok", "ok", "error", "error"]
    assert results[2].error == "batch msgbatch_1: cancelled before this request ran"
    state = read_journal(path)
    assert state is not None and state.batches == {}  # ended: never waited on again


def test_a_journaled_batch_is_polled_again_not_sent_again(tmp_path: Path) -> None:
    path = tmp_path / "night.journal.jsonl"
    seen = AnthropicSeen(polls_to_finish=10**9)  # never ends while the first engine waits
    with fake_anthropic_server(seen) as (base, _):
        journal = RunJournal.open(path, "r1", "2026-11-01T02:00:00.000Z", spec="s.toml")
        stopper = engine_for(BATCH, journal=journal)
        stopper.on_batch = lambda state: stopper.cancel() if state.status == "in_progress" else None
        first = stopper.run(plan(claude(base), PROMPTS), SpendEnvelope(cap=None))
        journal.close()
        assert {r.status for r in first} == {"cancelled"}
        state = read_journal(path)
        assert state is not None and list(state.batches.values()) == ["msgbatch_1"]
        assert seen.calls("POST", r"/v1/messages/batches/.*/cancel") == 0  # left to resume
        seen.polls_to_finish = 0  # Anthropic finished it while kb was stopped
        results = engine_for(BATCH, settled=state).run(
            plan(claude(base), PROMPTS), SpendEnvelope(cap=None)
        )
    assert [r.output for r in results] == [f"echo: {p}" for p in PROMPTS]
    assert seen.calls("POST", "/v1/messages/batches") == 1  # the same batch, paid once


class RefusingJournal:
    """A phase whose journal cannot note the batch (a full disk)."""

    stopped = False

    def __init__(self) -> None:
        self.ended: list[tuple[str, str]] = []

    def batch_for(self, members: str) -> str | None:
        return None

    def note_batch(self, members: str, batch_id: str) -> bool:
        return False

    def note_batch_end(self, batch_id: str, status: str) -> None:
        self.ended.append((batch_id, status))

    def opened(self, batch_id: str) -> None:
        pass

    def closed(self, batch_id: str) -> None:
        pass


def test_a_batch_the_journal_could_not_note_is_cancelled_at_once() -> None:
    with fake_anthropic_server(AnthropicSeen(polls_to_finish=10**9)) as (base, seen):
        transport = AnthropicBatchTransport(LiveTransport(), 0.01, 0.02)
        results = asyncio.run(
            transport.settle(plan(claude(base), PROMPTS), RefusingJournal(), None)
        )
    assert {r.status for r in results} == {"cancelled"}
    assert seen.calls("POST", "/v1/messages/batches/msgbatch_1/cancel") == 1
    assert seen.batches["msgbatch_1"]["processing_status"] == "canceling"


def test_a_results_url_on_another_host_is_not_sent_the_key() -> None:
    seen = AnthropicSeen(results_host="http://127.0.0.2:9")  # nothing listens there
    with fake_anthropic_server(seen) as (base, _):
        results = Engine.build(BATCH).run(plan(claude(base), PROMPTS), SpendEnvelope(cap=None))
    assert [r.output for r in results] == [f"echo: {p}" for p in PROMPTS]
    assert seen.calls("GET", "/v1/messages/batches/msgbatch_1/results") == 1  # its own path


def test_a_refused_key_is_an_error_that_never_shows_the_key() -> None:
    with fake_anthropic_server() as (base, _):
        spec = claude(base, api_key_env="KB_BAD_KEY")
        with pytest.MonkeyPatch.context() as env:
            env.setenv("KB_BAD_KEY", "sk-ant-refused-key")
            results = Engine.build(BATCH).run(plan(spec, PROMPTS[:1]), SpendEnvelope(cap=None))
    (result,) = results
    assert result.status == "error"
    assert result.error == "creating the batch: HTTP 401: invalid x-api-key: ***"


def test_an_unreachable_endpoint_is_an_error_not_a_crash() -> None:
    with fake_anthropic_server() as (base, _):
        pass  # the server is gone
    (result,) = Engine.build(BATCH).run(plan(claude(base), PROMPTS[:1]), SpendEnvelope(cap=None))
    assert result.status == "error" and (result.error or "").startswith("creating the batch: ")


def test_polls_that_fail_for_a_moment_are_tried_again() -> None:
    seen = AnthropicSeen(polls_to_finish=3, flaky_polls=2)
    with fake_anthropic_server(seen) as (base, _):
        results = Engine.build(BATCH).run(plan(claude(base), PROMPTS), SpendEnvelope(cap=None))
    assert {r.status for r in results} == {"ok"}


def test_results_lines_that_cannot_be_read_are_runs_without_an_answer() -> None:
    good = {
        "custom_id": "kb-0",
        "result": {
            "type": "succeeded",
            "message": {
                "content": [
                    {"type": "text", "text": "a"},
                    {"type": "tool_use"},
                    {"type": "text", "text": "b"},
                ],
                "usage": {"input_tokens": 3, "output_tokens": 1},
            },
        },
    }
    blob = "\n".join(
        [json.dumps(good), "{not json", json.dumps({"custom_id": "kb-1"}), "[" * 100_000, ""]
    ).encode()
    found = read_results(blob)
    assert list(found) == ["kb-0"] and found["kb-0"].text == "ab"
    assert (found["kb-0"].usage.prompt_tokens, found["kb-0"].usage.completion_tokens) == (3, 1)


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        ({"processing_status": "in_progress"}, "in_progress"),
        ({"processing_status": "canceling"}, "canceling"),
        ({"processing_status": "ended", "request_counts": {"succeeded": 1}}, "completed"),
        ({"processing_status": "ended", "request_counts": {"expired": 2}}, "expired"),
        ({"processing_status": "ended", "cancel_initiated_at": "t"}, "cancelled"),
    ],
)
def test_how_a_batch_ended_is_read_from_its_counts(raw: dict[str, Any], status: str) -> None:
    assert batch_state({"id": "b", **raw}).status == status


def test_a_stop_param_list_and_system_messages_map_to_the_messages_api() -> None:
    spec = ModelSpec("anthropic:claude-x", params={"stop": ["a", "b"], "max_tokens": 64})
    request = build_request(spec, "q", system="s")
    params = message_params("kb-3", request, 4096)["params"]
    assert params["stop_sequences"] == ["a", "b"] and params["max_tokens"] == 64
    assert params["system"] == "s" and params["messages"] == [{"role": "user", "content": "q"}]


def test_a_batched_sweep_claims_what_a_live_sweep_does(runner: CliRunner, isolated: Path) -> None:
    def answers(model: str, prompt: str) -> str:
        return responses(9).get(prompt, "a steady answer")

    with fake_anthropic_server(AnthropicSeen(answer=answers)) as (base, seen):
        found = {}
        for batch in (False, True):
            model = {"model": "anthropic:claude-sonnet-test", "params": claude(base).params}
            spec = write_spec(
                isolated / f"s-{batch}.toml",
                [model, scripted_model("here", 9)],
                extra_sweep=f"batch = {'true' if batch else 'false'}\nbatch_poll_s = 0.01",
            )
            night = ["sweep", str(spec), "--json", "--quiet", "--no-commit", "--observed-at", NIGHT]
            result = runner.invoke(cli, night)
            assert result.exit_code == 0, result.stderr
            found[batch] = json.loads(result.stdout)
        dry = runner.invoke(cli, ["sweep", str(spec), "--dry-run", "--observed-at", NIGHT])
    assert seen.calls("POST", "/v1/messages/batches") == 1
    assert seen.calls("POST", "/v1/messages") == 10  # the live night's only
    live, batched = found[False], found[True]
    assert [c["statement"] for c in batched["claims"]] == [c["statement"] for c in live["claims"]]
    assert len(live["claims"]) == 2
    cost = {
        b: next(c for c in r["cells"] if c["model"] == "anthropic:claude-sonnet-test")
        for b, r in found.items()
    }
    assert cost[True]["totalCostUsd"] == pytest.approx(cost[False]["totalCostUsd"] / 2)
    assert "10 of the 20 target runs go through the provider's batch API" in " ".join(
        dry.stdout.split()
    )


# -- a hostile or broken provider (found by an attack on this transport) -----------------------


def test_a_key_quoted_in_an_errored_result_never_reaches_the_runs_error() -> None:
    def quote_key(rows: list[dict[str, Any]]) -> list[Any]:
        rows[0]["result"] = {
            "type": "errored",
            "error": {
                "type": "error",
                "error": {"type": "authentication_error", "message": f"key {KEY} rejected"},
            },
        }
        return rows

    with fake_anthropic_server(AnthropicSeen(result_rows=quote_key)) as (base, _):
        results = Engine.build(BATCH).run(plan(claude(base), PROMPTS[:2]), SpendEnvelope(cap=None))
    assert results[0].status == "error" and KEY not in (results[0].error or "")
    assert "authentication_error: key *** rejected" in (results[0].error or "")
    assert results[1].status == "ok"


@pytest.mark.parametrize(
    "reply",
    [
        lambda batch: {"processing_status": "ended"},  # no id: a proxy's page
        lambda batch: {**batch, "request_counts": {"succeeded": "many"}},
        lambda batch: ["not", "an", "object"],
    ],
)
def test_a_poll_reply_that_is_not_a_batch_is_an_error_and_the_batch_is_kept(
    reply: Any, tmp_path: Path
) -> None:
    path = tmp_path / "night.journal.jsonl"
    with fake_anthropic_server(AnthropicSeen(poll_reply=reply)) as (base, seen):
        journal = RunJournal.open(path, "r1", "2026-11-01T02:00:00.000Z", spec="s.toml")
        results = engine_for(BATCH, journal=journal).run(
            plan(claude(base), PROMPTS[:2]), SpendEnvelope(cap=None)
        )
        journal.close()
    assert {r.status for r in results} == {"error"}
    assert all((r.error or "").startswith("polling the batch") for r in results)
    assert seen.calls("GET", "/v1/messages/batches/msgbatch_1") == 4  # tried again, then said
    state = read_journal(path)
    assert state is not None and list(state.batches.values()) == ["msgbatch_1"]  # resumable


def test_a_poll_that_describes_another_batch_is_not_believed() -> None:
    other = AnthropicSeen(poll_reply=lambda batch: {**batch, "id": "msgbatch_OTHER"})
    with fake_anthropic_server(other) as (base, seen):
        results = Engine.build(BATCH).run(plan(claude(base), PROMPTS[:1]), SpendEnvelope(cap=None))
    assert results[0].error == "polling the batch msgbatch_1: the reply describes another batch"
    assert seen.calls("GET", r".*/results") == 0


@pytest.mark.parametrize("batch_id", ["../../v1/other?x=1", "msgbatch_[/x]", "msg batch", "a/b"])
def test_a_batch_id_kb_cannot_put_in_a_url_is_refused(batch_id: str) -> None:
    with fake_anthropic_server(AnthropicSeen(batch_id=batch_id)) as (base, seen):
        (result,) = Engine.build(BATCH).run(plan(claude(base), ["one"]), SpendEnvelope(cap=None))
    assert result.error == "creating the batch: the reply names no batch id kb can use"
    assert [(m, p) for m, p, _ in seen.requests] == [("POST", "/v1/messages/batches")]


def test_a_status_anthropic_never_documented_is_polled_again_not_taken_as_the_end(
    tmp_path: Path,
) -> None:
    said = iter(["validating", "validating"])

    def unknown_then_real(batch: dict[str, Any]) -> dict[str, Any]:
        return {**batch, "processing_status": next(said, batch["processing_status"])}

    seen = AnthropicSeen(poll_reply=unknown_then_real, polls_to_finish=2)
    with fake_anthropic_server(seen) as (base, _):
        results = Engine.build(BATCH).run(plan(claude(base), PROMPTS), SpendEnvelope(cap=None))
    assert [r.output for r in results] == [f"echo: {p}" for p in PROMPTS]


def test_result_lines_with_impossible_usage_or_twice_the_same_id() -> None:
    def hostile(rows: list[dict[str, Any]]) -> list[Any]:
        rows[0]["result"]["message"]["usage"]["input_tokens"] = -3000
        rows[1]["result"]["message"]["usage"]["input_tokens"] = "Infinity"
        infinite = json.dumps(rows[1]).replace('"Infinity"', "Infinity")
        duplicate = {**rows[2], "result": {"type": "canceled"}}
        return [rows[0], infinite, rows[2], duplicate, rows[3]]

    with fake_anthropic_server(AnthropicSeen(result_rows=hostile)) as (base, _):
        results = Engine.build(BATCH).run(plan(claude(base), PROMPTS), SpendEnvelope(cap=None))
    assert results[0].status == "ok" and results[0].cost_usd >= 0  # no negative debit
    assert results[0].usage.prompt_tokens == 0
    assert results[1].status == "error"  # an unreadable line: no answer, never a crash
    assert results[2].output == "echo: three"  # the first line of an id is the one kept


def test_an_effort_model_stays_live_its_thinking_a_batch_would_drop() -> None:
    with fake_anthropic_server() as (base, seen):
        spec = ModelSpec("anthropic:claude-sonnet-test", effort="high", params=claude(base).params)
        runs = [PlannedRun("target:x/0", "target", spec, build_request(spec, "one"))]
        transport = AnthropicBatchTransport(LiveTransport(), 0.01, 0.02)
        assert not transport.accepts(runs[0])
        assert not transport.accepts(
            PlannedRun("t", "target", claude(base, tools=[]), build_request(claude(base), "x"))
        )
    assert seen.requests == []


def test_models_on_two_keys_never_share_a_batch() -> None:
    with fake_anthropic_server() as (base, seen):
        first = claude(base)
        second = claude(base, api_key_env="KB_OTHER_KEY")
        with pytest.MonkeyPatch.context() as env:
            env.setenv("KB_OTHER_KEY", "sk-ant-other-key-0000")
            runs = plan(first, ["one"]) + [
                PlannedRun("target:second/0", "target", second, build_request(second, "two"))
            ]
            results = Engine.build(BATCH).run(runs, SpendEnvelope(cap=None))
    assert [r.output for r in results] == ["echo: one", "echo: two"]
    assert seen.calls("POST", "/v1/messages/batches") == 2
    assert {k for k in seen.keys} == {KEY, "sk-ant-other-key-0000"}


def test_an_ended_batch_without_a_results_url_is_read_at_its_documented_path() -> None:
    seen = AnthropicSeen(poll_reply=lambda batch: {**batch, "results_url": None})
    with fake_anthropic_server(seen) as (base, _):
        results = Engine.build(BATCH).run(plan(claude(base), PROMPTS), SpendEnvelope(cap=None))
    assert [r.output for r in results] == [f"echo: {p}" for p in PROMPTS]
    assert seen.calls("GET", "/v1/messages/batches/msgbatch_1/results") == 1
