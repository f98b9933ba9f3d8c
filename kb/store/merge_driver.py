"""kb's git merge driver: the command git runs, and what it does with the three sides.

Merging itself is :mod:`kb.store.merge` (the store) and
:func:`kb.store.baselines.merge_baselines` (its canary baselines); this
module is the part that must never fail open — the command works when the
environment that installed it moved, and any failure leaves git's conflict
markers.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from kb.errors import MergeConflict
from kb.store.baselines import merge_baselines
from kb.store.epochs import merge_epochs_files
from kb.store.labels import merge_labels_files
from kb.store.merge import leave_textual_conflict, merge_store_files


def driver_command(python: str) -> str:
    """How git runs kb's merge driver: fail closed, whatever environment it finds.

    git runs the driver line through the shell with the three sides and the
    path in place of ``%O %A %B %P``. It tries, in order, ``$KB_PYTHON``,
    the interpreter that installed the driver (``python``), ``python3`` and a
    ``kb`` on ``PATH`` — the first that can import kb merges. When none can
    (the virtual environment moved, kb was uninstalled), it still leaves
    git's own conflict markers in the file and says why, so the merge stops
    as a visible conflict: a driver that merely failed would leave "ours"
    unmarked, and a plain ``git commit`` would drop the other branch's claims.
    """
    return (
        f'for py in "$KB_PYTHON" {shlex.quote(python)} python3; do '
        'if [ -n "$py" ] && "$py" -c \'import kb.cli\' 2>/dev/null; then '
        'exec "$py" -m kb merge-driver %O %A %B %P; fi; done; '
        "if command -v kb >/dev/null 2>&1; then exec kb merge-driver %O %A %B %P; fi; "
        "echo kb merge driver: no Python here can import kb, so git conflict markers were "
        "left in %P: install kb or set KB_PYTHON, then git merge --abort, kb merge-driver "
        "--install, and merge again >&2; "
        "git merge-file -L ours:%P -L base -L theirs:%P %A %O %B; exit 1"
    )


def run_merge_driver(base: Path, ours: Path, theirs: Path, name: str) -> str:
    """Merge one file kb's driver routes (the store or its canary baselines) into ``ours``.

    Returns the line to print. Fails closed: whatever goes wrong — a clash
    of the two sides, a side that cannot be read, an error of kb's own —
    git's conflict markers are left in ``ours`` and :class:`MergeConflict`
    is raised, never a silent "ours".
    """
    try:
        if name.endswith(".canary.json"):
            taken = merge_baselines(base, ours, theirs, name)
            return f"kb: merged {name}: {taken} subjects from theirs"
        if name.endswith(".epochs.json"):
            taken = merge_epochs_files(base, ours, theirs, name)
            return f"kb: merged {name}: {taken} cells from theirs"
        if name.endswith(".labels.json"):
            taken = merge_labels_files(base, ours, theirs, name)
            return f"kb: merged {name}: {taken} labels from theirs"
        merged = merge_store_files(base, ours, theirs, name)
    except MergeConflict:
        raise
    except Exception as error:  # noqa: BLE001 - anything else must still leave markers
        leave_textual_conflict(base, ours, theirs, name)
        raise MergeConflict(
            name, f"kb's merge driver failed ({type(error).__name__}: {error})"
        ) from error
    return (
        f"kb: merged {name}: store v{merged.snapshot.version}, from theirs +{merged.added} "
        f"claims, {merged.changed} status changes, {merged.removed} compacted"
    )
