"""Faults from a real HTTP server on 127.0.0.1, through litellm's openai/ route."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb.engine.budget import SpendEnvelope
from kb.engine.cassette import Cassette
from kb.engine.requests import ModelSpec
from kb.engine.scheduler import Engine, EngineConfig
from tests.engine_helpers import plan
from tests.fake_openai import fake_openai_server

pytestmark = pytest.mark.usefixtures("initialized_store")

PLANTED = "sk-planted-0123456789abcdef"
# The timeout leaves a loaded CI machine room for a real reply, and the hanging
# server outlasts it by far, so the statuses never depend on the machine's load.
CONFIG = EngineConfig(
    concurrency=8, backoff_base_s=0.01, backoff_max_s=0.05, timeout_s=3.0, max_retries=2
)


def spec_for(base: str) -> ModelSpec:
    return ModelSpec(
        "openai:fake-model",
        params={"api_base": base, "api_key_env": "KB_TEST_KEY", "max_tokens": 16},
    )


@pytest.fixture(autouse=True)
def planted_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_TEST_KEY", PLANTED)


def test_each_fault_ends_in_its_documented_status() -> None:
    with fake_openai_server(hang_s=20.0) as (base, seen):
        prompts = ["hello", "rate-limit-once", "server-error", "malformed", "hang"]
        results = Engine(CONFIG).run(plan(spec_for(base), prompts), SpendEnvelope(cap=None))
    by_prompt = dict(zip(prompts, results, strict=True))
    assert by_prompt["hello"].status == "ok" and by_prompt["hello"].output == "echo: hello"
    limited = by_prompt["rate-limit-once"]
    assert (limited.status, limited.attempts) == ("ok", 2)
    arrivals = [
        r["at"] for r in seen.requests if r["body"]["messages"][-1]["content"] == "rate-limit-once"
    ]
    assert arrivals[1] - arrivals[0] >= 0.3  # retry-after was honoured
    for prompt in ("server-error", "malformed", "hang"):
        result = by_prompt[prompt]
        assert result.status == "error", prompt
        assert result.attempts == CONFIG.max_retries + 1
    assert "boom" in (by_prompt["server-error"].error or "")
    assert "timed out" in (by_prompt["hang"].error or "")
    # The key was used for real, and never leaks into a result.
    assert {r["headers"].get("authorization") for r in seen.requests} == {f"Bearer {PLANTED}"}
    assert all(PLANTED not in repr(result) for result in results)


def test_a_planted_key_never_reaches_the_cassette(isolated: Path) -> None:
    path = isolated / "run.jsonl"
    with fake_openai_server() as (base, _):
        cassette = Cassette(path, "record")
        engine = Engine.build(CONFIG, cassette=cassette)
        spec = ModelSpec(
            "openai:fake-model",
            params={
                "api_base": base,
                "api_key_env": "KB_TEST_KEY",
                "extra_headers": {"Authorization": f"Bearer {PLANTED}"},
            },
        )
        engine.run(plan(spec, ["hello", "server-error"]), SpendEnvelope(cap=None))
        engine.finish()
    text = path.read_text()
    assert "hello" in text and PLANTED not in text and "Authorization" not in text
    assert "KB_TEST_KEY" not in text  # not even the variable's name: it is not part of the call


def test_secrets_echoed_by_a_provider_or_nested_in_params_never_reach_the_cassette(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment-0000")
    path = isolated / "run.jsonl"
    with fake_openai_server() as (base, _):
        authed_base = base.replace("http://", "http://user:hunter2-secret@")
        spec = ModelSpec(
            "openai:fake-model",
            params={
                "api_base": base,
                "api_key_env": "KB_TEST_KEY",
                "extra_body": {"vendor": {"token": "nested-secret-value"}, "note": "kept"},
                "metadata": {"origin": authed_base},
            },
        )
        engine = Engine.build(CONFIG, cassette=Cassette(path, "record"))
        (result,) = engine.run(plan(spec, ["echo-auth"]), SpendEnvelope(cap=None))
        engine.finish()
    assert result.status == "error" and "Incorrect API key provided: ***" in (result.error or "")
    text = path.read_text()
    for secret in (PLANTED, "nested-secret-value", "hunter2-secret", "sk-from-the-environment"):
        assert secret not in text and secret not in repr(result)
    assert '"note": "kept"' in text  # only secrets are cut
