"""Merging branches: kb's git merge driver re-applies theirs' store changes onto ours."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.cli import cli
from kb.errors import MergeConflict
from kb.store.baselines import CanaryBaselines, SubjectBaselines, merge_baselines
from kb.store.canonical import claims_hash
from kb.store.filestore import CommitContext, KnowledgeStore
from kb.store.merge import merge_snapshots
from kb.store.ops import ArchiveClaim, CompactClaim, MarkStale, Op, SupersedeClaim, apply_ops
from kb.store.snapshot import EMPTY_SNAPSHOT, Snapshot
from kb.store.validation import parse_store
from tests.cli_helpers import kb, note
from tests.conftest import git
from tests.factories import GATE, add, eval_claim
from tests.sweep_helpers import scripted_model, write_spec

STORE = "rulvar.models.json"


def sweep(runner: CliRunner, spec: Path, day: int) -> None:
    observed = f"2026-11-{day:02d}T02:00:00Z"
    result = kb(runner, "sweep", str(spec), "--quiet", "--observed-at", observed)
    assert result.exit_code == 0, result.stderr


def merge(repo: Path, branch: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "merge", "--no-edit", branch], cwd=repo, capture_output=True, text=True
    )


def store_at(repo: Path) -> Snapshot:
    return parse_store((repo / STORE).read_bytes(), "store")


def test_kb_init_installs_the_driver(repo: Path, runner: CliRunner) -> None:
    assert kb(runner, "init").exit_code == 0
    attributes = (repo / ".gitattributes").read_text()
    assert "/rulvar.models.json merge=kb" in attributes
    assert "/rulvar.models.canary.json merge=kb" in attributes
    assert "-m kb merge-driver %O %A %B %P" in git(repo, "config", "merge.kb.driver")
    assert git(repo, "status", "--porcelain") == ""
    assert ".gitattributes" in git(repo, "show", "--stat", "--format=", "HEAD")


def test_install_in_an_existing_repo_keeps_the_users_attributes(
    repo: Path, runner: CliRunner
) -> None:
    store = KnowledgeStore(repo / STORE)
    store.initialize(CommitContext("init", "me"))  # as kb v1 did: no driver
    (repo / ".gitattributes").write_text("*.png binary")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "user attributes")
    result = kb(runner, "merge-driver", "--install")
    assert result.exit_code == 0 and "committed .gitattributes" in result.stdout
    assert (repo / ".gitattributes").read_text().splitlines() == [
        "*.png binary",
        "/rulvar.models.json merge=kb",
        "/rulvar.models.canary.json merge=kb",
        "/rulvar.models.epochs.json merge=kb",
        "/rulvar.models.labels.json merge=kb",
    ]
    again = kb(runner, "merge-driver", "--install")
    assert again.exit_code == 0 and "already routes" in again.stdout


def test_merging_branches_that_each_swept_noted_and_archived(repo: Path, runner: CliRunner) -> None:
    assert kb(runner, "init").exit_code == 0
    spec = write_spec(
        repo / "night.toml", [scripted_model("strong", 10), scripted_model("weak", 2)]
    )
    git(repo, "add", "night.toml")
    git(repo, "commit", "-q", "-m", "spec")
    sweep(runner, spec, 1)
    weakness = next(e.id for e in store_at(repo).entries if e.polarity == "weakness")

    git(repo, "checkout", "-q", "-b", "feature")
    feature_note = note(runner, "planning", "2026-11-02T09:00:00Z")
    assert kb(runner, "archive", weakness, "--reason", "rejected").exit_code == 0
    other = write_spec(repo / "other.toml", [scripted_model("other", 10)])
    sweep(runner, other, 3)
    theirs = store_at(repo)

    git(repo, "checkout", "-q", "main")
    main_note = note(runner, "judging", "2026-11-02T10:00:00Z")
    third = write_spec(repo / "third.toml", [scripted_model("third", 10)])
    sweep(runner, third, 4)
    ours = store_at(repo)

    done = merge(repo, "feature")
    assert done.returncode == 0, done.stdout + done.stderr
    merged = store_at(repo)
    ids = {e.id: e.status for e in merged.entries}
    assert merged.version == max(ours.version, theirs.version) + 1
    assert merged.hash == claims_hash([dict(w) for w in merged.wire])
    assert feature_note in ids and main_note in ids
    assert ids[weakness] == "archived"
    models = {e.model for e in merged.entries}
    assert {"scripted:strong", "scripted:other", "scripted:third"} <= models
    assert len(merged) == len({*ours.index, *theirs.index})
    # Both sides' evidence is there, the merge is committed, and kb accepts its history.
    evidence = {p.name for p in (repo / "kb-evidence").iterdir()}
    assert any("2026-11-03" in name for name in evidence)
    assert any("2026-11-04" in name for name in evidence)
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert len(git(repo, "log", "-1", "--format=%P").split()) == 2
    verify = kb(runner, "verify")
    assert verify.exit_code == 0, verify.stderr
    # And kb keeps committing on top of the merge.
    note(runner, "synthesis", "2026-11-05T10:00:00Z")
    assert kb(runner, "verify").exit_code == 0


def test_a_clash_leaves_a_normal_conflict_with_one_line_why(repo: Path, runner: CliRunner) -> None:
    assert kb(runner, "init").exit_code == 0
    store = KnowledgeStore(repo / STORE)
    context = CommitContext("test", "ci")
    store.commit([add(eval_claim("x"))], 0, context)
    git(repo, "checkout", "-q", "-b", "feature")
    replacement = eval_claim("y", observedAt="2026-07-02T00:00:00.000Z")
    store.commit([SupersedeClaim("x", replacement, GATE)], 1, context)
    git(repo, "checkout", "-q", "main")
    assert kb(runner, "archive", "x", "--reason", "rejected").exit_code == 0
    done = merge(repo, "feature")
    assert done.returncode != 0
    assert "cannot merge: claim 'x' is archived on ours but superseded on theirs" in (
        done.stdout + done.stderr
    )
    text = (repo / STORE).read_text()
    assert "<<<<<<< ours:rulvar.models.json" in text and ">>>>>>> theirs:" in text
    assert "UU rulvar.models.json" in git(repo, "status", "--porcelain")
    listed = runner.invoke(cli, ["list"])
    assert listed.exit_code == 2 and "unresolved git merge conflict" in listed.stderr


def conflicted_without_driver(repo: Path, runner: CliRunner) -> None:
    """Two branches that each added a claim, merged in a clone without kb's driver."""
    assert kb(runner, "init").exit_code == 0
    git(repo, "config", "--remove-section", "merge.kb")  # a fresh clone has no such config
    store = KnowledgeStore(repo / STORE)
    context = CommitContext("test", "ci")
    store.commit([add(eval_claim("x"))], 0, context)
    git(repo, "checkout", "-q", "-b", "feature")
    store.commit([add(eval_claim("y"))], 1, context)
    git(repo, "checkout", "-q", "main")
    store.commit([add(eval_claim("z"))], 1, context)
    assert merge(repo, "feature").returncode != 0


