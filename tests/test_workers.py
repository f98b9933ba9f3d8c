"""Provider calls in worker processes (SPEC 12.5: the start-up overlapped, the CPU spread)."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.cli import cli
from kb.engine.budget import SpendEnvelope
from kb.engine.requests import ModelSpec
from kb.engine.scheduler import Engine, EngineConfig
from kb.engine.workers import DEFAULT_WORKERS, WorkerPool
from tests.engine_helpers import FAST, plan, scripted
from tests.fake_openai import fake_openai_server
from tests.sweep_helpers import loopback_model, scripted_model, write_spec

NIGHT = "2026-11-28T02:00:00Z"

pytestmark = pytest.mark.usefixtures("initialized_store")


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_TEST_KEY", "sk-test-workers")


def pooled(pool: WorkerPool | None) -> Engine:
    """The engine a job builds with ``pool`` making its calls."""
    return Engine.build(FAST, workers=pool)


def openai(base: str) -> ModelSpec:
    return ModelSpec(
        "openai:fake-model",
        params={"api_base": base, "api_key_env": "KB_TEST_KEY", "max_tokens": 16},
    )


def fields(results: list) -> list[tuple]:  # type: ignore[type-arg]
    """Everything a result depends on (timings aside)."""
    return [
        (r.label, r.status, r.output, r.usage, r.cost_usd, r.price_source, r.attempts, r.error)
        for r in results
    ]


def test_workers_answer_exactly_what_the_main_process_would() -> None:
    prompts = [f"question {i}" for i in range(24)] + ["rate-limit-once", "server-error"]

    def night(pool: WorkerPool | None) -> list:  # type: ignore[type-arg]
        with fake_openai_server() as (base, _):  # a fresh server: its 429 comes once each
            runs = plan(openai(base), prompts) + plan(scripted("s", responses={"x": "y"}), ["x"])
            return pooled(pool).run(runs, SpendEnvelope(cap=None))

    here = night(None)
    pool = WorkerPool(2)
    pool.start()
    try:
        there, again = night(pool), night(pool)  # two phases on the same workers
    finally:
        pool.stop()
    assert fields(there) == fields(here) == fields(again)
    assert there[0].output == "echo: question 0" and there[-1].output == "y"
    assert there[24].attempts == 2  # the 429 was retried by the engine, through a worker
    assert there[25].status == "error" and "InternalServerError" in (there[25].error or "")


def test_a_worker_that_dies_fails_its_calls_as_retryable_and_the_rest_go_on() -> None:
    with fake_openai_server(hang_s=None) as (base, seen):
        pool = WorkerPool(2)
        pool.start()
        try:
            warm = pooled(pool).run(plan(openai(base), ["warm"]), SpendEnvelope(None))
            assert warm[0].status == "ok"
            pool.wait_ready()
            os.kill(pool.pids()[0], signal.SIGKILL)
            results = pooled(pool).run(
                plan(openai(base), [f"q{i}" for i in range(6)]), SpendEnvelope(cap=None)
            )
        finally:
            seen.release.set()
            pool.stop()
    assert [r.status for r in results] == ["ok"] * 6  # retried on the worker left
    assert [r.output for r in results] == [f"echo: q{i}" for i in range(6)]


def test_when_no_worker_is_left_calls_are_made_in_process() -> None:
    with fake_openai_server() as (base, _):
        pool = WorkerPool(1)
        pool.start()
        try:
            pool.wait_ready()
            os.kill(pool.pids()[0], signal.SIGKILL)
            pool.wait_all()
            results = pooled(pool).run(plan(openai(base), ["a"]), SpendEnvelope(None))
        finally:
            pool.stop()
    assert results[0].status == "ok" and results[0].output == "echo: a"


def parent_of(pid: int) -> int:
    fields_after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields_after_name[1])


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_workers_are_forked_from_one_import_and_all_end_with_the_pool() -> None:
    pool = WorkerPool(3)
    pool.start()
    try:
        pool.wait_ready()
        workers = pool.pids()
        parent = pool._parent
        assert parent is not None
        assert len(set(workers)) == 3 and parent.pid not in workers
        # one process imported litellm; the workers are its forks, not three more imports
        assert {parent_of(pid) for pid in workers} == {parent.pid}
    finally:
        pool.stop()
    assert parent.returncode == 0  # it waited for its workers, which ended on their own
    assert all(gone(pid) for pid in workers)


def test_workers_still_importing_are_killed_when_the_pool_stops() -> None:
    pool = WorkerPool(2)
    pool.start()
    parent = pool._parent
    assert parent is not None
    pool.stop()  # at once: the import has not finished
    assert parent.returncode == -signal.SIGKILL
    assert gone(parent.pid)


def test_a_parent_that_cannot_import_litellm_leaves_the_calls_to_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "litellm"
    broken.mkdir()
    tried = tmp_path / "tried"
    (broken / "__init__.py").write_text(
        f"open({str(tried)!r}, 'w').close()\nraise ImportError('a broken litellm')\n"
    )
    with fake_openai_server() as (base, _):
        monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the workers' parent only
        pool = WorkerPool(2)
        pool.start()
        try:
            pool.wait_all()  # it ended, and with it every pipe
            assert not pool.usable(openai(base))
            assert tried.exists() and pool._parent is not None and pool._parent.wait() == 1
            results = pooled(pool).run(plan(openai(base), ["a"]), SpendEnvelope(None))
        finally:
            pool.stop()
    assert results[0].status == "ok" and results[0].output == "echo: a"  # made in-process


def test_calls_stay_in_the_sweeps_process_unless_workers_are_asked_for() -> None:
    assert DEFAULT_WORKERS == 0


def test_the_engine_without_workers_is_unchanged() -> None:
    config = EngineConfig()
    assert Engine.build(config).transport.workers is None  # type: ignore[attr-defined]


# -- kb sweep through workers -----------------------------------------------------------------


def loopback_spec(path: Path, base: str) -> Path:
    cases = [(f"case-{i:02d}", f"Question {i}?", f"echo: Question {i}?") for i in range(10)]
    return write_spec(
        path, [loopback_model("openai:fake-model", base), scripted_model("here", 9)], cases=cases
    )


def without_timings(text: str) -> Any:
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("latencyMs",)}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(json.loads(text))


@pytest.mark.parametrize("count", ["1", "2"])
def test_a_sweep_through_workers_reports_what_an_in_process_sweep_does(
    runner: CliRunner, isolated: Path, monkeypatch: pytest.MonkeyPatch, count: str
) -> None:
    with fake_openai_server() as (base, seen):
        spec = loopback_spec(isolated / "s.toml", base)
        args = ["sweep", str(spec), "--json", "--quiet", "--no-commit", "--observed-at", NIGHT]
        here = runner.invoke(cli, args)
        monkeypatch.setenv("KB_WORKERS", count)
        there = runner.invoke(cli, args)
    assert here.exit_code == there.exit_code == 0, there.stderr
    assert without_timings(there.stdout) == without_timings(here.stdout)
    assert len(json.loads(there.stdout)["claims"]) == 2
    assert len(seen.requests) == 20  # each night's 10 calls, none repeated


def test_bad_input_with_workers_is_refused_at_once(
    runner: CliRunner, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_WORKERS", "1")
    (isolated / "s.toml").write_text("[sweep]\ncommitter = 3\n")
    result = runner.invoke(cli, ["sweep", "s.toml"])
    assert result.exit_code == 2 and "committer" in result.stderr


@pytest.mark.parametrize("raw", ["-1", "lots", "65"])
@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_a_bad_kb_workers_is_named(
    runner: CliRunner,
    isolated: Path,
    monkeypatch: pytest.MonkeyPatch,
    raw: str,
    dry: list[str],
) -> None:
    monkeypatch.setenv("KB_WORKERS", raw)
    result = runner.invoke(cli, ["sweep", "s.toml", *dry])
    assert result.exit_code == 2
    assert "KB_WORKERS: must be a whole number from 0 to 64" in result.stderr


def test_an_empty_kb_workers_counts_as_unset(
    runner: CliRunner, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_WORKERS", "")
    (isolated / "s.toml").write_text("[sweep]\ncommitter = 3\n")
    result = runner.invoke(cli, ["sweep", "s.toml"])
    assert result.exit_code == 2 and "KB_WORKERS" not in result.stderr


def test_a_broken_model_fails_the_same_through_a_worker() -> None:
    from kb.errors import KbError

    broken = scripted("bad", responses={"x": 3})  # a reply that is not text

    def outcome(pool: WorkerPool | None) -> object:
        try:
            return fields(pooled(pool).run(plan(broken, ["x"]), SpendEnvelope(None)))
        except KbError as error:
            return (type(error).__name__, str(error))

    here = outcome(None)
    pool = WorkerPool(1)
    pool.start()
    try:
        there = outcome(pool)
    finally:
        pool.stop()
    assert there == here


def test_logprobs_and_rate_limit_headers_cross_from_the_workers() -> None:
    # a canary's logprob reading and the provider's rate-limit headers, made in a worker,
    # reach the engine as they would in-process (a reading lost here reads as an outage)
    from kb.engine.requests import build_request
    from kb.engine.runs import PlannedRun
    from tests.fake_ratelimit import rate_limited_server

    def night(pool: WorkerPool | None) -> tuple[list, Engine]:  # type: ignore[type-arg]
        with fake_openai_server() as (base, seen):
            seen.distributions["Pick one"] = {"red": 3.0, "blue": 1.0}
            spec = openai(base)
            request = build_request(
                spec, "Pick one", overrides={"logprobs": True, "top_logprobs": 2, "temperature": 0}
            )
            engine = pooled(pool)
            runs = [PlannedRun("canary:x/0", "canary", spec, request)]
            return engine.run(runs, SpendEnvelope(cap=None)), engine

    def limited(pool: WorkerPool | None) -> Engine:
        with rate_limited_server(600, 10**6) as (base, _):
            engine = pooled(pool)
            engine.run(plan(openai(f"{base}/v1"), ["a", "b"]), SpendEnvelope(cap=None))
            return engine

    (here,), _ = night(None)
    pool = WorkerPool(1)
    pool.start()
    try:
        (there,), _ = night(pool)
        paced = limited(pool)
    finally:
        pool.stop()
    assert there.logprobs is not None and there.logprobs == here.logprobs
    assert there.logprobs[0]["red"] == pytest.approx(math.log(0.75))
    (bucket,) = paced.rate_limits.buckets.values()
    assert bucket.requests.limit == 600 and bucket.tokens.limit == 10**6
