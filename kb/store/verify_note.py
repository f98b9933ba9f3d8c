"""What ``kb verify`` keeps between runs, and its check of the epochs file's history.

``kb verify`` reads every store version in git the first time; after a
verify that passed it leaves a note under ``.git`` naming the commit it
checked through, and the next one reads only what came after (SPEC 14.3:
a team's year of nightly commits would otherwise be re-read every run).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kb.atomicfile import write_atomic
from kb.errors import ConfigError
from kb.sidefile import SideFormat

if TYPE_CHECKING:
    from kb.store.git import GitStoreRepo


VERIFIED = SideFormat("verified-through note")


@dataclass(frozen=True)
class VerifiedThrough:
    """The note ``kb verify`` leaves under ``.git``: the commit it checked through.

    Never committed (it is this clone's knowledge: another clone has not
    read these versions), removed with the clone. The next ``kb verify``
    reads only the history after it; ``kb verify --all`` reads it all.
    """

    commit: str
    version: int | None
    """The store's version in that commit (``None``: no store there)."""

    @staticmethod
    def path(git: GitStoreRepo) -> Path:
        """One note per store path in the repository (two stores, two notes)."""
        name = hashlib.sha256(git.rel.encode()).hexdigest()[:16]
        return git.git_dir / "kb-verified" / f"{name}.json"

    @classmethod
    def read(cls, git: GitStoreRepo) -> VerifiedThrough | None:
        """The note, or ``None`` when there is none or it cannot be read (then all is read)."""
        try:
            value = json.loads(cls.path(git).read_text("utf-8"))
            VERIFIED.check(value, "note")
            commit, version = value["commit"], value["version"]
        except (OSError, ValueError, KeyError, TypeError, ConfigError):
            return None
        if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{40,64}", commit):
            return None
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            return None
        return cls(commit, version)

    def write(self, git: GitStoreRepo) -> None:
        """Record it (a note that cannot be written is no error: the next run reads all)."""
        path = self.path(git)
        data = json.dumps({**VERIFIED.stamp(), "commit": self.commit, "version": self.version})
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, (data + "\n").encode())


def epoch_drops(git: GitStoreRepo, rel: str | None, since: str | None = None) -> list[str]:
    """Commits whose epochs file lost a night a parent's held, without a reason to.

    A night leaves a cell's epoch only when an epoch begun on purpose (an
    alarm, a drift, a changed suite, ``--new-epoch``; never a first
    measurement) at or after it replaced the epoch, or when the cell left
    the file; any other loss is a writer that replaced the file with its own
    view (two clones pushing at once before kb 5) and the claims of the
    nights after it pool less than was measured.
    """
    if rel is None:
        return []
    from kb.store.epochs import EpochsFile, parse_epochs
    from kb.store.ttl import stored_instant

    def at(commit: str) -> EpochsFile | None:
        blob = git.blob_in_path(commit, rel)
        try:
            return parse_epochs(git.read_blob(blob), f"{commit[:12]}:{rel}") if blob else None
        except ConfigError:
            return None  # an unreadable version is not this check's to tell

    issues = []
    for commit in git.path_history(rel, since):
        after = at(commit.oid)
        if after is None:
            continue
        for parent in commit.parents:
            before = at(parent)
            for key, epoch in (before.cells if before is not None else {}).items():
                now = after.cells.get(key)
                if now is None:
                    continue  # the epoch ended (a restart whose night did not complete)
                lost = [n for n in epoch.nights if n.report_id not in set(now.reports)]
                began = stored_instant(now.start.observed_at)
                if now.start.reason != "first":
                    lost = [n for n in lost if stored_instant(n.observed_at) > began]
                if lost:
                    issues.append(
                        f"commit {commit.oid[:12]}: {rel} lost {len(lost)} night"
                        f"{'s' if len(lost) != 1 else ''} of {key}'s epoch that commit "
                        f"{parent[:12]} held ({lost[0].report_id}"
                        f"{' …' if len(lost) > 1 else ''}): a writer replaced the epoch with "
                        "its own view; the claims since pool fewer nights than were measured "
                        "(kb sweep --new-epoch measures the cell afresh)"
                    )
    return issues
