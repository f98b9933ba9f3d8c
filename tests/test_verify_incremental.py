"""``kb verify`` checks what is new (SPEC 14.3), and ``--all`` keeps the full check.

A verify that passes leaves a note under ``.git`` naming the commit it checked
through; the next reads only the commits after it. Through the real CLI and
real git: a corrupted new commit is caught incrementally, a corrupted old one
(an object swapped with ``git replace``, so history's shape is unchanged) only
by ``--all``, and rewritten history falls back to reading everything.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kb.store.git import GitStoreRepo
from kb.store.verify_note import VerifiedThrough
from tests.cli_helpers import kb, note
from tests.conftest import git
from tests.test_cli import STORE, seed


def test_a_second_verify_reads_only_what_is_new(runner: CliRunner, repo: Path) -> None:
    seed()
    first = kb(runner, "verify")
    assert first.stdout == "ok: store v2, 3 claims, 2 versions in git checked\n"
    head = git(repo, "rev-parse", "HEAD").strip()
    found = GitStoreRepo.discover(repo / STORE)
    assert found is not None
    through = VerifiedThrough.read(found)
    assert through == VerifiedThrough(head, 2)
    assert git(repo, "status", "--porcelain") == ""  # the note is not in the work tree
    again = kb(runner, "verify")
    assert (
        again.stdout
        == f"ok: store v2, 3 claims, 0 new versions checked since {head[:12]} (--all: every one)\n"
    )
    note(runner, "planning", "2026-11-03T00:00:00Z")
    third = kb(runner, "verify")
    assert f"1 new version checked since {head[:12]}" in third.stdout
    full = kb(runner, "verify", "--all")
    assert full.stdout == "ok: store v3, 4 claims, 3 versions in git checked\n"


def test_a_corrupted_new_commit_is_caught_incrementally(runner: CliRunner, repo: Path) -> None:
    seed()
    assert kb(runner, "verify").exit_code == 0
    text = (repo / STORE).read_text().replace('"version": 2', '"version": 9', 1)
    (repo / STORE).write_text(text)
    git(repo, "commit", "-qam", "hand edit")
    bad = kb(runner, "verify")
    assert bad.exit_code == 2
    assert "version 9 follows version 2 (must rise by exactly 1)" in bad.stderr
    # a failed verify moves no note: the next run still checks that commit
    assert kb(runner, "verify").exit_code == 2


def test_a_corrupted_old_commit_is_caught_by_all(runner: CliRunner, repo: Path) -> None:
    seed()
    old_blob = git(repo, "rev-parse", f"HEAD~1:{STORE}").strip()
    assert kb(runner, "verify").exit_code == 0
    broken = repo / "broken.json"
    broken.write_text('{"version": 1, "hash": "nope", "claims": []}\n')
    bad_blob = git(repo, "hash-object", "-w", str(broken)).strip()
    git(repo, "replace", old_blob, bad_blob)  # an old version's bytes change, history does not
    assert kb(runner, "verify").exit_code == 0  # incremental: nothing new to read
    everything = kb(runner, "verify", "--all")
    assert everything.exit_code == 2
    assert "hash: must be 64 lowercase hex characters" in everything.stderr


def test_rewritten_history_is_read_whole(runner: CliRunner, repo: Path) -> None:
    seed()
    assert kb(runner, "verify").exit_code == 0
    git(repo, "commit", "-q", "--amend", "-m", "reworded")  # the verified commit is gone
    again = kb(runner, "verify")
    assert again.exit_code == 0
    assert "2 versions in git checked" in again.stdout
    assert "no longer in HEAD's history (rewritten?)" in again.stderr


def test_an_unreadable_note_means_everything_is_read(runner: CliRunner, repo: Path) -> None:
    seed()
    assert kb(runner, "verify").exit_code == 0
    found = GitStoreRepo.discover(repo / STORE)
    assert found is not None
    path = VerifiedThrough.path(found)
    for broken in ("not json", json.dumps({"format": 99, "commit": "x", "version": 1}), "{}"):
        path.write_text(broken)
        assert "2 versions in git checked" in kb(runner, "verify").stdout
