"""Never lose a claim, never learn from a broken measurement (SPEC 12.3), on the real path.

Each case the issue found is reproduced as a user met it — a real ``kb``
process or the CLI in-process, a real git repository, a real loopback HTTP
server through litellm — and the store, the git history and the exit code
are asserted afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
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
    priced: bool = True,
    keyed: bool = True,
) -> Path:
    """``openai:m`` on the loopback server, ``cases`` cases it answers right (``echo: qN``).

    Sampling is the default (the nightly rule of SPEC 13.7) unless ``extra_sweep``
    says otherwise: its first night of 30 cases runs every case.
    """
    model: dict[str, Any] = {"api_base": base}
    model |= {"api_key": KEY} if keyed else {}
    model |= {"cost_usd": 0.001} if priced else {}
    model |= params or {}
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
    # Every case every night: the second night's counts are the whole suite's.
    spec = loopback_spec(repo / "s.toml", base, extra_sweep='sampling = "full"')
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


@pytest.mark.parametrize("outage", ["empty", "junk"])
def test_an_outage_that_begins_mid_canary_is_incomplete_not_drift(
    runner: CliRunner, repo: Path, server: tuple[str, Seen], outage: str
) -> None:
    """The first probe answers as ever, the next meets the outage: no claim flips."""
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, canary=True)
    assert kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1).exit_code == 0
    before = state(repo)
    baselines = (repo / "rulvar.models.canary.json").read_bytes()
    seen.outage, seen.outage_after = outage, len(seen.requests) + 1
    seen.junk_text = "<html><head><title>502 Bad Gateway</title></head>request {n}</html>"
    probed = kb(runner, "canary", str(spec), "--json", "--as-of", NIGHT_2)
    assert probed.exit_code == 0, probed.stderr
    (entry,) = json.loads(probed.stdout)
    assert entry["status"] == "incomplete" and entry["flipped"] == [], entry
    said = {"empty": "answered empty", "junk": "answered '<html> titled 502 Bad Gateway'"}
    assert said[outage] in entry["reason"] and "not drift" in entry["reason"]
    assert active(repo) == [("strength", "active")]  # nothing flipped stale
    assert state(repo) == before
    assert (repo / "rulvar.models.canary.json").read_bytes() == baselines  # not re-based


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
    ("store temp", STORE),
    ("evidence temp", ".jsonl"),
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
        elif step.endswith("temp"):
            from kb.store import committing  # where a commit writes its temps

            real_temp = committing.stream_temp_beside

            def temp(path: Path, fill: Any, owner: str = "") -> tuple[Path, str]:
                if path.name.endswith(where):
                    fail()
                return real_temp(path, fill, owner)

            patch.setattr(committing, "stream_temp_beside", temp)
        else:
            import os

            real_replace = os.replace

            def replace(src: Any, dst: Any) -> None:
                if str(dst).endswith(where) and ".kb-tmp" in str(src):
                    fail()
                real_replace(src, dst)

            patch.setattr(os, "replace", replace)
        failed = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert failed.exit_code == 1, failed.output
    assert "Traceback" not in failed.stderr
    # The store, HEAD and the work tree are as they were: git status has nothing to commit.
    assert state(repo) == before
    assert git(repo, "status", "--porcelain") == ""
    # Only the night's run journal is left (git ignores it), for --resume.
    left = sorted(p.name for p in (repo / "kb-evidence").iterdir())
    assert left == ["kb-sweep-2026-11-28T02:00:00.000Z.journal.jsonl"]
    assert not list(repo.glob(".*.kb-tmp")) and not list(repo.glob(".*.kb-old"))
    assert kb(runner, "verify").exit_code == 0
    # And the night commits cleanly afterwards, from its journal.
    again = kb(runner, "sweep", str(spec), "--quiet", "--resume")
    assert again.exit_code == 0, again.stderr
    assert git(repo, "status", "--porcelain") == ""
    assert not (repo / "kb-evidence" / left[0]).exists()


# -- 4 and 9: one sweep per night; a stopped night resumes and pays nothing twice -------------


def kb_process(repo: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "kb", *args],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition: Any, proc: subprocess.Popen[str]) -> None:
    """Poll the server's log (not a clock): a hang guard, not a speed bound."""
    import time

    deadline = time.monotonic() + 120
    while not condition():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)


