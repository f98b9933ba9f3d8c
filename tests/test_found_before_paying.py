"""What would stop the commit is found before the first paid call (SPEC 13.1 "Found before paying").

On v3 a store bind-mounted read-only into a container was found only when
the commit failed, after all 96 paid calls; and a ``.git`` file pointing
nowhere made kb treat the store as a plain file, committing nothing to git.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.cli_helpers import kb
from tests.fake_openai import Seen, fake_openai_server
from tests.test_never_lose import NIGHT_1, loopback_spec, state


@pytest.fixture
def server() -> Iterator[tuple[str, Seen]]:
    with fake_openai_server() as found:
        yield found


def _can_bind_mount(where: Path) -> str | None:
    if os.geteuid() != 0:
        return "bind mounts need root"
    source, target = where / "probe-src", where / "probe-dst"
    source.write_text("a")
    target.write_text("b")
    done = subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True)
    if done.returncode != 0:
        return f"mount --bind is not allowed here: {done.stderr.decode().strip()}"
    subprocess.run(["umount", str(target)], check=True)
    source.unlink()
    target.unlink()
    return None


@pytest.mark.parametrize("file", ["rulvar.models.json", "rulvar.models.epochs.json"])
def test_a_file_bind_mounted_read_only_is_refused_before_any_call(
    runner: CliRunner, repo: Path, server: tuple[str, Seen], file: str
) -> None:
    why = _can_bind_mount(repo.parent)
    if why is not None:
        print(f"skipped: {why}")
        pytest.skip(why)
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, cases=20)
    assert kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1).exit_code == 0
    target = repo / file
    frozen = repo.parent / f"frozen-{file}"
    frozen.write_bytes(target.read_bytes())
    subprocess.run(["mount", "--bind", str(frozen), str(target)], check=True)
    subprocess.run(["mount", "-o", "remount,ro,bind", str(target)], check=True)
    try:
        before, asked = state(repo), len(seen.requests)
        night = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", "2026-11-29T02:00:00Z")
        assert night.exit_code == 2, night.stderr
        assert f"{target}: is a mount point (a bind mount?)" in night.stderr
        assert len(night.stderr.strip().splitlines()) == 1
        assert len(seen.requests) == asked  # refused before any provider call
        assert state(repo) == before
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_a_git_file_pointing_nowhere_is_an_error_not_a_plain_store(
    runner: CliRunner, isolated: Path
) -> None:
    (isolated / ".git").write_text("gitdir: /nowhere/at/all\n")
    result = kb(runner, "init")
    assert result.exit_code == 2
    assert "git cannot use this repository" in result.stderr
    assert "gitdir: /nowhere/at/all" in result.stderr
    assert not (isolated / "rulvar.models.json").exists()


def test_an_untracked_file_at_tonights_evidence_path_is_refused_before_any_call(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, cases=5)
    junk = repo / "kb-evidence" / "kb-sweep-2026-11-28T02:00:00.000Z.jsonl"
    junk.parent.mkdir()
    junk.write_text("junk\n")
    before = state(repo)
    night = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert night.exit_code == 2
    assert f"{junk}: is in the way: git does not track it" in night.stderr
    assert "git restore" not in night.stderr  # it is not git's to restore
    assert seen.requests == [] and state(repo) == before
    junk.unlink()
    assert kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1).exit_code == 0
