"""The evidence files as types: one model per shape, read and written by the same classes.

A committing sweep writes two files per report beside the store (see
:mod:`kb.store.evidence`): ``<report>.jsonl``, one :class:`RunRecord` per
line, and ``<report>.report.json``, one :class:`ReportFile`. The ``--json``
report is the same :class:`ReportFile` with its ``runs``. Every reader —
``kb report``, ``kb show``, the HTML, the trends, compaction, ``kb diff`` —
validates into these models, so a field is named, typed and documented
once.

**Formats.** Each file carries a ``format`` number. Format 1 is what kb v2
wrote (no ``format`` key; ``tests/data/format1`` holds files made by v2);
format 2 (this kb) adds to every run what was asked: the request text, the
effective params, token usage, where the price came from and the case's
fingerprint. Format 3 (v5) changes only how a runs file is laid out, for a
team's year in git (SPEC 14.3): its lines are in case order (canary probes,
then task class by task class, case by case, each case's target runs before
their judges, run label by run label), and a run whose request is the
one an earlier line of the same case and kind carries says
``"sameRequest": true`` instead of repeating it, so the request text is
written once per case and night, and git's deltas between two nights find
each case's lines together. A reader fills the request back in: a record
read from any format is whole. A reader accepts formats 1, 2 and 3 and
refuses a newer one with a line that says so. Unknown keys are refused: a
typo in a hand-made file fails loudly instead of reading as absent.

**Wire form.** camelCase keys; optional keys are omitted when they do not
apply (never ``null``), except the few whose ``null`` means something
(``taskClass`` of a canary probe, ``latencyMs`` of a run that never started,
``worstCaseUsd`` of an unbounded sweep). Numbers print as JavaScript prints
them (``1``, not ``1.0``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Literal

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from kb.errors import ConfigError
from kb.schema import subject_key, validation_issues
from kb.sidefile import SideFormat, parse_json
from kb.stats import wilson_interval
from kb.store.canonical import js_stringify, to_fixed_2
from kb.store.wire import WireModel

EVIDENCE_FORMAT = SideFormat("evidence", current=3, older=(1, 2), absent=1)
"""Reports and runs files: format 3 since v5, 2 since v2; a file without ``format`` is format 1."""
SAME_REQUEST = "sameRequest"
"""Format 3 runs files: the request is the one the case's earlier line of this kind carries."""
FORMAT = EVIDENCE_FORMAT.current
"""The format this kb writes."""
TEXT_LIMIT = 4000
"""Outputs and request texts longer than this are cut and carry the sha256 of the full text."""

RunKind = Literal["target", "judge", "canary"]
PriceSource = Literal["litellm", "declared", "unpriced"]


def cut_text(text: str) -> tuple[str, str | None]:
    """``text`` up to :data:`TEXT_LIMIT` characters, and the full text's sha256 when cut."""
    if len(text) <= TEXT_LIMIT:
        return text, None
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return text[:TEXT_LIMIT], digest


# -- one run ---------------------------------------------------------------------------


class Verdict(WireModel):
    """What one grader said about one answer."""

    grader: str
    passed: bool
    score: float | None = None
    reason: str


class RequestRecord(WireModel):
    """What was asked: the system and user text (each cut at 4,000 characters)."""

    system: str | None = None
    system_sha256: str | None = Field(default=None, alias="systemSha256")
    user: str
    user_sha256: str | None = Field(default=None, alias="userSha256")


class UsageRecord(WireModel):
    """Token counts as the provider reported them."""

    prompt_tokens: int = Field(alias="promptTokens")
    completion_tokens: int = Field(alias="completionTokens")


