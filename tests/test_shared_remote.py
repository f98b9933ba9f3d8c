"""Many machines, one store: shards pushing to a shared bare remote concurrently."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kb.errors import ConfigError
from kb.store.filestore import KnowledgeStore
from kb.sweep.plan import parse_shard, shard_of
from tests.conftest import git

CASES = [(f"e{i}", "extraction", f"Extract {i}?", f"x{i}") for i in range(3)] + [
    (f"p{i}", "planning", f"Plan {i}?", f"y{i}") for i in range(3)
]


def spec_text(models: int) -> str:
    lines = [
        "[sweep]",
        'committer = "ci"',
        'gate = "point"',
        "",
        "[budgets]",
        "target_usd = 0.01",
        "max_total_usd = 5.0",
    ]
    for m in range(models):
        right = m % 2 == 0
        replies = {prompt: (answer if right else f"not {answer}") for _, _, prompt, answer in CASES}
        table = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in replies.items())
        lines += [
            "",
            "[[models]]",
            f'model = "scripted:m{m}"',
            f"params = {{ responses = {{ {table} }} }}",
        ]
    for name, task, prompt, answer in CASES:
        lines += [
            "",
            "[[cases]]",
            f'name = "{name}"',
            f'task_class = "{task}"',
            f'prompt = "{prompt}"',
            f'graders = [{{ kind = "golden", expected = "{answer}" }}]',
        ]
    return "\n".join(lines) + "\n"


def kb(cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "kb", *args],
        cwd=cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def kb_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run kb to completion."""
    return subprocess.run(
        [sys.executable, "-m", "kb", *args], cwd=cwd, text=True, capture_output=True, timeout=120
    )


@pytest.mark.slow
def test_four_shards_push_concurrently_and_every_claim_lands(isolated: Path) -> None:
    remote = isolated / "remote.git"
    git(isolated, "init", "-q", "--bare", str(remote))
    git(remote, "config", "receive.denyNonFastForwards", "true")  # a force push would fail
    seed = isolated / "seed"
    git(isolated, "clone", "-q", str(remote), str(seed))
    (seed / "sweep.toml").write_text(spec_text(models=8))
    git(seed, "add", "sweep.toml")
    git(seed, "commit", "-qm", "the nightly spec")
    assert kb_run(seed, "init").returncode == 0
    git(seed, "push", "-q", "origin", "HEAD")

    clones = []
    for shard in range(1, 5):
        clone = isolated / f"runner{shard}"
        git(isolated, "clone", "-q", str(remote), str(clone))
        clones.append(clone)
    runs = [
        kb(
            clone,
            "sweep",
            "sweep.toml",
            "--shard",
            f"{i}/4",
            "--push",
            "--attempts",
            "12",
            "--observed-at",
            "2026-11-29T02:00:00Z",
            "--json",
            "--quiet",
        )
        for i, clone in enumerate(clones, start=1)
    ]
    reports = []
    for process in runs:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        reports.append(json.loads(out))

    check = isolated / "check"
    git(isolated, "clone", "-q", str(remote), str(check))
    claims = KnowledgeStore(check / "rulvar.models.json").read().claims
    expected = {
        f"kb-sweep-2026-11-29T02:00:00.000Z/scripted:m{m}/{task}"
        for m in range(8)
        for task in ("extraction", "planning")
    }
    assert {c.id for c in claims} == expected  # every shard's claims landed, once
    assert sorted(
        cell["model"] + "/" + cell["taskClass"] for r in reports for cell in r["cells"]
    ) == sorted(f"scripted:m{m}/{t}" for m in range(8) for t in ("extraction", "planning"))
    assert git(check, "rev-list", "--merges", "HEAD") == ""  # linear history
    verify = subprocess.run(
        [sys.executable, "-m", "kb", "verify"], cwd=check, capture_output=True, text=True
    )
    assert verify.returncode == 0, verify.stderr
    shard_commits = [
        s for s in git(check, "log", "--format=%s").splitlines() if s.startswith("kb: sweep")
    ]
    assert len(shard_commits) == sum(1 for r in reports if r["cells"])


