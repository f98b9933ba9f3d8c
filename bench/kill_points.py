"""Kill a fresh night's commit (and a note's) at every write; count what each recovery kept.

The same enumeration as ``tests/test_commit_window.py`` (see
``tests/kill_points.py``), on a **fresh** night 2 — a real sweep through the
scripted provider and litellm, not a resume — so it takes longer than the
test suite should. Every kill point is recovered twice (``kb sweep --resume``;
the user's ``git add -A && git commit``, a later kb write, the resume) and
its outcome is ``ok`` or the first check that failed. Printed as a table of
kill points × outcomes.

To measure another kb (kb v3, say) against the same checks, point
``--kb-path`` at a checkout of it: its ``kb`` runs as ``python -m kb`` with
that checkout first on ``PYTHONPATH``, and ``kb verify`` runs as a process.

    python bench/kill_points.py                       # this checkout
    git worktree add /tmp/kb-v3 dae6976
    python bench/kill_points.py --kb-path /tmp/kb-v3  # the same checks on v3
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import kill_points  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb-path", type=Path, default=None, help="a checkout of another kb")
    parser.add_argument(
        "--journaled",
        action="store_true",
        help="kill a resume of a journaled night (what make test does) instead of a fresh one",
    )
    args = parser.parse_args()
    problem = kill_points.strace_problem()
    if problem is not None:
        print(f"skipped: {problem}")
        return
    extra = {}
    if args.kb_path is not None:
        if not (args.kb_path / "kb" / "__init__.py").is_file():
            parser.error(f"--kb-path {args.kb_path}: no kb package there")
        extra = {"PYTHONPATH": str(args.kb_path.resolve())}
        kill_points.IN_PROCESS_VERIFY = False
    with tempfile.TemporaryDirectory(prefix="kb-kill-") as scratch:
        tmp = Path(scratch)
        template = kill_points.build_template(
            tmp / "template", journaled=args.journaled, env_extra=extra
        )
        rows = []
        for name, command, trial in (
            (
                "sweep",
                kill_points.kb_command(*kill_points.killed_night_args(template)),
                kill_points.trial_sweep,
            ),
            ("note", kill_points.kb_command(*kill_points.note_args()), kill_points.trial_note),
        ):
            where = tmp / name
            where.mkdir()
            points = list(kill_points.enumerate_window(template, command, where))
            outcomes = kill_points.run_all(trial, points, template)
            rows.append((name, outcomes))
    which = f"kb at {args.kb_path}" if args.kb_path else "this checkout"
    night = "a resume of a journaled night" if args.journaled else "a fresh night"
    print(f"# Kill points of the commit window ({which}; {night})\n")
    print(f"Machine: {platform.machine()}, Python {platform.python_version()}.\n")
    print("| command | kill points | ok | lost something |")
    print("|---|---:|---:|---:|")
    for name, outcomes in rows:
        ok = sum(1 for why in outcomes.values() if why == "ok")
        print(f"| {name} | {len(outcomes)} | {ok} | {len(outcomes) - ok} |")
    for name, outcomes in rows:
        failed = Counter(why for why in outcomes.values() if why != "ok")
        if not failed:
            continue
        print(f"\n{name}: what failed (first failing check, by count)\n")
        for why, count in failed.most_common():
            print(f"- {count} × {why}")
        print("\n" + ", ".join(str(p) for p, why in outcomes.items() if why != "ok"))


if __name__ == "__main__":
    main()
