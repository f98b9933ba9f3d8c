"""The only part of kb that talks to git: one store commit = one git commit, by plumbing.

Split by responsibility, each layer calling only the ones below it (as
inspect_ai's ``log/`` package splits reading from writing):

* :mod:`.quick` — one git process, no GitPython: where the repository is,
  whether the store is unmerged or behind ``HEAD``, whether a git runs;
* :mod:`.runner` — :class:`~.runner.GitRunner`: runs git in the work tree,
  names every lock a killed git left, keeps kb's working files out of
  ``git status``;
* :mod:`.history` — :class:`~.history.GitHistory`: reads blobs, commits and
  trailers (never writes);
* :mod:`.commit` — :class:`~.commit.GitCommitting`: the commit window's git
  side, a commit built without moving a ref, then the ref moved by
  compare-and-swap;
* :mod:`.settle` — :class:`~.settle.GitSettling`: a commit a kill
  interrupted finished or undone, ``HEAD`` never ahead of the work tree;
* :mod:`.publish` — ``--push``: push, fetch and catch up, never forced;
* :mod:`.merging` — what kb's merge driver needs of git.

:class:`GitStoreRepo` is the whole of it for one store. Commit order:
every file of a commit is written into the work tree before the branch
ref moves (:meth:`~.commit.GitCommitting.prepare_commit`, then the file
store's swap, then :meth:`~.commit.GitCommitting.publish`); a process
killed anywhere in between leaves an intent the next writer settles.
"""

from __future__ import annotations

from kb.store.git.commit import PreparedCommit, ref_write_problem
from kb.store.git.history import StoreCommit
from kb.store.git.merging import register_merge_driver, textual_merge
from kb.store.git.publish import (
    PushTarget,
    catch_up,
    check_publishable,
    fetch,
    push,
    push_target,
    unpublished,
)
from kb.store.git.quick import (
    MERGE_DRIVER,
    quick_location,
    read_guard_issue,
    running_git,
    store_version,
    unmerged_advice,
)
from kb.store.git.runner import ZERO_OID
from kb.store.git.settle import GitSettling

__all__ = [
    "MERGE_DRIVER",
    "ZERO_OID",
    "GitStoreRepo",
    "PreparedCommit",
    "PushTarget",
    "StoreCommit",
    "catch_up",
    "check_publishable",
    "fetch",
    "push",
    "push_target",
    "quick_location",
    "read_guard_issue",
    "ref_write_problem",
    "register_merge_driver",
    "running_git",
    "store_version",
    "textual_merge",
    "unmerged_advice",
    "unpublished",
]


class GitStoreRepo(GitSettling):
    """A store file that lives in a git work tree: every layer of the package at hand."""
