"""Quick looks at git from the system: one git process, no GitPython (what every read asks).

Where the store's repository is, whether the store is unmerged or behind
``HEAD``, whether a git process is running in the repository, and whether
a ``.git`` that git cannot use is in the way.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from kb.errors import ConfigError

if TYPE_CHECKING:
    pass


MERGE_DRIVER = "kb"
"""The merge driver's name in ``.gitattributes`` (``merge=kb``) and git config."""


def store_version(head: bytes) -> int | None:
    """The version a store file's first bytes declare (``None``: not a store's header)."""
    found = re.match(rb'\s*\{\s*"version"\s*:\s*([0-9]+)', head)
    return int(found.group(1)) if found else None


def unmerged_advice(rel: str, driver: bool = False) -> str:
    """What to do about a store git left unmerged (``driver``: kb's driver is registered)."""
    if driver:
        return (
            "git left this file unmerged: kb's merge driver could not merge it (git merge said "
            f"why); kb will not read it as the store: take one side (git checkout --ours {rel} "
            "or --theirs), git add it, finish the merge with git commit, then redo what still "
            "applies of the other side's change with kb (or git merge --abort)"
        )
    return (
        "git left this file unmerged (a merge whose store kb's merge driver did not merge); "
        f"kb will not read it as the store: git merge --abort, kb merge-driver --install, "
        f"then merge again (or resolve it: git checkout --merge -- {rel} shows the conflict)"
    )


def running_git(top: Path, git_dir: Path) -> str | None:
    """A git process running in this repository, described (``None``: none, or cannot tell).

    Read from ``/proc``: a process named ``git`` whose working directory is
    inside the work tree or the git directory, or whose command line names
    either.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    places = (str(top), str(git_dir))
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "comm").read_text().strip() != "git":
                continue
            words = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        line = " ".join(w.decode("utf-8", "replace") for w in words if w)
        if cwd.startswith(places) or any(place in line for place in places):
            shown = line if len(line) <= 60 else line[:59] + "…"
            return f"pid {entry.name}: {shown}"
    return None


def _refuse_broken_repository(directory: Path, said: str) -> None:
    """A ``.git`` git cannot use (a file pointing nowhere) is an error, not a plain-file store.

    Otherwise every commit would silently become a plain file write beside a
    repository the user thinks holds the store's history. Only the nearest
    ``.git`` itself is judged: git declining to look above a ceiling
    (``GIT_CEILING_DIRECTORIES``, a file-system boundary) leaves a plain store.
    """
    for folder in (directory.resolve(), *directory.resolve().parents):
        marker = folder / ".git"
        if not (marker.exists() or marker.is_symlink()):
            continue
        checked = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--git-dir"],
            capture_output=True,
            text=True,
            check=False,
        )
        if checked.returncode == 0:
            return  # a usable repository: git chose not to treat the store as in it
        where = ""
        if marker.is_file():
            where = f" (it says {marker.read_text('utf-8', 'replace').strip()[:120]!r})"
        reason = checked.stderr.strip() or said.strip() or "not a repository"
        raise ConfigError(
            str(marker),
            f"git cannot use this repository{where}: {reason}; repair it (or remove it to "
            "keep the store as a plain file): kb will not write the store outside the git "
            "history it lives in",
        )


def quick_location(store_path: Path) -> tuple[Path, str] | None:
    """The git directory and the store's work-tree path, by one git process (no GitPython).

    For the checks every read makes (an interrupted commit waiting); ``None``
    outside a work tree or where git cannot tell.
    """
    directory = store_path.parent
    try:
        found = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "--absolute-git-dir", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    lines = found.stdout.splitlines()
    if found.returncode != 0 or len(lines) < 2:
        return None
    try:
        rel = (directory.resolve() / store_path.name).relative_to(Path(lines[1]).resolve())
    except ValueError:
        return None
    return Path(lines[0]), rel.as_posix()


def read_guard_issue(store_path: Path, file_version: int) -> str | None:
    """Why a work-tree store must not be read as the store (``None``: it may).

    Asked on every read, so it is two quick git processes and no GitPython:
    git's index holding the store unmerged (a merge kb's driver did not
    merge: the file may be one side only), or ``HEAD`` holding a newer store
    than the file (committing the file would drop claims).
    """
    directory = store_path.parent
    try:
        unmerged = subprocess.run(
            ["git", "-C", str(directory), "ls-files", "-u", "--", store_path.name],
            capture_output=True,
            check=False,
        )
    except OSError:
        return None  # no git on this machine: a plain file store
    if unmerged.returncode != 0:
        return None  # not in a git work tree
    rel = store_path.name
    if unmerged.stdout.strip():
        driver = subprocess.run(
            ["git", "-C", str(directory), "config", "--get", f"merge.{MERGE_DRIVER}.driver"],
            capture_output=True,
            check=False,
        )
        return unmerged_advice(rel, b"kb merge-driver" in driver.stdout)
    # A blob above core.bigFileThreshold is streamed rather than inflated whole: the
    # first bytes of a packed 100 MB store then cost nothing (0.15 s inflated whole).
    with subprocess.Popen(
        ["git", "-C", str(directory), "-c", "core.bigFileThreshold=1m", "cat-file", "blob"]
        + [f"HEAD:./{store_path.name}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as shown:
        assert shown.stdout is not None
        first = shown.stdout.read(200)
        shown.kill()
    committed = store_version(first)
    if committed is None or committed <= file_version:
        return None
    return (
        f"the work-tree store is v{file_version} but git's HEAD holds v{committed}: the file "
        "is behind (committing it would drop claims); restore it with git restore "
        f"--staged --worktree {rel}"
    )