class RunRecord(WireModel):
    """One line of ``<report>.jsonl``: one settled run (target, judge or canary probe)."""

    KEEP_NULL: ClassVar[frozenset[str]] = frozenset({"taskClass", "latencyMs"})

    format: int = FORMAT
    kind: RunKind
    label: str
    model: str
    effort: str | None = None
    case: str
    """The case name; for a canary probe, the probe prompt."""
    task_class: str | None = Field(alias="taskClass")
    """``None`` for a canary probe."""
    repeat: int
    status: Literal["ok", "exhausted", "error", "cancelled", "refused"]
    output: str
    """The answer (secrets cut), at most 4,000 characters."""
    output_sha256: str | None = Field(default=None, alias="outputSha256")
    """The full answer's sha256, when it was cut."""
    verdicts: tuple[Verdict, ...] = ()
    cost_usd: float = Field(alias="costUsd")
    latency_ms: float | None = Field(alias="latencyMs")
    attempts: int
    error: str | None = None
    request: RequestRecord | None = None
    """Format 2: what was asked."""
    params: dict[str, Any] | None = None
    """Format 2: the params the call was made with (secrets cut)."""
    usage: UsageRecord | None = None
    """Format 2: tokens."""
    price_source: PriceSource | None = Field(default=None, alias="priceSource")
    """Format 2: ``litellm`` (its price table), ``declared`` (the spec's price) or ``unpriced``."""
    case_fingerprint: str | None = Field(default=None, alias="caseFingerprint")
    """Format 2: the sha256 of the case as it was run (target and judge runs)."""
    expected: str | None = None
    """Format 2, since v3: what the case's graders take as a pass, in words (target runs;
    secrets cut, at most 4,000 characters). Older files lack it."""
    batch: str | None = None
    """Format 2, since v3: the provider's batch id when the run went in a batch (batch
    mode); absent for a live call."""

    @field_validator("cost_usd")
    @classmethod
    def _a_cost(cls, value: float) -> float:
        if not math.isfinite(value) or value < 0:
            raise ValueError("must be a finite nonnegative number of USD")
        return value

    @model_validator(mode="after")
    def _as_written(self) -> RunRecord:
        if len(self.output) > TEXT_LIMIT and self.output_sha256 is None:
            raise ValueError(
                f"output is longer than {TEXT_LIMIT:,} characters without outputSha256 "
                "(kb cuts it and records the full text's hash)"
            )
        newer = [
            name
            for name, value in (
                ("request", self.request),
                ("params", self.params),
                ("usage", self.usage),
                ("priceSource", self.price_source),
                ("caseFingerprint", self.case_fingerprint),
                ("batch", self.batch),
            )
            if value is not None
        ]
        if self.format == 1 and newer:
            raise ValueError(
                f"a format-1 record cannot hold {', '.join(newer)} (format 2 fields: "
                'add "format": 2)'
            )
        return self

    @property
    def subject_key(self) -> str:
        """``model`` or ``model@effort``."""
        return subject_key(self.model, self.effort)

    @property
    def passed(self) -> bool:
        """Settled ok and every grader passed."""
        return self.status == "ok" and bool(self.verdicts) and all(v.passed for v in self.verdicts)

    @property
    def judged(self) -> str | None:
        """For a judge run, the subject key of the target answer it judged (else ``None``).

        A judge's label is ``judge:<subject>/<case>[#repeat]/<grader index>``
        (:mod:`kb.evals.suite`); ``case`` is known, so a subject or case name
        holding ``/`` or ``#`` is still read right.
        """
        if self.kind != "judge" or not self.label.startswith("judge:"):
            return None
        head = self.label.removeprefix("judge:").rpartition("/")[0]
        tail = f"/{self.case}"
        if not head.endswith(tail):
            head = re.sub(r"#[0-9]+$", "", head)
        return head[: -len(tail)] if head.endswith(tail) and len(head) > len(tail) else None


# -- one report ------------------------------------------------------------------------


