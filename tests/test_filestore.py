"""Commits: CAS, the rebase loop, atomic writes, and one git commit per store commit."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from kb.errors import CasAttemptsExhausted, ConfigError, KnowledgeCasError, StoreDirtyError
from kb.store.commit_window import CommitWindow
from kb.store.filestore import CommitContext, KnowledgeStore, ReadOnlyStore
from kb.store.git import GitStoreRepo
from kb.store.ops import Op
from kb.store.snapshot import Snapshot
from tests.conftest import git
from tests.factories import add, eval_claim

CTX = CommitContext("sweep", "ci", label="r1", report_id="r1")


def adds(*ids: str) -> list[Op]:
    return [add(eval_claim(i)) for i in ids]


# -- plain file store ----------------------------------------------------------------


def test_plain_file_store_commits_and_reads_back(isolated: Path) -> None:
    store = KnowledgeStore("rulvar.models.json")
    assert store.git is None
    assert store.read().version == 0
    result = store.commit(adds("a"), 0, CTX)
    assert result.git_commit is None and result.snapshot.version == 1
    assert store.read() == result.snapshot
    text = (isolated / "rulvar.models.json").read_text()
    assert text.startswith('{\n  "version": 1,\n  "hash": "') and text.endswith("}\n")


def test_stale_expected_version_raises_cas_and_writes_nothing(isolated: Path) -> None:
    store = KnowledgeStore("rulvar.models.json")
    store.commit(adds("a"), 0, CTX)
    before = (isolated / "rulvar.models.json").read_bytes()
    with pytest.raises(KnowledgeCasError, match="expected version 0, the store is at 1"):
        store.commit(adds("b"), 0, CTX)
    assert (isolated / "rulvar.models.json").read_bytes() == before


def test_invalid_batch_writes_nothing(isolated: Path) -> None:
    store = KnowledgeStore("rulvar.models.json")
    store.commit(adds("a"), 0, CTX)
    before = (isolated / "rulvar.models.json").read_bytes()
    with pytest.raises(ConfigError):
        store.commit(adds("a"), 1, CTX)
    with pytest.raises(ConfigError, match="empty batch"):
        store.commit([], 1, CTX)
    assert (isolated / "rulvar.models.json").read_bytes() == before


@pytest.mark.parametrize("attempts", [0, -1, 1.5, True, "3"])
def test_attempts_are_validated_before_the_first_read(isolated: Path, attempts: object) -> None:
    (isolated / "rulvar.models.json").write_text("corrupt")
    store = KnowledgeStore("rulvar.models.json")
    calls: list[Snapshot] = []
    with pytest.raises(ConfigError, match="attempts: must be a positive integer"):
        store.commit_with_rebase(lambda s: calls.append(s) or [], CTX, attempts=attempts)  # type: ignore[arg-type]
    assert calls == []


def test_rebase_loop_recomputes_ops_after_a_conflict(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = KnowledgeStore("rulvar.models.json")
    other = KnowledgeStore("rulvar.models.json")
    seen_versions: list[int] = []
    real_read = KnowledgeStore.read
    sneaked = []

    def read_then_sneak_in(self: KnowledgeStore) -> Snapshot:
        snapshot = real_read(self)
        if self is store and not sneaked:
            # Another writer (a hand edit, here by a store that bypasses our lock)
            # lands between our read and our commit, exactly once.
            sneaked.append(True)
            other._commit_locked(adds("intruder"), snapshot.version, CTX, None)
        return snapshot

    monkeypatch.setattr(KnowledgeStore, "read", read_then_sneak_in)

    def build(snapshot: Snapshot) -> Sequence[Op]:
        seen_versions.append(snapshot.version)
        return adds(f"mine-{snapshot.version}")

    result = store.commit_with_rebase(build, CTX, attempts=3)
    assert result is not None and result.attempts == 2
    assert seen_versions == [0, 1]
    assert [c.id for c in real_read(store).claims] == ["intruder", "mine-1"]


def test_rebase_loop_gives_up_after_attempts(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = KnowledgeStore("rulvar.models.json")

    def always_conflict(*args: object, **kwargs: object) -> None:
        raise KnowledgeCasError("simulated")

    monkeypatch.setattr(KnowledgeStore, "_commit_locked", always_conflict)
    with pytest.raises(CasAttemptsExhausted, match="gave up after 2 attempts"):
        store.commit_with_rebase(lambda s: adds("a"), CTX, attempts=2)


def test_no_ops_means_no_commit(isolated: Path) -> None:
    store = KnowledgeStore("rulvar.models.json")
    assert store.commit_with_rebase(lambda s: [], CTX) is None
    assert not (isolated / "rulvar.models.json").exists()


def test_read_only_handle_has_no_way_to_write(isolated: Path) -> None:
    handle = KnowledgeStore("rulvar.models.json").read_only()
    assert isinstance(handle, ReadOnlyStore)
    assert handle.read().version == 0
    assert not any(hasattr(handle, name) for name in ("commit", "commit_with_rebase", "_publish"))
    with pytest.raises(AttributeError):
        handle.commit = lambda: None  # type: ignore[attr-defined]


def test_orphaned_temp_files_never_block_and_are_cleared(isolated: Path) -> None:
    owner = KnowledgeStore("rulvar.models.json").owner
    orphan = isolated / f".rulvar.models.json.{owner}-abc123.kb-tmp"
    orphan.write_text("half a store")
    other = isolated / ".rulvar.models.json.abc123.kb-tmp"  # not this store's: left alone
    other.write_text("someone else's")
    (isolated / ".rulvar.models.json.lock").write_text("")  # a dead writer's lock file
    store = KnowledgeStore("rulvar.models.json", lock_timeout=5)
    store.commit(adds("a"), 0, CTX)
    assert not orphan.exists() and other.exists()
    assert store.read().version == 1


def test_missing_directory_is_a_clear_error(isolated: Path) -> None:
    store = KnowledgeStore(isolated / "nope" / "rulvar.models.json")
    with pytest.raises(ConfigError, match="its directory does not exist"):
        store.commit(adds("a"), 0, CTX)


# -- git -------------------------------------------------------------------------------


def test_each_store_commit_is_one_git_commit_touching_only_the_store(repo: Path) -> None:
    (repo / "staged.txt").write_text("staged\n")
    git(repo, "add", "staged.txt")
    (repo / "README.txt").write_text("unstaged edit\n")
    status_before = git(repo, "status", "--porcelain")
    store = KnowledgeStore("rulvar.models.json")
    store.initialize(CommitContext("init", "ci"))
    store.commit(adds("a"), 0, CTX)
    result = store.commit(adds("b"), 1, CTX)

    log = git(repo, "log", "--format=%s").splitlines()
    assert log == [
        "kb: sweep r1: +1 claim (store v2)",
        "kb: sweep r1: +1 claim (store v1)",
        "kb: init: empty store (store v0)",
        "user: initial",
    ]
    for rev in ("HEAD", "HEAD~1", "HEAD~2"):
        assert git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", rev) == (
            "rulvar.models.json\n"
        )
    assert git(repo, "status", "--porcelain") == status_before  # user's changes untouched
    assert git(repo, "diff", "--cached", "--name-only") == "staged.txt\n"
    assert git(repo, "show", "HEAD:rulvar.models.json") == (repo / "rulvar.models.json").read_text()
    body = git(repo, "log", "-1", "--format=%B")
    assert "Kb-Report: r1\nKb-Store-Version: 2\nKb-Committer: ci" in body
    assert result.git_commit == git(repo, "rev-parse", "HEAD").strip()


def test_commits_into_an_unborn_branch(isolated: Path) -> None:
    git(isolated, "init", "-q")
    store = KnowledgeStore("rulvar.models.json")
    store.commit(adds("a"), 0, CTX)
    assert git(isolated, "log", "--format=%s") == "kb: sweep r1: +1 claim (store v1)\n"


def test_a_commit_the_branch_moved_under_is_made_again_on_top(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A concurrent git commit lands just before the ref moves: kb's commit goes on top."""
    store = KnowledgeStore("rulvar.models.json")
    store.commit(adds("a"), 0, CTX)
    real_publish = GitStoreRepo.publish
    moved = []

    def someone_commits_first(self: GitStoreRepo, *args: object, **kwargs: object) -> object:
        if not moved:  # the files are in place: the user commits just before the ref moves
            moved.append(True)
            git(repo, "commit", "-q", "--allow-empty", "-m", "user: concurrent commit")
        return real_publish(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(GitStoreRepo, "publish", someone_commits_first)
    result = store.commit(adds("b"), 1, CTX)
    assert result.git_commit == git(repo, "rev-parse", "HEAD").strip()
    assert git(repo, "log", "-2", "--format=%s").splitlines() == [
        "kb: sweep r1: +1 claim (store v2)",
        "user: concurrent commit",
    ]
    assert git(repo, "status", "--porcelain", "--ignored") == ""
    assert [c.id for c in store.read().claims] == ["a", "b"]


def test_a_branch_that_moved_kbs_files_is_a_detected_conflict(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The concurrent commit changed the store itself: undone, and the rebase loop retries."""
    store = KnowledgeStore("rulvar.models.json")
    store.commit(adds("a"), 0, CTX)
    real_publish = GitStoreRepo.publish
    other = repo.parent / "other"
    git(repo.parent, "clone", "-q", str(repo), str(other))
    KnowledgeStore(other / "rulvar.models.json").commit(adds("theirs"), 1, CTX)
    moved = []

    def someone_pulls_first(self: GitStoreRepo, *args: object, **kwargs: object) -> object:
        if not moved:
            moved.append(True)
            git(repo, "fetch", "-q", str(other), "main")
            git(repo, "update-ref", "refs/heads/main", "FETCH_HEAD")  # the branch moves alone
        return real_publish(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(GitStoreRepo, "publish", someone_pulls_first)
    with pytest.raises(KnowledgeCasError, match="moved"):
        store.commit(adds("b"), 1, CTX)
    assert git(repo, "log", "-1", "--format=%s").startswith("kb: sweep r1: +1 claim (store v2)")
    assert "theirs" in git(repo, "show", "HEAD:rulvar.models.json")


@pytest.mark.parametrize("how", ["unstaged", "staged", "deleted"])
def test_local_edits_to_the_store_are_refused_and_kept(repo: Path, how: str) -> None:
    store = KnowledgeStore("rulvar.models.json")
    store.commit(adds("a"), 0, CTX)
    path = repo / "rulvar.models.json"
    if how == "deleted":
        path.unlink()
    else:
        path.write_text(path.read_text().replace('"version": 1', '"version": 1 '))
        if how == "staged":
            git(repo, "add", "rulvar.models.json")
    before = path.read_bytes() if path.exists() else None
    head = git(repo, "rev-parse", "HEAD")
    with pytest.raises(StoreDirtyError, match="git restore --staged --worktree rulvar.models.json"):
        store.commit_with_rebase(lambda s: adds("b"), CTX)
    assert (path.read_bytes() if path.exists() else None) == before
    assert git(repo, "rev-parse", "HEAD") == head


def test_an_untracked_existing_store_is_refused(repo: Path) -> None:
    KnowledgeStore(repo / "elsewhere.json")  # unrelated
    path = repo / "rulvar.models.json"
    plain = Path(os.environ["GIT_CONFIG_GLOBAL"]).parent / "plain"
    plain.mkdir()
    KnowledgeStore(plain / "rulvar.models.json").commit(adds("a"), 0, CTX)
    path.write_bytes((plain / "rulvar.models.json").read_bytes())
    with pytest.raises(StoreDirtyError, match="not committed in git"):
        KnowledgeStore(path).commit(adds("b"), 1, CTX)


def crash_before_the_swap(monkeypatch: pytest.MonkeyPatch) -> tuple[KnowledgeStore, bytes]:
    """Store v1 holds ``a``; committing ``b`` dies after its intent, before any file moved."""
    store = KnowledgeStore("rulvar.models.json")
    store.commit(adds("a"), 0, CTX)
    old_bytes = store.path.read_bytes()

    def killed(*args: object) -> None:
        raise SystemExit("killed after the intent was written, before the file replace")

    with monkeypatch.context() as patch, pytest.raises(SystemExit):
        patch.setattr(CommitWindow, "swap", killed)
        store.commit(adds("b"), 1, CTX)
    return store, old_bytes


def test_a_crash_before_any_file_moved_is_finished_from_its_temps(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, old_bytes = crash_before_the_swap(monkeypatch)
    path = store.path
    assert path.read_bytes() == old_bytes  # the file is the previous valid store
    # HEAD never moves before the file is in place (SPEC 12.3): git still has v1.
    assert "store v1" in git(repo, "log", "-1", "--format=%s")
    assert store.pending_commit() is not None  # the intent waits for the next writer
    assert git(repo, "status", "--porcelain") == ""  # its temps are hidden from git add -A

    # Every new file is whole on disk (its fsynced temp): the next writer finishes it.
    fresh = KnowledgeStore("rulvar.models.json")
    result = fresh.commit_with_rebase(lambda s: adds(f"c-after-v{s.version}"), CTX)
    assert result is not None
    assert [c.id for c in fresh.read().claims] == ["a", "b", "c-after-v2"]
    assert any("finished an interrupted commit" in w for w in fresh.warnings)
    assert git(repo, "status", "--porcelain", "--ignored") == ""
    assert git(repo, "show", "HEAD:rulvar.models.json") == path.read_text()


def test_a_crash_whose_files_were_touched_since_is_undone(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, old_bytes = crash_before_the_swap(monkeypatch)
    path = store.path
    for temp in repo.glob(".rulvar.models.json.*.kb-tmp"):
        temp.unlink()  # someone cleaned up: the commit's new store is nowhere now
    settled = KnowledgeStore("rulvar.models.json").settle()
    assert settled.outcome == "undone"
    assert "undid an interrupted commit" in (settled.describe() or "")
    assert path.read_bytes() == old_bytes
    assert "store v1" in git(repo, "log", "-1", "--format=%s")
    assert git(repo, "status", "--porcelain", "--ignored") == ""


def test_a_crash_after_every_file_is_in_place_is_finished(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = KnowledgeStore("rulvar.models.json")
    store.commit(adds("a"), 0, CTX)

    def killed(*args: object) -> None:
        raise SystemExit("killed after the files, before the ref moved")

    with monkeypatch.context() as patch, pytest.raises(SystemExit):
        patch.setattr(GitStoreRepo, "publish", killed)
        store.commit(adds("b"), 1, CTX)
    assert "store v1" in git(repo, "log", "-1", "--format=%s")
    settled = KnowledgeStore("rulvar.models.json").settle()
    assert settled.outcome == "finished" and "+1 claim (store v2)" in settled.label
    assert "store v2" in git(repo, "log", "-1", "--format=%s")
    assert git(repo, "status", "--porcelain", "--ignored") == ""
    assert KnowledgeStore("rulvar.models.json").settle().outcome == "none"


def test_a_crash_before_the_index_update_is_repaired(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = KnowledgeStore("rulvar.models.json")
    store.commit(adds("a"), 0, CTX)

    def killed(*args: object) -> None:
        raise SystemExit("killed before the index update")

    with monkeypatch.context() as patch, pytest.raises(SystemExit):
        patch.setattr(GitStoreRepo, "set_index_blobs", killed)
        store.commit(adds("b"), 1, CTX)
    assert "rulvar.models.json" in git(repo, "status", "--porcelain")
    result = KnowledgeStore("rulvar.models.json").commit_with_rebase(lambda s: adds("c"), CTX)
    assert result is not None and result.snapshot.version == 3
    assert git(repo, "status", "--porcelain", "rulvar.models.json") == ""


def test_no_git_identity_falls_back_to_kb(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git(isolated, "init", "-q")
    # useConfigOnly stops git from guessing user@hostname, as on a bare CI runner.
    Path(os.environ["GIT_CONFIG_GLOBAL"]).write_text("[user]\n\tuseConfigOnly = true\n")
    for name in (
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "EMAIL",
    ):
        monkeypatch.delenv(name, raising=False)
    KnowledgeStore("rulvar.models.json").commit(adds("a"), 0, CTX)
    assert git(isolated, "log", "-1", "--format=%an <%ae>|%cn <%ce>") == (
        "kb <kb@localhost>|kb <kb@localhost>\n"
    )


def test_a_configured_identity_is_used(repo: Path) -> None:
    KnowledgeStore("rulvar.models.json").commit(adds("a"), 0, CTX)
    assert git(repo, "log", "-1", "--format=%an <%ae>") == "Test User <test@example.com>\n"


def test_a_held_lock_times_out_as_a_retryable_conflict(isolated: Path) -> None:
    import fcntl

    with open(isolated / ".rulvar.models.json.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a live writer elsewhere
        store = KnowledgeStore("rulvar.models.json", lock_timeout=0.2)
        with pytest.raises(KnowledgeCasError, match="held the store lock for over 0.2s"):
            store.commit(adds("a"), 0, CTX)
        with pytest.raises(CasAttemptsExhausted):
            store.commit_with_rebase(lambda s: adds("a"), CTX, attempts=2)
    assert not (isolated / "rulvar.models.json").exists()


def test_a_deliberate_revert_is_refused_not_rolled_forward(repo: Path) -> None:
    store = KnowledgeStore("rulvar.models.json")
    store.commit(adds("a"), 0, CTX)
    store.commit(adds("b"), 1, CTX)
    git(repo, "checkout", "HEAD~1", "--", "rulvar.models.json")  # the user restores v1
    reverted = (repo / "rulvar.models.json").read_bytes()
    with pytest.raises(StoreDirtyError, match="staged changes"):
        KnowledgeStore("rulvar.models.json").commit_with_rebase(lambda s: adds("c"), CTX)
    assert (repo / "rulvar.models.json").read_bytes() == reverted


def test_a_stale_intent_from_an_unpublished_commit_is_discarded(repo: Path) -> None:
    store = KnowledgeStore("rulvar.models.json")
    store.commit(adds("a"), 0, CTX)
    store.intent_path.write_text("0" * 40 + "\n")  # kb 3's marker of a commit git never had
    result = store.commit_with_rebase(lambda s: adds("b"), CTX)
    assert result is not None and result.snapshot.version == 2
    assert not store.intent_path.exists()


def test_an_intent_kb_cannot_read_is_one_line_and_nothing_moves(repo: Path) -> None:
    store = KnowledgeStore("rulvar.models.json")
    store.commit(adds("a"), 0, CTX)
    store.intent_path.write_text("{not json")
    before = (repo / "rulvar.models.json").read_bytes()
    with pytest.raises(ConfigError, match="interrupted commit cannot be read"):
        store.commit_with_rebase(lambda s: adds("b"), CTX)
    assert (repo / "rulvar.models.json").read_bytes() == before


def test_a_commit_git_gc_pruned_is_undone_not_retried_forever(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, old_bytes = crash_before_the_swap(monkeypatch)
    git(repo, "gc", "--quiet", "--prune=now")  # the built commit was never reachable
    settled = KnowledgeStore("rulvar.models.json").settle()
    assert settled.outcome == "undone" and "git gc" in settled.detail
    assert store.path.read_bytes() == old_bytes
    assert git(repo, "status", "--porcelain", "--ignored") == ""


def test_a_file_changed_after_the_crash_is_never_overwritten(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull, a checkout or an edit after the crash: the commit is undone, the file kept."""
    store, _ = crash_before_the_swap(monkeypatch)
    edited = store.path.read_bytes().replace(b'"a"', b'"a-edited"')
    store.path.write_bytes(edited)  # what git pull or a hand edit leaves there
    settled = KnowledgeStore("rulvar.models.json").settle()
    assert settled.outcome == "undone"
    assert "rulvar.models.json changed since; left as they are" in settled.detail
    assert store.path.read_bytes() == edited


def test_another_store_beside_it_never_sweeps_this_ones_pending_files(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = KnowledgeStore("a.json")
    first.commit(adds("a"), 0, CTX)

    def killed(*args: object) -> None:
        raise SystemExit("killed before the file replace")

    with monkeypatch.context() as patch, pytest.raises(SystemExit):
        patch.setattr(CommitWindow, "swap", killed)
        first.commit(adds("b"), 1, CTX)
    KnowledgeStore("b.json").commit(adds("x"), 0, CTX)  # a write to another store here
    settled = KnowledgeStore("a.json").settle()
    assert settled.outcome == "finished"  # its temp was left alone: the commit is whole
    assert [c.id for c in KnowledgeStore("a.json").read().claims] == ["a", "b"]


def test_a_repository_git_declines_to_look_into_is_a_plain_store_not_an_error(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git(isolated, "init", "-q")
    inner = isolated / "inner"
    inner.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(isolated))
    store = KnowledgeStore(inner / "rulvar.models.json")
    store.initialize(CTX)
    assert store.git is None and (inner / "rulvar.models.json").exists()


def crash_before_the_ref_moves(
    monkeypatch: pytest.MonkeyPatch, context: CommitContext = CTX
) -> KnowledgeStore:
    """Store v1 holds ``a``; committing ``b`` dies with its files in place and staged."""
    store = KnowledgeStore("rulvar.models.json")
    store.commit(adds("a"), 0, context)

    def killed(*args: object) -> None:
        raise SystemExit("killed after the index update, before the ref moved")

    with monkeypatch.context() as patch, pytest.raises(SystemExit):
        patch.setattr(GitStoreRepo, "publish", killed)
        store.commit(adds("b"), 1, context)
    return store


def test_a_staged_commit_git_gc_pruned_is_unstaged_too(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = crash_before_the_ref_moves(monkeypatch)
    git(repo, "gc", "--quiet", "--prune=now")
    assert KnowledgeStore("rulvar.models.json").settle().outcome == "undone"
    assert git(repo, "status", "--porcelain", "--ignored") == ""  # nothing left staged
    assert git(repo, "show", "HEAD:rulvar.models.json") == store.path.read_text()


def test_a_note_the_user_committed_whole_is_not_committed_twice(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_before_the_ref_moves(monkeypatch, CommitContext("note", "al", label="b"))
    git(repo, "commit", "-qam", "user: commit -a")  # takes the staged store, the note in it
    settled = KnowledgeStore("rulvar.models.json").settle()
    assert settled.outcome == "finished"
    assert git(repo, "log", "-1", "--format=%s") == "user: commit -a\n"  # no empty kb commit
    assert KnowledgeStore("rulvar.models.json").settle().outcome == "none"
    assert [c.id for c in KnowledgeStore("rulvar.models.json").read().claims] == ["a", "b"]
