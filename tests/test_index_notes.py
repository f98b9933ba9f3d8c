"""The evidence index reads a night's runs file once per version (SPEC 14.3).

What the index keeps of a night (each target run's cost, latency, whether it
was priced) is noted under ``.git/kb-index/`` by the runs file's recorded
sha256: the next command reads the note, not every answer again, and finds
the same index; a note kb cannot read is ignored; a runs file edited since
is read again and refused as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.errors import ConfigError
from kb.evidence_index import EvidenceIndex
from kb.store import evidence
from kb.store.filestore import KnowledgeStore
from tests.test_site import two_nights

pytestmark = pytest.mark.usefixtures("initialized_store")


def costs(index: EvidenceIndex) -> dict[tuple[str, str], object]:
    return {
        (task_class, subject): (cell.cost, dict(cell.runs))
        for task_class, cells in index.cells.items()
        for subject, cell in cells.items()
    }


def test_the_second_read_takes_the_notes_and_finds_the_same_index(
    runner: CliRunner, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    two_nights(runner, repo, gate="interval")
    store = KnowledgeStore(repo / "rulvar.models.json")
    first = EvidenceIndex.load(store)
    assert store.git is not None
    notes = sorted((store.git.git_dir / "kb-index").glob("*.json"))
    assert len(notes) == 2  # one per night, named by its runs file's sha256
    assert first.cells and all(
        c.cost.cost_per_case is not None for c in first.cells["extraction"].values()
    )

    def no_runs_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("a runs file was read although its note holds")

    monkeypatch.setattr(evidence, "load_evidence", no_runs_read)
    assert costs(EvidenceIndex.load(store)) == costs(first)

    monkeypatch.undo()
    notes[0].write_text("{not json")  # a note kb cannot read: the night is read again
    assert costs(EvidenceIndex.load(store)) == costs(first)
    noted = json.loads(notes[0].read_text())  # and noted again
    assert noted["format"] == 1 and noted["size"] > 0
    for entry in noted["runs"]:  # a hand-edited note: wrong types are not believed
        entry[3] = [["free", None, False] for _ in entry[3]]
    notes[0].write_text(json.dumps(noted))
    assert costs(EvidenceIndex.load(store)) == costs(first)


def test_a_runs_file_edited_after_its_note_is_read_and_refused(
    runner: CliRunner, repo: Path
) -> None:
    two_nights(runner, repo, gate="interval")
    store = KnowledgeStore(repo / "rulvar.models.json")
    EvidenceIndex.load(store)
    runs = sorted((repo / "kb-evidence").glob("*.jsonl"))[-1]
    runs.write_text(runs.read_text().replace('"costUsd":0', '"costUsd":0.5'))
    with pytest.raises(ConfigError) as caught:
        EvidenceIndex.load(store)
    assert "does not match the sha256 its report recorded" in str(caught.value)
