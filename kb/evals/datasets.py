"""Case sets kept as data: JSONL and CSV files mapped onto cases (``[[datasets]]``).

The interval gate speaks only with about 30 cases per task class, and eval
data already lives in JSONL and CSV, so a spec can point at a file instead
of spelling out ``[[cases]]`` tables::

    [[datasets]]
    path = "cases/extraction.jsonl"     # .jsonl or .csv, relative to the spec
    task_class = "extraction"           # or task_class_field = "category"
    fields = { name = "id", prompt = "question" }
    prompt_template = "Answer in one word. {question}"
    graders = [ { kind = "golden", expected = "{answer}", match = "normalized" } ]
    sample = 40                         # optional: a stable subset
    seed = 1

* Every record becomes a case. ``fields`` maps a case's ``name``, ``prompt``,
  ``system`` and ``expected`` to record fields (``prompt`` defaults to a
  field called ``prompt``). ``prompt_template``, ``system_template`` and
  every string inside ``graders`` may hold ``{field}``, replaced by that
  field of the record; ``{{`` and ``}}`` are literal braces, and braces that
  do not hold an identifier (a regex's ``{2,3}``) are left alone. Without
  ``graders``, ``fields.expected`` gives one golden ``normalized`` grader.
  When both ``prompt_template`` and ``fields.prompt`` are given the
  template wins (``fields.prompt`` is not read, but must still name a field
  the records have, so a typo in it is caught), as with ``system_template``.
* ``name`` defaults to ``<file stem>-<line>``. Names must be unique across
  the whole spec.
* ``sample = N`` keeps the N records whose sha256 of (seed, name) is
  smallest: the same subset every night, and a record added to the file
  displaces at most one chosen record (only when its own hash is small).
* Problems are reported with file and line, all at once: bad JSON, a CSV
  row with the wrong number of columns, an empty file, a missing field.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from kb.evals.cases import Case
from kb.schema import StrictModel, validation_issues

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")


class DatasetFields(StrictModel):
    """Which record field supplies each part of a case."""

    name: str | None = None
    """The record field that names the case (default: ``<file stem>-<line>``)."""
    prompt: str | None = None
    """The record field holding the prompt (default: a field called ``prompt``)."""
    system: str | None = None
    """The record field holding a system message."""
    expected: str | None = None
    """The record field holding the expected answer (alone: one golden ``normalized``
    grader)."""


class DatasetSpec(StrictModel):
    """``[[datasets]]``: a JSONL or CSV file of records, mapped onto cases."""

    path: str = Field(min_length=1)
    """The JSONL or CSV file, relative to the file that declares the table."""
    task_class: str | None = Field(default=None, min_length=1, max_length=100)
    """Every record's task class (else ``task_class_field``)."""
    task_class_field: str | None = Field(default=None, min_length=1)
    """The record field holding each case's task class."""
    fields: DatasetFields = Field(default_factory=DatasetFields)
    """Which record fields supply the case (``[datasets.fields]``)."""
    prompt_template: str | None = Field(default=None, min_length=1)
    """The prompt with ``{field}`` from the record (wins over ``fields.prompt``)."""
    system_template: str | None = Field(default=None, min_length=1)
    """A system message with ``{field}`` from the record."""
    graders: list[dict[str, Any]] | None = Field(default=None, min_length=1)
    """Grader tables as in ``[[cases]]``; their strings may hold ``{field}``."""
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    """JSON Schema for structured output, passed to the model."""
    sample: int | None = Field(default=None, ge=1)
    """Keep N records (the smallest sha256 of seed and name: the same subset every night)."""
    seed: int = 0
    """The sample's seed."""

    @model_validator(mode="after")
    def _one_task_class(self) -> DatasetSpec:
        if (self.task_class is None) == (self.task_class_field is None):
            raise ValueError("give exactly one of task_class and task_class_field")
        if self.graders is None and self.fields.expected is None:
            raise ValueError("give graders, or fields.expected for a golden grader")
        if not self.path.endswith((".jsonl", ".csv")):
            raise ValueError(f"path {self.path!r} must end in .jsonl or .csv")
        return self