def test_an_uninstalled_clone_gets_git_s_text_merge(repo: Path, runner: CliRunner) -> None:
    """Without the config (a fresh clone), git falls back to its line merge: kb says so."""
    conflicted_without_driver(repo, runner)
    listed = runner.invoke(cli, ["list"])
    assert listed.exit_code == 2 and "kb merge-driver --install" in listed.stderr


# -- the rules, on snapshots ---------------------------------------------------------------


def applied(snapshot: Snapshot, *ops: Op) -> Snapshot:
    return apply_ops(snapshot, list(ops)).snapshot


@pytest.fixture
def base() -> Snapshot:
    return applied(EMPTY_SNAPSHOT, add(eval_claim("x")), add(eval_claim("w", polarity="weakness")))


def statuses(snapshot: Snapshot) -> dict[str, str]:
    return {e.id: e.status for e in snapshot.entries}


def test_stale_then_superseded_is_superseded(base: Snapshot) -> None:
    ours = applied(base, MarkStale("x"))
    theirs = applied(base, SupersedeClaim("x", eval_claim("y"), GATE))
    for a, b in ((ours, theirs), (theirs, ours)):
        merged = merge_snapshots(base, a, b).snapshot
        assert statuses(merged) == {"x": "superseded", "w": "active", "y": "active"}
        assert merged.hash == claims_hash([dict(w) for w in merged.wire])


def test_both_sides_remeasured_the_same_claim_the_later_stays_active(base: Snapshot) -> None:
    early = eval_claim("early", observedAt="2026-07-02T00:00:00.000Z")
    late = eval_claim("late", observedAt="2026-07-03T00:00:00.000Z")
    ours = applied(base, SupersedeClaim("x", late, GATE))
    theirs = applied(base, SupersedeClaim("x", early, GATE))
    merged = merge_snapshots(base, ours, theirs).snapshot
    assert statuses(merged) == {
        "x": "superseded",
        "w": "active",
        "late": "active",
        "early": "superseded",
    }
    flipped = merge_snapshots(base, theirs, ours).snapshot
    assert statuses(flipped)["late"] == "active" and statuses(flipped)["early"] == "superseded"


