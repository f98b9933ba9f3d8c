"""The journal under faults (SPEC 13.1, "The journal"), on the real path.

A full disk stops the sweep before another call is sent, in one line; an
append never joins a torn last line; SIGINT's line counts the calls in
flight; a journal names its spec relative to the store's work tree, so a
resume from another directory is accepted. Each case runs a real ``kb``
(in-process or as a process) against the loopback server through litellm
and real git, and counts what the server was asked.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from kb.engine.journal import RunJournal, read_journal
from kb.store.validation import parse_store
from tests.cli_helpers import kb
from tests.conftest import git
from tests.fake_openai import Seen, fake_openai_server
from tests.test_never_lose import NIGHT_1, STORE, kb_process, loopback_spec, prompts_asked, state

JOURNAL = Path("kb-evidence") / "kb-sweep-2026-11-28T02:00:00.000Z.journal.jsonl"
CLAIM = "kb-sweep-2026-11-28T02:00:00.000Z/openai:m/extraction"
IN_FLIGHT = re.compile(r"(no|\d+) calls? (?:was|were) in flight")

# These nights must run every case (a full disk cuts them at a known place and a resume
# asks the rest): the nightly rule (SPEC 13.7) may stop a clear cold start early, so they
# run "full". The journal is what is tested here; a resume under the nightly rule is
# tests/test_never_lose.py's Ctrl-C drill.
WHOLE_POOL = 'concurrency = 4\nsampling = "full"'


def held(spec: Path, indexes: range) -> Path:
    """Cases ``indexes`` ask ``hang N``: the server holds them until ``seen.release``."""
    text = spec.read_text()
    for i in indexes:
        text = text.replace(f'prompt = "q{i}"\n', f'prompt = "hang {i}"\n')
        text = text.replace(f'expected = "echo: q{i}"', f'expected = "echo: hang {i}"')
    spec.write_text(text)
    return spec


def in_flight(line: str) -> int:
    """The number of calls in flight an error line names."""
    found = IN_FLIGHT.search(line)
    assert found is not None, line
    return 0 if found.group(1) == "no" else int(found.group(1))


def journaled_labels(journal: Path) -> set[str]:
    found = read_journal(journal)
    assert found is not None
    return set(found.settled)


def prompt_of(label: str) -> str:
    """``…/c07`` → ``q7`` (the prompt of a loopback case)."""
    return f"q{int(label.rsplit('/c', 1)[1])}"


def sweep_process(repo: Path, spec: Path, *extra: str) -> subprocess.Popen[str]:
    return kb_process(repo, "sweep", str(spec), "--quiet", *extra)


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    """Poll the server's log (not a clock): a hang guard, not a speed bound."""
    import time

    deadline = time.monotonic() + 120
    while not condition():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)


def interrupt(proc: subprocess.Popen[str]) -> str:
    """SIGINT ``proc``; its stderr once it has exited 130."""
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    return err


def kb_init(repo: Path) -> None:
    subprocess.run([sys.executable, "-m", "kb", "init"], cwd=repo, check=True, capture_output=True)


# -- 1. a full disk -------------------------------------------------------------------------


class FullDisk:
    """The journal's file system fills once the journal holds ``room`` bytes.

    ``where="write"``: the write that crosses the limit writes what fits, the
    next raises ENOSPC (as a real file system does); ``where="fsync"``: every
    write lands in the page cache and the fsync past the limit reports ENOSPC.
    Only journal files are affected; ``room = None`` frees the disk.
    """

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        room: int,
        where: str,
        asked: Callable[[], int] = lambda: 0,
    ):
        self.room: int | None = room
        self.requests_at_failure: int | None = None
        """What the provider had been asked when the first write failed."""
        self._asked = asked
        real_write, real_fsync = os.write, os.fsync

        def write(fd: int, data: Any) -> int:
            if where == "write" and self._full(fd):
                left = self.room - os.fstat(fd).st_size  # type: ignore[operator]
                if left <= 0:
                    self._fail()
                if len(data) > left:
                    return real_write(fd, bytes(data)[:left])
            return real_write(fd, data)

        def fsync(fd: int) -> None:
            if where == "fsync" and self._full(fd) and os.fstat(fd).st_size > self.room:  # type: ignore[operator]
                self._fail()
            real_fsync(fd)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "fsync", fsync)

    def _full(self, fd: int) -> bool:
        if self.room is None:
            return False
        try:
            return os.readlink(f"/proc/self/fd/{fd}").endswith(".journal.jsonl")
        except OSError:
            return False

    def _fail(self) -> None:
        if self.requests_at_failure is None:
            self.requests_at_failure = self._asked()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def asked_so_far(seen: Seen) -> int:
    with seen.lock:
        return len(seen.requests)


