"""The scripted provider, through the real engine and litellm's custom-provider path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kb.engine.budget import SpendEnvelope
from kb.engine.providers.scripted import ScriptedFault, ScriptedModel
from kb.engine.scheduler import Engine
from kb.errors import ConfigError
from tests.engine_helpers import FAST, plan, scripted


def run(spec, prompts, ceiling=None, envelope=None):  # type: ignore[no-untyped-def]
    return Engine(FAST).run(plan(spec, prompts, ceiling), envelope or SpendEnvelope(cap=None))


def test_responses_default_and_usage() -> None:
    spec = scripted(responses={"q": "the answer is 4"}, default="no idea", cost_usd=0.002)
    ok, unknown = run(spec, ["q", "something else entirely"])
    assert (ok.status, ok.output, ok.cost_usd) == ("ok", "the answer is 4", 0.002)
    assert ok.usage.prompt_tokens == 1 and ok.usage.completion_tokens == 4
    assert unknown.output == "no idea"


def test_no_params_replies_empty_to_everything() -> None:
    (result,) = run(scripted("bare"), ["anything"])
    assert result.status == "ok" and result.output == "" and result.cost_usd == 0.0


def test_list_replies_follow_plan_order_occurrences() -> None:
    spec = scripted(responses={"q": ["red", "blue"]})
    assert [r.output for r in run(spec, ["q", "q", "q"])] == ["red", "blue", "red"]


def test_script_file_and_params_override_it(isolated: Path) -> None:
    script = isolated / "script.json"
    script.write_text(json.dumps({"responses": {"a": "from file"}, "default": "file default"}))
    spec = scripted(script=str(script), default="param default")
    assert [r.output for r in run(spec, ["a", "b"])] == ["from file", "param default"]


def test_errors_and_timeouts_settle_error_after_kb_retries() -> None:
    spec = scripted(errors=["e"], timeouts=["t"])
    error, timeout = run(spec, ["e", "t"])
    assert error.status == "error" and error.attempts == FAST.max_retries + 1
    assert "scripted error" in (error.error or "")
    assert timeout.status == "error" and "scripted timeout" in (timeout.error or "")


def test_cost_above_the_run_ceiling_is_exhausted() -> None:
    (result,) = run(scripted(cost_usd=0.02, default="x"), ["q"], ceiling=0.01)
    assert result.status == "exhausted" and "exceeded the run's ceiling" in (result.error or "")
    assert result.cost_usd == 0.02  # the money was spent and is reported


def test_envelope_refusal_happens_before_the_call() -> None:
    envelope = SpendEnvelope.from_usd(0.025)
    results = run(scripted(cost_usd=0.001), ["a", "b", "c"], ceiling=0.01, envelope=envelope)
    assert [r.status for r in results] == ["ok", "ok", "refused"]
    assert results[2].attempts == 0 and results[2].started_at is None
    assert envelope.debited == 2000 and envelope.reserved == 0


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"responses": ["a"]}, "must be a table"),
        ({"errors": "e"}, "must be a list of strings"),
        ({"latency_ms": -1}, "nonnegative"),
        ({"default": 3}, "must be a string"),
        ({"script": "/nonexistent/script.json"}, "no such file"),
    ],
)
def test_bad_params_are_config_errors(params: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ScriptedModel.from_params(params)


def test_faults_are_raised_by_the_model_logic() -> None:
    model = ScriptedModel.from_params({"errors": ["x"]})
    with pytest.raises(ScriptedFault):
        model.respond([{"role": "user", "content": "x"}], 0)


def test_litellm_runs_offline_and_quiet() -> None:
    run(scripted(), ["q"])
    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert os.environ["LITELLM_OFFLINE_MODE"] == "True"
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    import logging

    assert logging.getLogger("LiteLLM").level == logging.ERROR
    assert logging.getLogger("LiteLLM").propagate is False


def test_a_night_builds_a_scripted_models_table_once(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[object] = []
    original = ScriptedModel.from_params.__func__  # type: ignore[attr-defined]

    def counting(cls, params, where="scripted"):  # type: ignore[no-untyped-def]
        built.append(params)
        return original(cls, params, where)

    monkeypatch.setattr(ScriptedModel, "from_params", classmethod(counting))
    table = {f"q{i}": f"a{i}" for i in range(50)}
    spec = scripted(responses=table, cost_usd=0.001)
    results = run(spec, [f"q{i}" for i in range(50)])
    assert [r.output for r in results] == [f"a{i}" for i in range(50)]
    assert all(r.cost_usd == 0.001 for r in results)
    # one build for the 50 calls (litellm hands over the params without cost_usd) and one
    # for their 50 prices: not one per call
    assert len(built) == 2


def test_an_edited_script_is_read_again_and_hashed_again(isolated: Path) -> None:
    from kb.engine.requests import file_identity

    path = isolated / "script.json"
    path.write_text(json.dumps({"responses": {"q": "before"}}))
    spec = scripted(script=str(path))
    first = file_identity(str(path), hash_content=True)
    assert [r.output for r in run(spec, ["q"])] == ["before"]
    path.write_text(json.dumps({"responses": {"q": "after, longer"}}))
    assert file_identity(str(path), hash_content=True) != first
    assert [r.output for r in run(spec, ["q"])] == ["after, longer"]


def test_a_large_reply_table_is_scrubbed_and_serialized_once_per_sweep_not_per_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kb.engine import requests
    from kb.store.canonical import canonical_json, sha256_hex

    table = {f"Q{i}?": f"a{i}" for i in range(1500)}
    spec = requests.ModelSpec("scripted:big", params={"responses": table, "temperature": 0})
    calls = {"scrub": 0, "canonical": 0}
    scrub, canonical = requests._scrubbed_value, requests.canonical_json

    def counted_scrub(value: object) -> object:
        calls["scrub"] += isinstance(value, dict) and len(value) == 1500
        return scrub(value)

    def counted_canonical(value: object) -> str:
        calls["canonical"] += isinstance(value, dict) and len(value) == 1500
        return canonical(value)

    monkeypatch.setattr(requests, "_scrubbed_value", counted_scrub)
    monkeypatch.setattr(requests, "canonical_json", counted_canonical)
    built = [requests.build_request(spec, f"Q{i}?") for i in range(200)]
    keys = {request.key for request in built}
    assert calls == {"scrub": 1, "canonical": 1}  # not 200 of each
    assert len(keys) == 200
    for request in built[:5]:  # the key is still the hash of the whole canonical request
        assert request.key == sha256_hex(canonical_json(request.canonical()))
    other = requests.ModelSpec("scripted:big", params={"responses": {**table, "Q0?": "b"}})
    assert requests.build_request(other, "Q1?").key != built[1].key  # new content, new key
