"""A team repository cloned with ``git clone --filter=blob:none`` (SPEC 14.3).

A partial clone fetches only the blobs ``HEAD`` checks out; an old store
version, an old epochs file or an old night's evidence is fetched from the
remote when git is first asked for it. Every kb command must work on such a
clone (over a ``file://`` remote here, as a CI runner's clone would over
https): the history kb reads is fetched on demand, and nothing kb writes
needs what is missing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.cli_helpers import kb, unwrapped
from tests.conftest import git
from tests.test_epochs import ADAPTIVE, model, night, spec

pytestmark = pytest.mark.usefixtures("initialized_store")


def missing_objects(clone: Path) -> list[str]:
    """Objects ``HEAD``'s history needs that this clone does not have (a partial clone's)."""
    out = subprocess.run(
        ["git", "rev-list", "--objects", "--all", "--missing=print"],
        cwd=clone,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line[1:] for line in out.splitlines() if line.startswith("?")]


def test_every_kb_command_works_on_a_blobless_clone(
    runner: CliRunner, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = spec(
        repo / "s.toml", model(), model(set(range(0, 60, 3)), name="weak"), extra_sweep=ADAPTIVE
    )
    for day in range(1, 5):
        night(runner, path, day)
    git(repo, "add", "s.toml")
    git(repo, "commit", "-qm", "the spec")
    # an old night's evidence leaves the tree: only history holds it now
    assert kb(runner, "--as-of", "2027-06-01", "compact", "--keep-days", "0").exit_code == 0
    remote = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(remote))
    git(remote, "config", "uploadpack.allowFilter", "true")
    git(remote, "config", "uploadpack.allowAnySHA1InWant", "true")
    clone = tmp_path / "runner"
    git(tmp_path, "clone", "-q", "--filter=blob:none", f"file://{remote}", str(clone))
    missing = missing_objects(clone)
    assert missing, "the clone holds every blob: not a partial clone"
    monkeypatch.chdir(clone)
    # reading: the history kb reads arrives on demand
    assert kb(runner, "--as-of", "2026-11-05", "list").exit_code == 0
    verified = kb(runner, "verify", "--all")
    assert verified.exit_code == 0, verified.stderr
    assert "versions in git checked" in verified.stdout
    claims = json.loads((clone / "rulvar.models.json").read_text())["claims"]
    live = next(c for c in claims if c["status"] == "active")
    shown = kb(runner, "--as-of", "2026-11-05", "show", live["id"])
    assert shown.exit_code == 0, shown.stderr
    assert "history:" in shown.stdout
    diff = kb(runner, "diff", "HEAD~3", "HEAD")
    assert diff.exit_code == 0, diff.stderr
    compared = kb(runner, "--as-of", "2026-11-05", "compare", "--json")
    assert compared.exit_code == 0, compared.stderr
    assert len(missing_objects(clone)) < len(missing)  # kb's reads fetched what they needed
    # writing: a night on the partial clone commits as on a full one
    fifth = kb(runner, "sweep", "s.toml", "--quiet", "--observed-at", "2026-11-05T02:00:00Z")
    assert fifth.exit_code == 0, fifth.stderr
    assert "kb: sweep" in git(clone, "log", "-1", "--format=%s")
    assert kb(runner, "verify").exit_code == 0
    assert "kb-sweep-2026-11-05T02:00:00.000Z" in unwrapped(
        kb(runner, "--as-of", "2026-11-06", "list", "--json").stdout
    )
