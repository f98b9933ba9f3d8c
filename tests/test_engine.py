"""The scheduler: concurrency that never changes a result, limits, cancellation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kb.engine.budget import SpendEnvelope
from kb.engine.requests import ModelSpec, build_request, litellm_model
from kb.engine.scheduler import Engine, EngineConfig, PlannedRun
from kb.errors import ConfigError
from tests.engine_helpers import FAST, plan, scripted

MIXED = scripted(
    responses={f"p{i}": f"answer {i}" for i in range(0, 40, 3)} | {"alt": ["a", "b", "c"]},
    errors=["p5", "p17"],
    timeouts=["p11"],
    cost_usd=0.004,
    latency_ms=5,
)
PROMPTS = [f"p{i}" for i in range(40)] + ["alt"] * 5


def run_at(concurrency: int, cap: float = 0.12) -> tuple[list[object], SpendEnvelope]:
    config = EngineConfig(
        concurrency=concurrency, per_provider=concurrency, backoff_base_s=0.001, backoff_max_s=0.005
    )
    envelope = SpendEnvelope.from_usd(cap)
    results = Engine(config).run(plan(MIXED, PROMPTS, ceiling=0.003 + 0.001 * 0), envelope)
    return [r.without_timings() for r in results], envelope


def test_concurrent_results_equal_sequential_ones_field_for_field() -> None:
    sequential, env1 = run_at(1)
    concurrent, env16 = run_at(16)
    assert concurrent == sequential
    assert (env1.debited, env1.refusals) == (env16.debited, env16.refusals)
    statuses = {r.status for r in sequential}  # type: ignore[attr-defined]
    assert statuses == {"exhausted", "error", "refused"}  # the plan exercises every path


def test_results_come_back_in_plan_order() -> None:
    spec = scripted(responses={"slow": "s", "fast": "f"})
    runs = plan(spec, ["slow", "fast"])
    results = Engine(FAST).run(runs, SpendEnvelope(cap=None))
    assert [r.label for r in results] == [r.label for r in runs]


def test_the_global_limit_bounds_calls_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    from kb.engine import adapter as adapter_module

    in_flight = 0
    peak = 0
    real = adapter_module.LiteLLMAdapter.complete

    async def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await asyncio.sleep(0.01)
            return await real(self, *args, **kwargs)
        finally:
            in_flight -= 1

    monkeypatch.setattr(adapter_module.LiteLLMAdapter, "complete", counting)
    config = EngineConfig(concurrency=3, per_provider=8)
    Engine(config).run(plan(scripted(), [f"q{i}" for i in range(12)]), SpendEnvelope(cap=None))
    assert peak == 3
    peak = 0
    config = EngineConfig(concurrency=8, per_provider=2)
    Engine(config).run(plan(scripted(), [f"q{i}" for i in range(12)]), SpendEnvelope(cap=None))
    assert peak == 2


def test_cancel_settles_unstarted_runs_cancelled() -> None:
    engine = Engine(FAST)
    engine.cancel()
    results = engine.run(plan(scripted(), ["a", "b"], ceiling=0.1), SpendEnvelope.from_usd(1.0))
    assert [r.status for r in results] == ["cancelled", "cancelled"]


def test_effort_maps_to_reasoning_effort_and_refs_map_to_litellm_routes() -> None:
    assert litellm_model("openai:gpt-4o-mini") == "openai/gpt-4o-mini"
    request = build_request(ModelSpec("openai:o3", "low", {"temperature": 0}), "q")
    assert request.params == {"temperature": 0, "reasoning_effort": "low"}
    assert build_request(ModelSpec("local:smollm2", "low"), "q").params == {}


def test_secret_params_never_enter_the_request() -> None:
    spec = ModelSpec(
        "openai:x",
        params={
            "api_key": "sk-1",
            "api_key_env": "K",
            "cost_usd": 1,
            "extra_headers_token": "t",
            "max_tokens": 5,
        },
    )
    assert build_request(spec, "q").params == {"max_tokens": 5}


@pytest.mark.parametrize("bad", [{"concurrency": 0}, {"per_provider": -1}, {"concurrency": True}])
def test_engine_config_is_validated(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        EngineConfig(**bad)  # type: ignore[arg-type]


def test_a_bad_ref_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="must be 'provider:model'"):
        PlannedRun("x", "target", ModelSpec("nocolon"), build_request(ModelSpec("nocolon"), "q"))


def test_a_capped_envelope_refuses_runs_without_a_ceiling() -> None:
    with pytest.raises(ConfigError, match="needs a per-run ceiling on every run"):
        Engine(FAST).run(plan(scripted(), ["a"]), SpendEnvelope.from_usd(1.0))


def test_one_busy_provider_does_not_starve_another() -> None:
    from tests.fake_openai import fake_openai_server

    slow = scripted("a", latency_ms=40)  # provider "scripted", limited to one call at a time
    config = EngineConfig(concurrency=2, per_provider=1, backoff_base_s=0.001)
    with fake_openai_server() as (base, _):
        other = ModelSpec("openai:fake", params={"api_base": base, "api_key": "sk-x"})
        runs = [PlannedRun(f"a{i}", "target", slow, build_request(slow, f"q{i}")) for i in range(4)]
        runs += [
            PlannedRun(f"b{i}", "target", other, build_request(other, f"q{i}")) for i in range(4)
        ]
        results = Engine(config).run(runs, SpendEnvelope(cap=None))
    assert all(r.status == "ok" for r in results)
    # Queued behind provider "scripted", the a-runs must not hold the global slots:
    # the first b-run starts before the last a-run does.
    assert min(r.started_at or 0 for r in results[4:]) < max(r.started_at or 0 for r in results[:4])


def test_the_known_provider_list_is_the_pinned_litellms() -> None:
    """Spec validation reads a snapshot so it never imports litellm; it must not go stale."""
    from kb.engine.adapter import load_litellm
    from kb.engine.known_providers import LITELLM_PROVIDERS
    from kb.engine.requests import KB_PROVIDERS

    litellm = load_litellm()
    # kb registers its own providers with litellm, which lists them too.
    live = {str(getattr(p, "value", p)) for p in litellm.provider_list} - set(KB_PROVIDERS)
    assert live == set(LITELLM_PROVIDERS), sorted(live ^ set(LITELLM_PROVIDERS))


def test_an_unknown_provider_gets_the_closest_name() -> None:
    from kb.engine.requests import provider_issue

    assert provider_issue("openai:gpt-4o") is None
    assert provider_issue("scripted:x") is None and provider_issue("local:smollm2") is None
    assert provider_issue("anthropc:claude") == (
        "provider 'anthropc' is neither kb's own (scripted, local) nor known to litellm; "
        "did you mean 'anthropic'?"
    )
    assert provider_issue("OpenAI:gpt-4o") == (  # refused (litellm would not route it), named
        "provider 'OpenAI' is neither kb's own (scripted, local) nor known to litellm; "
        "did you mean 'openai'?"
    )


def test_the_known_params_are_the_pinned_litellms() -> None:
    """Param checks read a snapshot so they never import litellm; it must not go stale.

    The snapshot's own script runs in a fresh interpreter (litellm's answers for a
    few providers depend on what the process did before) and must print the file.
    """
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    made = subprocess.run(
        [sys.executable, str(root / "tests" / "data" / "make_known_params.py")],
        capture_output=True,
        text=True,
        check=True,
    )
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "-"],
        input=made.stdout,
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    )
    assert formatted.stdout == (root / "kb" / "engine" / "known_params.py").read_text()


def test_a_models_own_timeout_s_bounds_its_calls() -> None:
    from tests.fake_openai import fake_openai_server

    with fake_openai_server(hang_s=None) as (base, seen):
        spec = ModelSpec("openai:m", None, {"api_base": base, "api_key": "x", "timeout_s": 0.5})
        engine = Engine(EngineConfig(timeout_s=3600, max_retries=0))
        (result,) = engine.run(plan(spec, ["hang"]), SpendEnvelope(cap=None))
        seen.release.set()
    assert result.status == "error" and "timed out" in (result.error or "")


def fresh_interpreter(probe: str) -> str:
    """What ``probe`` prints in a new Python (litellm not yet imported), run from the repo."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_litellm_is_imported_with_the_collector_paused_then_frozen() -> None:
    """A fresh interpreter: the collector is on again afterwards and the import's objects
    sit in the permanent generation (later collections do not rescan them)."""
    probe = (
        "import gc\n"
        "from kb.engine.adapter import load_litellm\n"
        "load_litellm()\n"
        "print(gc.isenabled(), gc.get_freeze_count())\n"
    )
    enabled, frozen = fresh_interpreter(probe).split()
    assert enabled == "True"
    assert int(frozen) > 100_000  # litellm's import builds ~500,000 tracked objects