def test_compacted_on_theirs_leaves_the_file(base: Snapshot) -> None:
    retired = applied(base, ArchiveClaim("w", "rejected"))
    theirs = applied(retired, CompactClaim("w"))
    ours = applied(retired, add(eval_claim("n")))
    merged = merge_snapshots(retired, ours, theirs).snapshot
    assert statuses(merged) == {"x": "active", "n": "active"}


def test_the_same_claim_added_twice_differently_clashes(base: Snapshot) -> None:
    ours = applied(base, add(eval_claim("n")))
    theirs = applied(base, add(eval_claim("n", statement="sweep passRate 0.90 over 20 cases")))
    with pytest.raises(Exception, match="added on both sides, differently"):
        merge_snapshots(base, ours, theirs)
    same = merge_snapshots(base, ours, applied(base, add(eval_claim("n")))).snapshot
    assert [e.id for e in same.entries].count("n") == 1


def test_over_the_cap_after_the_merge_clashes(base: Snapshot) -> None:
    ours = applied(base, *[add(eval_claim(f"o{i}")) for i in range(4)])
    theirs = applied(base, *[add(eval_claim(f"t{i}")) for i in range(4)])
    with pytest.raises(Exception, match="over the cap of 8"):
        merge_snapshots(base, ours, theirs, active_claims_cap=8)


def write_baselines(path: Path, subjects: dict[str, Any]) -> Path:
    document = CanaryBaselines(
        {"p1": ("2+2?",)},
        {key: SubjectBaselines({"p1": fp}, frozenset({fp})) for key, fp in subjects.items()},
    )
    path.write_bytes(document.render())
    return path


def test_canary_baselines_merge_per_subject(tmp_path: Path) -> None:
    base = write_baselines(tmp_path / "base", {"a": "f1", "b": "f2"})
    ours = write_baselines(tmp_path / "ours", {"a": "f1-new", "b": "f2"})
    theirs = write_baselines(tmp_path / "theirs", {"a": "f1", "b": "f2", "c": "f3"})
    assert merge_baselines(base, ours, theirs, "x.canary.json") == 1
    merged = json.loads(ours.read_text())["subjects"]
    assert {k: v["baselines"]["p1"] for k, v in merged.items()} == {
        "a": "f1-new",
        "b": "f2",
        "c": "f3",
    }
    clash = write_baselines(tmp_path / "clash", {"a": "f1-other", "b": "f2"})
    ours = write_baselines(tmp_path / "ours", {"a": "f1-new", "b": "f2"})
    with pytest.raises(MergeConflict, match="canary baselines of a changed on both sides"):
        merge_baselines(base, ours, clash, "x.canary.json")
    assert "<<<<<<<" in ours.read_text()


def test_the_driver_refuses_wrong_arguments(runner: CliRunner, repo: Path) -> None:
    result = runner.invoke(cli, ["merge-driver", "a", "b"])
    assert result.exit_code == 2 and "kb merge-driver --install" in result.stderr


def test_during_a_conflict_every_command_names_the_markers_and_install_changes_nothing(
    repo: Path, runner: CliRunner
) -> None:
    conflicted_without_driver(repo, runner)
    before = (repo / STORE).read_bytes()
    for command in (["archive", "x", "--reason", "rejected"], ["merge-driver", "--install"]):
        result = runner.invoke(cli, command)
        assert result.exit_code == 2, result.stderr
        assert "unresolved git merge conflict" in result.stderr
    assert (repo / STORE).read_bytes() == before
    config = subprocess.run(
        ["git", "config", "--get", "merge.kb.driver"], cwd=repo, capture_output=True
    )
    assert config.returncode == 1  # a refused install registers nothing


def test_the_driver_refuses_missing_files_and_stray_arguments(
    repo: Path, runner: CliRunner
) -> None:
    assert kb(runner, "init").exit_code == 0
    missing = runner.invoke(cli, ["merge-driver", "/nope1", STORE, "/nope3", STORE])
    assert missing.exit_code == 2 and "no such file: /nope1, /nope3" in missing.stderr
    assert not Path("/nope1").exists()
    stray = runner.invoke(cli, ["merge-driver", "--install", "a", "b", "c", "d"])
    assert stray.exit_code == 2 and "--install takes no" in stray.stderr


