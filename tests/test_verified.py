"""The record of validated store bytes: faster reads that can never let a changed file pass."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kb.errors import ConfigError
from kb.store import verified
from kb.store.filestore import CommitContext, KnowledgeStore, read_store_file
from kb.store.models import ModelClaim
from tests.factories import add, eval_claim

CTX = CommitContext("sweep", "ci")


def seeded(isolated: Path) -> Path:
    store = KnowledgeStore("rulvar.models.json")
    store.commit(
        [
            add(eval_claim(f"c{i}", metrics={"passRate": 1.0, "n": 3, "graderId": "g"}))
            for i in range(3)
        ],
        0,
        CTX,
    )
    return isolated / "rulvar.models.json"


def test_a_verified_file_reads_the_same_without_revalidation(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = seeded(isolated)
    assert verified.is_verified(verified.digest(path.read_bytes()))  # recorded by the commit
    first = read_store_file(path)

    def no_validation(*args: object, **kwargs: object) -> None:
        raise AssertionError("validated again")

    monkeypatch.setattr(ModelClaim, "model_validate", no_validation)
    again = read_store_file(path)
    assert again == first and again.wire == first.wire
    assert [c.subject_key for c in again.claims] == [c.subject_key for c in first.claims]


def test_changed_bytes_are_validated_in_full(isolated: Path) -> None:
    path = seeded(isolated)
    read_store_file(path)
    document = json.loads(path.read_text())
    document["claims"][0]["polarity"] = "strong"
    path.write_text(json.dumps(document, indent=2))
    with pytest.raises(ConfigError, match=r"claims\[0\].polarity"):
        read_store_file(path)


def test_a_hand_edit_that_breaks_the_hash_is_still_caught(isolated: Path) -> None:
    path = seeded(isolated)
    path.write_text(path.read_text().replace('"n": 3', '"n": 4', 1))
    with pytest.raises(ConfigError, match="hash: does not match"):
        read_store_file(path)


def test_kb_no_cache_turns_it_off(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_NO_CACHE", "1")
    path = seeded(isolated)
    read_store_file(path)
    assert not (Path(os.environ["XDG_CACHE_HOME"]) / "kb").exists()


def test_an_unwritable_cache_never_fails_a_read(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = isolated / "not-a-dir"
    blocker.write_text("a file where the cache directory would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    path = seeded(isolated)
    assert read_store_file(path).version == 1


def test_verify_never_trusts_the_record(isolated: Path) -> None:
    from click.testing import CliRunner

    from kb.cli import cli

    path = seeded(isolated)
    document = json.loads(path.read_text())
    document["claims"][0]["polarity"] = "bogus"
    path.write_text(json.dumps(document))
    planted = Path(os.environ["XDG_CACHE_HOME"]) / "kb" / "verified"
    planted.mkdir(parents=True, exist_ok=True)
    (
        planted / f"{__import__('kb').__version__}-{verified.RULES_VERSION}-"
        f"{verified.digest(path.read_bytes())}"
    ).touch()  # a forged record
    result = CliRunner().invoke(cli, ["verify"])
    assert result.exit_code == 2 and "claims[0].polarity" in result.stderr
