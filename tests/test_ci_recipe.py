"""The documented CI workflow (docs/how-to/nightly-ci.md), run as processes (SPEC 14.4).

A matrix of shards — each a fresh clone of a bare remote running the
documented command, ``kb sweep SPEC --resume --shard I/N --push`` — all on
one key against the loopback rate-limited server, sharing the key's bucket
(the runtime folder, or Redis with a runtime folder each, as on separate
machines); then the report job: a fresh clone that reads the store and writes
the step summary (``kb diff BEFORE HEAD --markdown``) and verifies it. One
test kills a shard in the middle of its night: the others go on and publish,
the killed one is run again with the same command and finishes from its
journal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kb.store.filestore import KnowledgeStore
from kb.sweep.plan import shard_of
from tests.conftest import git
from tests.fake_ratelimit import Limits, rate_limited_server
from tests.redis_server import redis_server
from tests.sweep_helpers import one_key_spec

SHARDS = 4
CLASSES = 16
CASES = 96
OBSERVED_AT = "2026-11-29T02:00:00Z"
KEY = "sk-ci-recipe-0123456789abcdef"


def spec_text(base: str) -> str:
    sweep = [
        'committer = "kb nightly"',
        'gate = "point"',
        "allow_unbounded = true",
        'sampling = "full"',
        "concurrency = 8",
    ]
    return one_key_spec(
        f"{base}/v1", CASES, CLASSES, model="openai:gpt-4o-mini", price=(0.15, 0.6), sweep=sweep
    )


@contextmanager
def remote_with_spec(where: Path, limits_rpm: float) -> Iterator[tuple[Path, str, Limits]]:
    """A bare remote holding an initialized store and the nightly spec; yields it, the
    commit the night starts from, and the rate-limited server's counters."""
    with rate_limited_server(limits_rpm, 10**9, full=False, latency_s=0.02) as (base, limits):
        remote = where / "origin.git"
        subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
        seed = where / "seed"
        subprocess.run(["git", "clone", "-q", str(remote), str(seed)], check=True)
        assert kb(seed, "init").returncode == 0
        (seed / "sweeps").mkdir()
        (seed / "sweeps" / "nightly.toml").write_text(spec_text(base))
        git(seed, "add", "-A")
        git(seed, "commit", "-qm", "kb store and the nightly spec")
        git(seed, "push", "-q", "origin", "HEAD:main")
        yield remote, git(seed, "rev-parse", "HEAD").strip(), limits


def environment(runtime: Path, rate_limits: str | None) -> dict[str, str]:
    env = {**os.environ, "OPENAI_API_KEY": KEY, "XDG_RUNTIME_DIR": str(runtime)}
    env.pop("KB_RATE_LIMITS", None)
    if rate_limits is not None:
        env["KB_RATE_LIMITS"] = rate_limits
    return env


def kb(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kb", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def shard_command(index: int) -> list[str]:
    """The documented matrix step (its summary to a file, as $GITHUB_STEP_SUMMARY is)."""
    return [
        sys.executable, "-m", "kb", "sweep", "sweeps/nightly.toml", "--resume",
        "--shard", f"{index}/{SHARDS}", "--observed-at", OBSERVED_AT, "--push",
        "--attempts", "10", "--summary", f"summary-{index}.md",
    ]  # fmt: skip


def runner(remote: Path, where: Path, index: int) -> Path:
    """A fresh CI runner: a clone of the remote (actions/checkout)."""
    clone = where / f"runner-{index}"
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True)
    return clone


def start_shard(clone: Path, index: int, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        shard_command(index),
        cwd=clone,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def report_job(remote: Path, where: Path, before: str) -> tuple[str, KnowledgeStore]:
    """The job after the matrix: a fresh clone reads the store, writes the summary."""
    clone = where / "report"
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True)
    verified = kb(clone, "verify")
    assert verified.returncode == 0, verified.stderr
    summary = kb(clone, "--as-of", "2026-11-29T06:00:00Z", "diff", before, "HEAD", "--markdown")
    assert summary.returncode == 0, summary.stderr
    return summary.stdout, KnowledgeStore(clone / "rulvar.models.json")


def assert_the_night_landed_whole(text: str, store: KnowledgeStore, where: Path) -> None:
    ids = {claim.id for claim in store.read().claims}
    night = "kb-sweep-2026-11-29T02:00:00.000Z/openai:gpt-4o-mini"
    assert ids == {f"{night}/class-{c}" for c in range(CLASSES)}  # every cell, once
    # ... and every shard's evidence: one report of the whole night, every case's run
    report = kb(where / "report", "report", "kb-sweep-2026-11-29T02:00:00.000Z", "--json")
    assert report.returncode == 0, report.stderr
    found = json.loads(report.stdout)
    assert sorted(c["taskClass"] for c in found["cells"]) == sorted(
        f"class-{c}" for c in range(CLASSES)
    )
    assert len(found["runs"]) == CASES and len(found["claims"]) == CLASSES
    shown = kb(where / "report", "show", f"{night}/class-3")
    assert "6 of 6 runs passed" in shown.stdout, shown.stdout
    assert text.count("openai:gpt-4o-mini") >= CLASSES  # every cell in the step summary
    history = git(where / "report", "log", "--format=%s", "--first-parent")
    assert git(where / "report", "rev-list", "--merges", "HEAD") == ""  # linear
    nights = [s for s in history.splitlines() if s.startswith("kb: sweep kb-sweep-2026-11-29T02")]
    assert len(nights) == SHARDS and len(history.splitlines()) == 2 + SHARDS  # one per shard


