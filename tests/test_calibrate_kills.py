"""Kill ``kb canary --calibrate`` at every write of its commit window, then recover (SPEC 13.1).

Calibration writes two things: the probes file (outside the store, where a
private file lives) and the sensitive baselines, committed with
compare-and-swap. Each kill point of that window (``tests/kill_points.py``:
every rename, link, unlink and fsync of kb and of each git it runs) gets a
fresh copy of a repository, the calibration killed there, and two
recoveries, each asserted to end with the baselines in ``HEAD`` once, the
probes file whole, nothing temporary visible to ``git add -A``, ``kb verify``
and ``git fsck`` passing:

* the calibration again;
* the user's own ``git add -A && git commit`` first, then the calibration.

The calibration replays a cassette recorded once against the loopback fake
(no provider call, no litellm import inside the enumeration).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kb.sweep.sensitive import probe_id
from tests.fake_openai import fake_openai_server
from tests.kill_points import (
    KillPoint,
    Template,
    assert_whole,
    check_killed_run,
    environment,
    fresh_copy,
    git,
    kb,
    kb_command,
    kill_at,
    reference_window,
    run_all,
    stale_git_locks,
    strace_problem,
    user_commits,
)
from tests.sweep_helpers import toml_value
from tests.test_sensitive_canary import LONGEST, TABLES

SKIP_REASON = strace_problem()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")

AT = "2026-11-27T12:00:00Z"
BASELINES = "rulvar.models.canary.json"
KEPT = {*TABLES, LONGEST}


def spec_text(base: str) -> str:
    params = {"api_base": base, "api_key": "sk-test", "cost_usd": 0.0001}
    lines = ["[sweep]", 'committer = "ci"', "max_retries = 0", "[budgets]"]
    lines += ["target_usd = 0.01", "canary_usd = 0.01", "max_total_usd = 50"]
    lines += ["[[models]]", 'model = "openai:m"', f"params = {toml_value(params)}"]
    # the probes file beside the repository (private), one per copy of it
    lines += ["[canary]", 'prompts = ["Ping?"]', "[canary.sensitive]"]
    lines += ['probes = "../private/probes.json"']
    for i in range(4):
        lines += ["[[cases]]", f'name = "c{i}"', 'task_class = "extraction"', f'prompt = "q{i}"']
        lines += [f'graders = [{{ kind = "golden", expected = "echo: q{i}" }}]']
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    """A store with one night, and a calibration recorded once (not committed)."""
    home = tmp_path_factory.mktemp("calibrate-kills")
    env = environment(home)
    repo = home / "repo"
    repo.mkdir()
    git(repo, env, "init", "-q")
    (repo / "README.txt").write_text("user file\n")
    git(repo, env, "add", "README.txt")
    git(repo, env, "commit", "-qm", "user: initial")
    assert kb(repo, env, "init").returncode == 0
    cassette = home / "calibration.jsonl"
    with fake_openai_server() as (base, seen):
        seen.distributions.update(TABLES)
        (repo / "spec.toml").write_text(spec_text(base))
        git(repo, env, "add", "spec.toml")
        git(repo, env, "commit", "-qm", "user: the spec")
        recorded = kb(repo, env, *calibrate_args("--record", str(cassette), "--no-commit"))
        assert recorded.returncode == 0, recorded.stderr
    assert not (home / "private").exists()  # --no-commit wrote nothing
    return Template(repo, env, cassette, journaled=False)


def calibrate_args(*extra: str) -> list[str]:
    return ["--as-of", AT, "canary", "--calibrate", "spec.toml", *extra]


def replayed(template: Template) -> list[str]:
    return calibrate_args("--replay", str(template.spec))


def assert_calibrated_once(repo: Path, env: dict[str, str], *, user_may_hold: bool = False) -> None:
    """The baselines in HEAD (every kept probe), one calibrate commit, the probes file whole.

    ``user_may_hold``: the user committed what ``git status`` showed after the kill, and
    that commit may hold all of kb's (then it stands for kb's, which is not made again).
    """
    baselines = json.loads(git(repo, env, "show", f"HEAD:{BASELINES}"))
    subject = baselines["subjects"]["openai:m"]
    assert set(subject["sensitive"]) == {probe_id(p) for p in KEPT}
    assert all(sum(c.values()) == 64 for c in subject["sensitive"].values())
    assert {k: len(v) for k, v in subject["sensitiveLogprobs"].items()} == {
        probe_id(p): 16 for p in KEPT
    }
    log = git(repo, env, "log", "--format=%s", "HEAD").splitlines()
    made = sum("calibrate" in line for line in log)
    assert made == 1 or (user_may_hold and made == 0), log
    probes = json.loads((repo.parent / "private" / "probes.json").read_text())
    assert set(probes["models"]["openai:m"]) == KEPT


def trial(template: Template, point: KillPoint, where: Path) -> None:
    env = template.env
    repo = fresh_copy(template, where / "a")
    killed = kill_at(point, kb_command(*replayed(template)), repo, env)
    check_killed_run(killed, repo, env)
    private = repo.parent / "private" / "probes.json"
    if private.exists():  # a rename is atomic: the file is the old one or the new one, whole
        json.loads(private.read_text())
    user = where / "b"
    user.mkdir()
    (user / "private").mkdir()
    if private.exists():
        (user / "private" / "probes.json").write_bytes(private.read_bytes())
    shutil.copytree(repo, user / "repo", symlinks=True)
    # 1. the calibration again
    for lock in stale_git_locks(repo) if killed.point.git_invocation is not None else []:
        lock.unlink()  # git names its own lock; the user removes it
    again = kb(repo, env, *replayed(template))
    assert again.returncode == 0, f"{point}: {again.stdout}{again.stderr}"
    assert_calibrated_once(repo, env)
    assert_whole(repo, env)
    # 2. the user's own commits of whatever git shows, then the calibration
    repo = user / "repo"
    for lock in stale_git_locks(repo):
        lock.unlink()
    user_commits(repo, env)
    later = kb(repo, env, *replayed(template))
    assert later.returncode == 0, f"{point}: {later.stdout}{later.stderr}"
    if "finished an interrupted commit" in later.stderr:  # it names a commit on the branch
        named = later.stderr.split("[git ", 1)[1][:12]
        assert git(repo, env, "merge-base", "--is-ancestor", named, "HEAD") == "", named
    assert_calibrated_once(repo, env, user_may_hold=True)
    assert_whole(repo, env)


@pytest.mark.slow
def test_a_calibration_killed_at_every_write_loses_nothing_and_commits_once(
    template: Template, tmp_path: Path
) -> None:
    probe = fresh_copy(template, tmp_path / "reference")
    window = reference_window(kb_command(*replayed(template)), probe, template.env)
    points = []
    for index, point in enumerate(window.points):
        where = tmp_path / f"p{index:03d}"
        where.mkdir()
        points.append((point, where))
    # the probes file's write and rename, the commit's renames, links and fsyncs, git's own
    assert len(points) >= 15, points
    print(f"{len(points)} kill points: {', '.join(str(p) for p, _ in points)}")
    outcomes = run_all(trial, points, template)
    failed = {str(point): why for point, why in outcomes.items() if why != "ok"}
    shown = "\n".join(f"{point}: {why}" for point, why in list(failed.items())[:8])
    assert not failed, f"{len(failed)} of {len(outcomes)} kill points lost something:\n{shown}"
