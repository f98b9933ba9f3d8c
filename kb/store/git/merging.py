"""What kb's merge driver needs of git: its registration, a textual merge."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kb.errors import GitError

if TYPE_CHECKING:
    pass

from kb.store.git.quick import MERGE_DRIVER
from kb.store.git.runner import GitRunner


def register_merge_driver(repo: GitRunner, command: str) -> None:
    """Register kb's merge driver in the repository's config (``merge.kb.driver``)."""
    repo.run("config", f"merge.{MERGE_DRIVER}.name", "kb: re-apply the other branch's store ops")
    repo.run("config", f"merge.{MERGE_DRIVER}.driver", command)


def textual_merge(ours: Path, base: Path, theirs: Path, labels: Sequence[str]) -> bytes:
    """Git's own line-based merge of three files, conflict markers included."""
    args = ["git", "merge-file", "-p"]
    for label in labels:
        args += ["-L", label]
    from git import Git

    status, out, err = Git(str(ours.parent)).execute(
        [*args, str(ours), str(base), str(theirs)],
        with_extended_output=True,
        with_exceptions=False,
        stdout_as_string=False,
        strip_newline_in_stdout=False,
    )
    if int(status) < 0 or not isinstance(out, bytes):
        raise GitError(f"git merge-file failed: {err!r}")
    return out
