"""kb reads what rulvar's reader reads: vectors made by rulvar's own code under Node.

``tests/data/rulvar_reader_vectors.json`` comes from
``tests/js/make_reader_vectors.mjs``: each input file, whether rulvar's
``FileModelKnowledgeStore`` accepted it, what it read (version, hash, claim
count, the first claim's instants as ``Date.parse`` reads them) and what its
writer wrote back. kb must accept exactly the same files, read the same
values, and write the claims back so that rulvar reads the same data (kb
keeps the claim bytes of a canonical-layout file as they are, where rulvar
re-prints them: an integer beyond 2**53 stays exact in kb's file).
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.cli import cli
from kb.errors import ConfigError
from kb.store.claim_texts import SpanTexts
from kb.store.filestore import CommitContext, KnowledgeStore
from kb.store.jsjson import parse_json
from kb.store.ops import AddClaim, EvalCommitterGate
from kb.store.snapshot import Snapshot
from kb.store.ttl import read_stored_instant
from kb.store.validation import parse_store
from kb.store.writing import render_store, write_store

VECTORS = json.loads((Path(__file__).parent / "data" / "rulvar_reader_vectors.json").read_text())
ACCEPTED = [v for v in VECTORS if v["accepted"]]


def input_bytes(vector: dict[str, Any]) -> bytes:
    if "fileBase64" in vector:
        return base64.b64decode(vector["fileBase64"])
    return str(vector["file"]).encode("utf-8", "surrogatepass")


def claims_section(text: str) -> str:
    return text[text.index('"claims": [') :]


def test_the_vectors_cover_what_the_issue_names() -> None:
    names = {v["name"] for v in ACCEPTED}
    for needed in (
        "unknown-key-claim-last",
        "unknown-key-metrics",
        "lone-high-surrogate-statement",
        "n-beyond-2^53-hash-of-parsed",
        'observedAt "2026-07-01T00:00:00+0200"',
        'observedAt "2026-07-01t00:00:00z"',
        'observedAt "2026-07-01T00:00:00.0159999999Z"',
    ):
        assert needed in names


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_kb_accepts_exactly_what_rulvar_accepts(vector: dict[str, Any]) -> None:
    data = input_bytes(vector)
    if not vector["accepted"]:
        with pytest.raises(ConfigError):
            parse_store(data, "rulvar.models.json")
        return
    snapshot = parse_store(data, "rulvar.models.json")
    read = vector["read"]
    assert (snapshot.version, snapshot.hash, len(snapshot)) == (
        read["version"],
        read["hash"],
        read["claims"],
    )
    instants = vector.get("instants")
    if instants and len(snapshot):
        first = snapshot.entries[0]
        assert read_stored_instant(first.observed_at).ms == instants["observedAtMs"]
        assert read_stored_instant(first.expires_at).ms == instants["expiresAtMs"]


@pytest.mark.parametrize(
    "vector", [v for v in ACCEPTED if "rerendered" in v], ids=lambda v: str(v["name"])
)
def test_kb_writes_back_what_rulvar_reads_the_same(vector: dict[str, Any]) -> None:
    data = input_bytes(vector)
    snapshot = parse_store(data, "rulvar.models.json")
    again = Snapshot(
        snapshot.version + 1, snapshot.hash, texts=snapshot.texts, extra=snapshot.extra
    )
    handle = io.BytesIO()
    write_store(again, handle)
    written = handle.getvalue().decode("utf-8", "replace")  # as Node reads the file
    theirs = str(vector["rerendered"])
    # rulvar reads kb's file as the same data it wrote itself.
    assert parse_json(written)[0]["claims"] == parse_json(theirs)[0]["claims"]
    assert parse_store(handle.getvalue(), "kb").hash == snapshot.hash
    source = data.decode("utf-8", "replace")
    if isinstance(snapshot.texts, SpanTexts):
        # A canonical-layout file: kb copies each claim's bytes (unknown keys, exact
        # digits and escapes included) rather than re-printing them.
        assert claims_section(written) == claims_section(source)
    elif not snapshot.extra:
        assert written == theirs  # any other layout: printed exactly as rulvar prints it


def test_unknown_top_level_keys_are_kept_where_rulvar_drops_them() -> None:
    vector = next(v for v in ACCEPTED if v["name"] == "unknown-top-level-key-last")
    snapshot = parse_store(input_bytes(vector), "rulvar.models.json")
    assert snapshot.extra and any("unknown top-level key" in w for w in snapshot.warnings)
    written = render_store(
        Snapshot(snapshot.version + 1, snapshot.hash, texts=snapshot.texts, extra=snapshot.extra)
    )
    assert all(f'"{key}"' in written for key in snapshot.extra)


COMMITTED = [
    "unknown-key-claim-last",
    "unknown-key-subject",
    "unknown-key-string-escapes",
    "unknown-key-number-forms",
    "lone-high-surrogate-statement",
    "n-beyond-2^53-hash-of-parsed",
    "huge-integer-in-unknown-key",
    'observedAt "2026-07-01T00:00:00+0200"',
    'observedAt "2026-07-01T00:00:00.0159999999Z"',
    "passRate-above-1",
]


@pytest.mark.parametrize("name", COMMITTED)
def test_a_kb_commit_keeps_every_existing_claim_byte_for_byte(tmp_path: Path, name: str) -> None:
    vector = next(v for v in ACCEPTED if v["name"] == name)
    path = tmp_path / "rulvar.models.json"
    original = parse_store(input_bytes(vector), "v")
    path.write_bytes(render_store(original).encode("utf-8", "surrogatepass"))
    before = path.read_bytes()
    store = KnowledgeStore(path)
    new = dict(original.wire_at(0), id="added-by-kb", status="active")
    new.pop("zz", None)
    claim = _kb_claim(new)
    evidence = claim.evidence[0]
    add = AddClaim(claim, EvalCommitterGate(claim.author["id"], evidence["reportId"]))
    result = store.commit([add], original.version, CommitContext(action="test", committer="tester"))
    after = path.read_bytes()
    assert result.snapshot.version == original.version + 1
    old_claims = before[before.index(b'"claims": [') : before.rindex(b"\n  ]")]
    assert after.startswith(before[: before.index(b'"version"')])
    assert old_claims in after
    assert parse_store(after, "after").hash == result.snapshot.hash


def _kb_claim(wire: dict[str, Any]) -> Any:
    from kb.store.models import claim_from_wire

    base = json.loads((Path(__file__).parent / "data" / "rulvar_store.json").read_text())
    claim = dict(base["claims"][0], id=wire["id"], status="active")
    return claim_from_wire(claim)


@pytest.mark.parametrize("name", ["passRate-above-1", "reportId-empty", "effort-empty"])
def test_kb_verify_warns_about_values_kb_would_never_write(
    tmp_path: Path, runner: CliRunner, name: str
) -> None:
    vector = next(v for v in ACCEPTED if v["name"] == name)
    path = tmp_path / "rulvar.models.json"
    path.write_bytes(input_bytes(vector))
    done = runner.invoke(cli, ["--store", str(path), "verify"], catch_exceptions=False)
    assert done.exit_code == 0, done.stderr
    assert "warning: claims[0]" in done.stderr
    assert path.read_bytes() == input_bytes(vector)


def test_a_lone_surrogate_prints_escaped_in_text_output(tmp_path: Path) -> None:
    vector = next(v for v in ACCEPTED if v["name"] == "lone-high-surrogate-statement")
    path = tmp_path / "rulvar.models.json"
    path.write_bytes(input_bytes(vector))
    for command in (["list", "--long"], ["show", "nightly-42/openai:gpt-4o-mini@low/extraction"]):
        done = subprocess.run(
            [sys.executable, "-m", "kb", "--store", str(path), "--as-of", "2026-07-02", *command],
            capture_output=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        assert b"bad \\ud800 end" in done.stdout