class GateRecord(WireModel):
    """The gate the sweep's claims passed through."""

    kind: Literal["interval", "point"]
    tolerance: float
    strength: float
    weakness: float

    @property
    def strength_floor(self) -> float:
        """The lowest 95 % lower bound a strength needs (the interval gate)."""
        return self.strength - self.tolerance

    @property
    def weakness_ceiling(self) -> float:
        """The highest 95 % upper bound a weakness allows (the interval gate)."""
        return self.weakness + self.tolerance

    def describe(self) -> str:
        """The rule in one sentence (the HTML report's legend)."""
        if self.kind == "point":
            return (
                f"point gate: strength at pass rate ≥ {self.strength}, weakness ≤ {self.weakness}"
            )
        return (
            "interval gate: strength when the 95% interval's lower bound ≥ "
            f"{to_fixed_2(self.strength_floor)}, weakness when its upper bound ≤ "
            f"{to_fixed_2(self.weakness_ceiling)}"
        )


class PoolRecord(WireModel):
    """Who was in the pool, why, and whether it was measured."""

    model: str
    origin: str
    measured: bool
    skipped: str | None = None


class CaseStability(WireModel):
    """A repeated case: how many of its runs passed."""

    name: str
    passes: int
    runs: int
    stability: Literal["stable-pass", "flaky", "stable-fail", "unmeasured"]


class PriorStands(WireModel):
    """An earlier claim of the cell that the sweep left in place."""

    claim_id: str = Field(alias="claimId")
    polarity: str
    status: str


class EpochRecord(WireModel):
    """Format 2: a cell's epoch after the night (the interval gate decides on it)."""

    reason: Literal["first", "suite", "drift", "alarm", "manual", "resync"]
    """Why the epoch began."""
    started_at: str = Field(alias="startedAt")
    started_in: str = Field(alias="startedIn")
    """The report of the night it began."""
    nights: int
    n: int
    """Distinct cases the epoch measured."""
    pass_rate: float = Field(alias="passRate")
    """The mean of its cases' mean scores."""
    down: float
    up: float
    """The drop and rise detectors after the night."""
    alarm: Literal["down", "up"] | None = None
    """The detector that alarmed tonight (and retired the claim it watched)."""
    pool: int
    """Cases the epoch draws from."""
    ran: int
    """Distinct cases the cell ran tonight."""
    why: str
    """Why it ran that many."""


class CellRecord(WireModel):
    """One (member, task class) cell of a report."""

    model: str
    effort: str | None = None
    task_class: str = Field(alias="taskClass")
    pass_rate: float = Field(alias="passRate")
    n: int
    planned_n: int = Field(alias="plannedN")
    total_cost_usd: float | None = Field(default=None, alias="totalCostUsd")
    """Absent (format 2) when a run was unpriced: the cost is unknown, never a sum of $0s."""
    case_names: tuple[str, ...] = Field(alias="caseNames")
    unpriced_runs: int | None = Field(default=None, alias="unpricedRuns")
    """Format 2: runs nobody could price (the cell's cost is unknown, never $0)."""
    exhausted_runs: int | None = Field(default=None, alias="exhaustedRuns")
    non_ok_runs: int | None = Field(default=None, alias="nonOkRuns")
    judge_incomplete_runs: int | None = Field(default=None, alias="judgeIncompleteRuns")
    envelope_exhausted: bool | None = Field(default=None, alias="envelopeExhausted")
    refused_run_label: str | None = Field(default=None, alias="refusedRunLabel")
    incomplete_reason: str | None = Field(default=None, alias="incompleteReason")
    suspect: str | None = None
    """Format 2: why the answers look like an outage, not a model (the cell is incomplete)."""
    first_error: str | None = Field(default=None, alias="firstError")
    wilson95: tuple[float, float]
    """The 95 % interval the interval gate used (cases as the unit of sampling); an
    incomplete cell's is over tonight's measured cases, like its ``passRate``."""
    repeats: int | None = None
    cases: tuple[CaseStability, ...] | None = None
    outcome: Literal["strength", "weakness", "none", "incomplete"]
    claim_id: str | None = Field(default=None, alias="claimId")
    prior_stands: tuple[PriorStands, ...] | None = Field(default=None, alias="priorStands")
    epoch: EpochRecord | None = None
    """Format 2, interval gate: the cell's epoch after the night (``passRate``, ``n``,
    ``plannedN`` and ``caseNames`` are tonight's; ``wilson95`` is the epoch's)."""
    newer_night: str | None = Field(default=None, alias="newerNight")
    """The store already held a newer night of this cell when this one committed (its
    report id): this night claimed and retired nothing there (``outcome`` is what it
    measured; ``epoch`` is left out: the newer night's epoch is the cell's)."""

    @field_validator("total_cost_usd")
    @classmethod
    def _a_total(cls, value: float | None) -> float | None:
        if value is not None and (not math.isfinite(value) or value < 0):
            raise ValueError("must be a finite nonnegative number of USD (or null: unpriced)")
        return value

    @property
    def subject_key(self) -> str:
        """``model`` or ``model@effort``."""
        return subject_key(self.model, self.effort)

    @property
    def complete(self) -> bool:
        """The cell could claim (whatever it earned)."""
        return self.outcome != "incomplete"

    @property
    def shown_rate(self) -> float:
        """The pass rate the cell is judged by: its epoch's pooled estimate, else tonight's."""
        return self.epoch.pass_rate if self.epoch is not None else self.pass_rate

    @property
    def answered_estimate(self) -> tuple[float, tuple[float, float]] | None:
        """An incomplete cell's pass rate over the cases that answered tonight, and its interval.

        The interval is Wilson's over the same answered cases, so it always holds the
        rate (the epoch's pooled interval need not: an incomplete night is not part of
        its epoch). ``None`` when nothing answered, or when the answers look like an
        outage (``suspect``): there is no rate to show then, never a bare 0.00.
        """
        if self.n == 0 or self.suspect:
            return None
        successes = min(float(self.n), max(0.0, self.pass_rate * self.n))
        return self.pass_rate, wilson_interval(successes, self.n)