def test_kb_diff_over_a_merge_tells_what_the_branch_brought(repo: Path, runner: CliRunner) -> None:
    assert kb(runner, "init").exit_code == 0
    store = KnowledgeStore(repo / STORE)
    context = CommitContext("test", "ci")
    store.commit([add(eval_claim("x")), add(eval_claim("w", polarity="weakness"))], 0, context)
    git(repo, "checkout", "-q", "-b", "feature")
    early = eval_claim("early", observedAt="2026-07-02T00:00:00.000Z")
    store.commit([SupersedeClaim("x", early, GATE)], 1, context)
    assert kb(runner, "archive", "w", "--reason", "deprecated").exit_code == 0
    git(repo, "checkout", "-q", "main")
    late = eval_claim("late", observedAt="2026-07-03T00:00:00.000Z")
    store.commit([SupersedeClaim("x", late, GATE)], 1, context)
    assert merge(repo, "feature").returncode == 0
    shown = kb(runner, "--as-of", "2026-07-04", "diff", "--json")
    data = json.loads(shown.output)
    assert [c["id"] for c in data["added"]] == ["early"]
    assert [(c["id"], c["reason"]) for c in data["archived"]] == [("w", "deprecated")]


# -- a driver that cannot run fails closed (SPEC 12.3) ------------------------------------


def branches_with_a_note_each(repo: Path, runner: CliRunner) -> tuple[str, str]:
    """main and feature each add a human note after kb init; returns the two note ids."""
    assert kb(runner, "init").exit_code == 0
    git(repo, "checkout", "-q", "-b", "feature")
    theirs = note(runner, "planning", "2026-11-20T00:00:00Z")
    git(repo, "checkout", "-q", "main")
    ours = note(runner, "judging", "2026-11-21T00:00:00Z")
    return ours, theirs


def bare_path(tmp_path: Path) -> str:
    """A PATH with git and nothing else: no python3, no kb."""
    import shutil

    bin_dir = tmp_path / "bare-bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    return str(bin_dir)


def merge_with(repo: Path, branch: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        ["git", "merge", "--no-edit", branch],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )


def test_a_driver_whose_virtualenv_moved_still_merges_with_another_python(
    repo: Path, runner: CliRunner, tmp_path: Path
) -> None:
    import sys

    from kb.store.merge_driver import driver_command

    ours, theirs = branches_with_a_note_each(repo, runner)
    # The interpreter that installed the driver is gone (its virtualenv moved) ...
    git(repo, "config", "merge.kb.driver", driver_command("/gone/venv/bin/python3"))
    # ... but a python3 on PATH can import kb: it merges.
    path = f"{Path(sys.executable).parent}:{bare_path(tmp_path)}"
    done = merge_with(repo, "feature", PATH=path, KB_PYTHON="")
    assert done.returncode == 0, done.stderr
    assert {ours, theirs} <= {claim.id for claim in store_at(repo).claims}
    assert kb(runner, "verify").exit_code == 0


def test_a_driver_that_cannot_run_leaves_conflict_markers_and_loses_nothing(
    repo: Path, runner: CliRunner, tmp_path: Path
) -> None:
    from kb.store.merge_driver import driver_command

    ours, theirs = branches_with_a_note_each(repo, runner)
    git(repo, "config", "merge.kb.driver", driver_command("/gone/venv/bin/python3"))
    done = merge_with(repo, "feature", PATH=bare_path(tmp_path), KB_PYTHON="")
    assert done.returncode != 0
    assert "kb merge driver: no Python here can import kb" in done.stdout + done.stderr
    text = (repo / STORE).read_text()
    assert "<<<<<<< ours:" in text and ">>>>>>> theirs:" in text
    assert ours in text and theirs in text  # both notes are in the file, inside the markers
    assert "UU rulvar.models.json" in git(repo, "status", "--porcelain")
    listed = runner.invoke(cli, ["list"])
    assert listed.exit_code == 2 and "unresolved git merge conflict" in listed.stderr
    # An ordinary git commit of what git status shows cannot pass for a store.
    git(repo, "add", STORE)
    git(repo, "commit", "-q", "--no-edit")
    assert runner.invoke(cli, ["verify"]).exit_code == 2


