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

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
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
    return parse_window(trace.read_text(errors="replace").splitlines(), cwd.parent)


def _names_a_path_under(arguments: str, place: Path) -> bool:
    """Whether a traced call's first path argument lies under ``place`` (or is relative)."""
    found = re.search(r'"([^"]*)"', arguments)
    return (
        found is None
        or not found.group(1).startswith("/")
        or (found.group(1).startswith(f"{place}/"))
    )


def parse_window(lines: Sequence[str], place: Path | None = None) -> Window:
    """The window and its kill points, from a ``strace -f`` log (see :func:`reference_window`).

    A call in the window by a process that is neither kb's main thread nor git
    fails the enumeration when it names a path under ``place`` (the test's
    directory: the store, its evidence, its git dir): such a step would be a
    kill point left out. A worker process still importing litellm when a fully
    journaled night commits may remove its own file in ``/tmp``; that touches
    nothing of the store and is not a step of the commit.
    """
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
        elif place is None or _names_a_path_under(rest, place):
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


def kill_at(
    point: KillPoint,
    command: Sequence[str],
    cwd: Path,
    env: dict[str, str],
    signal_name: str = "KILL",
) -> Killed:
    """Run ``command`` with ``point`` injected (kb itself killed, or one git process).

    ``signal_name`` other than ``KILL`` (``INT``: a Ctrl-C) is for kb's own calls.
    """
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
            f"inject={point.call}:signal={signal_name}:when={point.when}",
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
    """``kb ARGS`` as a process (this interpreter's kb, or the one ``PYTHONPATH`` names)."""
    return [sys.executable, "-m", "kb", *args]


# -- the night, the note and the recoveries ------------------------------------------------

IN_PROCESS_VERIFY = True
"""``kb verify`` run in this process (fast; the bench sets it off to check another kb)."""

NIGHT_1 = "2026-11-28T02:00:00Z"
NIGHT_2 = "2026-11-29T02:00:00Z"
NIGHT_2_ID = "kb-sweep-2026-11-29T02:00:00.000Z"
NOTE_AT = "2026-11-29T12:00:00Z"
NOTE_ID = "note/openai:m/planning/2026-11-29T12:00:00.000Z"
STORE = "rulvar.models.json"
HIDDEN = (".kb-tmp", ".kb-old", "kb-intent")
KILLED = -9  # strace ends itself with its tracee's fatal signal


def spec_text(cases: int = 16) -> str:
    lines = [
        "[sweep]",
        'committer = "ci"',
        "[budgets]",
        "target_usd = 0.01",
        "canary_usd = 0.01",
        "max_total_usd = 5",
        "[[models]]",
        'model = "scripted:m"',
        'params = { default = "yes", cost_usd = 0.001 }',
        "[canary]",
        'prompts = ["Ping?"]',
    ]
    for i in range(cases):
        lines += [
            "[[cases]]",
            f'name = "c{i:02d}"',
            'task_class = "extraction"',
            f'prompt = "q{i}"',
            'graders = [{ kind = "golden", expected = "yes" }]',
        ]
    return "\n".join(lines) + "\n"


