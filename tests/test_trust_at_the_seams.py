"""Trust at the seams (SPEC 14.1), each item reproduced as a team met it on v4.

Real ``kb`` processes (or the CLI in-process), a real git repository, a real
loopback HTTP server through litellm; the store, the evidence, the journal,
git's history and the exit code are asserted afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kb.engine.journal import read_journal
from kb.engine.requests import ModelSpec
from kb.store.records import CellRecord, EpochRecord, GateRecord, ReportFile, RetiredRecord
from kb.store.validation import parse_store
from kb.views.report_text import alarm_lines
from tests.cli_helpers import kb
from tests.conftest import git
from tests.fake_openai import fake_openai_server
from tests.sweep_helpers import echo_spec
from tests.test_never_lose import (
    KEY,
    STORE,
    kb_process,
    loopback_spec,
    prompts_asked,
    wait_for,
)

NIGHT_1 = "2026-11-28T02:00:00Z"
NIGHT_2 = "2026-11-29T02:00:00Z"
REPORT_2 = "kb-sweep-2026-11-29T02:00:00.000Z"


def run_kb(repo: Path, *args: str) -> Result:
    """``kb ARGS`` in-process, in ``repo`` (the cwd): a stopped night needs a process."""
    assert Path.cwd() == repo
    return kb(CliRunner(), *args)


# -- 1. a resume never pools two models -----------------------------------------------------


@pytest.mark.parametrize("changed", [True, False], ids=["model-changed", "model-same"])
def test_a_resume_asks_the_canary_again_and_never_pools_two_models(
    repo: Path, changed: bool
) -> None:
    """Interrupt a night after its canary and 20 runs; the provider changes the model
    (a hidden system prompt); the resume must not pool the old model's 20 answers with
    the new model's 30 (v4 committed ``weakness 0.38 (19/50)``)."""
    assert run_kb(repo, "init").exit_code == 0
    extra = 'concurrency = 2\nsampling = "full"'
    with fake_openai_server(latency_s=0.02) as (base, seen):
        loopback_spec(repo / "s.toml", base, cases=50, canary=True, extra_sweep=extra)
        first = run_kb(repo, "sweep", "s.toml", "--quiet", "--observed-at", NIGHT_1)
        assert first.exit_code == 0, first.stderr  # night 1: a strength, fingerprint F1
        before_night_2 = len(seen.requests)
        night = ["sweep", "s.toml", "--quiet", "--observed-at", NIGHT_2]
        proc = kb_process(repo, *night)
        wait_for(lambda: len(seen.requests) >= before_night_2 + 2 + 20, proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        journal = repo / "kb-evidence" / f"{REPORT_2}.journal.jsonl"
        stopped = read_journal(journal)
        assert stopped is not None
        old_runs = {label for label in stopped.settled if label.startswith("target:")}
        assert 18 <= len(old_runs) < 50
        if changed:
            seen.changed = "As your assistant I decline"  # a hidden system prompt
        asked_before = len(seen.requests)
        resumed = run_kb(repo, "sweep", "s.toml", "--resume")
        asked = prompts_asked(seen, asked_before)
    assert resumed.exit_code == 0, resumed.stderr
    # The canary is always asked again, before any target run.
    assert sorted(asked[:2]) == ["Ping?", "Pong?"]
    targets = [p for p in asked if p.startswith("q")]
    runs = [
        json.loads(line)
        for line in (repo / "kb-evidence" / f"{REPORT_2}.jsonl").read_text().splitlines()
    ]
    outputs = {r["output"].split(":")[0] for r in runs if r["kind"] == "target"}
    claims = parse_store((repo / STORE).read_bytes(), "store").claims
    (night_2,) = [c for c in claims if c.id.startswith(REPORT_2)]
    assert night_2.metrics is not None and night_2.metrics["n"] == 50
    if changed:
        # every case asked of the new model: none of the old model's answers is pooled
        assert sorted(targets) == sorted(f"q{i}" for i in range(50))
        assert outputs == {"As your assistant I decline"}
        assert night_2.polarity == "weakness" and night_2.metrics["passRate"] == 0
        assert "resume: openai:m answers its canary differently" in resumed.stderr
        assert "its cells start a new epoch" in " ".join(resumed.stderr.split())
        epochs = json.loads((repo / "rulvar.models.epochs.json").read_text())
        (epoch,) = epochs["cells"].values()
        assert epoch["start"] == {
            "reportId": REPORT_2,
            "observedAt": "2026-11-29T02:00:00.000Z",
            "reason": "drift",
        }
        assert [n["reportId"] for n in epoch["nights"]] == [REPORT_2]
        # night 1's strength was measured on the old model: flipped stale, then retired
        night_1 = [c for c in claims if not c.id.startswith(REPORT_2)]
        assert [c.status for c in night_1] != ["active"]
        # the old answers stay in the journal's history (git ignores the journal; the
        # night is whole now, so it is gone): they were never pooled, never lost to a
        # later resume either
    else:
        # the same model: only what the journal did not hold is paid for again
        assert len(targets) == 50 - len(old_runs)
        assert outputs == {"echo"}
        assert night_2.polarity == "strength"
        assert "resume:" not in resumed.stderr
    assert git(repo, "log", "--format=%s").count("kb: sweep") == 2


def test_a_resume_whose_model_changed_forgets_the_old_answers_for_every_later_resume(
    repo: Path,
) -> None:
    """The old model's journaled answers are marked in the journal, not only skipped once:
    a resume that is itself stopped, then resumed, still never pools them."""
    assert run_kb(repo, "init").exit_code == 0
    extra = 'concurrency = 2\nsampling = "full"'
    with fake_openai_server(latency_s=0.02) as (base, seen):
        loopback_spec(repo / "s.toml", base, cases=50, canary=True, extra_sweep=extra)
        night = ["sweep", "s.toml", "--quiet", "--observed-at", NIGHT_2]
        proc = kb_process(repo, *night)
        wait_for(lambda: len(seen.requests) >= 2 + 20, proc)
        proc.send_signal(signal.SIGINT)
        assert proc.communicate(timeout=120) and proc.returncode == 130
        seen.changed = "Changed"
        asked_before = len(seen.requests)
        proc = kb_process(repo, "sweep", "s.toml", "--quiet", "--resume")
        wait_for(lambda: len(seen.requests) >= asked_before + 2 + 10, proc)
        proc.send_signal(signal.SIGINT)
        assert proc.communicate(timeout=120) and proc.returncode == 130
        resumed = run_kb(repo, "sweep", "s.toml", "--resume")
    assert resumed.exit_code == 0, resumed.stderr
    runs = [
        json.loads(line)
        for line in (repo / "kb-evidence" / f"{REPORT_2}.jsonl").read_text().splitlines()
    ]
    outputs = [r["output"] for r in runs if r["kind"] == "target"]
    assert len(outputs) == 50 and all(o.startswith("Changed: ") for o in outputs)


# -- 5. what cannot succeed is not paid for ---------------------------------------------------


def refused_spec(path: Path, base: str) -> None:
    models = {
        "openai:good": {"api_base": base, "api_key": KEY, "cost_usd": 0.001},
        "openai:unknown": {"api_base": base, "api_key": KEY, "cost_usd": 0.001},
        "openai:wrongkey": {"api_base": base, "api_key_env": "WRONG_KEY", "cost_usd": 0.001},
    }
    prompts = [f"q{i}" for i in range(30)]
    echo_spec(path, models, prompts, canary=["Ping?", "Pong?"])  # concurrency 8


def test_a_model_refused_the_same_way_three_times_is_not_called_again(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WRONG_KEY", "sk-wrong-key-0000000000")
    assert run_kb(repo, "init").exit_code == 0
    with fake_openai_server() as (base, seen):
        seen.refuse.update({"unknown": 404, "wrongkey": 401})
        refused_spec(repo / "s.toml", base)
        swept = run_kb(repo, "sweep", "s.toml", "--observed-at", NIGHT_1)
        calls = Counter(r["body"]["model"] for r in seen.requests)
    assert swept.exit_code == 1, swept.stderr  # two models' cells are incomplete
    # the two canary probes and the first target run: three calls each, no more
    assert calls == {"good": 32, "unknown": 3, "wrongkey": 3}
    err = " ".join(swept.stderr.split())
    assert (
        f"stopped: openai:unknown at {base}: HTTP 404 on its first 3 calls (the endpoint does "
        "not know this model: check the model's name and its api_base); 29 more runs not sent "
        "tonight, its cells are incomplete"
    ) in err
    assert f"stopped: openai:wrongkey at {base}: HTTP 401 on its first 3 calls (the key was " in err
    # a refused key is not called missing
    assert "the provider refused the key it was sent (from $WRONG_KEY): check its value" in err
    assert "set params.api_key_env to the variable" not in err
    claims = parse_store((repo / STORE).read_bytes(), "store").claims
    assert [c.subject["model"] for c in claims] == ["openai:good"]  # the others went on


def test_a_connection_error_names_the_endpoint(repo: Path) -> None:
    import socket

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert run_kb(repo, "init").exit_code == 0
    base = f"http://127.0.0.1:{port}/v1"
    loopback_spec(repo / "s.toml", base, cases=1)
    swept = run_kb(repo, "sweep", "s.toml", "--observed-at", NIGHT_1)
    assert swept.exit_code == 1
    assert f"(connecting to {base})" in " ".join(swept.stdout.split())


# -- 4. --deadline stops a night, journaled and resumable -------------------------------------


def test_a_deadline_stops_the_night_journaled_and_a_resume_finishes_it(repo: Path) -> None:
    assert run_kb(repo, "init").exit_code == 0
    with fake_openai_server(hang_s=None) as (base, seen):
        spec = loopback_spec(
            repo / "s.toml", base, cases=20, extra_sweep='concurrency = 2\nsampling = "full"'
        )
        # the last two cases hang until released: the deadline passes while they wait
        text = spec.read_text().replace('prompt = "q18"', 'prompt = "hang q18"')
        text = text.replace('prompt = "q19"', 'prompt = "hang q19"')
        spec.write_text(
            text.replace('"echo: q18"', '"echo: hang q18"').replace(
                '"echo: q19"', '"echo: hang q19"'
            )
        )
        stopped = run_kb(repo, "sweep", "s.toml", "--observed-at", NIGHT_1, "--deadline", "2s")
        assert stopped.exit_code == 1, stopped.stderr
        assert "the deadline 20" in stopped.stderr and "passed: the job stopped" in stopped.stderr
        assert "kb sweep SPEC --resume finishes the night" in " ".join(stopped.stderr.split())
        assert git(repo, "log", "--format=%s").count("kb: sweep") == 0
        journal = read_journal(
            repo / "kb-evidence" / "kb-sweep-2026-11-28T02:00:00.000Z.journal.jsonl"
        )
        assert journal is not None
        held = set(journal.settled)
        seen.release.set()
        asked_before = len(seen.requests)
        resumed = run_kb(repo, "sweep", "s.toml", "--resume")
        asked = prompts_asked(seen, asked_before)
    assert resumed.exit_code == 0, resumed.stderr
    assert {"hang q18", "hang q19"} <= set(asked)
    assert not {f"target:openai:m/c{i:02d}" for i in range(18) if f"q{i}" in asked} & held
    claims = parse_store((repo / STORE).read_bytes(), "store").claims
    assert [c.metrics["n"] for c in claims if c.metrics] == [20]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("soon", "is neither an instant"),
        ("2020-01-01T00:00:00Z", "has passed already"),
        ("0s", "must lie in the future"),
    ],
)
def test_a_deadline_that_cannot_be_met_is_refused_before_any_call(
    repo: Path, given: str, said: str
) -> None:
    assert run_kb(repo, "init").exit_code == 0
    with fake_openai_server() as (base, seen):
        loopback_spec(repo / "s.toml", base, cases=1)
        swept = run_kb(repo, "sweep", "s.toml", "--observed-at", NIGHT_1, "--deadline", given)
        assert seen.requests == []
    assert swept.exit_code == 2 and said in swept.stderr


