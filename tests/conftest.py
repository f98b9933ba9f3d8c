"""Every test runs in its own directory with its own git configuration."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import settings

# A property holds or not whatever the machine's load: no example has a wall-clock deadline
# (hypothesis' default 200 ms failed a key-cutting property on a loaded two-core runner).
settings.register_profile("kb", deadline=None)
settings.load_profile("kb")

PROJECT = Path(__file__).resolve().parent.parent
PINNED_COMMIT_DATE = "2026-11-01T00:00:00Z"


def _project_state() -> tuple[str, bytes]:
    head = subprocess.run(
        ["git", "rev-parse", "-q", "--verify", "HEAD"], cwd=PROJECT, capture_output=True, text=True
    ).stdout
    return head, (PROJECT / "rulvar.models.json").read_bytes()


@pytest.fixture(autouse=True, scope="session")
def project_untouched() -> Iterator[None]:
    """No test may commit to or write the project's own store (a test escaping tmp_path)."""
    before = _project_state()
    yield
    assert _project_state() == before, "a test wrote to the project's own git repository"


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """cwd = tmp_path; no user git config, no KB_* settings leak in."""
    gitconfig = tmp_path / ".gitconfig-test"
    gitconfig.write_text(
        "[user]\n\tname = Test User\n\temail = test@example.com\n[init]\n\tdefaultBranch = main\n"
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    # Every commit a test makes carries this instant unless the test sets its own, so
    # nothing a test asserts about history (diffs, expiries, compaction) depends on the
    # real date (tests pass on any date: SPEC 12.1).
    monkeypatch.setenv("GIT_COMMITTER_DATE", PINNED_COMMIT_DATE)
    monkeypatch.setenv("GIT_AUTHOR_DATE", PINNED_COMMIT_DATE)
    for name in ("KB_STORE", "KB_AS_OF", "KB_DEBUG", "KB_COMMITTER", "KB_NO_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # The shared rate-limit buckets (SPEC 14.4) in the test's own runtime folder: a
    # loopback server's port is reused between tests, its 429 holds must not be
    monkeypatch.delenv("KB_RATE_LIMITS", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    # Calls in this process unless a test asks for worker processes (tests/test_workers.py
    # runs sweeps through them): a worker pays litellm's import (~5 s of CPU) per sweep,
    # which the thousands of sweeps here would pay again and again.
    monkeypatch.setenv("KB_WORKERS", "0")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    yield work


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` and return its stdout."""
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def repo(isolated: Path) -> Path:
    """A git work tree with one commit holding a user's file."""
    git(isolated, "init", "-q")
    (isolated / "README.txt").write_text("user file\n")
    git(isolated, "add", "README.txt")
    git(isolated, "commit", "-q", "-m", "user: initial")
    return isolated


@pytest.fixture
def runner() -> CliRunner:
    """A click runner that keeps stdout and stderr apart."""
    return CliRunner()


@pytest.fixture
def initialized_store(request: pytest.FixtureRequest, isolated: Path) -> Path:
    """An empty store (``kb init``) in the test's directory; committed when it is a repo.

    kb never creates a store implicitly, so every test that sweeps or commits
    through the CLI starts from one.
    """
    from kb.store.filestore import CommitContext, KnowledgeStore

    if "repo" in request.fixturenames:
        request.getfixturevalue("repo")
    path = isolated / "rulvar.models.json"
    if not path.exists():
        KnowledgeStore(path).initialize(CommitContext("init", "test"))
    return path
