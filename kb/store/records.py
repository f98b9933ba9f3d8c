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
import math
import re
from collections.abc import Sequence
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

EVIDENCE_FORMAT = SideFormat("evidence", current=4, older=(1, 2, 3), absent=1)
"""Reports and runs files: format 3 since v5, 2 since v2; a file without ``format`` is format 1."""
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
    """What one grader said about one answer.

    Format 4: ``passed`` is ``null`` when the answer is unscored (a judge's
    reply that is not ``{passed, reason}``, a panel's tie): no verdict, not a
    fail. A judge run's record carries that judge's own verdict.
    """

    KEEP_NULL: ClassVar[frozenset[str]] = frozenset({"passed"})

    grader: str
    passed: bool | None
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
        return (
            self.status == "ok"
            and bool(self.verdicts)
            and all(v.passed is True for v in self.verdicts)
        )

    @property
    def unscored(self) -> bool:
        """Settled ok, and no grader failed it, but one gave no verdict (format 4)."""
        return (
            self.status == "ok"
            and any(v.passed is None for v in self.verdicts)
            and not any(v.passed is False for v in self.verdicts)
        )

    @property
    def verdict_word(self) -> str:
        """``PASS``, ``FAIL``, ``UNSCORED``, else the status in capitals."""
        if self.status != "ok":
            return self.status.upper()
        return "UNSCORED" if self.unscored else "PASS" if self.passed else "FAIL"

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
    unscored_n: int | None = Field(default=None, alias="unscoredN")
    """Format 4: cases left unscored (out of ``n``; more than 5 % is judge-incomplete)."""
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

    @property
    def retired_beliefs(self) -> tuple[str, ...]:
        """Claims the night retired as beliefs: archived (falsified, stale) or flipped stale.

        A claim superseded by tonight's claim of the same cell is a re-measurement
        (kb supersedes only with the same polarity), not a retired belief: see
        :attr:`remeasured`, counted apart as ``kb diff`` does.
        """
        found = [r.claim_id for r in self.retired if r.action == "archived"]
        found += [claim_id for entry in self.canary for claim_id in entry.flipped]
        return tuple(dict.fromkeys(found))

    @property
    def remeasured(self) -> tuple[str, ...]:
        """Claims renewed by tonight's claim with the same belief (superseded)."""
        return tuple(r.claim_id for r in self.retired if r.action == "superseded")

    def with_runs(self, runs: Sequence[RunRecord]) -> ReportFile:
        """The report with its runs (what ``--json`` prints)."""
        return self.model_copy(update={"runs": tuple(runs)})

    def render(self) -> bytes:
        """The report file: this report without its runs, two-space indented."""
        wire = self.to_wire()
        wire.pop("runs", None)
        return (js_stringify(wire, indent=2) + "\n").encode("utf-8", "surrogatepass")


# -- reading and writing -----------------------------------------------------------------------


def validated(model: type[WireModel], data: Any, where: str) -> Any:
    """``data`` as ``model`` (an evidence file's object), or one ``ConfigError``."""
    if not isinstance(data, dict):
        raise ConfigError(where, f"must be a JSON object, got {type(data).__name__}")
    EVIDENCE_FORMAT.check(data, where)
    try:
        return model.model_validate({"format": EVIDENCE_FORMAT.version(data), **data})
    except ValidationError as exc:
        raise ConfigError(where, validation_issues("", exc)) from None


def parse_report(data: bytes, source: str) -> ReportFile:
    """A report file (format 1, 2 or 3)."""
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    report: ReportFile = validated(ReportFile, parse_json(text, source), source)
    return report