def assert_whole_lines(journal: Path) -> None:
    """No torn tail: every line of the journal is a complete JSON line."""
    text = journal.read_bytes()
    assert text.endswith(b"\n"), text[-80:]
    for line in text.decode().splitlines():
        json.loads(line)


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_a_full_disk_stops_the_sweep_in_one_line_and_resume_pays_nothing_twice(
    runner: CliRunner, repo: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Guaranteed: no call is *started* after the write that failed. Calls already
    started then (at most ``concurrency - 1``, the line counts them) are cut short;
    the run whose write failed and those of them that reached the provider are all
    a resume pays again."""
    assert kb(runner, "init").exit_code == 0
    with fake_openai_server(latency_s=0.005) as (base, seen):
        spec = loopback_spec(repo / "s.toml", base, cases=80, extra_sweep=WHOLE_POOL)
        disk = FullDisk(monkeypatch, room=9000, where=where, asked=lambda: asked_so_far(seen))
        before = state(repo)
        night = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
        assert night.exit_code == 1, night.stderr
        lines = night.stderr.splitlines()
        assert len(lines) == 1, night.stderr  # not a traceback per run
        assert "No space left on device" in lines[0] and JOURNAL.name in lines[0], lines[0]
        assert "nothing committed" in lines[0]
        cut_short = in_flight(lines[0])
        assert cut_short <= 3
        assert state(repo) == before
        asked = len(seen.requests)
        assert disk.requests_at_failure is not None
        assert asked - disk.requests_at_failure <= cut_short  # nothing started afterwards
        assert_whole_lines(repo / JOURNAL)
        kept = journaled_labels(repo / JOURNAL)
        assert 0 < len(kept) and asked - len(kept) <= 1 + cut_short
        disk.room = None  # the disk is freed
        resumed = kb(runner, "sweep", str(spec), "--quiet", "--resume")
        assert resumed.exit_code == 0, resumed.stderr
        again = prompts_asked(seen, asked)
        everything = prompts_asked(seen)
    assert sorted(again) == sorted({f"q{i}" for i in range(80)} - {prompt_of(k) for k in kept})
    paid_twice = [p for p, n in Counter(everything).items() if n > 1]
    assert len(paid_twice) == asked - len(kept) <= 1 + cut_short
    claims = parse_store((repo / STORE).read_bytes(), "store").claims
    assert [c.id for c in claims] == [CLAIM]


def test_a_batch_the_journal_cannot_record_is_named_as_billing_and_not_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch exists at the provider once created; a resume could not find it."""
    from kb.engine.budget import SpendEnvelope
    from kb.engine.requests import ModelSpec
    from kb.engine.scheduler import EngineConfig
    from kb.errors import JournalUnwritable
    from tests.engine_helpers import engine_for, plan
    from tests.fake_batches import fake_batch_server

    path = tmp_path / "night.journal.jsonl"
    config = EngineConfig(batch=True, batch_poll_s=0.01, batch_poll_max_s=0.02, timeout_s=10.0)
    with fake_batch_server() as (base, seen):
        monkeypatch.setenv("KB_TEST_KEY", "sk-test-batch")
        spec = ModelSpec(
            "openai:gpt-4o-mini", params={"api_base": base, "api_key_env": "KB_TEST_KEY"}
        )
        journal = RunJournal.open(path, "r1", "2026-11-01T02:00:00.000Z", spec="s.toml")
        FullDisk(monkeypatch, room=path.stat().st_size, where="write")  # full after the header
        with pytest.raises(JournalUnwritable) as stopped:
            engine_for(config, journal=journal).run(plan(spec, ["a", "b"]), SpendEnvelope(cap=None))
        journal.close()
        polled = seen.calls("GET", "/v1/batches/batch_1")
    said = str(stopped.value)
    assert "No space left on device" in said and "no call was in flight" in said
    assert "batch batch_1 was created at the provider but not journaled" in said
    assert "kb sweep --resume collects it" not in said  # it could not
    assert seen.calls("POST", "/v1/batches") == 1 and polled == 0  # not waited on
    assert_whole_lines(path)


def mount_small_tmpfs(directory: Path) -> None:
    """A 1 MiB tmpfs on ``directory`` (root only; skipped, saying why, elsewhere)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip(
            "a real full file system needs root to mount a small tmpfs; "
            "test_a_full_disk_stops_the_sweep_in_one_line_and_resume_pays_nothing_twice "
            "covers the same path with ENOSPC injected"
        )
    directory.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")


def fill(directory: Path, leave: int) -> Path:
    """Fill ``directory``'s file system but ``leave`` bytes; the filler file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"x" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    os.truncate(filler, filler.stat().st_size - leave)
    return filler


def test_a_real_full_tmpfs_stops_the_sweep_and_a_resume_finishes_the_night(repo: Path) -> None:
    evidence = repo / "kb-evidence"
    mount_small_tmpfs(evidence)
    try:
        kb_init(repo)
        with fake_openai_server(latency_s=0.005) as (base, seen):
            spec = loopback_spec(repo / "s.toml", base, cases=80, extra_sweep=WHOLE_POOL)
            filler = fill(evidence, leave=12 * 1024)
            night = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "kb",
                    "sweep",
                    spec.name,
                    "--quiet",
                    "--observed-at",
                    NIGHT_1,
                ],
                cwd=repo,
                capture_output=True,
                text=True,
            )
            assert night.returncode == 1, night.stderr
            lines = night.stderr.splitlines()
            assert len(lines) == 1 and "No space left on device" in lines[0], night.stderr
            cut_short = in_flight(lines[0])
            asked = len(seen.requests)
            assert_whole_lines(repo / JOURNAL)
            kept = journaled_labels(repo / JOURNAL)
            assert 0 < len(kept) < 80 and asked - len(kept) <= 1 + cut_short
            filler.unlink()
            resumed = subprocess.run(
                [sys.executable, "-m", "kb", "sweep", "s.toml", "--quiet", "--resume"],
                cwd=repo,
                capture_output=True,
                text=True,
            )
            assert resumed.returncode == 0, resumed.stderr
            again = prompts_asked(seen, asked)
        assert sorted(again) == sorted({f"q{i}" for i in range(80)} - {prompt_of(k) for k in kept})
        assert [c.id for c in parse_store((repo / STORE).read_bytes(), "store").claims] == [CLAIM]
    finally:
        subprocess.run(["umount", "-l", str(evidence)], check=False)


