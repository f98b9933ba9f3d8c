"""Every side file answers a format it cannot read the same way (kb.sidefile).

Evidence reports and runs, epochs, canary baselines, the run journal,
cassettes, settings and the commit intent each name their format under one
key; a newer one asks to upgrade kb, a wrong one says what it is not, in one
line naming the file, whichever reader met it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kb.engine.cassette import CASSETTE, Cassette
from kb.engine.journal import JOURNAL, read_journal
from kb.errors import ConfigError
from kb.sidefile import SideFormat, parse_json
from kb.store.baselines import BASELINES, parse_baselines
from kb.store.commit_window import INTENT, CommitIntent
from kb.store.epochs import EPOCHS, parse_epochs
from kb.store.home import SETTINGS, read_settings
from kb.store.labels import LABELS
from kb.store.records import EVIDENCE_FORMAT, parse_report
from kb.store.runs_file import parse_runs


def _bytes_reader(parse: Callable[[bytes, str], Any]) -> Callable[[Path, bytes], Any]:
    def read(path: Path, data: bytes) -> Any:
        return parse(data, str(path))

    return read


def _file_reader(read: Callable[[Path], Any]) -> Callable[[Path, bytes], Any]:
    def through_file(path: Path, data: bytes) -> Any:
        path.write_bytes(data)
        return read(path)

    return through_file


def _intent(path: Path, data: bytes) -> Any:
    return CommitIntent.parse(data, str(path), path.parent)


READERS: dict[str, tuple[SideFormat, Callable[[Path, bytes], Any]]] = {
    "evidence report": (EVIDENCE_FORMAT, _bytes_reader(parse_report)),
    "evidence runs": (EVIDENCE_FORMAT, _bytes_reader(parse_runs)),
    "epochs": (EPOCHS, _bytes_reader(parse_epochs)),
    "canary baselines": (BASELINES, _bytes_reader(parse_baselines)),
    "run journal": (JOURNAL, _file_reader(read_journal)),
    "cassette": (CASSETTE, _file_reader(lambda p: Cassette(p, "replay"))),
    "settings": (SETTINGS, _file_reader(read_settings)),
    "commit intent": (INTENT, _intent),
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_newer_format_asks_to_upgrade_kb_in_one_line(tmp_path: Path, name: str) -> None:
    side, read = READERS[name]
    newer = max(side.readable) + 1
    with pytest.raises(ConfigError) as caught:
        read(tmp_path / "side.json", f'{{"{side.key}": {newer}}}\n'.encode())
    message = str(caught.value)
    assert f"{side.what} format {newer} was written by a newer kb" in message
    assert "upgrade kb" in message
    assert str(tmp_path / "side.json") in message
    assert "\n" not in message


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_format_that_is_not_a_number_is_named(tmp_path: Path, name: str) -> None:
    side, read = READERS[name]
    with pytest.raises(ConfigError) as caught:
        read(tmp_path / "side.json", f'{{"{side.key}": "two"}}\n'.encode())
    assert f"{side.key}: 'two' is not a {side.what} format" in str(caught.value)


@pytest.mark.parametrize("name", sorted(READERS))
def test_json_nested_too_deep_is_one_line(tmp_path: Path, name: str) -> None:
    _, read = READERS[name]
    with pytest.raises(ConfigError) as caught:
        read(tmp_path / "side.json", b"[" * 100_000 + b"]" * 100_000 + b"\n")
    assert "\n" not in str(caught.value)


def test_files_written_before_the_stamp_read_as_format_one() -> None:
    assert CASSETTE.issue({"key": "k"}) is None and CASSETTE.version({"key": "k"}) == 1
    assert EVIDENCE_FORMAT.version({"reportId": "r"}) == 1
    assert EPOCHS.issue({"cells": {}}) == "format: missing (not a kb epochs file?)"


def test_every_writer_stamps_the_format_its_reader_checks() -> None:
    assert BASELINES.stamp() == {"version": 1}
    assert JOURNAL.stamp() == {"journal": 1}
    assert INTENT.stamp() == {"intent": 1}
    assert CASSETTE.stamp() == SETTINGS.stamp() == EPOCHS.stamp() == {"format": 1}
    assert LABELS.stamp() == {"format": 1}
    assert EVIDENCE_FORMAT.stamp() == {"format": 4}


@given(
    current=st.integers(1, 5),
    older=st.lists(st.integers(1, 5), max_size=3),
    found=st.one_of(st.none(), st.booleans(), st.integers(-3, 9), st.text(max_size=3)),
)
def test_a_format_is_read_exactly_when_it_is_one_this_kb_reads(
    current: int, older: list[int], found: object
) -> None:
    side = SideFormat("thing", current=current, older=tuple(x for x in older if x < current))
    issue = side.issue({"format": found})
    readable = isinstance(found, int) and not isinstance(found, bool) and found in side.readable
    assert (issue is None) == readable
    if issue is not None and isinstance(found, int) and not isinstance(found, bool):
        assert ("upgrade kb" in issue) == (found > current)


def test_parse_json_names_the_source_of_bad_text() -> None:
    with pytest.raises(ConfigError, match=r"^f\.json: not valid JSON"):
        parse_json(b"{", "f.json")
    with pytest.raises(ConfigError, match=r"^f\.json: not valid JSON"):
        parse_json(b"\xff", "f.json")