def prompts_asked(seen: Seen, since: int = 0) -> list[str]:
    with seen.lock:
        return [r["body"]["messages"][-1]["content"] for r in seen.requests[since:]]


def uninterrupted_night(root: Path, spec_text: str, night: list[str]) -> tuple[list[str], bytes]:
    """The same night run once without a cut, in its own repository.

    Returns the prompts it asked and the store it committed.
    """
    git(root, "init", "-q")
    (root / "README.txt").write_text("user file\n")
    git(root, "add", "README.txt")
    git(root, "commit", "-q", "-m", "user: initial")
    subprocess.run([sys.executable, "-m", "kb", "init"], cwd=root, check=True, capture_output=True)
    with fake_openai_server() as (base, seen):
        (root / "s.toml").write_text(spec_text.replace(PLACEHOLDER_BASE, base))
        done = subprocess.run(
            [sys.executable, "-m", "kb", *night], cwd=root, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        asked = prompts_asked(seen)
    return asked, (root / STORE).read_bytes()


PLACEHOLDER_BASE = "http://placeholder.invalid/v1"


@pytest.mark.parametrize("sampling", ["adaptive", "full"])
def test_ctrl_c_mid_night_then_resume_pays_only_for_what_was_not_settled(
    repo: Path, tmp_path_factory: pytest.TempPathFactory, sampling: str
) -> None:
    """The resumed night equals the night never cut, whichever rule chose its cases.

    Under the nightly rule (the default) the night's later passes depend on the
    outcomes of its first: a resume must replay them from the journal, not ask again.
    """
    import signal

    from kb.engine.journal import read_journal

    night = ["sweep", "s.toml", "--quiet", "--observed-at", NIGHT_1]
    extra = f'concurrency = 4\nsampling = "{sampling}"'
    template = loopback_spec(repo / "s.toml", PLACEHOLDER_BASE, cases=120, extra_sweep=extra)
    spec_text = template.read_text()
    whole, whole_store = uninterrupted_night(tmp_path_factory.mktemp("uncut"), spec_text, night)
    assert len(set(whole)) == len(whole) and len(whole) == (40 if sampling == "adaptive" else 120)

    subprocess.run([sys.executable, "-m", "kb", "init"], cwd=repo, check=True, capture_output=True)
    with fake_openai_server(latency_s=0.02) as (base, seen):
        (repo / "s.toml").write_text(spec_text.replace(PLACEHOLDER_BASE, base))
        proc = kb_process(repo, *night)
        wait_for(lambda: len(seen.requests) >= 20, proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert git(repo, "log", "--format=%s").count("kb: sweep") == 0  # nothing committed
        journal = repo / "kb-evidence" / "kb-sweep-2026-11-28T02:00:00.000Z.journal.jsonl"
        state_ = read_journal(journal)
        assert state_ is not None and 10 <= len(state_.settled) < len(whole)
        settled = {label.rsplit("/", 1)[1] for label in state_.settled}
        asked_before = len(seen.requests)
        resumed = subprocess.run(
            [sys.executable, "-m", "kb", "sweep", "s.toml", "--quiet", "--resume"],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        assert resumed.returncode == 0, resumed.stderr
        asked = prompts_asked(seen, asked_before)
    # Exactly the runs the journal did not hold were paid for, each once, and together
    # with those the journal held they are the uncut night's.
    named = {f"c{int(p[1:]):02d}" for p in asked}
    assert len(set(asked)) == len(asked) and not named & settled
    assert named | settled == {f"c{int(p[1:]):02d}" for p in whole}
    assert not journal.exists()
    claims = parse_store((repo / STORE).read_bytes(), "store").claims
    assert [c.id for c in claims] == ["kb-sweep-2026-11-28T02:00:00.000Z/openai:m/extraction"]
    assert (repo / STORE).read_bytes() == whole_store
    runs = (repo / "kb-evidence" / "kb-sweep-2026-11-28T02:00:00.000Z.jsonl").read_text()
    assert len(runs.splitlines()) == len(whole)


def test_a_partly_failed_night_resumes_under_its_own_report_id(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base)
    flaky = {
        "model": "openai:flaky",
        "params": {"api_base": base, "api_key": KEY, "cost_usd": 0.001},
    }
    spec.write_text(
        spec.read_text().replace(
            "\n[[cases]]", f"\n[[models]]\nmodel = {toml_value(flaky['model'])}\n"
            f"params = {toml_value(flaky['params'])}\n\n[[cases]]", 1,
        )
    )  # fmt: skip
    seen.failing.add("flaky")
    first = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert first.exit_code == 1 and "1 of 2 cells incomplete" in first.stderr
    assert "the complete cell is committed" in first.stderr
    again = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert again.exit_code == 2 and "--resume, to finish a night that stopped" in again.stderr
    seen.failing.clear()  # the provider is back
    before = len(seen.requests)
    resumed = kb(runner, "sweep", str(spec), "--quiet", "--resume", "--observed-at", NIGHT_1)
    assert resumed.exit_code == 0, resumed.stderr
    models = {r["body"]["model"] for r in seen.requests[before:]}
    assert models == {"flaky"} and len(seen.requests) - before == 30  # the done cell not re-run
    claims = [c.id for c in parse_store((repo / STORE).read_bytes(), "store").claims]
    assert claims == [
        "kb-sweep-2026-11-28T02:00:00.000Z/openai:m/extraction",
        "kb-sweep-2026-11-28T02:00:00.000Z/openai:flaky/extraction",
    ]
    report = json.loads(kb(runner, "report", "kb-sweep-2026-11-28T02:00:00.000Z", "--json").stdout)
    assert [c["outcome"] for c in report["cells"]] == ["strength", "strength"]
    assert len(report["runs"]) == 60
    assert git(repo, "log", "--format=%s").count("kb: sweep kb-sweep-2026-11-28") == 2
    assert kb(runner, "verify").exit_code == 0


def test_a_second_sweep_of_the_same_night_is_refused_while_the_first_runs(repo: Path) -> None:
    subprocess.run([sys.executable, "-m", "kb", "init"], cwd=repo, check=True, capture_output=True)
    with fake_openai_server(hang_s=None) as (base, seen):
        spec = loopback_spec(repo / "s.toml", base, cases=3)
        spec.write_text(spec.read_text().replace('prompt = "q2"', 'prompt = "hang"'))
        night = ["sweep", str(spec), "--quiet", "--observed-at", NIGHT_1]
        first = kb_process(repo, *night)
        wait_for(lambda: len(seen.requests) == 3, first)  # all its calls sent, one held
        asked = len(seen.requests)
        second = subprocess.run(
            [sys.executable, "-m", "kb", *night], cwd=repo, capture_output=True, text=True
        )
        assert second.returncode == 2
        assert (
            "another sweep of 'kb-sweep-2026-11-28T02:00:00.000Z' is running on this store now"
        ) in second.stderr
        assert len(seen.requests) == asked  # refused before any provider call
        seen.release.set()
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err  # the first sweep finished and committed its night
    assert git(repo, "log", "--format=%s").count("kb: sweep") == 1


def test_a_reply_without_choices_is_not_paid_for_twice(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, cases=3)
    spec.write_text(spec.read_text().replace("max_retries = 0", "max_retries = 3"))
    seen.outage = "no-choices"  # answered (and billed) without a reply
    result = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert result.exit_code == 1 and "answered without choices" in result.stderr
    assert len(seen.requests) == 3  # one call per case, no retry


def test_the_journal_keeps_no_secret_and_forgets_an_outages_answers(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    from kb.engine.journal import read_journal

    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, cases=12)
    spec.write_text(spec.read_text().replace('prompt = "q11"', 'prompt = "echo-auth"'))
    seen.outage = "empty"
    night = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert night.exit_code == 1 and "suspect" in night.stderr, night.stderr
    journal = repo / "kb-evidence" / "kb-sweep-2026-11-28T02:00:00.000Z.journal.jsonl"
    text = journal.read_text()
    assert "Incorrect API key provided: ***" in text and KEY not in text
    kept = read_journal(journal)
    assert kept is not None and kept.settled == {}  # the empty answers are not reused
    seen.outage = None  # the provider is back
    before = len(seen.requests)
    resumed = kb(runner, "sweep", str(spec), "--quiet", "--resume", "--allow-incomplete")
    assert resumed.exit_code == 0, resumed.stderr
    assert len(seen.requests) - before == 12  # every case asked again


def test_resume_refuses_another_spec_and_a_night_already_complete(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, cases=5)
    spec.write_text(spec.read_text().replace('prompt = "q4"', 'prompt = "server-error"'))
    night = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert night.exit_code == 1
    other = repo / "other.toml"
    other.write_text(spec.read_text())
    before = (state(repo), len(seen.requests))
    # Unnamed: this spec has no stopped night, so --resume would start one (SPEC 14.4),
    # saying so and naming the newest stopped night with its spec
    unnamed = kb(runner, "sweep", str(other), "--resume", "--dry-run")
    assert unnamed.exit_code == 0, unnamed.stderr
    assert "no journal of a stopped sweep of this spec" in unnamed.stderr
    assert "is a sweep of s.toml): the night starts now" in unnamed.stderr
    # Named: that night is another spec's.
    wrong = kb(runner, "sweep", str(other), "--quiet", "--resume", "--observed-at", NIGHT_1)
    assert wrong.exit_code == 2
    assert "is a sweep of s.toml, not of other.toml" in wrong.stderr
    assert (state(repo), len(seen.requests)) == before
    complete = loopback_spec(repo / "c.toml", base, cases=5)
    assert kb(runner, "sweep", str(complete), "--quiet", "--observed-at", NIGHT_2).exit_code == 0
    again = kb(runner, "sweep", str(complete), "--quiet", "--resume", "--observed-at", NIGHT_2)
    # SPEC 13.1: a resume of a committed night exits 0 and says so.
    assert again.exit_code == 0, again.stderr
    assert "is already committed (store v" in again.stdout and "nothing to resume" in again.stdout


def test_an_empty_report_id_is_refused(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, cases=1)
    before = state(repo)
    result = kb(runner, "sweep", str(spec), "--quiet", "--report-id", " ")
    assert result.exit_code == 2
    assert "--report-id: must not be empty" in result.stderr
    assert seen.requests == [] and state(repo) == before


# -- 5. prices: declared or refused, never a silent $0 -----------------------------------------


def test_a_model_nobody_can_price_is_refused_under_a_cap_and_named(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, priced=False)
    before = state(repo)
    refused = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert refused.exit_code == 2
    assert "openai:m: has no price (litellm's price table does not know it" in refused.stderr
    assert "price = { input_per_mtok = …, output_per_mtok = … }" in refused.stderr
    assert "or set sweep.allow_unpriced = true" in refused.stderr
    assert seen.requests == [] and state(repo) == before
    # Declared: priced per token, recorded as declared.
    price = {"price": {"input_per_mtok": 2, "output_per_mtok": 10}}
    declared = loopback_spec(repo / "d.toml", base, priced=False, params=price)
    done = kb(runner, "sweep", str(declared), "--json", "--quiet", "--observed-at", NIGHT_1)
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    assert {r["priceSource"] for r in report["runs"]} == {"declared"}
    assert report["cells"][0]["totalCostUsd"] == pytest.approx(30 * (5 * 2 + 2 * 10) / 1e6)
    # Allowed unpriced: the runs say so, the cell's cost is "unpriced", never $0.0000.
    allowed = loopback_spec(
        repo / "a.toml",
        base,
        priced=False,
        extra_sweep='allow_unpriced = true\nsampling = "full"',
    )
    run = kb(runner, "sweep", str(allowed), "--quiet", "--observed-at", NIGHT_2)
    assert run.exit_code == 0, run.stderr
    assert "  openai:m · extraction: strength\n" in run.stdout
    assert "n=30  unpriced\n" in run.stdout
    assert "(+ 30 unpriced runs, cost unknown)" in run.stdout
    latest = parse_store((repo / STORE).read_bytes(), "store").claims[-1]
    assert latest.metrics is not None and "cost" not in latest.metrics
    shown = kb(runner, "report", "kb-sweep-2026-11-29T02:00:00.000Z", "--json")
    assert shown.exit_code == 0, shown.stderr
    (cell,) = json.loads(shown.stdout)["cells"]
    assert "totalCostUsd" not in cell and cell["unpricedRuns"] == 30  # unknown, not $0


def test_the_checkpoint_refuses_to_compare_unpriced_arms(isolated: Path, runner: CliRunner) -> None:
    assert kb(runner, "init").exit_code == 0
    (isolated / "c.toml").write_text(
        '[checkpoint]\norchestrator = "scripted:o"\n\n[budgets]\ntarget_usd = 0.01\n'
        "orchestrator_usd = 0.01\nmax_total_usd = 1\n\n"
        '[[ladders]]\nname = "g"\nstart_tier = 1\nrungs = [{ model = "openai:cheap-unknown" }, '
        '{ model = "scripted:big" }]\n\n[[profiles]]\nname = "p"\nmodel = "scripted:big"\n'
        'task_class = "t"\n\n[[cases]]\nname = "k1"\ntask_class = "t"\nprompt = "q"\n'
        'graders = [{ kind = "golden", expected = "a" }]\n\n[[orchestrated]]\nname = "o1"\n'
        'task_class = "t"\nprompt = "q2"\ngraders = [{ kind = "golden", expected = "a" }]\n'
    )
    result = kb(runner, "checkpoint", "c.toml")
    assert result.exit_code == 2
    assert "openai:cheap-unknown: has no price" in result.stderr
    assert "allow_unpriced" not in result.stderr  # no way around it: the criteria compare costs


# -- 6. params: kb's own refused, typos named, provider keys through extra ------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"max_retries": 5},
            "models[0].params.max_retries: kb sets max_retries itself; kb retries failed "
            "calls itself: use [sweep] max_retries",
        ),
        ({"timeout": 5}, "models[0].params.timeout: kb sets timeout itself; use params.timeout_s"),
        (
            {"model": "x"},
            "models[0].params.model: kb sets model itself; the model is [[models]].model",
        ),
        (
            {"stream": True},
            "models[0].params.stream: kb sets stream itself; kb reads whole replies",
        ),
        (
            {"n": 3},
            "models[0].params.n: kb sets n itself; to ask a case several times use [sweep] repeats",
        ),
        (
            {"temprature": 0},
            "models[0].params.temprature: not a param litellm knows for openai; did you "
            "mean 'temperature'?",
        ),
        ({"extra": 3}, "models[0].params.extra: must be a table of provider-specific keys"),
        (
            {"price": {"input_per_mtok": -1}},
            "models[0].params.price.input_per_mtok: must be a nonnegative number",
        ),
        (
            {"price": {"input_per_mtok": float("inf"), "output_per_mtok": 1}},
            "models[0].params.price.input_per_mtok: must be a nonnegative number (got inf)",
        ),
        (
            {"cost_usd": 0.001, "price": {"input_per_mtok": 1, "output_per_mtok": 1}},
            "models[0].params: declares its price twice (cost_usd, price); keep one",
        ),
        (
            {"timeout_s": 0},
            "models[0].params.timeout_s: must be a number of seconds above 0 (got 0)",
        ),
        ({"temperature": "hot"}, "models[0].params.temperature: must be a number (got 'hot')"),
        ({"top_p": 1.5}, "models[0].params.top_p: must be between 0 and 1 (got 1.5)"),
        ({"max_tokens": 0}, "models[0].params.max_tokens: must be at least 1 (got 0)"),
        ({"seed": 1.5}, "models[0].params.seed: must be a whole number (got 1.5)"),
        (
            {"extra": {"temperature": 0}},
            "models[0].params.extra.temperature: litellm knows temperature for openai; set it "
            "as models[0].params.temperature so kb checks it",
        ),
        (
            {"extra": {"timeout_s": 3}},
            "models[0].params.extra.timeout_s: a kb setting; set it as models[0].params.timeout_s",
        ),
    ],
)
def test_params_kb_owns_or_litellm_does_not_know_are_refused_before_any_call(
    runner: CliRunner, repo: Path, server: tuple[str, Seen], params: dict[str, Any], message: str
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, params=params, priced="price" not in params)
    result = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert result.exit_code == 2
    assert message in result.stderr, result.stderr
    assert seen.requests == []