def test_a_rejected_push_is_reapplied_on_the_remote_tip(isolated: Path) -> None:
    remote, a = remote_with_clone(isolated)
    b = isolated / "b"
    git(isolated, "clone", "-q", str(remote), str(b))
    assert kb_run(a, *NOTE).returncode == 0
    later = ["2026-11-02" if arg == "2026-11-01" else arg for arg in NOTE]
    second = kb_run(b, *later)  # b is now behind: rejected once, then re-applied
    assert second.returncode == 0, second.stderr
    git(b, "fetch", "-q")
    assert git(b, "rev-parse", "HEAD") == git(b, "rev-parse", "origin/main")
    ids = [c.id for c in KnowledgeStore(b / "rulvar.models.json").read().claims]
    assert ids == ["note/x:y/t/2026-11-01T00:00:00.000Z", "note/x:y/t/2026-11-02T00:00:00.000Z"]
    assert git(b, "rev-list", "--merges", "HEAD") == ""


def remote_with_clone(isolated: Path) -> tuple[Path, Path]:
    remote = isolated / "remote.git"
    git(isolated, "init", "-q", "--bare", str(remote))
    git(remote, "config", "receive.denyNonFastForwards", "true")
    a = isolated / "a"
    git(isolated, "clone", "-q", str(remote), str(a))
    assert kb_run(a, "init").returncode == 0
    git(a, "push", "-q", "origin", "HEAD")
    return remote, a


NOTE = [
    "--as-of",
    "2026-11-01",
    "note",
    "--model",
    "x:y",
    "--task-class",
    "t",
    "--polarity",
    "weakness",
    "--statement",
    "s",
    "--approver",
    "ann",
    "--ruled-out",
    "prompt",
    "--evidence",
    "journal:r:1",
    "--push",
]


def test_push_exhaustion_keeps_and_names_the_local_commit(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kb.errors import CasAttemptsExhausted, PushRejected
    from kb.store import git as store_git
    from kb.store.filestore import CommitContext
    from tests.factories import add, eval_claim

    _, a = remote_with_clone(isolated)

    def always_lose(*args: object) -> None:  # a remote that keeps moving
        raise PushRejected("[rejected] (fetch first)")

    monkeypatch.setattr(store_git, "push", always_lose)
    store = KnowledgeStore(a / "rulvar.models.json")
    with pytest.raises(CasAttemptsExhausted) as caught:
        store.commit_with_rebase(
            lambda s: [add(eval_claim("c"))], CommitContext("t", "t"), attempts=2, push=True
        )
    local = git(a, "rev-parse", "--short=12", "HEAD").strip()
    assert f"the local commit {local} is kept on main, not published" in str(caught.value)
    assert "c" in store.read().by_id
    assert git(a, "status", "--porcelain") == ""


def test_a_refusing_hook_is_an_error_not_a_race(isolated: Path) -> None:
    remote, a = remote_with_clone(isolated)
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'policy: no pushes today (rejected)' >&2\nexit 1\n")
    hook.chmod(0o755)
    result = kb_run(a, *NOTE)
    assert result.returncode == 1, result.stderr  # not 3: retrying cannot help
    assert "pre-receive hook declined" in result.stderr


def test_push_refuses_to_publish_commits_kb_did_not_make(isolated: Path) -> None:
    remote, a = remote_with_clone(isolated)
    (a / "wip.txt").write_text("not for publication\n")
    git(a, "add", "wip.txt")
    git(a, "commit", "-qm", "WIP do not publish")
    before = (a / "rulvar.models.json").read_bytes()
    result = kb_run(a, *NOTE)
    assert result.returncode == 1 and "unpublished commit" in result.stderr
    assert (a / "rulvar.models.json").read_bytes() == before
    assert "WIP" not in git(remote, "log", "--format=%s", "main")


def test_catching_up_keeps_the_users_staged_work(isolated: Path) -> None:
    remote, a = remote_with_clone(isolated)
    b = isolated / "b"
    git(isolated, "clone", "-q", str(remote), str(b))
    assert kb_run(a, *NOTE).returncode == 0  # b is now behind
    (b / "staged.txt").write_text("staged\n")
    git(b, "add", "staged.txt")
    second = kb_run(b, *["2026-11-02" if arg == "2026-11-01" else arg for arg in NOTE])
    assert second.returncode == 0, second.stderr
    assert git(b, "diff", "--cached", "--name-only") == "staged.txt\n"


def test_shards_are_whole_cells_and_parse_strictly() -> None:
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/4", "5/4", "x", "1/0", "-1/2"):
        with pytest.raises(ConfigError):
            parse_shard(bad)
    keys = [(f"m{i}", t) for i in range(50) for t in ("a", "b", "c")]
    owners = [shard_of(m, t, 4) for m, t in keys]
    assert set(owners) == {1, 2, 3, 4}
    assert owners == [shard_of(m, t, 4) for m, t in keys]  # deterministic