class RetiredRecord(WireModel):
    """A prior claim the sweep retired."""

    claim_id: str = Field(alias="claimId")
    action: Literal["superseded", "archived"]
    by: str | None = None
    reason: str | None = None


class ProbeRecord(WireModel):
    """One canary probe's status."""

    prompt: str
    status: str


class ShiftProbeRecord(WireModel):
    """One border probe of the sensitive tier tonight."""

    probe: str
    """The probe's id (16 hex of its prompt's sha256: the prompt may be private)."""
    counts: dict[str, int]
    """Tonight's first-word answers and how often each came."""
    p_value: float | None = Field(default=None, alias="pValue")
    failed: str | None = None
    logprob_p_value: float | None = Field(default=None, alias="logprobPValue")
    """Since the logprob readings: their test's p-value (absent: not tested)."""
    logprob_distance: float | None = Field(default=None, alias="logprobDistance")
    """How far tonight's mean first-token top-k moved from the baseline's (0-1)."""


class SensitiveRecord(WireModel):
    """The canary's sensitive tier for one model tonight (SPEC 13.4)."""

    status: Literal["steady", "shift", "uncalibrated", "incomplete"]
    alpha: float
    probe: str | None = None
    """The probe that alarmed (``shift``)."""
    p_value: float | None = Field(default=None, alias="pValue")
    """Its p-value (``shift``)."""
    line: str
    """What the tier saw, in words (as the sweep prints it)."""
    probes: tuple[ShiftProbeRecord, ...] = ()


class CanaryRecord(WireModel):
    """One member's canary (``kb canary --json`` prints a list of these)."""

    model: str
    effort: str | None = None
    fingerprint: str
    all_ok: bool = Field(alias="allOk")
    probes: tuple[ProbeRecord, ...]
    status: Literal["no-drift", "drift", "rebaselined", "incomplete", "unstable"]
    reason: str | None = None
    """Format 2: why the canary could not judge (``incomplete``, ``unstable``)."""
    flipped: tuple[str, ...] = ()
    version: int | None = None
    sensitive: SensitiveRecord | None = None
    """Since v4: the sensitive tier (absent when the canary has no ``[sensitive]``)."""

    @property
    def subject_key(self) -> str:
        """``model`` or ``model@effort``."""
        return subject_key(self.model, self.effort)

    @property
    def shifted(self) -> bool:
        """The sensitive tier saw the answer distribution move tonight."""
        return self.sensitive is not None and self.sensitive.status == "shift"