@pytest.mark.parametrize("share", ["file", "redis"])
def test_the_readme_matrix_shares_one_key_and_lands_every_cell(share: str, tmp_path: Path) -> None:
    with (
        remote_with_spec(tmp_path, 600) as (remote, before, limits),
        redis_server() if share == "redis" else _nothing() as redis_url,
    ):
        shards = []
        for index in range(1, SHARDS + 1):
            # one runtime folder on one runner (file); a folder each, as on four
            # machines, when only Redis is shared
            runtime = tmp_path / ("run" if share == "file" else f"run-{index}")
            env = environment(runtime, redis_url)
            shards.append(start_shard(runner(remote, tmp_path, index), index, env))
        for process in shards:
            _, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, stderr
            assert "RateLimitError" not in stderr and "pacing per process" not in stderr
            shared = "file:" + str(tmp_path / "run" / "kb") if share == "file" else redis_url
            assert f"answered 429; buckets shared through {shared}\n" in stderr  # the CI log
        text, store = report_job(remote, tmp_path, before)
        assert_the_night_landed_whole(text, store, tmp_path)
        # the shards paced as one: the 429s of a bucket that starts empty, few
        assert limits.served == CASES  # every case answered once, none paid twice
        assert limits.limited <= SHARDS * 8
        if share == "file":
            assert list((tmp_path / "run" / "kb").glob("*.json"))  # the one shared document


def test_a_shard_killed_mid_night_resumes_and_the_others_go_on(tmp_path: Path) -> None:
    with remote_with_spec(tmp_path, 600) as (remote, before, limits):
        env = environment(tmp_path / "run", None)
        clones = {index: runner(remote, tmp_path, index) for index in range(1, SHARDS + 1)}
        doomed = 2
        shards = {index: start_shard(clone, index, env) for index, clone in clones.items()}
        journal = _journal_with_runs(clones[doomed], shards[doomed])
        shards[doomed].send_signal(signal.SIGKILL)
        shards[doomed].communicate(timeout=60)
        assert shards[doomed].returncode == -signal.SIGKILL
        journaled = _settled_runs(journal)
        doomed_cases = (
            CASES
            // CLASSES
            * sum(
                1
                for c in range(CLASSES)
                if shard_of("openai:gpt-4o-mini", f"class-{c}", SHARDS) == doomed
            )
        )
        for index, process in shards.items():
            if index != doomed:
                _, stderr = process.communicate(timeout=300)
                assert process.returncode == 0, stderr  # the others went on and published
        asked_before = limits.served
        again = subprocess.run(
            shard_command(doomed), cwd=clones[doomed], env=env, capture_output=True, text=True
        )
        assert again.returncode == 0, again.stderr
        assert "nothing to resume" not in again.stderr  # resumed, not started afresh
        # the resumed shard asked only what its journal did not hold
        assert limits.served - asked_before == doomed_cases - journaled
        text, store = report_job(remote, tmp_path, before)
        assert_the_night_landed_whole(text, store, tmp_path)
        assert limits.served <= CASES + 8  # asked twice: at most the killed shard's calls in flight


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def _settled_runs(journal: Path) -> int:
    """The runs a journal holds whole (a line the kill tore is not one)."""
    count = 0
    for line in journal.read_text().splitlines()[1:]:  # after the header
        try:
            found = json.loads(line)
        except ValueError:
            continue
        count += isinstance(found, dict) and found.get("status") == "ok"
    return count


def _journal_with_runs(clone: Path, process: subprocess.Popen[str]) -> Path:
    """The shard's journal once it holds a settled run (polled; the shard still runs)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for journal in clone.rglob("*.journal.jsonl"):
            if len(journal.read_text().splitlines()) >= 3:
                return journal
        assert process.poll() is None, "the shard ended before it journaled a run"
        time.sleep(0.01)  # polling the journal's growth, not ordering the test
    raise AssertionError("the shard journaled nothing in 120 s")


def test_the_readme_workflow_is_the_recipe_these_tests_run() -> None:
    readme = (Path(__file__).resolve().parents[1] / "docs/how-to/nightly-ci.md").read_text()
    start = readme.index("A GitHub Actions workflow: a matrix of shards")
    block = readme[readme.index("```yaml", start) : readme.index("```\n", start + 10)]
    step = " ".join(block.split("kb sweep ", 1)[1].split("\n", 3)[:3]).replace("\\", " ").split()
    assert step[:2] == ["sweeps/nightly.toml", "--resume"]
    ours = shard_command(1)[4:]
    flags = [word for word in ours if word.startswith("--")]
    assert flags == [word for word in step if word.startswith("--")][: len(flags)]
    assert "--shard ${{ matrix.shard }}/4" in block and "--push --attempts 10" in block
    assert 'KB_RATE_LIMITS: "${{ secrets.KB_REDIS_URL }}"' in block
    assert "kb verify\n" in block
    assert 'kb diff ${{ github.sha }} HEAD --markdown >> "$GITHUB_STEP_SUMMARY"' in block