def environment(home: Path) -> dict[str, str]:
    """The tests' git identity and pinned commit dates; no KB_* settings from outside."""
    gitconfig = home / "gitconfig"
    gitconfig.write_text(
        "[user]\n\tname = Test User\n\temail = test@example.com\n[init]\n\tdefaultBranch = main\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
    env |= {
        "GIT_CONFIG_GLOBAL": str(gitconfig),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_COMMITTER_DATE": "2026-11-01T00:00:00Z",
        "GIT_AUTHOR_DATE": "2026-11-01T00:00:00Z",
        "XDG_CACHE_HOME": str(home / "cache"),
        "KB_WORKERS": "0",
    }
    return env


def run(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def git(cwd: Path, env: dict[str, str], *args: str) -> str:
    done = run(cwd, env, "git", *args)
    assert done.returncode == 0, f"git {args}: {done.stderr}"
    return done.stdout


def kb(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run(cwd, env, *kb_command(*args))


def note_args(at: str = NOTE_AT) -> list[str]:
    return [
        "--as-of", at, "note", "--model", "openai:m", "--task-class", "planning",
        "--polarity", "weakness", "--statement", "weak at planning", "--approver", "al",
        "--ruled-out", "prompt", "--evidence", "journal:r:1",
    ]  # fmt: skip


NIGHT_1_ID = "kb-sweep-2026-11-28T02:00:00.000Z"
LABELS = "rulvar.models.labels.json"


def label_args(at: str = NOTE_AT) -> list[str]:
    """A person's label on one answer of night 1 (committed in the template)."""
    return ["--as-of", at, "label", NIGHT_1_ID, "c03", "scripted:m", "fail", "--why", "wrong"]


@dataclass(frozen=True)
class Template:
    """A repository where night 1 is committed and night 2 is journaled, not committed."""

    repo: Path
    env: dict[str, str]
    spec: Path
    """Outside the repository, so that every copy sweeps the very same spec file."""
    journaled: bool
    """Night 2 waits in its journal (the command killed is its resume), else it is fresh."""


def build_template(
    home: Path, *, journaled: bool, env_extra: dict[str, str] | None = None
) -> Template:
    """Night 1 committed; with ``journaled``, night 2 paid and journaled but not committed."""
    home.mkdir(parents=True, exist_ok=True)
    env = environment(home) | (env_extra or {})
    repo = home / "repo"
    repo.mkdir()
    git(repo, env, "init", "-q")
    (repo / "README.txt").write_text("user file\n")
    git(repo, env, "add", "README.txt")
    git(repo, env, "commit", "-qm", "user: initial")
    spec = home / "spec.toml"
    spec.write_text(spec_text())
    assert kb(repo, env, "init").returncode == 0
    first = kb(repo, env, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert first.returncode == 0, first.stderr
    if not journaled:
        return Template(repo, env, spec, journaled)
    # Night 2 is paid and journaled, then killed at its first rename (its commit's intent).
    killed = kill_at(
        KillPoint("rename", 1),
        kb_command("sweep", str(spec), "--quiet", "--observed-at", NIGHT_2),
        repo,
        env,
    )
    assert killed.returncode == KILLED, (killed.returncode, killed.stdout, killed.stderr)
    assert kb(repo, env, "settle").returncode == 0
    assert git(repo, env, "status", "--porcelain") == ""
    journal = repo / "kb-evidence" / f"{NIGHT_2_ID}.journal.jsonl"
    assert journal.exists()
    return Template(repo, env, spec, journaled)


def resume_args(template: Template) -> list[str]:
    """The night's command line again, with --resume (what a CI retry runs)."""
    return [*night_args(template), "--resume"]


def night_args(template: Template) -> list[str]:
    """Night 2's command line."""
    return ["sweep", str(template.spec), "--quiet", "--observed-at", NIGHT_2]


def killed_night_args(template: Template) -> list[str]:
    """The command the sweep enumeration kills: night 2, or its resume when it is journaled."""
    return resume_args(template) if template.journaled else night_args(template)


def fresh_copy(template: Template, where: Path) -> Path:
    target = where / "repo"
    shutil.copytree(template.repo, target, symlinks=True)
    return target


# -- what must hold after every recovery ------------------------------------------------------


def head_store(repo: Path, env: dict[str, str]) -> dict[str, object]:
    return json.loads(git(repo, env, "show", f"HEAD:{STORE}"))


def assert_nothing_hidden_is_visible(repo: Path, env: dict[str, str]) -> None:
    shown = git(repo, env, "status", "--porcelain", "--untracked-files=all")
    assert not [line for line in shown.splitlines() if any(h in line for h in HIDDEN)], shown


def assert_whole(repo: Path, env: dict[str, str]) -> None:
    """kb verify and git fsck pass, the work tree equals HEAD, no temporary is left."""
    if IN_PROCESS_VERIFY:
        from kb.store.audit import verify_store
        from kb.store.filestore import KnowledgeStore

        verify_store(KnowledgeStore(repo / STORE))  # kb verify, in this process: raises if not ok
    else:
        verified = kb(repo, env, "verify")
        assert verified.returncode == 0, f"kb verify: {verified.stdout}{verified.stderr}"
    assert run(repo, env, "git", "fsck", "--no-progress").returncode == 0
    assert git(repo, env, "status", "--porcelain") == ""
    left = [
        p for p in repo.rglob("*") if any(h in p.name for h in HIDDEN) and ".git" not in p.parts
    ]
    assert left == [], left
    json.loads((repo / STORE).read_bytes())


def assert_night_once(repo: Path, env: dict[str, str]) -> None:
    """Night 2's claim is in HEAD once, its commit recorded once, its epoch pooled once."""
    claims = head_store(repo, env)["claims"]
    assert isinstance(claims, list)
    night = [c for c in claims if c["id"].startswith(f"{NIGHT_2_ID}/")]
    assert [(c["polarity"], c["status"]) for c in night] == [("strength", "active")], night
    recorded = git(repo, env, "log", "--format=%H", f"--grep=Kb-Report: {NIGHT_2_ID}", "HEAD")
    assert len(recorded.split()) == 1, recorded
    epochs = json.loads(git(repo, env, "show", "HEAD:rulvar.models.epochs.json"))
    (cell,) = epochs["cells"].values()
    assert [n["reportId"] for n in cell["nights"]].count(NIGHT_2_ID) == 1
    tree = git(repo, env, "ls-tree", "-r", "--name-only", "HEAD", "kb-evidence")
    assert f"kb-evidence/{NIGHT_2_ID}.jsonl" in tree.split()
    assert f"kb-evidence/{NIGHT_2_ID}.report.json" in tree.split()


def assert_note_once(repo: Path, env: dict[str, str]) -> None:
    claims = head_store(repo, env)["claims"]
    assert isinstance(claims, list)
    assert [c["id"] for c in claims].count(NOTE_ID) == 1


GIT_LOCKS = (".git/index.lock", ".git/refs/heads/main.lock", ".git/HEAD.lock")


def stale_git_locks(repo: Path) -> list[Path]:
    return [repo / lock for lock in GIT_LOCKS if (repo / lock).exists()]


def kb_through_git_locks(
    repo: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """Run kb; where a killed git left its lock, kb must name it; the user then removes it."""
    done = kb(repo, env, *args)
    locks = stale_git_locks(repo)
    if done.returncode != 0 and locks:
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert any(lock.name in done.stderr for lock in locks), done.stderr
        for lock in locks:
            lock.unlink()
        done = kb(repo, env, *args)
    return done


def user_commits(repo: Path, env: dict[str, str]) -> None:
    """What a user may commit after a crash: what is staged, every tracked change, everything.

    Each is a commit only when there is something to commit; none may hold a
    temporary file.
    """
    for how in (["commit"], ["commit", "-a"], ["add", "-A"]):
        if how == ["add", "-A"]:
            run(repo, env, "git", "add", "-A")
            how = ["commit"]
        before = git(repo, env, "rev-parse", "HEAD")
        run(repo, env, "git", *how, "-qm", f"user: git {' '.join(how)}")
        if git(repo, env, "rev-parse", "HEAD") != before:
            files = git(repo, env, "show", "--name-only", "--format=", "HEAD").split()
            assert not [f for f in files if any(h in f for h in HIDDEN)], files


def check_killed_run(killed: Killed, repo: Path, env: dict[str, str]) -> None:
    """Right after the kill: one line when kb itself survived, the store whole on disk."""
    if killed.point.git_invocation is not None:
        assert "Traceback" not in killed.stderr, killed.stderr
        assert killed.returncode in (0, 1, 2, 3), (killed.returncode, killed.stderr)
    else:
        assert killed.returncode == KILLED, (killed.returncode, killed.stderr)
    json.loads((repo / STORE).read_bytes())
    assert_nothing_hidden_is_visible(repo, env)


# -- the enumeration ------------------------------------------------------------------------


def trial_sweep(template: Template, point: KillPoint, where: Path) -> None:
    env = template.env
    repo = fresh_copy(template, where / "a")
    killed = kill_at(point, kb_command(*killed_night_args(template)), repo, env)
    check_killed_run(killed, repo, env)
    user = where / "b"
    user.mkdir()
    shutil.copytree(repo, user / "repo", symlinks=True)
    # 1. the command again
    for lock in stale_git_locks(repo) if killed.point.git_invocation is not None else []:
        lock.unlink()  # git names its own lock in every command; kb names it too (case 2)
    again = kb_through_git_locks(repo, env, *resume_args(template))
    assert again.returncode == 0, f"{point}: {again.stdout}{again.stderr}"
    assert_night_once(repo, env)
    assert_whole(repo, env)
    # 2. the user's own commit of what git status shows, a later kb write, then the resume
    repo = user / "repo"
    for lock in stale_git_locks(repo):
        lock.unlink()  # git add would refuse, naming it; the user removes it
    user_commits(repo, env)
    noted = kb_through_git_locks(repo, env, *note_args())
    assert noted.returncode == 0, f"{point}: {noted.stdout}{noted.stderr}"
    resumed = kb_through_git_locks(repo, env, *resume_args(template))
    assert resumed.returncode == 0, f"{point}: {resumed.stdout}{resumed.stderr}"
    assert_night_once(repo, env)
    assert_note_once(repo, env)
    assert_whole(repo, env)


def trial_note(template: Template, point: KillPoint, where: Path) -> None:
    env = template.env
    repo = fresh_copy(template, where / "a")
    killed = kill_at(point, kb_command(*note_args()), repo, env)
    check_killed_run(killed, repo, env)
    user = where / "b"
    user.mkdir()
    shutil.copytree(repo, user / "repo", symlinks=True)
    # 1. the user runs the note again (kb refuses a note whose claim stands already)
    for lock in stale_git_locks(repo) if killed.point.git_invocation is not None else []:
        lock.unlink()
    again = kb_through_git_locks(repo, env, *note_args())
    assert again.returncode == 0 or "already exists" in again.stderr, again.stderr
    assert_note_once(repo, env)
    assert_whole(repo, env)
    # 2. the user's own commit, then a later kb write (the night's resume)
    repo = user / "repo"
    for lock in stale_git_locks(repo):
        lock.unlink()
    user_commits(repo, env)
    night = resume_args(template) if template.journaled else night_args(template)
    later = kb_through_git_locks(repo, env, *night)  # a later kb write: the night
    assert later.returncode == 0, f"{point}: {later.stdout}{later.stderr}"
    assert_night_once(repo, env)
    ids = [c["id"] for c in head_store(repo, env)["claims"]]  # type: ignore[union-attr]
    assert ids.count(NOTE_ID) <= 1
    assert_whole(repo, env)


def head_labels(repo: Path, env: dict[str, str]) -> list[dict[str, object]]:
    """The labels file in ``HEAD`` (none: no file)."""
    shown = subprocess.run(
        ["git", "show", f"HEAD:{LABELS}"], cwd=repo, env=env, capture_output=True, text=True
    )
    if shown.returncode != 0:
        return []
    found = json.loads(shown.stdout)["labels"]
    assert isinstance(found, list)
    return found


def trial_label(template: Template, point: KillPoint, where: Path) -> None:
    """``kb label`` killed at ``point``: then again, and after the user's own commit."""
    env = template.env
    repo = fresh_copy(template, where / "a")
    claims = head_store(repo, env)["claims"]
    killed = kill_at(point, kb_command(*label_args()), repo, env)
    check_killed_run(killed, repo, env)
    user = where / "b"
    user.mkdir()
    shutil.copytree(repo, user / "repo", symlinks=True)
    # 1. the label again: one label, no claim changed
    for lock in stale_git_locks(repo) if killed.point.git_invocation is not None else []:
        lock.unlink()
    again = kb_through_git_locks(repo, env, *label_args())
    assert again.returncode == 0, f"{point}: {again.stdout}{again.stderr}"
    assert [lb["case"] for lb in head_labels(repo, env)] == ["c03"]
    assert head_store(repo, env)["claims"] == claims
    assert_whole(repo, env)
    # 2. the user's own commit of what git status shows, then a later kb write (a note)
    repo = user / "repo"
    for lock in stale_git_locks(repo):
        lock.unlink()
    user_commits(repo, env)
    assert len(head_labels(repo, env)) <= 1  # a file the user committed is whole or absent
    noted = kb_through_git_locks(repo, env, *note_args())
    assert noted.returncode == 0, f"{point}: {noted.stdout}{noted.stderr}"
    labelled = kb_through_git_locks(repo, env, *label_args())
    assert labelled.returncode == 0, f"{point}: {labelled.stdout}{labelled.stderr}"
    assert [lb["case"] for lb in head_labels(repo, env)] == ["c03"]
    assert_note_once(repo, env)
    assert_whole(repo, env)


def enumerate_window(
    template: Template, command: list[str], tmp: Path
) -> Iterator[tuple[KillPoint, Path]]:
    """Every kill point of ``command``'s commit window, each with a fresh directory."""
    probe = fresh_copy(template, tmp / "reference")
    window = reference_window(command, probe, template.env)
    for index, point in enumerate(window.points):
        where = tmp / f"p{index:03d}"
        where.mkdir()
        yield point, where


Trial = Callable[[Template, KillPoint, Path], None]


def run_all(
    trial: Trial, points: Sequence[tuple[KillPoint, Path]], template: Template
) -> dict[KillPoint, str]:
    """Each point's outcome: ``ok``, or the first line of the check that failed."""
    outcomes: dict[KillPoint, str] = {}

    def one(item: tuple[KillPoint, Path]) -> None:
        point, where = item
        try:
            trial(template, point, where)
            outcomes[point] = "ok"
        except AssertionError as exc:
            outcomes[point] = (str(exc).strip().splitlines() or ["failed"])[0][:300]

    # Each trial mostly waits on its processes and their fsyncs: one more than the cores.
    with ThreadPoolExecutor(max_workers=(os.cpu_count() or 2) + 1) as pool:
        list(pool.map(one, points))
    return outcomes
