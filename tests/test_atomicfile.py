"""The one atomic write: old bytes or new bytes, the file's mode kept, errors name the file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kb.atomicfile import temp_files_beside, write_atomic
from kb.store.filestore import CommitContext, KnowledgeStore
from tests.factories import add, eval_claim


def test_write_replaces_and_leaves_no_temp_file(isolated: Path) -> None:
    target = isolated / "f.json"
    target.write_bytes(b"old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert temp_files_beside(target) == []


def test_a_read_only_store_keeps_its_mode(isolated: Path) -> None:
    store = KnowledgeStore(isolated / "rulvar.models.json")
    store.commit([add(eval_claim("a"))], 0, CommitContext("t", "t"))
    os.chmod(store.path, 0o444)
    store.commit([add(eval_claim("b"))], 1, CommitContext("t", "t"))
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o444
    assert [c.id for c in store.read().claims] == ["a", "b"]


def test_a_new_file_gets_the_umask_mode(isolated: Path) -> None:
    old = os.umask(0o022)
    try:
        write_atomic(isolated / "new.json", b"{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((isolated / "new.json").stat().st_mode) == 0o644


def test_a_failed_replace_names_the_target_and_cleans_up(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = isolated / "store.json"
    target.write_bytes(b"old")

    def refuse(src: object, dst: object) -> None:
        raise PermissionError(1, "Operation not permitted", str(src))

    monkeypatch.setattr("kb.atomicfile.os.replace", refuse)
    with pytest.raises(OSError) as caught:
        write_atomic(target, b"new")
    assert caught.value.filename == str(target)
    assert target.read_bytes() == b"old"
    assert temp_files_beside(target) == []