# -- 1b. a torn last line is cut before the next append --------------------------------------


def test_a_torn_last_line_then_an_interrupted_resume_still_resumes(repo: Path) -> None:
    kb_init(repo)
    with fake_openai_server(latency_s=0.01) as (base, seen):
        spec = loopback_spec(repo / "s.toml", base, cases=90, extra_sweep=WHOLE_POOL)
        first = sweep_process(repo, spec, "--observed-at", NIGHT_1)
        wait_for(lambda: len(seen.requests) >= 20, first)
        interrupt(first)
        journal = repo / JOURNAL
        last = journal.read_text().splitlines()[-1]
        with open(journal, "a") as handle:  # a crash mid-write: half a line, no newline
            handle.write(last[: len(last) // 2])
        asked = len(seen.requests)
        second = sweep_process(repo, spec, "--resume")
        wait_for(lambda: len(seen.requests) >= asked + 20, second)
        interrupt(second)
        assert_whole_lines(journal)
        kept = journaled_labels(journal)
        asked = len(seen.requests)
        third = subprocess.run(
            [sys.executable, "-m", "kb", "sweep", str(spec), "--quiet", "--resume"],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        assert third.returncode == 0, third.stderr
        again = prompts_asked(seen, asked)
    assert sorted(again) == sorted({f"q{i}" for i in range(90)} - {prompt_of(k) for k in kept})
    assert [c.id for c in parse_store((repo / STORE).read_bytes(), "store").claims] == [CLAIM]


def journal_text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


RUN_LINE = json.dumps(
    {
        "label": "target:openai:m/extraction/c00",
        "key": "k0",
        "kind": "target",
        "model": "openai:m",
        "status": "ok",
        "output": "echo: q0",
        "usage": {"promptTokens": 5, "completionTokens": 2},
        "costUsd": 0.001,
        "priceSource": "declared",
        "attempts": 1,
        "error": None,
        "latencyMs": 3,
    }
)


@given(runs=st.integers(0, 4), cut=st.integers(1, 400), header_only=st.booleans())
def test_an_append_never_joins_a_torn_last_line(
    tmp_path_factory: pytest.TempPathFactory, runs: int, cut: int, header_only: bool
) -> None:
    """Whatever prefix of its last line a crash left, the next append starts a line."""
    path = tmp_path_factory.mktemp("j") / "r.journal.jsonl"
    header = json.dumps(
        {"journal": 1, "reportId": "r1", "observedAt": "2026-11-28T02:00:00.000Z", "spec": "s"}
    )
    whole = [header, *[RUN_LINE.replace("c00", f"c{i:02d}") for i in range(runs)]]
    torn = (header if header_only else RUN_LINE.replace("c00", "c99"))[: cut % len(RUN_LINE)]
    path.write_text(journal_text([] if header_only else whole) + torn)
    journal = RunJournal.open(path, "r1", "2026-11-28T02:00:00.000Z", spec="s")
    journal.discard(["nothing"])
    journal.close()
    text = path.read_text()
    assert text.endswith('{"discard": ["nothing"]}\n')
    found = read_journal(path)
    assert found is not None and found.report_id == "r1"
    assert found.lines == (0 if header_only else runs)


# -- 2. SIGINT says how many calls were in flight ---------------------------------------------


@pytest.mark.parametrize("workers", ["0", "2"])
def test_sigint_names_the_calls_in_flight_and_resume_asks_exactly_those_again(
    repo: Path, monkeypatch: pytest.MonkeyPatch, workers: str
) -> None:
    """Cases 30.. are held by the server: when it has received 30 + 4 requests, the four
    slots hold four calls the server has and kb has not settled: exactly what is in flight.
    (In this process, and through worker processes.)"""
    monkeypatch.setenv("KB_WORKERS", workers)
    kb_init(repo)
    with fake_openai_server(latency_s=0.005, hang_s=None) as (base, seen):
        spec = loopback_spec(repo / "s.toml", base, cases=60, extra_sweep=WHOLE_POOL)
        held(spec, range(30, 60))
        night = sweep_process(repo, spec, "--observed-at", NIGHT_1)
        wait_for(lambda: len(seen.requests) == 34, night)
        err = interrupt(night)
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: interrupted by SIGINT"), err
        received = len(seen.requests)
        kept = journaled_labels(repo / JOURNAL)
        assert in_flight(lines[0]) == received - len(kept) == 4, lines[0]
        assert "kb sweep --resume asks them again" in lines[0]
        first = set(prompts_asked(seen))
        seen.release.set()  # the provider answers at once from now on
        resumed = subprocess.run(
            [sys.executable, "-m", "kb", "sweep", str(spec), "--quiet", "--resume"],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        assert resumed.returncode == 0, resumed.stderr
        again = prompts_asked(seen, received)
    assert len(again) == len(set(again)) == 60 - len(kept)
    assert len(first & set(again)) == 4  # the calls in flight, asked again, and only they


def test_sigint_with_nothing_in_flight_says_so(repo: Path) -> None:
    """Every call answered, the sweep waits on nothing the provider holds: none in flight."""
    from kb.errors import JobInterrupted

    assert "in flight" not in str(JobInterrupted("SIGINT", 0.0))  # no engine: nothing sent
    assert "no call was in flight" in str(JobInterrupted("SIGINT", 0.0, in_flight=0))
    one = str(JobInterrupted("SIGINT", 0.0, in_flight=1, resumable=True))
    assert "1 call was in flight" in one and "kb sweep --resume" in one
    plain = str(JobInterrupted("SIGTERM", 0.0, in_flight=2))
    assert "2 calls were in flight" in plain and "resume" not in plain


# -- 3. the journal names the spec relative to the store's work tree -------------------------


def stopped_night(repo: Path, base: str, seen: Seen) -> Path:
    """A night of 5 cases stopped by SIGINT with the 5th in flight; its spec."""
    spec = held(
        loopback_spec(repo / "specs" / "s.toml", base, cases=5, extra_sweep="concurrency = 1"),
        range(4, 5),
    )
    night = sweep_process(repo, Path("specs/s.toml"), "--observed-at", NIGHT_1)
    wait_for(lambda: len(seen.requests) == 5, night)
    interrupt(night)
    return spec


def test_a_resume_in_another_checkout_of_the_same_repository_is_accepted(
    tmp_path: Path, repo: Path
) -> None:
    kb_init(repo)
    (repo / "specs").mkdir()
    with fake_openai_server(hang_s=None) as (base, seen):
        stopped_night(repo, base, seen)
        header = json.loads((repo / JOURNAL).read_text().splitlines()[0])
        assert header["spec"] == "specs/s.toml"  # not where this checkout happens to be
        elsewhere = tmp_path / "runner-2" / "checkout"
        shutil.copytree(repo, elsewhere, symlinks=True)
        shutil.copy(elsewhere / "specs" / "s.toml", elsewhere / "specs" / "other.toml")
        seen.release.set()
        before = (state(elsewhere), len(seen.requests))
        other = subprocess.run(
            [sys.executable, "-m", "kb", "sweep", "specs/other.toml", "--quiet", "--resume",
             "--observed-at", NIGHT_1],
            cwd=elsewhere, capture_output=True, text=True,
        )  # fmt: skip
        assert other.returncode == 2, other.stderr
        assert "is a sweep of specs/s.toml, not of specs/other.toml" in other.stderr
        assert (state(elsewhere), len(seen.requests)) == before
        resumed = subprocess.run(
            [sys.executable, "-m", "kb", "sweep", "s.toml", "--quiet", "--resume"],
            cwd=elsewhere / "specs",  # the store is found upwards; the spec named from here
            capture_output=True,
            text=True,
        )
        assert resumed.returncode == 0, resumed.stderr
        assert prompts_asked(seen, before[1]) == ["hang 4"]  # only the call cut short
    assert git(elsewhere, "log", "--format=%s").count("kb: sweep") == 1


def test_a_journal_naming_its_spec_by_absolute_path_is_still_resumed(repo: Path) -> None:
    """Journals written before the spec was named relative to the work tree."""
    kb_init(repo)
    (repo / "specs").mkdir()
    with fake_openai_server(hang_s=None) as (base, seen):
        spec = stopped_night(repo, base, seen)
        journal = repo / JOURNAL
        lines = journal.read_text().splitlines()
        header = json.loads(lines[0]) | {"spec": str(spec.resolve())}
        journal.write_text(journal_text([json.dumps(header), *lines[1:]]))
        shutil.copy(spec, repo / "specs" / "other.toml")
        seen.release.set()
        asked = len(seen.requests)
        other = subprocess.run(  # the spec's copy has no stopped night: it would start one
            [sys.executable, "-m", "kb", "sweep", "specs/other.toml", "--resume", "--dry-run"],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        assert other.returncode == 0, other.stderr
        assert "no journal of a stopped sweep of this spec" in other.stderr
        assert "the night starts now" in other.stderr
        resumed = subprocess.run(
            [sys.executable, "-m", "kb", "sweep", "specs/s.toml", "--quiet", "--resume"],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        assert resumed.returncode == 0, resumed.stderr
        assert prompts_asked(seen, asked) == ["hang 4"]


def test_a_plain_file_store_moved_elsewhere_resumes_its_night(
    tmp_path: Path, isolated: Path
) -> None:
    """Outside git the spec is named relative to the store's directory."""
    kb_init(isolated)
    (isolated / "specs").mkdir()
    with fake_openai_server(hang_s=None) as (base, seen):
        stopped_night(isolated, base, seen)
        assert json.loads((isolated / JOURNAL).read_text().splitlines()[0])["spec"] == (
            "specs/s.toml"
        )
        moved = tmp_path / "moved"
        shutil.move(isolated, moved)
        seen.release.set()
        asked = len(seen.requests)
        resumed = subprocess.run(
            [sys.executable, "-m", "kb", "sweep", "specs/s.toml", "--resume"],
            cwd=moved,
            capture_output=True,
            text=True,
        )
        assert resumed.returncode == 0, resumed.stderr
        assert prompts_asked(seen, asked) == ["hang 4"]
    assert "reused 4 journaled runs" in resumed.stdout


# -- 5. group sync (SPEC 14.3) ----------------------------------------------------------------


def settled_run(index: int) -> Any:
    from kb.engine.requests import build_request
    from kb.engine.runs import RunResult, Usage
    from tests.engine_helpers import scripted

    return RunResult(
        label=f"target:m/q{index}",
        kind="target",
        model="scripted:m",
        status="ok",
        output=f"answer {index}",
        usage=Usage(1, 2),
        cost_usd=0.001,
        request=build_request(scripted("m"), f"q{index}"),
    )


class CountedSyncs:
    """Every fsync of a journal file, counted (the real fsync still runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = os.fsync

        def fsync(fd: int) -> None:
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".journal.jsonl"):
                self.count += 1
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)


def test_runs_are_synced_in_groups_of_256(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    syncs = CountedSyncs(monkeypatch)
    path = tmp_path / "n.journal.jsonl"
    journal = RunJournal.open(path, "r", "2026-11-28T02:00:00.000Z", spec="s.toml", clock=lambda: 0)
    assert syncs.count == 1  # the header, at once
    for index in range(600):
        journal.record(settled_run(index))
    assert syncs.count == 1 + 2  # the 256th and the 512th line
    journal.close()
    assert syncs.count == 1 + 3  # the last 88 at the end of the night
    state = read_journal(path)
    assert state is not None and len(state.settled) == 600


def test_a_line_written_100_ms_into_its_group_ends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs = CountedSyncs(monkeypatch)
    now = [0.0]
    path = tmp_path / "n.journal.jsonl"
    journal = RunJournal.open(
        path, "r", "2026-11-28T02:00:00.000Z", spec="s.toml", clock=lambda: now[0]
    )
    for index in range(9):  # 40 ms apart: a group's third line is 80 ms in, its fourth 120
        journal.record(settled_run(index))
        now[0] += 0.04
    assert syncs.count == 1 + 2  # header; lines 1-4 (120 ms); lines 5-8
    journal.record_batch("target:m/q9", "batch_1")  # a batch's id is synced at once, with line 9
    assert syncs.count == 1 + 3
    journal.close()
    assert syncs.count == 1 + 3  # nothing left to sync


def test_a_killed_process_loses_no_written_run(tmp_path: Path) -> None:
    """SIGKILL between two group syncs: every line the process wrote is in the file."""
    path = tmp_path / "n.journal.jsonl"
    child = f"""
import os, signal, sys
sys.path.insert(0, {str(Path(__file__).parent.parent)!r})
from kb.engine.journal import RunJournal
from tests.test_journal_faults import settled_run
journal = RunJournal.open(
    __import__("pathlib").Path({str(path)!r}), "r", "2026-11-28T02:00:00.000Z",
    spec="s.toml", clock=lambda: 0,
)
for index in range(300):  # the 256th line synced; 44 written after it, never synced
    journal.record(settled_run(index))
os.kill(os.getpid(), signal.SIGKILL)
"""
    killed = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    state = read_journal(path)
    assert state is not None and sorted(state.settled) == sorted(
        f"target:m/q{i}" for i in range(300)
    )