# -- 6. a canned refusal is an answer; an error page is not -----------------------------------


def two_model_spec(path: Path, base: str, cases: int = 40) -> None:
    models = {
        "openai:a": {"api_base": base, "api_key": KEY, "cost_usd": 0.001},
        "openai:b": {"api_base": base, "api_key": KEY, "cost_usd": 0.001},
    }
    echo_spec(path, models, [f"q{i}" for i in range(cases)])


REFUSED = {f"q{i}" for i in range(0, 40, 3)}  # 14 of 40
CANNED = "I can't help with that."


def test_a_model_refusing_a_third_of_its_cases_loses_its_strength(repo: Path) -> None:
    """v4 read the canned refusal as an outage: the degraded model kept its strength."""
    assert run_kb(repo, "init").exit_code == 0
    with fake_openai_server() as (base, seen):
        two_model_spec(repo / "s.toml", base)
        first = run_kb(repo, "sweep", "s.toml", "--observed-at", NIGHT_1)
        assert first.exit_code == 0, first.stderr
        seen.refusals["a"] = (REFUSED, CANNED)
        asked_before = len(seen.requests)
        second = run_kb(repo, "sweep", "s.toml", "--observed-at", NIGHT_2, "--json")
        asked = prompts_asked(seen, asked_before)
    assert second.exit_code == 0, second.stderr
    report = json.loads(second.stdout)
    (cell,) = [c for c in report["cells"] if c["model"] == "openai:a"]
    assert cell["n"] == 40 and cell["passRate"] == 26 / 40  # the refusals scored as failures
    assert "incompleteReason" not in cell
    # asked again once: ten of the refused prompts, then never again
    assert len(asked) == 80 + 10
    claims = parse_store((repo / STORE).read_bytes(), "store").claims
    a = {c.id: c for c in claims if c.subject["model"] == "openai:a"}
    night_1 = a["kb-sweep-2026-11-28T02:00:00.000Z/openai:a/extraction"]
    assert night_1.status == "archived"  # the strength is falsified by the real answers


