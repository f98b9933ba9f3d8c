"""Kill a kb command at every write of its commit window, with strace, and see what is left.

The enumeration (SPEC 13.1): from the first temp file a commit writes to the
end of the command, every ``rename``, ``renameat``, ``renameat2``, ``link``,
``linkat``, ``unlink``, ``unlinkat``, ``fsync`` and ``fdatasync`` — made by
kb itself or by a git process kb runs — is a kill point. strace counts
injections per process and per system call, so the two kinds are reached
apart:

* kb's own calls: ``strace -e inject=CALL:signal=KILL:when=K kb …`` (no
  ``-f``: only kb's main thread is counted; a reference trace proves every
  call of the window is made there), K from the first call inside the
  window to the last;
* each git process's calls: git is reached through a wrapper first on
  ``PATH`` that runs the N-th git invocation under
  ``strace -f -e inject=CALL:signal=KILL:when=K``, for every N started
  inside the window and every K up to that process's count.

A reference run under ``strace -f`` (with ``openat`` and ``execve``) finds
the window and the counts. Used by ``tests/test_commit_window.py`` (a small
night and a note, in ``make test``) and ``bench/kill_points.py`` (wider).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CALLS = (
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "unlink",
    "unlinkat",
    "fsync",
    "fdatasync",
)
REAL_GIT = shutil.which("git") or "/usr/bin/git"
STRACE = shutil.which("strace")

_LINE = re.compile(r"^(\d+)\s+(\w+)\((.*)$")
_TEMP_OPEN = re.compile(r'openat\([^"]*"[^"]*/\.(?!kb-probe\.)[^"/]*\.kb-tmp", [^)]*O_CREAT')


def strace_problem() -> str | None:
    """Why the enumeration cannot run here (``None``: it can)."""
    if STRACE is None:
        return "strace is not installed (make test installs the Debian package)"
    probe = subprocess.run(
        [STRACE, "-f", "-o", "/dev/null", "-e", "inject=fsync:error=EIO:when=1", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"strace cannot attach or inject here: {probe.stderr.strip()[:200]}"
    return None


@dataclass(frozen=True)
class KillPoint:
    """One call to kill: kb's own K-th ``call``, or git invocation N's K-th ``call``."""

    call: str
    when: int
    git_invocation: int | None = None
    """``None``: kb's own call."""

    def __str__(self) -> str:
        who = "kb" if self.git_invocation is None else f"git#{self.git_invocation}"
        return f"{who}:{self.call}:{self.when}"


@dataclass(frozen=True)
class Window:
    """What the reference run of a command showed about its commit window."""

    points: tuple[KillPoint, ...]
    kb_calls: Counter[str]
    """kb's own calls inside the window, by system call."""
    git_processes: int
    """git processes started inside the window."""


def git_wrapper(directory: Path) -> Path:
    """A ``git`` that counts its invocations and runs one of them under strace (see module)."""
    directory.mkdir(parents=True, exist_ok=True)
    wrapper = directory / "git"
    wrapper.write_text(
        f"""#!/bin/sh
count_file="$KB_KILL_COUNT"
n=$(( $(cat "$count_file" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$count_file"
if [ -n "$KB_KILL_GIT" ] && [ "$n" = "$KB_KILL_GIT" ]; then
  exec {STRACE} -f -o /dev/null -e trace="$KB_KILL_CALL" \\
    -e inject="$KB_KILL_CALL":signal=KILL:when="$KB_KILL_WHEN" {REAL_GIT} "$@"
fi
exec {REAL_GIT} "$@"
"""
    )
    wrapper.chmod(0o755)
    return wrapper


def _environment(base: dict[str, str], wrapper_dir: Path, count_file: Path) -> dict[str, str]:
    env = dict(base)
    env["PATH"] = f"{wrapper_dir}{os.pathsep}{env.get('PATH', '')}"
    env["GIT_PYTHON_GIT_EXECUTABLE"] = str(wrapper_dir / "git")
    env["KB_KILL_COUNT"] = str(count_file)
    return env


