"""People's verdicts on answers: the labels file beside the store (SPEC 14.5).

``rulvar.models.labels.json`` holds one entry per labelled answer: which
night (``reportId``), which case, which model (``model[@effort]``) and
repeat, the person's verdict (``pass`` or ``fail``), why, who and when —
and, copied from that night's evidence, the answer's task class and what
each judge said about it (so agreement never needs the night again).
``kb label`` writes it through the commit window; the store's merge driver
merges it (every label of both sides is kept; when both sides labelled the
same answer, the later label wins).

A label is a correction, and corrections only apply forward (the seeds'
frozen grader contract): a label changes no committed claim. A sweep whose
night is observed after the label was recorded grades that case, on that model, by the
label (:func:`kb.sweep.plan.labelled_case`): the case's graders give way to a
:class:`~kb.evals.cases.LabelGrader`, so the cell's suite fingerprint
changes and its epoch starts over. ``kb judges`` compares each label with
what the judges said about the same answer (:mod:`kb.judging`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from kb.atomicfile import write_atomic
from kb.errors import ConfigError
from kb.sidefile import SideFormat
from kb.store.layout import conflict_lines
from kb.store.merge import read_sides
from kb.store.ttl import format_instant, stored_instant
from kb.store.wire import WireModel

LABELS = SideFormat("labels")
WHY_MAX = 500
"""The longest ``--why`` (a label's reason) kb keeps."""
LabelVerdict = Literal["pass", "fail"]


class Label(WireModel):
    """A person's verdict on one answer of one night."""

    report_id: str = Field(alias="reportId", min_length=1)
    case: str = Field(min_length=1)
    model: str = Field(min_length=1)
    """The subject key, ``model`` or ``model@effort``."""
    repeat: int | None = Field(default=None, ge=1)
    """Which repeat (from 1) when the night ran the case more than once (absent: the first)."""
    verdict: LabelVerdict
    why: str | None = Field(default=None, max_length=WHY_MAX)
    labelled_at: str = Field(alias="labelledAt")
    by: str = Field(min_length=1)
    task_class: str = Field(alias="taskClass", min_length=1)
    judges: dict[str, bool | None] = Field(default_factory=dict)
    """What each judge said about the answer (judge key → its verdict; ``null``: unscored),
    copied from the night's evidence when the label was recorded: ``kb judges`` reads
    agreement from the labels file alone, however big the nights or wherever they went."""

    @field_validator("labelled_at")
    @classmethod
    def _instant(cls, value: str) -> str:
        stored_instant(value)  # raises ValueError for what is not an instant
        return value

    @property
    def answer(self) -> tuple[str, str, str, int]:
        """Which answer it labels: report, case, model and repeat (0-based)."""
        return (self.report_id, self.case, self.model, (self.repeat or 1) - 1)

    @property
    def instant(self) -> int:
        """When it was recorded (ms)."""
        return stored_instant(self.labelled_at)


class LabelsFile(WireModel):
    """The whole file."""

    format: int = LABELS.current
    labels: tuple[Label, ...] = ()

    def render(self) -> bytes:
        """Deterministic JSON: labels sorted by answer then time, two-space indent."""
        from kb.store.canonical import js_stringify

        ordered = sorted(self.labels, key=_order)
        wire = {**self.to_wire(), "labels": [label.to_wire() for label in ordered]}
        return (js_stringify(wire, indent=2) + "\n").encode("utf-8")

    def with_labels(self, added: Iterable[Label]) -> LabelsFile:
        """The file with ``added``; a new label of an answer replaces its earlier one."""
        found = {label.answer: label for label in self.labels}
        for label in added:
            found[label.answer] = label
        return LabelsFile(labels=tuple(sorted(found.values(), key=_order)))

    def grading(self, observed_at: int) -> dict[tuple[str, str], Label]:
        """What grades each (model, case) on a night at ``observed_at``: its newest label.

        Only labels recorded before the night count (corrections apply forward).
        """
        found: dict[tuple[str, str], Label] = {}
        for label in sorted(self.labels, key=lambda lb: (lb.instant, _order(lb))):
            if label.instant < observed_at:
                found[(label.model, label.case)] = label
        return found


def _order(label: Label) -> tuple[str, str, str, int, str]:
    report, case, model, repeat = label.answer
    return (model, case, report, repeat, label.labelled_at)


def parse_labels(data: bytes | None, source: str) -> LabelsFile:
    """The labels file's bytes (``None``: no file yet, no labels)."""
    if data is None:
        return LabelsFile()
    markers = conflict_lines(data.decode("utf-8", "replace"))
    if markers:
        raise ConfigError(
            source,
            f"unresolved git merge conflict (markers at lines {markers[0]}-{markers[-1]}): "
            "take one side (git checkout --ours or --theirs), then kb label the other side's "
            "labels again; kb merge-driver --install lets the next merge keep both",
        )
    return LABELS.load_as(data, source, LabelsFile)


def read_labels(path: Path) -> LabelsFile:
    """The labels file at ``path`` (empty when absent)."""
    return parse_labels(LABELS.read_bytes(path), str(path))


def merge_labels(base: LabelsFile, ours: LabelsFile, theirs: LabelsFile) -> LabelsFile:
    """Every label of both sides; one answer labelled on both keeps the later label.

    Labels are never removed, so the base only matters as a side that may
    hold what neither removed: the union covers it. Equal times fall to the
    larger rendering, so both merge orders give the same file.
    """
    found: dict[tuple[str, str, str, int], Label] = {}
    for label in (*base.labels, *ours.labels, *theirs.labels):
        held = found.get(label.answer)
        if held is None or _newer(label, held):
            found[label.answer] = label
    return LabelsFile(labels=tuple(sorted(found.values(), key=_order)))


def _newer(one: Label, two: Label) -> bool:
    if one.instant != two.instant:
        return one.instant > two.instant
    return json.dumps(one.to_wire(), sort_keys=True) > json.dumps(two.to_wire(), sort_keys=True)


def merge_labels_files(base: Path, ours: Path, theirs: Path, name: str) -> int:
    """Git's merge driver for the labels file: merge into ``ours`` in place.

    Returns how many labels came from theirs. A side that cannot be read
    leaves git's textual merge and raises :class:`MergeConflict`.
    """
    was, mine, other = read_sides(
        base, ours, theirs, name, lambda p: read_labels(p) if p.stat().st_size else LabelsFile()
    )
    merged = merge_labels(was, mine, other)
    write_atomic(ours, merged.render())
    return sum(1 for label in merged.labels if label not in mine.labels)


@dataclass(frozen=True)
class LabelRequest:
    """What a person says about one answer (``kb label`` arguments, or a line of ``--from``)."""

    report_id: str
    case: str
    model: str
    """The subject key as reports print it (``model`` or ``model@effort``)."""
    verdict: LabelVerdict
    why: str | None = None
    repeat: int | None = None
    """From 1; ``None``: the first (or only) run of the case that night."""
    where: str | None = None
    """Where it was written (``FILE:LINE`` of ``--from``), for messages."""

    def __post_init__(self) -> None:
        if self.why is not None and len(self.why) > WHY_MAX:
            raise ConfigError(
                self.where or "--why", f"why: at most {WHY_MAX} characters (got {len(self.why)})"
            )

    def label(
        self, labelled_at: int, by: str, task_class: str, judges: Mapping[str, bool | None]
    ) -> Label:
        """The label as the file keeps it, with the answer's task class and judges' verdicts."""
        return Label(
            report_id=self.report_id,
            case=self.case,
            model=self.model,
            repeat=self.repeat if self.repeat not in (None, 1) else None,
            verdict=self.verdict,
            why=self.why or None,
            labelled_at=format_instant(labelled_at),
            by=by,
            task_class=task_class,
            judges=dict(judges),
        )


_REQUEST_KEYS = {"reportId", "case", "model", "verdict", "why", "repeat"}


def parse_label_requests(data: bytes, source: str) -> list[LabelRequest]:
    """``--from FILE``: one JSON object a line, ``{reportId, case, model, verdict, why?, repeat?}``.

    Every line is checked before any is used; the issues name their lines.
    """
    found: list[LabelRequest] = []
    issues: list[str] = []
    seen: dict[tuple[str, str, str, int], int] = {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(source, "is not UTF-8 text") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            issues.append(f"line {number}: not JSON ({exc})")
            continue
        issue = _request_issue(item)
        if issue is not None:
            issues.append(f"line {number}: {issue}")
            continue
        answer = (item["reportId"], item["case"], item["model"], item.get("repeat") or 1)
        if answer in seen:
            issues.append(f"line {number}: labels the same answer as line {seen[answer]}")
            continue
        seen[answer] = number
        found.append(
            LabelRequest(
                item["reportId"],
                item["case"],
                item["model"],
                item["verdict"],
                item.get("why"),
                item.get("repeat"),
                f"{source}:{number}",
            )
        )
    if issues:
        raise ConfigError(source, issues)
    if not found:
        raise ConfigError(source, "holds no labels (one JSON object a line)")
    return found


def _request_issue(item: object) -> str | None:
    if not isinstance(item, dict):
        return "must be a JSON object"
    unknown = sorted(set(item) - _REQUEST_KEYS)
    if unknown:
        return f"unknown key {unknown[0]!r} (known: {', '.join(sorted(_REQUEST_KEYS))})"
    for key in ("reportId", "case", "model"):
        if not isinstance(item.get(key), str) or not item[key]:
            return f"{key}: must be a non-empty string"
    if item.get("verdict") not in ("pass", "fail"):
        return 'verdict: must be "pass" or "fail"'
    if not isinstance(item.get("why", ""), str | None):
        return "why: must be a string"
    if len(item.get("why") or "") > WHY_MAX:
        return f"why: at most {WHY_MAX} characters"
    repeat = item.get("repeat", 1)
    if repeat is not None and (
        isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1
    ):
        return "repeat: must be a whole number from 1"
    return None