ALL = {f"q{i}" for i in range(40)}
BUSY = "Our servers are busy right now. Please try again in a few minutes."


@pytest.mark.parametrize(
    ("refusals", "why", "asked_again"),
    [
        # one text for every model on the endpoint: the endpoint's, not a model's
        (
            {"a": (REFUSED, CANNED), "b": (REFUSED, CANNED)},
            "another model on the same endpoint gave it tonight",
            0,
        ),
        ({"a": (REFUSED, '{"error": {"message": "overloaded"}}')}, "an error page or an error", 0),
        ({"a": (REFUSED, "<html><body>Service unavailable</body></html>")}, "error page", 0),
        # a plain-text outage page to every prompt of one model (found by a newcomer: v5's
        # first cut scored it and falsified a true strength)
        ({"a": (ALL, BUSY)}, "it answered every prompt: an outage's pattern", 0),
        ({"a": (REFUSED, "try again later ({count})")}, "did not come back the same", 10),
    ],
    ids=["endpoint-page", "json-error", "html", "busy-everywhere", "varies"],
)
def test_a_reply_that_is_not_the_models_own_answer_stays_suspect(
    repo: Path, refusals: dict[str, tuple[set[str], str]], why: str, asked_again: int
) -> None:
    assert run_kb(repo, "init").exit_code == 0
    with fake_openai_server() as (base, seen):
        two_model_spec(repo / "s.toml", base)
        seen.refusals.update(refusals)
        swept = run_kb(repo, "sweep", "s.toml", "--observed-at", NIGHT_1, "--json")
        asked = len(seen.requests)
    assert swept.exit_code == 1, why
    report = json.loads(swept.stdout)
    (cell,) = [c for c in report["cells"] if c["model"] == "openai:a"]
    assert cell["incompleteReason"].startswith("suspect:"), why
    assert why in cell["incompleteReason"]  # and says why it is not the model's answer
    assert not [c for c in report["claims"] if c["subject"]["model"] == "openai:a"]
    assert asked == 80 + asked_again  # what cannot be an answer is not asked again


