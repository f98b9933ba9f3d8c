"""Never lose a claim, never learn from a broken measurement (SPEC 12.3), on the real path.

Each case the issue found is reproduced as a user met it — a real ``kb``
process or the CLI in-process, a real git repository, a real loopback HTTP
server through litellm — and the store, the git history and the exit code
are asserted afterwards.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.store.validation import parse_store
from tests.cli_helpers import kb, note
from tests.conftest import git
from tests.fake_openai import Seen, fake_openai_server
from tests.sweep_helpers import toml_value

STORE = "rulvar.models.json"
NIGHT_1 = "2026-11-28T02:00:00Z"
NIGHT_2 = "2026-11-29T02:00:00Z"
KEY = "sk-loopback-key-0123456789"


@pytest.fixture
def server() -> Iterator[tuple[str, Seen]]:
    with fake_openai_server() as found:
        yield found


def loopback_spec(
    path: Path,
    base: str,
    *,
    cases: int = 30,
    canary: bool = False,
    params: dict[str, Any] | None = None,
    extra_sweep: str = "",
) -> Path:
    """``openai:m`` on the loopback server, ``cases`` cases it answers right (``echo: qN``)."""
    model = {"api_base": base, "api_key": KEY, "cost_usd": 0.001} | (params or {})
    lines = [
        "[sweep]",
        'committer = "ci"',
        "max_retries = 0",
        extra_sweep,
        "",
        "[budgets]",
        "target_usd = 0.01",
        "canary_usd = 0.01",
        "max_total_usd = 5",
        "",
        "[[models]]",
        'model = "openai:m"',
        f"params = {toml_value(model)}",
    ]
    if canary:
        lines += ["", "[canary]", 'prompts = ["Ping?", "Pong?"]']
    for i in range(cases):
        lines += [
            "",
            "[[cases]]",
            f'name = "c{i:02d}"',
            'task_class = "extraction"',
            f'prompt = "q{i}"',
            f'graders = [{{ kind = "golden", expected = "echo: q{i}" }}]',
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def state(repo: Path) -> tuple[bytes, str]:
    """The store's bytes and HEAD: what must not move when nothing may be committed."""
    return (repo / STORE).read_bytes(), git(repo, "rev-parse", "HEAD")


def active(repo: Path) -> list[tuple[str, str]]:
    snapshot = parse_store((repo / STORE).read_bytes(), "store")
    return [(c.polarity, c.status) for c in snapshot.claims if c.status == "active"]


# -- 3. an outage is not a weakness ------------------------------------------------------


@pytest.mark.parametrize("outage", ["empty", "junk", "no-choices"])
def test_an_outage_answering_http_200_is_suspect_not_a_weakness(
    runner: CliRunner, repo: Path, server: tuple[str, Seen], outage: str
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base)
    first = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert first.exit_code == 0, first.stderr
    assert active(repo) == [("strength", "active")]
    before = state(repo)
    seen.outage = outage  # the provider now fails quietly
    second = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_2)
    assert second.exit_code == 1
    expected = {
        "empty": "suspect: 30 of 30 replies were empty",
        "junk": "suspect: every reply was '<html>502 Bad Gateway</html>', to 30 different",
        "no-choices": "answered without choices",
    }[outage]
    assert expected in second.stderr, second.stderr
    # Nothing was learned from the outage: no weakness, no falsified strength, no commit.
    assert state(repo) == before
    assert active(repo) == [("strength", "active")]


def test_a_canary_of_empty_probes_is_incomplete_not_drift(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, canary=True)
    assert kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1).exit_code == 0
    seen.outage = "empty"
    probed = kb(runner, "canary", str(spec), "--json", "--as-of", NIGHT_2)
    assert probed.exit_code == 0, probed.stderr
    (entry,) = json.loads(probed.stdout)
    assert entry["status"] == "incomplete" and entry["flipped"] == []
    assert active(repo) == [("strength", "active")]  # nothing flipped stale
    text = kb(runner, "canary", str(spec), "--as-of", NIGHT_2).stdout
    assert "incomplete (every probe answered empty: an outage, not drift)" in text


def test_a_case_that_expects_an_empty_answer_is_exempt(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, cases=0)
    text = spec.read_text()
    for i in range(30):
        text += (
            f'\n[[cases]]\nname = "e{i:02d}"\ntask_class = "silence"\nprompt = "say nothing {i}"\n'
            'graders = [{ kind = "golden", expected = "" }]\n'
        )
    spec.write_text(text)
    seen.outage = "empty"  # here an empty reply is the right answer
    done = kb(runner, "sweep", str(spec), "--json", "--quiet", "--observed-at", NIGHT_1)
    assert done.exit_code == 0, done.stderr
    (cell,) = json.loads(done.stdout)["cells"]
    assert cell["outcome"] == "strength" and "suspect" not in cell


