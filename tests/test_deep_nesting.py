"""JSON nested too deep for Python's parser is bad input like any other: one line, never a crash.

A 3,000-deep array (``[[[…]]]``) makes ``json.loads`` raise ``RecursionError``,
which is not a ``ValueError``. Every file a user or a tool can hand kb is
checked here (SPEC 13.1 "Smaller": a deeply nested cassette is one line,
exit 2); the cassette itself, ladders and specs are in their own tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.engine.journal import read_journal
from kb.errors import ConfigError
from kb.store.baselines import read_baselines
from kb.store.epochs import read_epochs
from kb.store.home import read_settings
from kb.store.records import parse_report
from kb.store.runs_file import parse_runs
from kb.sweep.spec import load_spec
from tests.cli_helpers import kb

DEEP = "[" * 3000 + "]" * 3000


def journal_with_a_deep_line(path: Path) -> Path:
    header = {"journal": 1, "reportId": "r", "observedAt": "2026-11-28T02:00:00.000Z", "spec": ""}
    path.write_text(json.dumps(header) + "\n" + DEEP + "\n" + DEEP + "\n")
    return path


def spec_with(tmp: Path, extra: str) -> Path:
    spec = tmp / "s.toml"
    spec.write_text(
        '[sweep]\ncommitter = "ci"\n[budgets]\ntarget_usd = 0.01\nmax_total_usd = 1\n' + extra
    )
    return spec


READERS: dict[str, Callable[[Path], object]] = {
    "epochs file": lambda tmp: read_epochs(_write(tmp / "e.json", DEEP)),
    "canary baselines": lambda tmp: read_baselines(_write(tmp / "b.json", DEEP)),
    "settings file": lambda tmp: read_settings(_write(tmp / "s.json", DEEP)),
    "evidence runs": lambda tmp: parse_runs(DEEP.encode() + b"\n", "runs.jsonl"),
    "evidence report": lambda tmp: parse_report(DEEP.encode(), "r.report.json"),
    "run journal": lambda tmp: read_journal(journal_with_a_deep_line(tmp / "j.journal.jsonl")),
    "scripted script": lambda tmp: load_spec(
        spec_with(
            tmp,
            '[[models]]\nmodel = "scripted:m"\n'
            f'params = {{ script = "{_write(tmp / "x.json", DEEP)}" }}\n'
            '[[cases]]\nname = "a"\ntask_class = "t"\nprompt = "p"\n'
            'graders = [{ kind = "golden", expected = "x" }]\n',
        )
    ),
    "dataset": lambda tmp: load_spec(
        spec_with(
            tmp,
            '[[models]]\nmodel = "scripted:m"\n[[datasets]]\npath = "d.jsonl"\n'
            'task_class = "t"\nfields = { prompt = "q", expected = "a" }\n'
            'graders = [{ kind = "golden", expected = "{a}" }]\n',
        )
        if _write(tmp / "d.jsonl", DEEP + "\n")
        else None
    ),
    "json grader": lambda tmp: load_spec(
        spec_with(
            tmp,
            '[[models]]\nmodel = "scripted:m"\n[[cases]]\nname = "a"\ntask_class = "t"\n'
            'prompt = "p"\n'
            f'graders = [{{ kind = "golden", match = "json", expected = "{DEEP}" }}]\n',
        )
    ),
}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("reader", sorted(READERS))
def test_json_nested_too_deep_is_a_config_error(isolated: Path, reader: str) -> None:
    with pytest.raises(ConfigError) as found:
        READERS[reader](isolated)
    assert "\n" not in str(found.value)


def test_kb_verify_names_a_deep_epochs_file_in_one_line(
    runner: CliRunner, initialized_store: Path
) -> None:
    epochs = initialized_store.with_name("rulvar.models.epochs.json")
    epochs.write_text(DEEP)
    before = initialized_store.read_bytes()
    result = kb(runner, "verify")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "rulvar.models.epochs.json" in result.stderr and "Traceback" not in result.stderr
    assert initialized_store.read_bytes() == before


def test_a_journaled_reply_with_a_line_separator_is_one_run(isolated: Path) -> None:
    """U+2028 inside a reply is not a line break: the paid night stays resumable."""
    from kb.engine.journal import RunJournal
    from kb.engine.requests import build_request
    from kb.engine.runs import RunResult, Usage
    from tests.engine_helpers import scripted

    path = isolated / "j.journal.jsonl"
    journal = RunJournal.open(path, "r", "2026-11-28T02:00:00.000Z", spec="s.toml")
    reply = "first\u2028second\u0085third"
    journal.record(
        RunResult(
            label="target:m/a",
            kind="target",
            model="scripted:m",
            status="ok",
            output=reply,
            usage=Usage(1, 1),
            cost_usd=0.001,
            request=build_request(scripted("m"), "a"),
        )
    )
    journal.close()
    state = read_journal(path)
    assert state is not None and state.lines == 1
    assert state.settled["target:m/a"][1].output == reply
