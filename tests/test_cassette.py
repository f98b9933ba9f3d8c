"""Record/replay: any concurrency to any concurrency, misses, corruption, no provider needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from kb.cli import cli
from kb.engine.budget import SpendEnvelope
from kb.engine.cassette import Cassette, Exchange
from kb.engine.requests import cut_secrets, secrets_to_cut
from kb.engine.runs import Usage
from kb.engine.scheduler import Engine, EngineConfig
from kb.errors import ConfigError, VcrMissError
from kb.store.runs_file import parse_runs
from tests.engine_helpers import plan, scripted
from tests.fake_openai import fake_openai_server
from tests.sweep_helpers import write_spec

pytestmark = pytest.mark.usefixtures("initialized_store")

SPEC = scripted(
    responses={"a": "alpha", "b": ["b1", "b2", "b3"]},
    errors=["bad"],
    cost_usd=0.0015,
    latency_ms=3,
)
PROMPTS = ["a", "b", "b", "bad", "c", "b", "a"]


def engine(concurrency: int, cassette: Cassette | None = None) -> Engine:
    return Engine.build(
        EngineConfig(
            concurrency=concurrency,
            per_provider=concurrency,
            backoff_base_s=0.001,
            backoff_max_s=0.002,
        ),
        cassette=cassette,
    )


def record(path: Path, concurrency: int) -> list[object]:
    eng = engine(concurrency, Cassette(path, "record"))
    results = eng.run(plan(SPEC, PROMPTS, ceiling=0.01), SpendEnvelope.from_usd(1.0))
    eng.finish()
    return [r.without_timings() for r in results]


def replay(path: Path, concurrency: int, prompts: list[str] = PROMPTS) -> list[object]:
    eng = engine(concurrency, Cassette(path, "replay"))
    results = eng.run(plan(SPEC, prompts, ceiling=0.01), SpendEnvelope.from_usd(1.0))
    return [r.without_timings() for r in results]


def comparable(results: list[object]) -> list[tuple[object, ...]]:
    return [
        (r.label, r.status, r.output, r.usage, r.cost_usd, r.error)  # type: ignore[attr-defined]
        for r in results
    ]


@pytest.mark.parametrize(("rec", "rep"), [(8, 1), (1, 8)])
def test_recorded_at_one_concurrency_replays_identically_at_another(
    isolated: Path, rec: int, rep: int
) -> None:
    path = isolated / "c.jsonl"
    recorded = record(path, rec)
    replayed = replay(path, rep)
    assert comparable(replayed) == comparable(recorded)
    assert all(r.replayed for r in replayed)  # type: ignore[attr-defined]
    assert [r.cost_usd for r in replayed] == [0.0015] * 3 + [0.0] + [0.0015] * 3  # type: ignore[attr-defined]


def test_the_cassette_file_is_the_same_whatever_the_concurrency(isolated: Path) -> None:
    record(isolated / "one.jsonl", 1)
    record(isolated / "many.jsonl", 16)
    assert (isolated / "one.jsonl").read_text() == (isolated / "many.jsonl").read_text()
    lines = [json.loads(line) for line in (isolated / "one.jsonl").read_text().splitlines()]
    assert [
        line["occurrence"] for line in lines if line["request"]["messages"][0]["content"] == "b"
    ] == [0, 1, 2]


def test_a_changed_prompt_is_a_miss(isolated: Path) -> None:
    record(isolated / "c.jsonl", 4)
    with pytest.raises(VcrMissError, match="not recorded"):
        replay(isolated / "c.jsonl", 1, ["a", "changed prompt"])


def test_asking_for_more_occurrences_than_recorded_is_a_miss(isolated: Path) -> None:
    record(isolated / "c.jsonl", 4)
    with pytest.raises(VcrMissError, match="only 2 recorded, replay asked for occurrence 2"):
        replay(isolated / "c.jsonl", 1, ["a", "a", "a"])


def test_changed_params_are_a_miss(isolated: Path) -> None:
    record(isolated / "c.jsonl", 2)
    other = scripted(responses={"a": "alpha"}, temperature=0.5)
    eng = engine(1, Cassette(isolated / "c.jsonl", "replay"))
    with pytest.raises(VcrMissError):
        eng.run(plan(other, ["a"]), SpendEnvelope(cap=None))


@pytest.mark.parametrize(
    "line",
    [
        "{not json",
        '{"key": "k"}',
        '{"key": "k", "occurrence": -1, "seq": 0, "request": {}, '
        '"status": "ok", "output": "", "usage": {"promptTokens": 0, "completionTokens": 0}, '
        '"costUsd": 0, "error": null}',
        '{"key": "k", "occurrence": 0, "seq": 0, "request": {}, '
        '"status": "ok", "output": "", "usage": {"promptTokens": 0, "completionTokens": 0}, '
        '"costUsd": 0, "error": null, "topLogprobs": [{"a": "-0.1"}]}',
    ],
)
def test_a_corrupt_line_is_a_clear_config_error(isolated: Path, line: str) -> None:
    path = isolated / "c.jsonl"
    record(path, 1)
    path.write_text(path.read_text() + line + "\n")
    with pytest.raises(ConfigError, match=rf"c.jsonl:{len(PROMPTS) + 1}: corrupt cassette line"):
        Cassette(path, "replay")


def test_a_missing_cassette_is_a_config_error(isolated: Path) -> None:
    with pytest.raises(ConfigError, match="no such cassette"):
        Cassette(isolated / "nope.jsonl", "replay")


def test_replay_needs_no_provider_and_never_imports_litellm(isolated: Path) -> None:
    record(isolated / "c.jsonl", 4)
    code = (
        "import sys\n"
        "sys.path.insert(0, {!r})\n"
        "from tests.test_cassette import replay\n"
        "from pathlib import Path\n"
        "results = replay(Path({!r}), 2)\n"
        "print(len(results), 'litellm' in sys.modules)\n"
    ).format(str(Path(__file__).resolve().parents[1]), str(isolated / "c.jsonl"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == f"{len(PROMPTS)} False", proc.stderr


def test_a_cassette_replays_from_another_checkout() -> None:
    import shutil
    import tempfile

    from kb.engine.requests import build_request

    base = Path(tempfile.mkdtemp())
    try:
        for name in ("one", "two"):
            (base / name).mkdir()
            (base / name / "script.json").write_text('{"default": "from the script"}')
        keys = [
            build_request(scripted(script=str(base / name / "script.json")), "q").key
            for name in ("one", "two")
        ]
        assert keys[0] == keys[1]  # the path differs; the content, and so the key, does not
        (base / "two" / "script.json").write_text('{"default": "edited"}')
        edited = build_request(scripted(script=str(base / "two" / "script.json")), "q").key
        assert edited != keys[0]  # an edited script is a different request
    finally:
        shutil.rmtree(base)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("costUsd", float("nan"), "costUsd must be a finite nonnegative number"),
        ("costUsd", -1, "costUsd must be a finite nonnegative number"),
        ("output", None, "an ok exchange needs a string output"),
        ("usage", {"promptTokens": -1, "completionTokens": 0}, "usage must be nonnegative"),
    ],
)
def test_a_line_that_would_invent_an_answer_is_refused(
    isolated: Path, field: str, value: object, problem: str
) -> None:
    path = isolated / "c.jsonl"
    record(path, 1)
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    first[field] = value
    lines[0] = json.dumps(first)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=problem):
        Cassette(path, "replay")


# -- secrets: a cassette is committed next to the tests, so it is cut as evidence is -----------

ENV_KEY = "sk-env-cassette-secret-0123"
LITERAL_KEY = "sk-literal-cassette-secret-4567"
NIGHT = "2026-11-28T02:00:00Z"


def keyed_models(base: str) -> list[dict[str, object]]:
    free = {"input_per_mtok": 0.0, "output_per_mtok": 0.0}
    return [
        {
            "model": "openai:by-env",
            "params": {"api_base": base, "api_key_env": "KB_CASSETTE_KEY", "price": free},
        },
        {
            "model": "openai:by-literal",
            "params": {"api_base": base, "api_key": LITERAL_KEY, "price": free},
        },
        {"model": "openai:local", "params": {"api_base": base, "api_key": "none", "price": free}},
    ]


def test_a_recorded_reply_quoting_its_key_is_cut_as_the_evidence_cuts_it(
    runner: CliRunner, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_CASSETTE_KEY", ENV_KEY)
    cases = [("quote", "echo-key", "x"), ("plain", "say none", "x")]
    with fake_openai_server() as (base, seen):
        spec = write_spec(isolated / "s.toml", keyed_models(base), cases=cases)
        night = ["sweep", str(spec), "--quiet", "--observed-at", NIGHT, "--allow-incomplete"]
        result = runner.invoke(cli, [*night, "--record", "c.jsonl"])
        assert result.exit_code == 0, result.stderr
    sent = {
        v for r in seen.requests for k, v in r["headers"].items() if k.lower() == "authorization"
    }
    assert {f"Bearer {ENV_KEY}", f"Bearer {LITERAL_KEY}", "Bearer none"} <= sent  # they were echoed
    text = (isolated / "c.jsonl").read_text()
    assert ENV_KEY not in text and LITERAL_KEY not in text
    lines = [json.loads(line) for line in text.splitlines()]
    recorded = {
        (line["request"]["model"], line["request"]["messages"][-1]["content"]): line["output"]
        for line in lines
    }
    assert recorded[("openai/by-env", "echo-key")] == "you sent ***"
    assert recorded[("openai/by-literal", "echo-key")] == "you sent ***"
    assert recorded[("openai/local", "echo-key")] == "you sent none"  # a placeholder, no secret
    assert recorded[("openai/local", "say none")] == "echo: say none"
    evidence = (isolated / "kb-evidence" / f"kb-sweep-{NIGHT[:19]}.000Z.jsonl").read_text()
    assert ENV_KEY not in evidence and LITERAL_KEY not in evidence
    cut = {  # read as kb reads it: a line of a case's second model shares the request
        (f"openai/{r.model.split(':')[1]}", r.request.user): r.output
        for r in parse_runs(evidence.encode(), "evidence")
        if r.kind == "target" and r.request is not None
    }
    assert {k: v for k, v in recorded.items() if k in cut} == cut  # exactly as evidence does
    replayed = runner.invoke(cli, [*night, "--no-commit", "--replay", "c.jsonl"])
    assert replayed.exit_code == result.exit_code, replayed.stderr  # the keys still match


def test_a_deeply_nested_line_is_one_line_naming_the_file_and_line(
    runner: CliRunner, isolated: Path
) -> None:
    path = isolated / "c.jsonl"
    record(path, 1)
    path.write_text(path.read_text() + "[" * 3000 + "]" * 3000 + "\n")
    spec = write_spec(isolated / "s.toml", [{"model": "scripted:x", "params": {"default": "y"}}])
    before = (isolated / "rulvar.models.json").read_bytes()
    result = runner.invoke(cli, ["sweep", str(spec), "--replay", str(path), "--observed-at", NIGHT])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"Error: {path}:{len(PROMPTS) + 1}: corrupt cassette line: nested too deep to read"
    ]
    assert (isolated / "rulvar.models.json").read_bytes() == before


SECRETISH = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", max_size=20
)


@given(key=SECRETISH, before=st.text(max_size=20), after=st.text(max_size=20))
def test_a_saved_line_holds_a_key_only_when_it_is_too_short_to_be_a_secret(
    tmp_path_factory: pytest.TempPathFactory, key: str, before: str, after: str
) -> None:
    key = "k" + key  # never empty (an empty key is no key)
    path = tmp_path_factory.mktemp("cassette") / "c.jsonl"
    said = f"{before}{key}{after}"
    cassette = Cassette(path, "record")
    exchange = Exchange(
        key="0" * 64,
        occurrence=0,
        seq=0,
        request={"model": "openai/x", "messages": [{"role": "user", "content": said}]},
        status="ok",
        output=said,
        usage=Usage(1, 1),
        cost_usd=0.0,
        error=None,
    )
    cassette.record(exchange, [key])
    cassette.save()
    (line,) = Cassette(path, "replay")._exchanges.values()
    if len(key) >= 8:  # a secret (SPEC 12.3): cut wherever it is
        assert key not in path.read_text()
        assert line.output == cut_secrets(said, secrets_to_cut([key]))
    else:  # a placeholder such as "none": the text is the model's, untouched
        assert line.output == said and line.request["messages"][0]["content"] == said


def test_a_reply_with_a_unicode_line_separator_replays(isolated: Path) -> None:
    spec = scripted(responses={"a": "one\u2028two\x85three"})
    eng = engine(1, Cassette(isolated / "c.jsonl", "record"))
    recorded = eng.run(plan(spec, ["a"]), SpendEnvelope(cap=None))
    eng.finish()
    replayed = engine(1, Cassette(isolated / "c.jsonl", "replay")).run(
        plan(spec, ["a"]), SpendEnvelope(cap=None)
    )
    assert [r.output for r in replayed] == [r.output for r in recorded] == ["one\u2028two\x85three"]
