"""Real processes: no lost update under contention, and kill -9 at random points."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kb.store.audit import verify_store
from kb.store.filestore import CommitContext, KnowledgeStore
from tests.conftest import git
from tests.factories import add, eval_claim

WORKER = Path(__file__).parent / "workers" / "commit_worker.py"


def start_worker(store: Path, worker: int, count: int, attempts: int = 3) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, str(WORKER), str(store), str(worker), str(count), str(attempts)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process


@pytest.mark.slow
def test_eight_processes_lose_no_update(repo: Path) -> None:
    store_path = repo / "rulvar.models.json"
    workers = [start_worker(store_path, w, 25) for w in range(8)]
    for process in workers:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        assert len(out.split()) == 25
    snapshot = KnowledgeStore(store_path).read()
    assert snapshot.version == 200
    assert sorted(c.id for c in snapshot.claims) == sorted(
        f"w{w}-{n}" for w in range(8) for n in range(25)
    )
    subjects = git(repo, "log", "--format=%s").splitlines()
    assert len([s for s in subjects if s.startswith("kb: sweep")]) == 200
    versions = [int(s.split("(store v")[1].rstrip(")")) for s in subjects if "store v" in s]
    assert versions == list(range(200, 0, -1))  # linear: one commit per version, in order
    assert git(repo, "rev-list", "--merges", "HEAD") == ""
    fsck = subprocess.run(["git", "fsck", "--strict"], cwd=repo, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    assert git(repo, "status", "--porcelain") == ""
    assert verify_store(KnowledgeStore(store_path)).history_checked == 200


@pytest.mark.slow
@pytest.mark.parametrize("in_git", [False, True], ids=["plain", "git"])
def test_kill_minus_nine_at_random_points_never_corrupts(isolated: Path, in_git: bool) -> None:
    if in_git:
        git(isolated, "init", "-q")
    store_path = isolated / "rulvar.models.json"
    rng = random.Random(20261130)
    committed_before = 0
    for round_number in range(25):
        process = start_worker(store_path, round_number, 0)
        # The kill point is random on purpose; nothing waits on the worker's progress.
        time.sleep(rng.uniform(0.0, 0.15))
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
        store = KnowledgeStore(store_path)
        # The next commit must go through: no lock or temp file left behind blocks it.
        result = store.commit_with_rebase(
            lambda _s, r=round_number: [
                add(eval_claim(f"after-kill-{r}", subject={"model": f"k:{r}"}))
            ],
            CommitContext("sweep", "test"),
        )
        assert result is not None
        snapshot = store.read()  # validates the whole file and its hash
        assert snapshot.version >= committed_before + 1
        assert f"after-kill-{round_number}" in snapshot.by_id
        committed_before = snapshot.version
        assert not list(isolated.glob(".rulvar.models.json.*.kb-tmp"))
        if in_git:
            assert git(isolated, "status", "--porcelain", "rulvar.models.json") == ""
            verify_store(store)
