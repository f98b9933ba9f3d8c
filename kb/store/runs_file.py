"""The runs file (``<report>.jsonl``): written in case order, read back whole.

Format 3 (:mod:`kb.store.records` says what each format holds): canary
probes first, then task class by task class, case by case, each case's
target runs before their judges, run label by run label — an order that does
not depend on when a run settled, so two nights line up for git's deltas —
and a run whose request is the one an earlier line of the same case and kind
carries says ``"sameRequest": true`` instead of repeating it. The reader
fills the request back in and checks the file against its report.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from kb.errors import ConfigError
from kb.store.canonical import js_stringify
from kb.store.records import EVIDENCE_FORMAT, ReportFile, RequestRecord, RunRecord, validated

SAME_REQUEST = "sameRequest"
"""Format 3: the request is the one the case's earlier line of this kind carries."""


_KIND_ORDER = {"canary": 0, "target": 1, "judge": 2}


def _case_order(record: RunRecord) -> tuple[int, str, str, int, str, int]:
    """Canary probes first, then task class by task class, case by case, model by model.

    The order does not depend on when each run settled, so two nights of the same
    cases line up for git's deltas (format 3).
    """
    probe = record.task_class is None
    return (
        0 if probe else 1,
        record.task_class or "",
        record.case,
        _KIND_ORDER[record.kind],
        record.label,
        record.repeat,
    )


def render_runs(records: Iterable[RunRecord]) -> bytes:
    """The JSONL file: one compact object per line, numbers as JavaScript prints them.

    In case order, each case's request written once per kind (format 3).
    """
    lines = []
    asked: dict[tuple[str | None, str, str], RequestRecord] = {}
    for record in sorted(records, key=_case_order):
        wire = record.to_wire()
        where = (record.task_class, record.case, record.kind)
        if record.request is not None and record.format >= 3:
            if asked.get(where) == record.request:
                del wire["request"]
                wire[SAME_REQUEST] = True
            else:
                asked.setdefault(where, record.request)
        lines.append(js_stringify(wire) + "\n")
    return "".join(lines).encode("utf-8", "surrogatepass")


def _shared_request(
    value: dict[str, Any], asked: dict[tuple[Any, Any, Any], Any]
) -> dict[str, Any]:
    """A format-3 line with its request filled in from the case's earlier line."""
    where = (value.get("taskClass"), value.get("case"), value.get("kind"))
    if SAME_REQUEST not in value:
        if "request" in value and EVIDENCE_FORMAT.version(value) >= 3:  # as the writer does
            asked.setdefault(where, value["request"])
        return value
    if EVIDENCE_FORMAT.version(value) < 3:
        raise ConfigError("record", f"{SAME_REQUEST}: a format-3 key in a format-2 record")
    if value[SAME_REQUEST] is not True or "request" in value:
        raise ConfigError("record", f"{SAME_REQUEST}: must be true, and without a request")
    if where not in asked:
        raise ConfigError(
            "record", f"{SAME_REQUEST}: no earlier line of this case and kind carries a request"
        )
    filled = {key: item for key, item in value.items() if key != SAME_REQUEST}
    filled["request"] = asked[where]
    return filled


def in_case_order(records: Iterable[RunRecord]) -> list[RunRecord]:
    """``records`` in the runs file's order (the ``--json`` report's too)."""
    return sorted(records, key=_case_order)


def parse_runs(data: bytes, source: str) -> list[RunRecord]:
    """The records of an evidence file; every line that is not a run record is named at once."""
    records = []
    problems: dict[tuple[str, ...], list[int]] = {}
    asked: dict[tuple[Any, Any, Any], Any] = {}
    for number, raw in enumerate(data.splitlines(), 1):
        try:
            line = raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            problems.setdefault((f"not UTF-8 text ({exc.reason})",), []).append(number)
            continue
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            problems.setdefault((f"not valid JSON: {exc}",), []).append(number)
            continue
        try:
            if isinstance(value, dict) and EVIDENCE_FORMAT.issue(value) is None:
                value = _shared_request(value, asked)
            records.append(validated(RunRecord, value, "record"))
        except ConfigError as exc:
            problems.setdefault(exc.issues, []).append(number)
    if problems:
        raise ConfigError(
            source,
            [f"{_line_numbers(lines)}: {'; '.join(found)}" for found, lines in problems.items()],
        )
    return records


def _line_numbers(lines: Sequence[int]) -> str:
    """``line 3`` or ``lines 2-4, 9``: one issue, every line it is on."""
    spans: list[list[int]] = []
    for number in lines:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)
    return f"line {text}" if len(lines) == 1 else f"lines {text}"


def check_runs_match(report: ReportFile, data: bytes, count: int, source: str) -> None:
    """A format-2 report names its runs file's size and hash: a cut or edited file is refused."""
    if report.run_count is not None and report.run_count != count:
        raise ConfigError(
            source,
            f"holds {count} runs but its report recorded {report.run_count}: the file was "
            "cut or edited (restore it from git)",
        )
    if report.runs_sha256 is not None and hashlib.sha256(data).hexdigest() != report.runs_sha256:
        raise ConfigError(
            source,
            "does not match the sha256 its report recorded: the file was edited (restore "
            "it from git)",
        )