def reference_window(command: Sequence[str], cwd: Path, env: dict[str, str]) -> Window:
    """Run ``command`` once under ``strace -f`` and find its commit window and kill points."""
    trace = cwd.parent / f"{cwd.name}.trace"
    wrapper_dir = cwd.parent / f"{cwd.name}.bin"
    git_wrapper(wrapper_dir)
    count_file = cwd.parent / f"{cwd.name}.count"
    count_file.unlink(missing_ok=True)
    traced = ",".join((*CALLS, "openat", "execve"))
    done = subprocess.run(
        [STRACE or "strace", "-f", "-qq", "-o", str(trace), "-e", f"trace={traced}", *command],
        cwd=cwd,
        env=_environment(env, wrapper_dir, count_file),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"the reference run failed: {done.stdout}{done.stderr}")
    return parse_window(trace.read_text(errors="replace").splitlines())


def parse_window(lines: Sequence[str]) -> Window:
    """The window and its kill points, from a ``strace -f`` log (see :func:`reference_window`)."""
    records = [m.groups() for line in lines if (m := _LINE.match(line))]
    main = records[0][0]
    git_pids: list[str] = []  # in the order the wrapper numbers them (each exec of real git)
    started = None
    kb_calls: Counter[str] = Counter()
    git_calls: dict[str, Counter[str]] = {}
    other: list[str] = []
    for index, (pid, call, rest) in enumerate(records):
        if call == "execve" and rest.startswith(f'"{REAL_GIT}"') and pid not in git_pids:
            git_pids.append(pid)
            git_calls[pid] = Counter()
        if started is None and pid == main and _TEMP_OPEN.match(f"{call}({rest}"):
            started = index
        if started is None or call not in CALLS:
            continue
        if pid == main:
            kb_calls[call] += 1
        elif pid in git_calls:
            git_calls[pid][call] += 1
        else:
            other.append(f"{pid} {call}({rest}")
    if started is None:
        raise AssertionError("the reference run wrote no commit temp file: no window found")
    if other:
        raise AssertionError(f"window calls outside kb's main thread and git: {other[:3]}")
    before = Counter(call for pid, call, _ in records[:started] if pid == main and call in CALLS)
    points = [
        KillPoint(call, before[call] + k) for call in CALLS for k in range(1, kb_calls[call] + 1)
    ]
    inside = [pid for pid in git_pids if records_started_after(records, pid, started)]
    for pid in inside:
        number = git_pids.index(pid) + 1
        points += [
            KillPoint(call, k, number) for call in CALLS for k in range(1, git_calls[pid][call] + 1)
        ]
    return Window(tuple(points), kb_calls, len(inside))


def records_started_after(records: Sequence[tuple[str, str, str]], pid: str, start: int) -> bool:
    """Whether ``pid`` first appears in the log after line ``start``."""
    return next(i for i, (p, _, _) in enumerate(records) if p == pid) > start


@dataclass(frozen=True)
class Killed:
    """What a killed run printed and how it ended."""

    point: KillPoint
    returncode: int
    stdout: str
    stderr: str


def kill_at(point: KillPoint, command: Sequence[str], cwd: Path, env: dict[str, str]) -> Killed:
    """Run ``command`` with ``point`` injected (kb itself killed, or one git process)."""
    wrapper_dir = cwd.parent / f"{cwd.name}.bin"
    git_wrapper(wrapper_dir)
    count_file = cwd.parent / f"{cwd.name}.count"
    count_file.unlink(missing_ok=True)
    run_env = _environment(env, wrapper_dir, count_file)
    argv = list(command)
    if point.git_invocation is None:
        argv = [
            STRACE or "strace",
            "-o",
            "/dev/null",
            "-e",
            f"trace={point.call}",
            "-e",
            f"inject={point.call}:signal=KILL:when={point.when}",
            *argv,
        ]
    else:
        run_env |= {
            "KB_KILL_GIT": str(point.git_invocation),
            "KB_KILL_CALL": point.call,
            "KB_KILL_WHEN": str(point.when),
        }
    done = subprocess.run(argv, cwd=cwd, env=run_env, capture_output=True, text=True, check=False)
    return Killed(point, done.returncode, done.stdout, done.stderr)


def kb_command(*args: str) -> list[str]:
    """``kb ARGS`` as a process (this interpreter's kb)."""
    return [sys.executable, "-m", "kb", *args]