@dataclass(frozen=True)
class Record:
    """One record of a dataset file and where it starts."""

    line: int
    values: Mapping[str, Any]


@dataclass(frozen=True)
class LocatedCase:
    """A case and where it was written (``file:line`` or ``file: cases[i]``)."""

    case: Case
    where: str


def render_template(template: str, values: Mapping[str, Any]) -> str:
    """``{field}`` → the record's field, ``{{``/``}}`` → a brace; a missing field is a KeyError."""

    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        return _text(values[match.group(1)], match.group(1))

    return _PLACEHOLDER.sub(replace, template)


def _text(value: Any, field: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return json.dumps(value)
    raise ValueError(f"field {field!r} is not text (got {type(value).__name__})")


def _substituted(value: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        return render_template(value, values)
    if isinstance(value, list):
        return [_substituted(item, values) for item in value]
    if isinstance(value, dict):
        return {key: _substituted(item, values) for key, item in value.items()}
    return value


def read_records(path: Path, issues: list[str], where: str) -> list[Record]:
    """Every record of a ``.jsonl`` or ``.csv`` file; problems go to ``issues`` with lines."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        issues.append(f"{where}: no such file")
        return []
    except (OSError, UnicodeDecodeError) as exc:
        issues.append(f"{where}: cannot read: {exc}")
        return []
    before = len(issues)
    records = list(
        _jsonl(text, where, issues) if path.suffix == ".jsonl" else _csv(text, where, issues)
    )
    if not records and len(issues) == before:
        issues.append(f"{where}: the file holds no records")
    return records


def _jsonl(text: str, where: str, issues: list[str]) -> Iterator[Record]:
    # Lines end at \n only: a raw U+2028 inside a JSON string is not a line break.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            # json's own words may end in "at" ("Unterminated string starting at")
            said = exc.msg.removesuffix(" at")
            issues.append(f"{where}:{number}: not valid JSON: {said} at column {exc.colno}")
            continue
        except RecursionError:
            issues.append(f"{where}:{number}: not valid JSON: nested too deep to read")
            continue
        if not isinstance(value, dict):
            issues.append(f"{where}:{number}: a record must be a JSON object")
            continue
        yield Record(number, value)


def _csv(text: str, where: str, issues: list[str]) -> Iterator[Record]:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
    except csv.Error as exc:
        issues.append(f"{where}:1: not valid CSV: {exc}")
        return
    if header is None:
        return
    if len(set(header)) != len(header) or any(not name.strip() for name in header):
        issues.append(f"{where}:1: the header needs distinct, non-empty column names")
        return
    start = reader.line_num + 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            issues.append(f"{where}:{start}: not valid CSV: {exc}")
            return
        if row and not (len(row) == 1 and not row[0].strip()):
            if len(row) != len(header):
                issues.append(
                    f"{where}:{start}: has {len(row)} column{'s' if len(row) != 1 else ''}, "
                    f"the header has {len(header)}"
                )
            else:
                yield Record(start, dict(zip(header, row, strict=True)))
        start = reader.line_num + 1


def placeholders(text: str) -> list[str]:
    """The ``{field}`` names a template uses, in order."""
    return [m.group(1) for m in _PLACEHOLDER.finditer(text) if m.group(1)]


def fields_used(spec: DatasetSpec) -> list[str]:
    """Every record field a dataset's mapping, templates and graders read."""
    names: list[str] = []
    mapped = spec.fields
    for field in (mapped.name, mapped.system, mapped.expected, spec.task_class_field):
        if field:
            names.append(field)
    if spec.prompt_template is not None:
        names += placeholders(spec.prompt_template)
        if mapped.prompt:  # not read when the template wins, but a typo in it is still a typo
            names.append(mapped.prompt)
    else:
        names.append(mapped.prompt or "prompt")
    if spec.system_template is not None:
        names += placeholders(spec.system_template)

    def walk(value: Any) -> None:
        if isinstance(value, str):
            names.extend(placeholders(value))
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    walk(spec.graders or [])
    return list(dict.fromkeys(names))


def sample_key(seed: int, name: str) -> str:
    """The order a ``sample`` keeps records in: sha256 of the seed and the case name."""
    return hashlib.sha256(f"{seed}\0{name}".encode()).hexdigest()


def grouped_issues(found: Mapping[str, Sequence[str]], noun: str) -> list[str]:
    """One issue per distinct problem, at its first place, with how many more share it."""
    issues = []
    for problem, places in found.items():
        more = f" (and {len(places) - 1} more {noun})" if len(places) > 1 else ""
        issues.append(f"{places[0]}: {problem}{more}")
    return issues


def load_dataset(spec: DatasetSpec, base: Path, issues: list[str]) -> list[LocatedCase]:
    """The cases of one ``[[datasets]]`` entry (relative paths against ``base``)."""
    path = Path(spec.path).expanduser()
    path = path if path.is_absolute() else base / path
    where = spec.path
    built: list[LocatedCase] = []
    # The same problem on every record (a grader typo) is said once, with a count.
    found: dict[str, list[str]] = {}
    used = fields_used(spec)
    for record in read_records(path, issues, where):
        at = f"{where}:{record.line}"
        missing = [name for name in used if name not in record.values]
        if missing:
            names = ", ".join(repr(name) for name in missing)
            fields = ", ".join(record.values) or "none"
            plural = "s" if len(missing) > 1 else ""
            found.setdefault(f"no field{plural} {names} (the record has: {fields})", []).append(at)
            continue
        try:
            case = _case(spec, record, path.stem)
        except KeyError as missing_field:  # pragma: no cover - fields_used names every field
            found.setdefault(f"no field {missing_field.args[0]!r}", []).append(at)
            continue
        except ValidationError as exc:  # before ValueError: pydantic's is one
            for issue in validation_issues("", exc):
                found.setdefault(issue, []).append(at)
            continue
        except ValueError as exc:
            found.setdefault(str(exc), []).append(at)
            continue
        built.append(LocatedCase(case, at))
    issues.extend(grouped_issues(found, "records"))
    if spec.sample is not None and len(built) > spec.sample:
        chosen = sorted(built, key=lambda located: sample_key(spec.seed, located.case.name))
        keep = {id(located) for located in chosen[: spec.sample]}
        built = [located for located in built if id(located) in keep]
    return built


def _case(spec: DatasetSpec, record: Record, stem: str) -> Case:
    values = record.values
    fields = spec.fields
    name = _text(values[fields.name], fields.name) if fields.name else f"{stem}-{record.line}"
    if spec.prompt_template is not None:
        prompt = render_template(spec.prompt_template, values)
    else:
        prompt_field = fields.prompt or "prompt"
        prompt = _text(values[prompt_field], prompt_field)
    system = None
    if spec.system_template is not None:
        system = render_template(spec.system_template, values)
    elif fields.system is not None:
        system = _text(values[fields.system], fields.system)
    if spec.task_class is not None:
        task_class = spec.task_class
    else:
        assert spec.task_class_field is not None
        task_class = _text(values[spec.task_class_field], spec.task_class_field)
    if spec.graders is not None:
        graders: Sequence[Any] = _substituted(spec.graders, values)
    else:
        assert fields.expected is not None
        expected = _text(values[fields.expected], fields.expected)
        graders = [{"kind": "golden", "expected": expected, "match": "normalized"}]
    data: dict[str, Any] = {
        "name": name,
        "task_class": task_class,
        "prompt": prompt,
        "graders": graders,
    }
    if system is not None:
        data["system"] = system
    if spec.schema_ is not None:
        data["schema"] = spec.schema_
    return Case.model_validate(data)
