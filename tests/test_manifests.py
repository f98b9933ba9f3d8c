"""Claims that do not grow with time (SPEC 14.3): an epoch is cited through its manifest.

Through the real ``kb sweep`` on a scripted model, night after night under the
interval gate: the claim's size stays bounded, its manifest is committed and
names its own bytes, ``kb show`` lists every pooled run, ``kb compact`` keeps
what live claims rest on, and a missing or edited manifest is said in one line.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.store.epochs import read_epochs
from kb.store.manifests import is_manifest_ref, manifest_path, parse_manifest
from tests.cli_helpers import kb, unwrapped
from tests.conftest import git
from tests.test_epochs import ADAPTIVE, CELL, EPOCHS, STORE, claims, model, night, spec

pytestmark = pytest.mark.usefixtures("initialized_store")

EVIDENCE = Path("kb-evidence")


def live_claim() -> Any:
    (claim,) = [c for c in claims() if c.status == "active"]
    return claim


def claim_json(root: Path) -> dict[str, Any]:
    (found,) = [
        c for c in json.loads((root / STORE).read_text())["claims"] if c["status"] == "active"
    ]
    return found


def test_a_claims_size_is_bounded_over_twelve_nights(runner: CliRunner, repo: Path) -> None:
    path = spec(repo / "s.toml", model(), extra_sweep=ADAPTIVE)
    sizes = []
    for day in range(1, 13):
        night(runner, path, day)
        claim = claim_json(repo)
        sizes.append(len(json.dumps(claim)))
        if day == 1:  # a one-night epoch cites its night, as rulvar writes it
            assert [e["reportId"] for e in claim["evidence"]] == [
                "kb-sweep-2026-11-01T02:00:00.000Z"
            ]
            continue
        manifest, tonight = claim["evidence"]
        assert is_manifest_ref(manifest["reportId"]) and manifest["caseIds"] == []
        assert tonight["reportId"] == f"kb-sweep-2026-11-{day:02d}T02:00:00.000Z"
    epoch = read_epochs(repo / EPOCHS).cells[CELL]
    assert len(epoch.nights) == 12  # one epoch pooled all twelve nights
    # nights 4-12 run the settled sample (20 cases): the claim is the same size each night
    assert max(sizes[3:]) - min(sizes[3:]) <= 40, sizes
    assert sizes[-1] < 2 * sizes[1], sizes


def test_the_manifest_is_committed_names_its_bytes_and_lists_every_night(
    runner: CliRunner, repo: Path
) -> None:
    path = spec(repo / "s.toml", model(), extra_sweep=ADAPTIVE)
    for day in range(1, 5):
        night(runner, path, day)
    claim = live_claim()
    ref = claim.evidence[0]["reportId"]
    file = manifest_path(repo / EVIDENCE, ref)
    data = file.read_bytes()
    assert "epoch:" + hashlib.sha256(data).hexdigest()[:24] == ref
    tracked = git(repo, "ls-files", str(file.relative_to(repo))).strip()
    assert tracked == str(file.relative_to(repo))  # committed with the claim
    manifest = parse_manifest(data, str(file), ref)
    epoch = read_epochs(repo / EPOCHS).cells[CELL]
    assert manifest.nights == epoch.nights and manifest.cell == CELL
    # kb show lists every run of every pooled night
    shown = unwrapped(kb(runner, "--as-of", "2026-11-05", "show", claim.id).stdout)
    for pooled in epoch.nights:
        assert f"evidence of {pooled.report_id} from the work tree" in shown
        for case in pooled.cases:
            assert f"PASS {case}" in shown
    assert f"evidence eval {ref}: the epoch's nights" in shown


def test_compaction_keeps_what_live_claims_rest_on_and_drops_uncited_manifests(
    runner: CliRunner, repo: Path
) -> None:
    path = spec(repo / "s.toml", model(), extra_sweep=ADAPTIVE)
    for day in range(1, 5):
        night(runner, path, day)
    manifests = sorted((repo / EVIDENCE / "manifests").iterdir())
    assert len(manifests) == 3  # nights 2, 3 and 4 each made a claim citing a manifest
    done = kb(runner, "--as-of", "2027-06-01", "compact", "--keep-days", "0")
    assert done.exit_code == 0, done.stderr
    claim = live_claim()
    kept = manifest_path(repo / EVIDENCE, claim.evidence[0]["reportId"])
    assert sorted((repo / EVIDENCE / "manifests").iterdir()) == [kept]
    for day in range(1, 5):  # every night the live claim pooled keeps its evidence
        assert (repo / EVIDENCE / f"kb-sweep-2026-11-{day:02d}T02:00:00.000Z.jsonl").exists()
    shown = kb(runner, "--as-of", "2027-06-01", "show", claim.id)
    assert unwrapped(shown.stdout).count("from the work tree") == 4


def test_a_manifest_gone_from_the_tree_is_read_from_history_and_an_edited_one_refused(
    runner: CliRunner, repo: Path
) -> None:
    path = spec(repo / "s.toml", model(), extra_sweep=ADAPTIVE)
    for day in range(1, 4):
        night(runner, path, day)
    claim = live_claim()
    file = manifest_path(repo / EVIDENCE, claim.evidence[0]["reportId"])
    original = file.read_bytes()
    file.unlink()
    shown = kb(runner, "--as-of", "2026-11-04", "show", claim.id)
    assert shown.exit_code == 0 and unwrapped(shown.stdout).count("evidence of kb-sweep-") == 3
    file.write_bytes(original.replace(b"2026-11-01", b"2026-10-01"))
    edited = kb(runner, "--as-of", "2026-11-04", "show", claim.id)
    assert edited.exit_code == 2
    assert len(edited.stderr.strip().splitlines()) == 1
    assert "edited after it was committed" in edited.stderr
    before = (repo / STORE).read_bytes()
    compacted = kb(runner, "--as-of", "2027-06-01", "compact", "--keep-days", "0")
    assert compacted.exit_code == 2 and (repo / STORE).read_bytes() == before


def test_a_manifest_nowhere_is_said_by_kb_show(runner: CliRunner, isolated: Path) -> None:
    path = spec(isolated / "s.toml", model(), extra_sweep=ADAPTIVE)
    for day in range(1, 3):
        night(runner, path, day)
    claim = live_claim()
    manifest_path(isolated / EVIDENCE, claim.evidence[0]["reportId"]).unlink()
    shown = unwrapped(kb(runner, "--as-of", "2026-11-03", "show", claim.id).stdout)
    assert f"the epoch manifest {claim.evidence[0]['reportId']} is not in the evidence" in shown
    assert "evidence of kb-sweep-2026-11-02T02:00:00.000Z" in shown


# -- rulvar reads the store (SPEC 14.3: "rulvar still reads the store") ---------------------

DATA = Path(__file__).parent / "data"


def four_nights(runner: CliRunner, root: Path) -> bytes:
    """The store after four nights of one epoch (its live claim cites a manifest)."""
    path = spec(root / "s.toml", model(), extra_sweep=ADAPTIVE)
    for day in range(1, 5):
        night(runner, path, day)
    return (root / STORE).read_bytes()


def test_kb_still_writes_the_store_rulvar_read(runner: CliRunner, isolated: Path) -> None:
    """``tests/data/kb_manifest_store.json`` is what kb writes today, byte for byte."""
    assert four_nights(runner, isolated) == (DATA / "kb_manifest_store.json").read_bytes()


def test_rulvar_reads_a_store_whose_claims_cite_manifests() -> None:
    """rulvar's reader and writer (tests/js/read_kb_store.mjs) took the store kb wrote."""
    from kb.store.validation import parse_store

    read = json.loads((DATA / "rulvar_reads_kb_store.json").read_text())
    data = (DATA / "kb_manifest_store.json").read_bytes()
    ours = parse_store(data, "kb_manifest_store.json")
    assert read["accepted"] and read["version"] == ours.version
    assert read["hash"] == read["recomputedHash"] == read["rewrittenHash"] == ours.hash
    assert read["rewrittenVersion"] == ours.version + 1
    assert [c["id"] for c in read["claims"]] == [c.id for c in ours.claims]
    cited = [e for c in read["claims"] for e in c["evidence"]]
    assert any(is_manifest_ref(e["reportId"]) and e["caseIds"] == [] for e in cited)
    assert [c["evidence"] for c in read["claims"]] == [list(c.evidence) for c in ours.claims]