class ReportFile(WireModel):
    """``<report>.report.json``, and (with ``runs``) the sweep's ``--json`` report."""

    KEEP_NULL: ClassVar[frozenset[str]] = frozenset({"worstCaseUsd"})

    format: int = FORMAT
    report_id: str = Field(alias="reportId")
    observed_at: str = Field(alias="observedAt")
    gate: GateRecord
    pool: tuple[PoolRecord, ...]
    worst_case_usd: float | None = Field(alias="worstCaseUsd")
    """The worst-case authorized spend (``None``: unbounded)."""
    spent_usd: float = Field(alias="spentUsd")
    cells: tuple[CellRecord, ...]
    claims: tuple[dict[str, Any], ...]
    """The claims the sweep emitted, exactly as the store holds them."""
    retired: tuple[RetiredRecord, ...]
    canary: tuple[CanaryRecord, ...]
    committed_version: int | None = Field(default=None, alias="committedVersion")
    reused_runs: int | None = Field(default=None, alias="reusedRuns")
    """Format 2: runs a resumed sweep served from its journal (paid by the stopped one)."""
    run_count: int | None = Field(default=None, alias="runCount")
    """Format 2: how many records the runs file holds (a cut file is caught on reading)."""
    runs_sha256: str | None = Field(default=None, alias="runsSha256")
    """Format 2: the sha256 of the runs file's bytes (an edited file is caught on reading)."""
    runs: tuple[RunRecord, ...] | None = None
    """Every run (``--json`` only; the file keeps them in ``<report>.jsonl``)."""

    def incomplete_line(self) -> str | None:
        """The failing line of a report with incomplete cells (``None``: every cell complete)."""
        cells = self.cells
        broken = [cell for cell in cells if cell.outcome == "incomplete"]
        if not broken:
            return None
        first = broken[0]
        cause = first.incomplete_reason or "nothing measured"
        if first.first_error:
            cause += f"; first error: {first.first_error}"
        complete = len(cells) - len(broken)
        cells_are = (
            "the complete cell is" if complete == 1 else f"the {complete} complete cells are"
        )
        committed = (
            f"{cells_are} committed (store v{self.committed_version})"
            if self.committed_version is not None
            else "nothing was committed"
        )
        return (
            f"{len(broken)} of {len(cells)} cells incomplete, e.g. {first.subject_key} "
            f"{first.task_class}: {cause}; {committed}"
        )

    def with_runs(self, runs: Sequence[RunRecord]) -> ReportFile:
        """The report with its runs (what ``--json`` prints)."""
        return self.model_copy(update={"runs": tuple(runs)})

    def render(self) -> bytes:
        """The report file: this report without its runs, two-space indented."""
        wire = self.to_wire()
        wire.pop("runs", None)
        return (js_stringify(wire, indent=2) + "\n").encode("utf-8", "surrogatepass")


# -- reading and writing -----------------------------------------------------------------------


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
        if "request" in value:
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


def _validated(model: type[WireModel], data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(where, f"must be a JSON object, got {type(data).__name__}")
    EVIDENCE_FORMAT.check(data, where)
    try:
        return model.model_validate({"format": EVIDENCE_FORMAT.version(data), **data})
    except ValidationError as exc:
        raise ConfigError(where, validation_issues("", exc)) from None


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
            records.append(_validated(RunRecord, value, "record"))
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


def parse_report(data: bytes, source: str) -> ReportFile:
    """A report file (format 1 or 2)."""
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    report: ReportFile = _validated(ReportFile, parse_json(text, source), source)
    return report