def test_provider_specific_keys_go_through_extra(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(
        repo / "s.toml", base, cases=1, params={"temperature": 0, "extra": {"top_k": 7}}
    )
    result = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert result.exit_code == 0, result.stderr
    (request,) = seen.requests
    assert request["body"]["temperature"] == 0 and request["body"]["top_k"] == 7


# -- 7. secrets: real ones cut, placeholders left alone ---------------------------------


def test_api_key_none_never_hides_the_word_none(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, _ = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, cases=1, params={"api_key": "none"})
    spec.write_text(spec.read_text().replace('prompt = "q0"', 'prompt = "There are none left."'))
    spec.write_text(
        spec.read_text().replace('expected = "echo: q0"', 'expected = "echo: There are none left."')
    )
    done = kb(runner, "sweep", str(spec), "--json", "--quiet", "--observed-at", NIGHT_1)
    assert done.exit_code == 0, done.stderr
    (run,) = json.loads(done.stdout)["runs"]
    assert run["output"] == "echo: There are none left."
    assert run["request"]["user"] == "There are none left."
    evidence = (repo / "kb-evidence" / "kb-sweep-2026-11-28T02:00:00.000Z.jsonl").read_text()
    assert "none left" in evidence and "***" not in evidence


def test_a_real_key_is_cut_wherever_it_would_show(
    runner: CliRunner, repo: Path, server: tuple[str, Seen], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, _ = server
    monkeypatch.setenv("LOOPBACK_CRED", "s3cret-value-123456")
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(
        repo / "s.toml", base, cases=1, keyed=False, params={"api_key_env": "LOOPBACK_CRED"}
    )
    spec.write_text(
        spec.read_text()
        .replace('prompt = "q0"', 'prompt = "say s3cret-value-123456"')
        # The golden grader's reason quotes what it expected: the secret, here.
        .replace('expected = "echo: q0"', 'expected = "echo: say s3cret-value-123456"')
    )
    done = kb(
        runner,
        "sweep",
        str(spec),
        "--json",
        "--quiet",
        "--observed-at",
        NIGHT_1,
        "--allow-incomplete",
    )
    assert done.exit_code == 0, done.stderr
    assert "s3cret-value-123456" not in done.stdout
    evidence = (repo / "kb-evidence" / "kb-sweep-2026-11-28T02:00:00.000Z.jsonl").read_text()
    assert "s3cret-value-123456" not in evidence and "say ***" in evidence
    (run,) = json.loads(done.stdout)["runs"]
    assert run["verdicts"][0]["reason"] == "matches exact 'echo: say ***'"


# -- 8. an interrupt on the real HTTP path says one line, no Python warning -----------------


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_interrupt_with_calls_in_flight_prints_one_line_and_no_warning(
    repo: Path, sig: str
) -> None:
    """Calls cut short inside litellm (mid-request, or still being built in its executor)
    leave coroutines it never awaited; none of that may reach the user's terminal."""
    import signal

    subprocess.run([sys.executable, "-m", "kb", "init"], cwd=repo, check=True, capture_output=True)
    with fake_openai_server(latency_s=0.02, hang_s=None) as (base, seen):
        # Every case in one stream (sampling = "full"): calls start and finish, then hang.
        full = 'concurrency = 8\nsampling = "full"'
        spec = loopback_spec(repo / "s.toml", base, cases=160, extra_sweep=full)
        text = spec.read_text()
        for i in range(150, 160):  # calls the server holds: always some in flight at the end
            text = text.replace(f'prompt = "q{i}"\n', 'prompt = "hang"\n')
        spec.write_text(text)
        proc = kb_process(repo, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
        wait_for(lambda: len(seen.requests) >= 60, proc)  # mid-stream: calls start and finish
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"Error: interrupted by {sig}: nothing committed, the store is unchanged; $"
    ), err
    assert out == ""


# -- 9. inputs a newcomer mistyped, refused before anything moves -----------------------------


def test_a_future_observed_at_is_refused_not_allowed_to_block_every_real_night(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, cases=1)
    before = state(repo)
    typo = kb(
        runner, "--as-of", "2026-11-28T03:00:00Z", "sweep", str(spec), "--quiet",
        "--observed-at", "2030-11-28T02:00:00Z",
    )  # fmt: skip
    assert typo.exit_code == 2
    assert "--observed-at: 2030-11-28T02:00:00.000Z is 1461.0 days after now" in typo.stderr
    assert seen.requests == [] and state(repo) == before
    # A day of clock skew is fine.
    skew = kb(
        runner, "--as-of", "2026-11-28T01:00:00Z", "sweep", str(spec), "--quiet",
        "--observed-at", NIGHT_1,
    )  # fmt: skip
    assert skew.exit_code == 0, skew.stderr


def test_a_declared_cost_above_the_runs_ceiling_is_refused_before_any_call(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, cases=1, params={"cost_usd": 0.02})
    spec.write_text(spec.read_text().replace('"cost_usd" = 0.001, ', ""))
    result = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert result.exit_code == 2
    assert (
        "openai:m: cost_usd = 0.02 per call is above budgets.target_usd = 0.01 (each run's "
        "ceiling): every call would overspend"
    ) in result.stderr
    assert seen.requests == []


@pytest.mark.parametrize(
    ("report_id", "message"),
    [
        ("a\nb", "must not contain '\\n'"),
        ("../escape", "must not contain '/'"),
        ("-rf", "must not start with '-'"),
        ("x y", "must not contain ' '"),
        ("r" * 121, "is 121 characters; at most 120"),
    ],
)
def test_a_report_id_that_cannot_name_a_night_is_refused(
    runner: CliRunner, repo: Path, server: tuple[str, Seen], report_id: str, message: str
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    spec = loopback_spec(repo / "s.toml", base, cases=1)
    before = state(repo)
    result = kb(runner, "sweep", str(spec), "--quiet", "--report-id", report_id)
    assert result.exit_code == 2 and "--report-id: " in result.stderr
    assert message in result.stderr, result.stderr
    assert seen.requests == [] and state(repo) == before


def test_a_report_id_whose_night_left_evidence_only_is_not_reused(
    runner: CliRunner, repo: Path, server: tuple[str, Seen]
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    # 3 of 4 right: no claim under the interval gate, but the night's evidence is committed.
    spec = loopback_spec(repo / "s.toml", base, cases=4)
    spec.write_text(spec.read_text().replace('expected = "echo: q0"', 'expected = "no"'))
    first = kb(runner, "sweep", str(spec), "--quiet", "--report-id", "night-a")
    assert first.exit_code == 0, first.stderr
    evidence = (repo / "kb-evidence" / "night-a.report.json").read_bytes()
    before, asked = state(repo), len(seen.requests)
    again = kb(runner, "sweep", str(spec), "--quiet", "--report-id", "night-a")
    assert again.exit_code == 2
    assert "'night-a' was already used: its evidence is in" in again.stderr
    assert state(repo) == before and len(seen.requests) == asked
    assert (repo / "kb-evidence" / "night-a.report.json").read_bytes() == evidence


def test_a_ref_git_cannot_write_is_not_called_a_race(
    runner: CliRunner, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kb.store.git import GitStoreRepo

    assert kb(runner, "init").exit_code == 0
    before = state(repo)
    real = GitStoreRepo.call

    def locked(self: GitStoreRepo, *args: str, **kwargs: Any) -> tuple[int, str, str]:
        if args[:1] == ("update-ref",) and "-m" in args and "kb: take back" not in args:
            return (
                128,
                "",
                "fatal: Unable to create 'refs/heads/main.lock': Operation not permitted",
            )
        return real(self, *args, **kwargs)

    monkeypatch.setattr(GitStoreRepo, "call", locked)
    noted = kb(
        runner, "--as-of", "2026-11-21T00:00:00Z", "note", "--model", "a:b",
        "--task-class", "t", "--polarity", "weakness", "--statement", "s",
        "--approver", "al", "--ruled-out", "prompt", "--evidence", "journal:r:1",
    )  # fmt: skip
    assert noted.exit_code == 2, noted.stderr
    assert "git cannot update the ref (fatal: Unable to create" in noted.stderr
    assert "moved from" not in noted.stderr and "attempts" not in noted.stderr
    assert state(repo) == before
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"api_key": 98765432101234}, "models[0].params.api_key: must be a non-empty string"),
        ({"input_cost_per_token": 1e-3}, "models[0].params.output_cost_per_token: missing"),
        (
            {"api_key_env": "SOME_VAR"},
            "models[0].params: both api_key and api_key_env; keep one",
        ),
    ],
)
def test_more_params_a_provider_would_reject_mid_sweep(
    runner: CliRunner, repo: Path, server: tuple[str, Seen], params: dict[str, Any], message: str
) -> None:
    base, seen = server
    assert kb(runner, "init").exit_code == 0
    priced = "input_cost_per_token" not in params
    spec = loopback_spec(repo / "s.toml", base, cases=1, params=params, priced=priced)
    result = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", NIGHT_1)
    assert result.exit_code == 2
    assert message in result.stderr, result.stderr
    assert seen.requests == []