def test_an_unmerged_store_without_markers_is_refused_by_every_command(
    repo: Path, runner: CliRunner
) -> None:
    """The v2 failure: a driver that failed without markers left ours, unmarked, unmerged."""
    ours, theirs = branches_with_a_note_each(repo, runner)
    git(repo, "config", "merge.kb.driver", "false")  # fails and writes nothing
    assert merge(repo, "feature").returncode != 0
    assert "UU rulvar.models.json" in git(repo, "status", "--porcelain")
    before = (repo / STORE).read_bytes()
    assert theirs.encode() not in before  # the file is ours alone
    for command in (
        ["list"],
        ["show", ours],
        ["queue"],
        ["verify"],
        ["archive", ours, "--reason", "rejected"],
    ):
        result = runner.invoke(cli, command)
        assert result.exit_code == 2, (command, result.output)
        assert "git left this file unmerged" in result.stderr, command
        assert "kb merge-driver --install, then merge again" in result.stderr
    assert (repo / STORE).read_bytes() == before


def test_a_driver_that_fails_inside_kb_still_leaves_markers(
    repo: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from kb.store import merge_driver

    def broken(*args: object) -> None:
        raise RuntimeError("a bug in the merge")

    base, ours, theirs = tmp_path / "base", tmp_path / "ours", tmp_path / "theirs"
    empty = b'{\n  "version": 0,\n  "hash": "x",\n  "claims": []\n}\n'
    base.write_bytes(empty)
    ours.write_bytes(empty.replace(b'"version": 0', b'"version": 1'))
    theirs.write_bytes(empty.replace(b'"version": 0', b'"version": 2'))
    monkeypatch.setattr(merge_driver, "merge_store_files", broken)
    result = runner.invoke(cli, ["merge-driver", str(base), str(ours), str(theirs), STORE])
    assert result.exit_code == 1
    assert "kb's merge driver failed (RuntimeError: a bug in the merge)" in result.stderr
    assert "<<<<<<< ours:" in ours.read_text()


def test_committing_a_merge_that_kept_one_side_fails_kb_verify_until_redone(
    repo: Path, runner: CliRunner
) -> None:
    ours, theirs = branches_with_a_note_each(repo, runner)
    git(repo, "config", "merge.kb.driver", "false")  # a driver that fails without markers
    assert merge(repo, "feature").returncode != 0
    git(repo, "add", STORE)
    git(repo, "commit", "-q", "--no-edit")  # what git status offers: ours alone
    verified = runner.invoke(cli, ["verify"])
    assert verified.exit_code == 2
    assert "the merge dropped 1 claim a branch had" in verified.stderr
    assert (
        theirs in verified.stderr and "re-add each under its id (kb note --id ID" in verified.stderr
    )
    # Redone, the history is still told, as a warning.
    note(runner, "planning", "2026-11-20T00:00:00Z")
    again = runner.invoke(cli, ["verify"])
    assert again.exit_code == 0, again.stderr
    assert "they were redone since" in again.stderr


def test_a_real_conflict_is_told_as_one_and_kb_waits_for_the_merge(
    repo: Path, runner: CliRunner
) -> None:
    assert kb(runner, "init").exit_code == 0
    store = KnowledgeStore(repo / STORE)
    context = CommitContext("test", "ci")
    store.commit([add(eval_claim("x"))], 0, context)
    git(repo, "checkout", "-q", "-b", "feature")
    store.commit(
        [SupersedeClaim("x", eval_claim("y", observedAt="2026-07-02T00:00:00.000Z"), GATE)],
        1,
        context,
    )
    git(repo, "checkout", "-q", "main")
    assert kb(runner, "archive", "x", "--reason", "rejected").exit_code == 0
    assert merge(repo, "feature").returncode != 0
    git(repo, "checkout", "--ours", STORE)  # as kb's conflict line advises
    listed = runner.invoke(cli, ["list"])
    assert listed.exit_code == 2
    assert "kb's merge driver could not merge it" in listed.stderr
    assert "merge-driver --install" not in listed.stderr  # it is installed: say the right thing
    git(repo, "add", STORE)
    before = (repo / STORE).read_bytes()
    noted = kb(
        runner, "--as-of", "2026-11-21T00:00:00Z", "note", "--model", "a:b", "--task-class",
        "t", "--polarity", "weakness", "--statement", "s", "--approver", "al",
        "--ruled-out", "prompt", "--evidence", "journal:r:1",
    )  # fmt: skip
    assert noted.exit_code == 2 and "a git merge is in progress" in noted.stderr
    assert (repo / STORE).read_bytes() == before