# -- 2. the commit never runs ahead of its files --------------------------------------------


def scripted_spec(path: Path, canary: bool = True) -> Path:
    from tests.sweep_helpers import scripted_model, write_spec

    return write_spec(
        path,
        [scripted_model("m", 10, cost_usd=0.001)],
        budgets={"target_usd": 0.01, "canary_usd": 0.01, "max_total_usd": 5},
        extra='\n[canary]\nprompts = ["Ping?"]\n' if canary else "",
    )


def make_immutable(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``chattr +i`` where the file system allows it; else the same answer from the check."""
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    if done.returncode == 0:
        return
    from kb import atomicfile

    real = atomicfile._inode_flags
    monkeypatch.setattr(atomicfile, "_inode_flags", lambda p: 0x10 if p == path else real(p))


def release(path: Path) -> None:
    subprocess.run(["chattr", "-i", str(path)], capture_output=True, check=False)


def test_an_immutable_store_is_refused_before_anything_moves(
    runner: CliRunner, repo: Path, server: tuple[str, Seen], monkeypatch: pytest.MonkeyPatch
) -> None:
    """v2 moved HEAD, then failed writing the file: committing git status then lost the note."""
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    note(runner, "planning", "2026-11-20T00:00:00Z")
    before = state(repo)
    make_immutable(repo / STORE, monkeypatch)
    try:
        noted = kb(
            runner, "--as-of", "2026-11-21T00:00:00Z", "note", "--model", "a:b",
            "--task-class", "t", "--polarity", "weakness", "--statement", "s",
            "--approver", "al", "--ruled-out", "prompt", "--evidence", "journal:r:1",
        )  # fmt: skip
        assert noted.exit_code == 2
        assert "is immutable or append-only (chattr +i/+a)" in noted.stderr
        spec = loopback_spec(repo / "s.toml", base)
        swept = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
        assert swept.exit_code == 2 and "immutable" in swept.stderr
        assert seen.requests == []  # refused before any provider call
        assert state(repo) == before
        assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    finally:
        release(repo / STORE)
    assert kb(runner, "verify").exit_code == 0
    assert kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1).exit_code == 0


FAULTS = [
    ("store temp", "kb.store.filestore.stream_temp_beside"),
    ("evidence temp", "kb.store.filestore.write_temp_beside"),
    ("git objects", "kb.store.git.GitStoreRepo.prepare_commit"),
    ("evidence swap", ".jsonl"),
    ("baselines swap", ".canary.json"),
    ("store swap", STORE),
    ("ref move", "kb.store.git.GitStoreRepo.publish"),
    ("index", "kb.store.git.GitStoreRepo.set_index_blobs"),
]


@pytest.mark.parametrize(("step", "where"), FAULTS, ids=[step for step, _ in FAULTS])
def test_every_write_of_a_commit_can_fail_and_nothing_is_half_done(
    runner: CliRunner, repo: Path, monkeypatch: pytest.MonkeyPatch, step: str, where: str
) -> None:
    import errno

    from kb import atomicfile

    assert kb(runner, "init").exit_code == 0
    spec = scripted_spec(repo / "s.toml")
    git(repo, "add", "s.toml")
    git(repo, "commit", "-qm", "spec")
    before = state(repo)

    def fail(*args: object, **kwargs: object) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        if where.startswith("kb."):
            if step == "index":
                patch.setattr(where, lambda *a, **k: False)  # the index stays locked
            else:
                patch.setattr(where, fail)
        else:
            real_put = atomicfile.Replacement.put

            def put(self: atomicfile.Replacement, temp: Path, path: Path) -> None:
                if path.name.endswith(where):
                    fail()
                real_put(self, temp, path)

            patch.setattr(atomicfile.Replacement, "put", put)
        failed = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert failed.exit_code == 1, failed.output
    assert "Traceback" not in failed.stderr
    # The store, HEAD and the work tree are as they were: git status has nothing to commit.
    assert state(repo) == before
    assert git(repo, "status", "--porcelain") == ""
    assert not (repo / "kb-evidence").exists() or not list((repo / "kb-evidence").iterdir())
    assert not list(repo.glob(".*.kb-tmp")) and not list(repo.glob(".*.kb-old"))
    assert kb(runner, "verify").exit_code == 0
    # And the same night commits cleanly afterwards.
    again = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert again.exit_code == 0, again.stderr
    assert git(repo, "status", "--porcelain") == ""
