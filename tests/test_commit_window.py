"""Kill a sweep's and a note's commit at every write, then recover as a user would (SPEC 13.1).

Each kill point of the commit window (see ``tests/kill_points.py``) gets a
fresh copy of a small repository, the command killed there, and then two
recoveries, each asserted to end with the night's (or the note's) claims in
``HEAD`` exactly once, nothing temporary ever visible to ``git add -A``,
and ``kb verify`` and ``git fsck`` passing:

* the command again (``kb sweep --resume``; for a note, ``kb settle`` then
  the note again when it was undone);
* the user's own ``git add -A && git commit`` first, then a later kb write
  (a note), then the resume.

A git process killed mid-write can leave git's own lock file
(``index.lock``, ``<branch>.lock``); git refuses to work until it is
removed, and so does kb — with a line that names it. The recovery then
removes it, as the user would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from kb.store.audit import verify_store
from kb.store.filestore import KnowledgeStore
from kb.store.validation import parse_store
from tests.kill_points import Killed, KillPoint, kb_command, kill_at, reference_window
from tests.kill_points import strace_problem as _strace_problem

NIGHT_1 = "2026-11-28T02:00:00Z"
NIGHT_2 = "2026-11-29T02:00:00Z"
NIGHT_2_ID = "kb-sweep-2026-11-29T02:00:00.000Z"
NOTE_AT = "2026-11-29T12:00:00Z"
NOTE_ID = "note/openai:m/planning/2026-11-29T12:00:00.000Z"
STORE = "rulvar.models.json"
HIDDEN = (".kb-tmp", ".kb-old", "kb-intent")
KILLED = -9  # strace ends itself with its tracee's fatal signal

SKIP_REASON = _strace_problem()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


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


@dataclass(frozen=True)
class Template:
    """A repository where night 1 is committed and night 2 is journaled, not committed."""

    repo: Path
    env: dict[str, str]
    spec: Path
    """Outside the repository, so that every copy sweeps the very same spec file."""


@pytest.fixture(scope="module")
def night_template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    home = tmp_path_factory.mktemp("kill-template")
    env = environment(home)
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
    return Template(repo, env, spec)


def resume_args(template: Template) -> list[str]:
    """The night's command line again, with --resume (what a CI retry runs)."""
    return ["sweep", str(template.spec), "--quiet", "--observed-at", NIGHT_2, "--resume"]


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
    verify_store(KnowledgeStore(repo / STORE))  # kb verify, in this process: raises if not ok
    assert run(repo, env, "git", "fsck", "--no-progress").returncode == 0
    assert git(repo, env, "status", "--porcelain") == ""
    left = [
        p for p in repo.rglob("*") if any(h in p.name for h in HIDDEN) and ".git" not in p.parts
    ]
    assert left == [], left
    parse_store((repo / STORE).read_bytes(), STORE)


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


def check_killed_run(killed: Killed, repo: Path, env: dict[str, str]) -> None:
    """Right after the kill: one line when kb itself survived, the store whole on disk."""
    if killed.point.git_invocation is not None:
        assert "Traceback" not in killed.stderr, killed.stderr
        assert killed.returncode in (0, 1, 2, 3), (killed.returncode, killed.stderr)
    else:
        assert killed.returncode == KILLED, (killed.returncode, killed.stderr)
    parse_store((repo / STORE).read_bytes(), STORE)
    assert_nothing_hidden_is_visible(repo, env)


# -- the enumeration ------------------------------------------------------------------------


def trial_sweep(template: Template, point: KillPoint, where: Path) -> None:
    env = template.env
    repo = fresh_copy(template, where / "a")
    killed = kill_at(point, kb_command(*resume_args(template)), repo, env)
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
    run(repo, env, "git", "add", "-A")
    committed = run(repo, env, "git", "commit", "-qm", "user: commit what git status shows")
    if committed.returncode == 0:
        files = git(repo, env, "show", "--name-only", "--format=", "HEAD").split()
        assert not [f for f in files if any(h in f for h in HIDDEN)], files
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
    # 1. the note again, when it did not stand (a note has no journal: it is asked again)
    for lock in stale_git_locks(repo) if killed.point.git_invocation is not None else []:
        lock.unlink()
    settled = kb_through_git_locks(repo, env, "settle")
    assert settled.returncode == 0, settled.stderr
    if NOTE_ID not in [c["id"] for c in head_store(repo, env)["claims"]]:  # type: ignore[union-attr]
        assert "finished" not in settled.stderr, settled.stderr
        again = kb_through_git_locks(repo, env, *note_args())  # the user runs it again
        assert again.returncode == 0, again.stderr
    assert_note_once(repo, env)
    assert_whole(repo, env)
    # 2. the user's own commit, then a later kb write (the night's resume)
    repo = user / "repo"
    for lock in stale_git_locks(repo):
        lock.unlink()
    run(repo, env, "git", "add", "-A")
    committed = run(repo, env, "git", "commit", "-qm", "user: commit what git status shows")
    if committed.returncode == 0:
        files = git(repo, env, "show", "--name-only", "--format=", "HEAD").split()
        assert not [f for f in files if any(h in f for h in HIDDEN)], files
    resumed = kb_through_git_locks(repo, env, *resume_args(template))
    assert resumed.returncode == 0, f"{point}: {resumed.stdout}{resumed.stderr}"
    assert_night_once(repo, env)
    ids = [c["id"] for c in head_store(repo, env)["claims"]]  # type: ignore[union-attr]
    assert ids.count(NOTE_ID) <= 1
    assert_whole(repo, env)


def enumerate_window(
    template: Template, command: list[str], tmp: Path
) -> Iterator[tuple[KillPoint, Path]]:
    probe = fresh_copy(template, tmp / "reference")
    window = reference_window(command, probe, template.env)
    assert window.kb_calls["rename"] >= 2 and window.git_processes >= 3, window
    for index, point in enumerate(window.points):
        where = tmp / f"p{index:03d}"
        where.mkdir()
        yield point, where


def run_all(trial: object, points: list[tuple[KillPoint, Path]], template: Template) -> None:
    failures: list[str] = []

    def one(item: tuple[KillPoint, Path]) -> None:
        point, where = item
        try:
            trial(template, point, where)  # type: ignore[operator]
        except AssertionError as exc:
            failures.append(f"{point}: {exc}")

    # Each trial mostly waits on its processes and their fsyncs: one more than the cores.
    with ThreadPoolExecutor(max_workers=(os.cpu_count() or 2) + 1) as pool:
        list(pool.map(one, points))
    assert not failures, "\n\n".join(failures[:5]) + f"\n\n({len(failures)} of {len(points)})"


@pytest.mark.slow
def test_a_sweep_killed_at_every_write_of_its_commit_loses_nothing(
    night_template: Template, tmp_path: Path
) -> None:
    points = list(
        enumerate_window(
            night_template,
            kb_command(*resume_args(night_template)),
            tmp_path,
        )
    )
    print(f"{len(points)} kill points: {', '.join(str(p) for p, _ in points)}")
    run_all(trial_sweep, points, night_template)


@pytest.mark.slow
def test_a_note_killed_at_every_write_of_its_commit_loses_nothing(
    night_template: Template, tmp_path: Path
) -> None:
    points = list(enumerate_window(night_template, kb_command(*note_args()), tmp_path))
    print(f"{len(points)} kill points: {', '.join(str(p) for p, _ in points)}")
    run_all(trial_note, points, night_template)
