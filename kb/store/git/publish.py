"""Publishing a store commit to a shared remote: ``--push``, never forced.

A push that lost a race is told from git's ``--porcelain`` status lines in
the C locale; :func:`catch_up` moves the branch onto the remote tip (only
kb's own unpushed commit may be dropped) so the caller re-applies its ops.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kb.errors import GitError, PushRejected

if TYPE_CHECKING:
    pass

from kb.store.git.runner import GitRunner


@dataclass(frozen=True)
class PushTarget:
    """Where ``--push`` publishes: a remote and the branch on it."""

    remote: str
    branch: str
    local_ref: str

    @property
    def remote_ref(self) -> str:
        """The remote-tracking ref fetched into (``refs/remotes/<remote>/<branch>``)."""
        return f"refs/remotes/{self.remote}/{self.branch}"


def push_target(repo: GitRunner) -> PushTarget:
    """The branch's upstream (``git branch --set-upstream-to``), else ``origin/<branch>``."""
    ref, _ = repo.head()
    if not ref.startswith("refs/heads/"):
        raise GitError("--push needs a branch checked out, not a detached HEAD")
    branch = ref.removeprefix("refs/heads/")
    remote = repo.try_run("config", f"branch.{branch}.remote")
    merge = repo.try_run("config", f"branch.{branch}.merge")
    remote_name = remote.strip() if remote else "origin"
    remote_branch = merge.strip().removeprefix("refs/heads/") if merge else branch
    if repo.try_run("remote", "get-url", remote_name) is None:
        raise GitError(f"--push: no remote {remote_name!r} is configured")
    return PushTarget(remote_name, remote_branch, ref)


#: Messages git prints are matched only in the C locale.
_C_LOCALE = {"LC_ALL": "C", "LANGUAGE": "C"}

_RACE = re.compile(
    r"\[rejected\] \((fetch first|non-fast-forward|stale info)\)"
    r"|\[remote rejected\] \((cannot lock ref|failed to update ref|failed to lock)"
)


def push(repo: GitRunner, target: PushTarget) -> None:
    """Push the branch without force; :class:`PushRejected` when another push won a race.

    The verdict comes from ``--porcelain`` status lines in the C locale, never
    from advice text: a hook that refuses the push is a :class:`GitError`
    (exit 1), not a race to retry.
    """
    status, out, err = repo.call(
        "push",
        "--porcelain",
        target.remote,
        f"{target.local_ref}:refs/heads/{target.branch}",
        env=_C_LOCALE,
    )
    if status == 0:
        return
    refused = [line for line in out.splitlines() if line.startswith("!")]
    if refused and all(_RACE.search(line) for line in refused):
        raise PushRejected(refused[0].split("\t")[-1])
    detail = refused[0].split("\t")[-1] if refused else (err.strip().splitlines() or [""])[-1]
    raise GitError(f"git push to {target.remote} failed: {detail}")


def fetch(repo: GitRunner, target: PushTarget) -> str | None:
    """Fetch the remote branch; its tip (``None`` when the remote has no such branch)."""
    status, _, err = repo.call(
        "fetch",
        "--quiet",
        target.remote,
        f"+refs/heads/{target.branch}:{target.remote_ref}",
        env=_C_LOCALE,
    )
    if status != 0:
        if "couldn't find remote ref" in err:
            return None
        raise GitError(f"git fetch {target.remote} failed: {err.strip()}")
    return repo.run("rev-parse", target.remote_ref).strip()


def unpublished(repo: GitRunner, target: PushTarget, remote_tip: str | None) -> list[str]:
    """Local commits on the branch that the remote does not have."""
    base = [f"^{remote_tip}"] if remote_tip else []
    return repo.run("rev-list", target.local_ref, *base).split()


def check_publishable(repo: GitRunner, target: PushTarget) -> None:
    """Before a ``--push`` commit: the branch must carry nothing unpublished already.

    Otherwise the push would publish work the user never asked kb to publish
    (or an earlier run's kept commit, which they should look at first).
    """
    if repo.head()[0] != target.local_ref:
        raise GitError(f"--push: HEAD is no longer {target.local_ref}")
    remote_tip = fetch(repo, target)
    if remote_tip is None:
        raise GitError(
            f"--push: {target.remote} has no branch {target.branch!r} yet; push it once yourself"
        )
    ahead = unpublished(repo, target, remote_tip)
    if ahead:
        raise GitError(
            f"--push: {target.local_ref.removeprefix('refs/heads/')} has {len(ahead)} "
            f"unpublished commit(s) (e.g. {ahead[0][:12]}); push or drop them first, kb only "
            "publishes its own commit"
        )


def catch_up(repo: GitRunner, target: PushTarget, droppable: set[str]) -> str:
    """Fetch the remote branch and move the local branch onto it.

    The local branch may be ahead of the remote only by ``droppable`` — the
    kb commit the rejected push carried, whose *ops* the caller re-applies on
    the fresh remote store. Anything else stops everything: kb never discards
    work this call did not make. The move is a two-tree ``read-tree -m -u``
    (the user's staged and unstaged changes elsewhere are kept; a conflicting
    one stops it) and a compare-and-swap ``update-ref`` of the branch itself,
    so a branch switched or moved meanwhile is never touched.
    """
    ref, old = repo.head()
    if ref != target.local_ref or old is None:
        raise GitError(
            f"--push: HEAD moved off {target.local_ref} during the push; nothing was reset"
        )
    remote_tip = fetch(repo, target)
    if remote_tip is None:
        raise GitError(f"--push: {target.remote} has no branch {target.branch!r}")
    foreign = [oid for oid in unpublished(repo, target, remote_tip) if oid not in droppable]
    if foreign:
        raise GitError(
            f"--push: the local branch has {len(foreign)} unpublished commit(s) this push did "
            f"not make (e.g. {foreign[0][:12]}); push or rebase them onto {target.remote}/"
            f"{target.branch} first"
        )
    repo.try_run("update-index", "-q", "--refresh")
    repo.run("read-tree", "-m", "-u", old, remote_tip)
    repo.run("update-ref", "-m", "kb: catch up with the remote", target.local_ref, remote_tip, old)
    return remote_tip
