"""Kill a sweep's and a note's commit at every write, then recover as a user would (SPEC 13.1).

Each kill point of the commit window (see ``tests/kill_points.py``) gets a
fresh copy of a small repository, the command killed there, and then two
recoveries, each asserted to end with the night's (or the note's) claims in
``HEAD`` exactly once, nothing temporary ever visible to ``git add -A``,
and ``kb verify`` and ``git fsck`` passing:

* the command again (``kb sweep --resume``; the note run again);
* the user's own ``git add -A && git commit`` first, then a later kb write
  (a note; the night itself), then the resume.

The killed sweep is a resume of a night whose runs are all journaled (no
provider call, no litellm import: the whole enumeration stays within
minutes); ``bench/kill_points.py`` kills a fresh night the same way.

A git process killed mid-write can leave git's own lock file
(``index.lock``, ``<branch>.lock``); git refuses to work until it is
removed, and so does kb — with a line that names it. The recovery then
removes it, as the user would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kill_points import (
    KillPoint,
    Template,
    build_template,
    enumerate_window,
    fresh_copy,
    git,
    kb,
    kb_command,
    kill_at,
    killed_night_args,
    label_args,
    note_args,
    run_all,
    strace_problem,
    trial_label,
    trial_note,
    trial_sweep,
)

SKIP_REASON = strace_problem()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


@pytest.fixture(scope="module")
def night_template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return build_template(tmp_path_factory.mktemp("kill-template"), journaled=True)


def assert_all_ok(outcomes: dict[object, str]) -> None:
    failed = {str(point): why for point, why in outcomes.items() if why != "ok"}
    shown = "\n".join(f"{point}: {why}" for point, why in list(failed.items())[:8])
    assert not failed, f"{len(failed)} of {len(outcomes)} kill points lost something:\n{shown}"


@pytest.mark.slow
def test_a_sweep_killed_at_every_write_of_its_commit_loses_nothing(
    night_template: Template, tmp_path: Path
) -> None:
    command = kb_command(*killed_night_args(night_template))
    points = list(enumerate_window(night_template, command, tmp_path))
    assert len(points) >= 30, points  # kb's renames, links, unlinks, fsyncs and git's
    print(f"{len(points)} kill points: {', '.join(str(p) for p, _ in points)}")
    assert_all_ok(run_all(trial_sweep, points, night_template))


@pytest.mark.slow
def test_a_label_killed_at_every_write_of_its_commit_loses_nothing(
    night_template: Template, tmp_path: Path
) -> None:
    points = list(enumerate_window(night_template, kb_command(*label_args()), tmp_path))
    assert len(points) >= 10, points
    print(f"{len(points)} kill points: {', '.join(str(p) for p, _ in points)}")
    assert_all_ok(run_all(trial_label, points, night_template))


@pytest.mark.slow
def test_a_note_killed_at_every_write_of_its_commit_loses_nothing(
    night_template: Template, tmp_path: Path
) -> None:
    points = list(enumerate_window(night_template, kb_command(*note_args()), tmp_path))
    assert len(points) >= 15, points
    print(f"{len(points)} kill points: {', '.join(str(p) for p, _ in points)}")
    assert_all_ok(run_all(trial_note, points, night_template))


def trial_ctrl_c(template: Template, point: KillPoint, where: Path) -> None:
    """Ctrl-C at ``point``: exit 130, one line saying whether the commit was made, whole."""
    command = kb_command(*killed_night_args(template))
    repo, env = fresh_copy(template, where), template.env
    before = git(repo, env, "rev-parse", "HEAD")
    done = kill_at(point, command, repo, env, signal_name="INT")
    moved = git(repo, env, "rev-parse", "HEAD") != before
    assert done.returncode == 130 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert ("after the commit was made (kb: sweep" in done.stderr) == moved, done.stderr
    assert moved or "nothing committed, the store is unchanged" in done.stderr
    assert kb(repo, env, "verify").returncode == 0  # no commit is left half made
    assert git(repo, env, "status", "--porcelain") == ""


@pytest.mark.slow
def test_ctrl_c_at_any_write_of_the_commit_leaves_it_made_or_undone_whole(
    night_template: Template, tmp_path: Path
) -> None:
    """A signal waits while the commit window is open (SPEC 11.2, 13.1)."""
    command = kb_command(*killed_night_args(night_template))
    points = [
        (point, where)
        for point, where in enumerate_window(night_template, command, tmp_path)
        if point.git_invocation is None
    ]
    assert_all_ok(run_all(trial_ctrl_c, points, night_template))


@pytest.mark.slow
def test_ctrl_c_in_the_commit_waits_for_it_with_other_threads_running(
    night_template: Template, tmp_path: Path
) -> None:
    """A worker pool's reader threads are alive: the kernel may hand SIGINT to any of them."""
    from dataclasses import replace

    threaded = replace(night_template, env={**night_template.env, "KB_WORKERS": "1"})
    command = kb_command(*killed_night_args(threaded))
    renames = [
        (point, where)
        for point, where in enumerate_window(threaded, command, tmp_path)
        if point.git_invocation is None and point.call == "rename"
    ]
    assert len(renames) >= 3  # the intent, the evidence files, the store
    trial_ctrl_c(threaded, *renames[-1])  # the store's rename: the heart of the commit
