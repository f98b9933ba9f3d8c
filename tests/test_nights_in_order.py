"""Two nights at once never make the store go backwards (SPEC 13.1 "Nights in order").

Someone re-runs last night's failed CI job while tonight's cron runs: both
plan against the store as it was, the newer night commits first, and the
older one rebases onto it. On v3 the older night then superseded the newer
night's claims and dropped it from the epochs file, and ``kb verify`` said
ok. Here the interleaving is made exactly (the older night's plan is made,
the newer night commits, the older night measures and commits), and, as a
user meets it, through a real ``kb sweep --resume`` of an older night.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from kb.engine.scheduler import Engine, EngineConfig
from kb.store.epochs import read_epochs
from kb.store.filestore import KnowledgeStore
from kb.store.ttl import parse_flag_instant
from kb.store.validation import parse_store
from kb.sweep.plan import prepare_sweep
from kb.sweep.run import execute_sweep
from kb.sweep.spec import load_spec
from tests.cli_helpers import kb
from tests.conftest import git

NIGHT_1 = "2026-11-27T02:00:00Z"
NIGHT_2 = "2026-11-28T02:00:00Z"
NIGHT_3 = "2026-11-29T02:00:00Z"
ID_2 = "kb-sweep-2026-11-28T02:00:00.000Z"
ID_3 = "kb-sweep-2026-11-29T02:00:00.000Z"
STORE = "rulvar.models.json"


def spec(path: Path, models: int = 2, cases: int = 20) -> Path:
    lines = [
        '[sweep]\ncommitter = "ci"\nsampling = "full"',
        "[budgets]\ntarget_usd = 0.01\nmax_total_usd = 5",
    ]
    for m in range(models):
        lines.append(f'[[models]]\nmodel = "scripted:m{m}"\n'
                     'params = { default = "yes", cost_usd = 0.001 }')  # fmt: skip
    for i in range(cases):
        lines.append(
            f'[[cases]]\nname = "c{i:02d}"\ntask_class = "extraction"\nprompt = "q{i}"\n'
            'graders = [{ kind = "golden", expected = "yes" }]'
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def claims(repo: Path) -> list[dict[str, object]]:
    found = json.loads((repo / STORE).read_text())["claims"]
    assert isinstance(found, list)
    return found


def stop_night_2_before_its_commit(repo: Path, path: Path) -> None:
    """Night 2 is paid and journaled, then killed at its first rename (its commit's intent)."""
    killed = subprocess.run(
        ["strace", "-o", "/dev/null", "-e", "trace=rename", "-e",
         "inject=rename:signal=KILL:when=1", sys.executable, "-m", "kb", "sweep", str(path),
         "--quiet", "--observed-at", NIGHT_2],
        cwd=repo, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr


def assert_newer_night_stands(repo: Path, runner: CliRunner) -> None:
    """Night 3's claims are the live ones; night 2 added, superseded and archived nothing."""
    found = claims(repo)
    live = sorted(str(c["id"]) for c in found if c["status"] == "active")
    assert live == [f"{ID_3}/scripted:m0/extraction", f"{ID_3}/scripted:m1/extraction"]
    assert not [c for c in found if str(c["id"]).startswith(ID_2)]
    assert not [c for c in found if str(c.get("supersedes", "")).startswith(ID_3)]
    epochs = read_epochs(repo / "rulvar.models.epochs.json")
    for epoch in epochs.cells.values():
        # pooled in night order, each night once
        assert [n.report_id for n in epoch.nights] == [
            "kb-sweep-2026-11-27T02:00:00.000Z",
            ID_2,
            ID_3,
        ]
        assert epoch.n == 20 and list(epoch.counts) == [3] * 20
    assert kb(runner, "verify").exit_code == 0
    parse_store((repo / STORE).read_bytes(), STORE)


def test_an_older_night_committing_after_a_newer_one_decides_nothing_over_it(
    runner: CliRunner, repo: Path
) -> None:
    path = spec(repo / "s.toml")
    assert kb(runner, "init").exit_code == 0
    assert kb(runner, "sweep", str(path), "--quiet", "--observed-at", NIGHT_1).exit_code == 0
    store = KnowledgeStore(repo / STORE)
    # Night 2 (last night's CI job, re-run) plans against the store as it is now ...
    late = prepare_sweep(
        load_spec(path),
        store.read(),
        observed_at=parse_flag_instant(NIGHT_2),
        epochs=read_epochs(store.home.epochs_file),
    )
    # ... tonight's cron commits night 3 meanwhile ...
    tonight = kb(runner, "sweep", str(path), "--quiet", "--observed-at", NIGHT_3)
    assert tonight.exit_code == 0, tonight.stderr
    # ... and night 2 measures, then commits onto a store holding night 3.
    done = execute_sweep(late, store, Engine(EngineConfig(concurrency=4)))
    assert all(cell.complete for cell, _ in done.cells)  # it exits 0 as its cells would
    assert done.report.claims == () and done.report.retired == ()
    assert {cell.newer_night for cell in done.report.cells} == {ID_3}
    for cell in done.report.cells:  # what stands is what the store holds now, not at plan time
        assert [p.claim_id.split("/")[0] for p in cell.prior_stands or ()] == [ID_3]
        assert cell.epoch is None
    assert "evidence only" in done.commit.message if done.commit else False
    assert_newer_night_stands(repo, runner)
    tree = git(repo, "ls-tree", "-r", "--name-only", "HEAD", "kb-evidence").split()
    assert f"kb-evidence/{ID_2}.jsonl" in tree  # the night's evidence is kept


def test_a_resumed_older_night_commits_its_evidence_and_pools_in_order(
    runner: CliRunner, repo: Path
) -> None:
    """A night stopped before its commit, resumed after a newer night committed."""
    path = spec(repo / "s.toml")
    assert kb(runner, "init").exit_code == 0
    assert kb(runner, "sweep", str(path), "--quiet", "--observed-at", NIGHT_1).exit_code == 0
    stop_night_2_before_its_commit(repo, path)
    tonight = kb(runner, "sweep", str(path), "--quiet", "--observed-at", NIGHT_3)
    assert tonight.exit_code == 0, tonight.stderr
    # The stopped night is not forgotten: tonight's sweep names it and what commits it.
    assert f"the stopped night {ID_2} has 40 paid runs in its journal" in tonight.stderr
    assert f"kb sweep s.toml --resume --report-id {ID_2} commits it" in tonight.stderr
    resumed = kb(runner, "sweep", str(path), "--quiet", "--observed-at", NIGHT_2, "--resume")
    assert resumed.exit_code == 0, resumed.stderr
    assert f"not decided: the store holds a newer night, {ID_3}" in " ".join(resumed.stdout.split())
    assert_newer_night_stands(repo, runner)
    # A fresh night 2 (not a resume) is still refused before any call, as sequentially.
    again = kb(
        runner, "sweep", str(path), "--quiet", "--observed-at", NIGHT_2, "--report-id", "n2-again"
    )
    assert again.exit_code == 2 and "is older than" in again.stderr


def test_an_older_night_is_never_pooled_into_an_epoch_that_began_after_it(
    runner: CliRunner, repo: Path
) -> None:
    path = spec(repo / "s.toml")
    assert kb(runner, "init").exit_code == 0
    assert kb(runner, "sweep", str(path), "--quiet", "--observed-at", NIGHT_1).exit_code == 0
    stop_night_2_before_its_commit(repo, path)
    third = kb(runner, "sweep", str(path), "--quiet", "--observed-at", NIGHT_3, "--new-epoch")
    assert third.exit_code == 0, third.stderr
    resumed = kb(runner, "sweep", str(path), "--quiet", "--observed-at", NIGHT_2, "--resume")
    assert resumed.exit_code == 0, resumed.stderr
    for epoch in read_epochs(repo / "rulvar.models.epochs.json").cells.values():
        assert [n.report_id for n in epoch.nights] == [ID_3]  # night 2 stays evidence only
        assert list(epoch.counts) == [1] * 20
    tree = git(repo, "ls-tree", "-r", "--name-only", "HEAD", "kb-evidence").split()
    assert f"kb-evidence/{ID_2}.jsonl" in tree


def test_a_newer_night_committing_after_an_older_one_keeps_it_in_the_epoch(
    runner: CliRunner, repo: Path
) -> None:
    """The usual order of a re-run: last night's job finishes first, tonight's commits second."""
    path = spec(repo / "s.toml")
    assert kb(runner, "init").exit_code == 0
    assert kb(runner, "sweep", str(path), "--quiet", "--observed-at", NIGHT_1).exit_code == 0
    store = KnowledgeStore(repo / STORE)
    tonight = prepare_sweep(
        load_spec(path),
        store.read(),
        observed_at=parse_flag_instant(NIGHT_3),
        epochs=read_epochs(store.home.epochs_file),
    )
    rerun = kb(runner, "sweep", str(path), "--quiet", "--observed-at", NIGHT_2)
    assert rerun.exit_code == 0, rerun.stderr
    done = execute_sweep(tonight, store, Engine(EngineConfig(concurrency=4)))
    assert all(cell.complete for cell, _ in done.cells)
    found = claims(repo)
    live = sorted(str(c["id"]) for c in found if c["status"] == "active")
    assert live == [f"{ID_3}/scripted:m0/extraction", f"{ID_3}/scripted:m1/extraction"]
    for epoch in read_epochs(repo / "rulvar.models.epochs.json").cells.values():
        assert [n.report_id for n in epoch.nights] == [
            "kb-sweep-2026-11-27T02:00:00.000Z",
            ID_2,
            ID_3,
        ]
        assert list(epoch.counts) == [3] * 20
    assert kb(runner, "verify").exit_code == 0