def test_the_paused_collector_is_restored_as_it_was_even_on_failure() -> None:
    import gc

    from kb.engine.adapter import _collector_paused

    try:
        with pytest.raises(ImportError), _collector_paused():
            assert not gc.isenabled()
            raise ImportError("litellm is broken")
        assert gc.isenabled()
        gc.disable()
        with _collector_paused():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()
        gc.unfreeze()  # this test process's objects go back to being collected


class _Clock:
    """A monotonic clock that only moves when told (the import, the call)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_a_runs_latency_leaves_out_litellms_import(monkeypatch: pytest.MonkeyPatch) -> None:
    import kb.engine.adapter
    import kb.engine.scheduler
    from kb.engine.adapter import ProviderReply
    from kb.engine.runs import Usage

    clock = _Clock()

    class SlowToImport:
        def __init__(self) -> None:
            clock.now += 100.0  # the import: long, and not the provider's doing

        async def complete(self, *args: object, **kwargs: object) -> ProviderReply:
            clock.now += 0.25  # the call itself
            return ProviderReply("y", Usage(1, 1), 0.0, "declared")

        async def aclose(self) -> None:
            pass

    monkeypatch.setattr(kb.engine.adapter, "LiteLLMAdapter", SlowToImport)
    monkeypatch.setattr(kb.engine.scheduler, "time", clock)
    (result,) = Engine(FAST).run(plan(scripted("s"), ["x"]), SpendEnvelope(cap=None))
    assert result.status == "ok" and result.latency_ms == pytest.approx(250.0)


def test_a_runs_latency_leaves_out_the_wait_for_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    import kb.engine.scheduler
    from kb.engine.adapter import ProviderReply
    from kb.engine.runs import Usage

    clock = _Clock()

    class StartingWorkers:
        """As a pool does: a call waits for a worker to be ready."""

        ready = False

        def usable(self, spec: object) -> bool:
            return True

        async def when_ready(self) -> None:
            if not self.ready:
                clock.now += 100.0  # the workers' import
                self.ready = True

        async def complete(self, *args: object, **kwargs: object) -> ProviderReply:
            await self.when_ready()
            clock.now += 0.25
            return ProviderReply("y", Usage(1, 1), 0.0, "declared")

    monkeypatch.setattr(kb.engine.scheduler, "time", clock)
    engine = Engine.build(FAST, workers=StartingWorkers())  # type: ignore[arg-type]
    (result,) = engine.run(plan(scripted("s"), ["x"]), SpendEnvelope(cap=None))
    assert result.status == "ok" and result.latency_ms == pytest.approx(250.0)


def test_litellms_first_call_imports_are_done_before_any_run_starts() -> None:
    """litellm loads ~40 more modules on its first completion; the adapter does that up
    front (a completion litellm answers itself), so a first run's latency is the call's."""
    probe = (
        "import asyncio, sys\n"
        "from kb.engine.adapter import LiteLLMAdapter\n"
        "from kb.engine.requests import ModelSpec, build_request\n"
        "from tests.fake_openai import fake_openai_server\n"
        "with fake_openai_server() as (base, seen):\n"
        "    spec = ModelSpec('openai:m', params={'api_base': base, 'api_key': 'sk-12345678'})\n"
        "    adapter = LiteLLMAdapter()\n"
        "    before = set(sys.modules)\n"
        "    reply = asyncio.run(adapter.complete(spec, build_request(spec, 'q'),"
        " occurrence=0, timeout_s=10))\n"
        "    print(reply.text, len(seen.requests), len(set(sys.modules) - before))\n"
    )
    text, requests, loaded = fresh_interpreter(probe).rsplit(maxsplit=2)
    assert text == "echo: q" and requests == "1"  # the warm-up sent nothing
    assert int(loaded) < 20, f"the first call still imported {loaded} modules"