def test_a_text_the_models_canary_got_too_is_not_its_answer(repo: Path) -> None:
    assert run_kb(repo, "init").exit_code == 0
    with fake_openai_server() as (base, seen):
        two_model_spec(repo / "s.toml", base)
        text = (repo / "s.toml").read_text() + '\n[canary]\nprompts = ["Ping?", "Pong?"]\n'
        (repo / "s.toml").write_text(text.replace("max_total_usd = 50", "max_total_usd = 50"))
        seen.refusals["a"] = (REFUSED | {"Ping?", "Pong?"}, BUSY)
        swept = run_kb(repo, "sweep", "s.toml", "--observed-at", NIGHT_1, "--json")
    report = json.loads(swept.stdout)
    (cell,) = [c for c in report["cells"] if c["model"] == "openai:a"]
    assert "the model's canary got it too" in cell["incompleteReason"]
    (canary,) = [c for c in report["canary"] if c["model"] == "openai:a"]
    assert canary["status"] == "incomplete"  # the two checks agree: an outage


# -- 7. a killed calibration resumed pays nothing twice ---------------------------------------


def test_a_calibration_stopped_midway_is_finished_by_the_next_without_paying_twice(
    repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from tests.test_calibrate_kills import AT, spec_text
    from tests.test_sensitive_canary import TABLES

    calibrate = ["--as-of", AT, "canary", "--calibrate", "spec.toml"]
    with fake_openai_server(latency_s=0.01) as (base, seen):
        seen.distributions.update(TABLES)
        # the same calibration, never stopped, in a repository of its own: what it asks
        whole = tmp_path_factory.mktemp("whole") / "repo"
        whole.mkdir()
        git(whole, "init", "-q")
        (whole / "spec.toml").write_text(spec_text(base))
        subprocess.run([sys.executable, "-m", "kb", "init"], cwd=whole, check=True)
        done = subprocess.run(
            [sys.executable, "-m", "kb", *calibrate], cwd=whole, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        uncut = Counter(json.dumps(r["body"], sort_keys=True) for r in seen.requests)
        seen.requests.clear()
        assert run_kb(repo, "init").exit_code == 0
        (repo / "spec.toml").write_text(spec_text(base))
        proc = kb_process(repo, *calibrate)
        wait_for(lambda: len(seen.requests) >= sum(uncut.values()) // 3, proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert (repo / "kb-evidence" / "canary-calibration.journal.jsonl").exists()
        finished = run_kb(repo, *calibrate)
        asked = Counter(json.dumps(r["body"], sort_keys=True) for r in seen.requests)
    assert finished.exit_code == 0, finished.stderr
    # each call once in all: only those in flight at the Ctrl-C (at most 8) asked again
    assert set(asked) == set(uncut)
    assert sum((asked - uncut).values()) <= 8
    assert not (repo / "kb-evidence" / "canary-calibration.journal.jsonl").exists()
    ours = json.loads((repo / "rulvar.models.canary.json").read_text())
    theirs = json.loads((whole / "rulvar.models.canary.json").read_text())
    assert ours["subjects"] == theirs["subjects"]  # the same baselines as never stopped


# -- 8. git's locks: every one at once, whether a git holds them, how to remove them -----------


NOTE = [
    "note", "--model", "openai:m", "--task-class", "extraction", "--polarity", "weakness",
    "--statement", "weak at extraction", "--approver", "alice", "--ruled-out", "prompt",
    "--evidence", "journal:run-1:1",
]  # fmt: skip


@pytest.mark.parametrize("live", [False, True], ids=["killed-git", "running-git"])
def test_every_lock_a_git_left_is_named_at_once_and_none_is_removed(repo: Path, live: bool) -> None:
    assert run_kb(repo, "init").exit_code == 0
    locks = [repo / ".git" / "index.lock", repo / ".git" / "HEAD.lock"]
    locks.append(
        repo / ".git" / "refs" / "heads" / f"{git(repo, 'branch', '--show-current').strip()}.lock"
    )
    for lock in locks:
        lock.write_text("")
    holder = None
    if live:  # a git still at work in the repository: its locks are its own
        holder = subprocess.Popen(
            ["git", "hash-object", "--stdin"], cwd=repo, stdin=subprocess.PIPE, text=True
        )
    try:
        noted = run_kb(repo, "--as-of", "2026-11-28T02:00:00Z", *NOTE)
    finally:
        if holder is not None:
            holder.communicate("")
    assert noted.exit_code != 0
    (line,) = noted.stderr.strip().splitlines()  # one line, every lock in it
    for lock in locks:
        assert str(lock) in line, line
        assert lock.exists()  # kb never removes one
    if live:
        assert (
            f"a git process is running in this repository (pid {holder.pid}: git hash-object"
            in line
        )
    else:
        assert "no git process is running in this repository: a git that was killed left" in line
        removal = line.split("(rm ", 1)[1].split(")", 1)[0]  # the one command for all
        assert set(removal.split()) == {str(lock) for lock in locks}


# -- 9. smaller ------------------------------------------------------------------------------


def _alarmed_report(retired: bool) -> ReportFile:
    cell = CellRecord(
        model="openai:m",
        task_class="extraction",
        pass_rate=0.4,
        n=10,
        planned_n=10,
        total_cost_usd=0.0,
        case_names=tuple(f"c{i}" for i in range(10)),
        wilson95=(0.17, 0.69),
        outcome="none",
        epoch=EpochRecord(
            reason="alarm",
            started_at="2026-11-28T02:00:00.000Z",
            started_in="r2",
            nights=1,
            n=10,
            pass_rate=0.4,
            down=6.0,
            up=0.0,
            alarm="down",
            pool=10,
            ran=10,
            why="the detector alarmed",
        ),
    )
    gone = RetiredRecord(claim_id="r1/openai:m/extraction", action="archived", reason="falsified")
    return ReportFile(
        report_id="r2",
        observed_at="2026-11-28T02:00:00.000Z",
        gate=GateRecord(kind="interval", strength=0.9, weakness=0.5, tolerance=0.1),
        pool=(),
        worst_case_usd=None,
        spent_usd=0.0,
        cells=(cell,),
        claims=(),
        retired=(gone,) if retired else (),
        canary=(),
    )


def test_the_alarm_line_says_a_claim_was_retired_only_when_one_was() -> None:
    (held,) = alarm_lines(_alarmed_report(retired=True))
    assert held.endswith("a held strength is retired and a new epoch began")
    (none,) = alarm_lines(_alarmed_report(retired=False))
    assert none.endswith("a new epoch began (no claim was held)") and "retired" not in none


def test_a_change_that_rounds_to_nothing_has_no_arrow() -> None:
    from kb.views.html import CellPoint, _delta

    cell = _alarmed_report(retired=False).cells[0].model_copy(update={"epoch": None})
    tiny = [CellPoint("2026-11-27T02:00:00.000Z", "r1", 0.397, True)]
    shown = _delta(cell, tiny)
    assert "▲" not in shown and "=" in shown and "±0.00" in shown
    moved = [CellPoint("2026-11-27T02:00:00.000Z", "r1", 0.35, True)]
    assert "▲ +0.05" in _delta(cell, moved)


def test_the_dry_runs_batch_line_is_the_transports_own_rule() -> None:
    from kb.engine.batch import batch_forecast
    from kb.engine.requests import build_request
    from kb.engine.runs import PlannedRun
    from kb.engine.transports.anthropic_batch import AnthropicBatchTransport

    spec = ModelSpec("anthropic:claude-x", params={"api_key": "sk-ant-test-000000"})
    plain = PlannedRun("target:a/1", "target", spec, build_request(spec, "hi"), 0.01)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    shaped = PlannedRun(
        "target:a/2", "target", spec, build_request(spec, "hi", response_schema=schema), 0.01
    )
    from kb.engine.transports.live import LiveTransport

    transport = AnthropicBatchTransport(LiveTransport(), 1.0, 60.0)
    found = batch_forecast([plain, shaped], transport.accepts)
    assert (found.asked, found.batched) == (2, 1)  # the schema's run goes live
    assert "the others run live (at the live price)" in found.text


def test_a_dataset_json_error_reads_once_at_its_column(tmp_path: Path) -> None:
    from kb.evals.datasets import read_records

    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "unterminated}\n')
    issues: list[str] = []
    read_records(path, issues, "d.jsonl")
    assert any("Unterminated string starting at column" in issue for issue in issues), issues
    assert not any("at at" in issue for issue in issues)


def test_a_row_a_newer_night_decided_prints_tonights_rate_with_tonights_interval() -> None:
    """v4 printed ``1.00 [0.74, 0.89]``: tonight's rate beside the epoch's interval."""
    from kb.engine.runs import RunResult
    from kb.evals.suite import CaseVerdict
    from kb.store.epochs import CellEpoch, EpochNight, EpochStart
    from kb.sweep.cells import SweepCell
    from kb.sweep.gate import CellEstimate
    from kb.sweep.report import cell_record
    from kb.sweep.sampling import CellEpochNight, CellSuite

    member = ModelSpec("openai:m")
    names = tuple(f"c{i:02d}" for i in range(20))
    epoch = CellEpoch(  # the epoch pooled a worse night: 0.8 over its cases
        suite="a" * 64,
        start=EpochStart(report_id="r0", observed_at="2026-11-26T02:00:00.000Z", reason="first"),
        nights=(EpochNight(report_id="r0", observed_at="2026-11-26T02:00:00.000Z", cases=names),),
        cases=names,
        scores=(1.0,) * 16 + (0.0,) * 4,
        counts=(1,) * 20,
    )
    suite = CellSuite(member, "extraction", names, epoch.suite, epoch, None, "strength")
    night = CellEpochNight(suite, epoch, None, None, 20, 20, "settled")

    def passing(name: str) -> CaseVerdict:
        run = RunResult(f"target:m/{name}", "target", "m", "ok", "x", price_source="declared")
        return CaseVerdict(name, "extraction", run, (), (), False, True)

    cell = SweepCell(member, "extraction", tuple(map(passing, names)), epoch=night)
    from kb.sweep.gate import GatePolicy

    record = cell_record(cell, GatePolicy(), None, newer_night="r3")
    low, high = record.wilson95
    assert record.pass_rate == 1.0 and low <= 1.0 <= high  # tonight's 20/20, its own interval
    assert (low, high) == CellEstimate(20, 20).interval


def test_an_older_nights_canary_says_what_it_saw_and_that_it_was_not_applied(
    repo: Path,
) -> None:
    """v4 called it incomplete although every probe answered."""
    from tests import test_nights_in_order as nights

    path = nights.spec(repo / "s.toml")
    text = path.read_text().replace("max_total_usd = 5", "max_total_usd = 5\ncanary_usd = 0.01")
    text = text.replace(  # real answers to the probes (one answer to all would be an outage)
        "cost_usd = 0.001 }",
        'cost_usd = 0.001, responses = { "Ping?" = "pong", "Pong?" = "ping" } }',
    )
    path.write_text(text + '\n[canary]\nprompts = ["Ping?", "Pong?"]\n')
    assert run_kb(repo, "init").exit_code == 0
    first = run_kb(repo, "sweep", str(path), "--quiet", "--observed-at", nights.NIGHT_1)
    assert first.exit_code == 0, first.stderr
    nights.stop_night_2_before_its_commit(repo, path)
    third = run_kb(repo, "sweep", str(path), "--quiet", "--observed-at", nights.NIGHT_3)
    assert third.exit_code == 0, third.stderr
    resumed = run_kb(
        repo, "sweep", str(path), "--json", "--observed-at", nights.NIGHT_2, "--resume"
    )
    assert resumed.exit_code == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["reportId"] == nights.ID_2
    canary = report["canary"]
    assert canary and all(c["status"] == "no-drift" for c in canary), [
        (c["status"], c.get("reason")) for c in canary
    ]
    for found in canary:
        assert found["reason"].startswith("not applied: the store holds a newer night")
        assert found["flipped"] == []


def test_a_sweep_meeting_a_lock_left_by_git_refuses_before_paying(repo: Path) -> None:
    """A newcomer's find: v5's first cut paid for every call, then failed at the commit."""
    assert run_kb(repo, "init").exit_code == 0
    (repo / ".git" / "index.lock").write_text("")
    with fake_openai_server() as (base, seen):
        loopback_spec(repo / "s.toml", base, cases=3)
        swept = run_kb(repo, "sweep", "s.toml", "--observed-at", NIGHT_1)
        assert seen.requests == []
    assert swept.exit_code == 2
    assert "index.lock: no git process is running" in swept.stderr
    assert "nothing was sent, nothing paid" in swept.stderr
    assert (repo / ".git" / "index.lock").exists()


def test_a_night_stopped_in_its_commit_resumes_without_asking_anything(repo: Path) -> None:
    """Every run was measured before the commit: the resume pools nothing new, so it need not
    ask the canary again (and a night killed in its commit window resumes offline)."""
    assert run_kb(repo, "init").exit_code == 0
    with fake_openai_server() as (base, seen):
        spec = loopback_spec(repo / "s.toml", base, cases=20, canary=True)
        assert run_kb(repo, "sweep", "s.toml", "--observed-at", NIGHT_1).exit_code == 0
        killed = subprocess.run(  # night 2 killed at its commit's first rename (the intent)
            ["strace", "-o", "/dev/null", "-e", "trace=rename", "-e",
             "inject=rename:signal=KILL:when=1", sys.executable, "-m", "kb", "sweep", str(spec),
             "--quiet", "--observed-at", NIGHT_2],
            cwd=repo, capture_output=True, text=True, check=False,
            # pacing alone: a shared bucket's document is renamed into place at each call,
            # and the rename to kill is the commit's
            env={**os.environ, "KB_RATE_LIMITS": "process"},
        )  # fmt: skip
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        asked = len(seen.requests)
        resumed = run_kb(repo, "sweep", "s.toml", "--resume")
        assert len(seen.requests) == asked  # not even the canary
    assert resumed.exit_code == 0, resumed.stderr
    assert git(repo, "log", "--format=%s").count("kb: sweep") == 2
