"""Evidence a reviewer can open: every run of a sweep, as data.

A committing sweep writes, beside the store and in the same git commit,

* ``kb-evidence/<reportId>.jsonl`` — one JSON object per run: ``kind``
  (``target``, ``judge``, ``canary``), ``label``, ``model``, ``effort?``,
  ``case``, ``taskClass``, ``repeat``, ``status``, ``output`` (the full text
  up to 4,000 characters; a longer one is cut and carries ``outputSha256`` of
  the full text), ``verdicts`` (``[{grader, passed, score?, reason}]``),
  ``costUsd``, ``latencyMs``, ``attempts``, ``error?``;
* ``kb-evidence/<reportId>.report.json`` — the sweep's ``--json`` report
  without its ``runs`` (cells, claims, retirements, canary, pool, gate).

Together they are the one source ``kb show``, ``kb report`` and the HTML read.
Secrets are cut from every output and error (known keys, key-shaped tokens,
the environment's credentials). A canary record's ``case`` is its probe
prompt and its ``taskClass`` is ``null``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kb.canary import CanaryResult
from kb.engine.requests import ModelSpec, scrub_secrets, secret_values
from kb.engine.runs import RunResult
from kb.evals.graders import Grade
from kb.store.canonical import js_stringify
from kb.store.filestore import KnowledgeStore
from kb.sweep.cells import SweepCell
from kb.sweep.html import CellPoint, History, subject_key_of

OUTPUT_LIMIT = 4000
DEFAULT_EVIDENCE_DIR = "kb-evidence"


def evidence_stem(report_id: str) -> str:
    """The file name stem for a report id (a ``/`` in the id cannot be a path separator)."""
    return report_id.replace("%", "%25").replace("/", "%2F")


def evidence_paths(directory: Path, report_id: str) -> tuple[Path, Path]:
    """The runs file and the report file of ``report_id`` in ``directory``."""
    stem = evidence_stem(report_id)
    return directory / f"{stem}.jsonl", directory / f"{stem}.report.json"


@dataclass(frozen=True)
class EvidenceContext:
    """What every record needs besides its run: which secrets to cut."""

    secrets: tuple[str, ...]

    @classmethod
    def of(cls, models: Iterable[ModelSpec]) -> EvidenceContext:
        """Every secret any of ``models`` carries in its params."""
        found: list[str] = []
        for model in models:
            found += secret_values(model.params)
        return cls(tuple(dict.fromkeys(found)))

    def cut(self, text: str) -> str:
        """``text`` without secrets."""
        return scrub_secrets(text, self.secrets)


def _verdict(grade: Grade) -> dict[str, Any]:
    entry: dict[str, Any] = {"grader": grade.grader_id, "passed": grade.passed}
    if grade.score is not None:
        entry["score"] = grade.score
    entry["reason"] = grade.detail
    return entry


def run_record(
    run: RunResult,
    *,
    kind: str,
    model: ModelSpec,
    case: str,
    task_class: str | None,
    repeat: int,
    verdicts: Sequence[Grade],
    context: EvidenceContext,
) -> dict[str, Any]:
    """One line of the evidence file."""
    record: dict[str, Any] = {"kind": kind, "label": run.label, "model": model.ref}
    if model.effort:
        record["effort"] = model.effort
    output = context.cut(run.output or "")
    record.update(case=case, taskClass=task_class, repeat=repeat, status=run.status, output=output)
    if len(output) > OUTPUT_LIMIT:
        record["output"] = output[:OUTPUT_LIMIT]
        record["outputSha256"] = hashlib.sha256(output.encode("utf-8", "surrogatepass")).hexdigest()
    latency = run.latency_ms
    record.update(
        verdicts=[_verdict(grade) for grade in verdicts],
        costUsd=run.cost_usd,
        latencyMs=round(latency, 1) if latency is not None else None,
        attempts=run.attempts,
    )
    if run.error:
        record["error"] = context.cut(run.error)
    return record


def cell_records(cell: SweepCell, context: EvidenceContext) -> list[dict[str, Any]]:
    """The target runs of a cell and the judge runs behind their verdicts, in plan order."""
    records = []
    for verdict in cell.verdicts:
        repeat = verdict.repeat or 0
        records.append(
            run_record(
                verdict.target,
                kind="target",
                model=cell.member,
                case=verdict.name,
                task_class=cell.task_class,
                repeat=repeat,
                verdicts=verdict.grades,
                context=context,
            )
        )
        for judge, spec in zip(verdict.judges, verdict.judge_models, strict=True):
            records.append(
                run_record(
                    judge,
                    kind="judge",
                    model=spec,
                    case=verdict.name,
                    task_class=cell.task_class,
                    repeat=repeat,
                    verdicts=(),
                    context=context,
                )
            )
    return records


def canary_records(
    canaries: Sequence[CanaryResult], context: EvidenceContext
) -> list[dict[str, Any]]:
    """Every canary probe run (each repeat)."""
    return [
        run_record(
            run,
            kind="canary",
            model=canary.member,
            case=probe.prompt,
            task_class=None,
            repeat=index,
            verdicts=(),
            context=context,
        )
        for canary in canaries
        for probe in canary.probes
        for index, run in enumerate(probe.runs)
    ]


def render_runs(records: Sequence[Mapping[str, Any]]) -> bytes:
    """The JSONL file: one compact object per line, numbers as JavaScript prints them."""
    return "".join(js_stringify(record) + "\n" for record in records).encode(
        "utf-8", "surrogatepass"
    )


def render_report(report: Mapping[str, Any]) -> bytes:
    """The report file: the ``--json`` report without ``runs``."""
    body = {key: value for key, value in report.items() if key != "runs"}
    return (js_stringify(body, indent=2) + "\n").encode("utf-8", "surrogatepass")


def parse_runs(data: bytes) -> list[dict[str, Any]]:
    """Records of an evidence file (lines that are not JSON objects are skipped)."""
    records = []
    for line in data.decode("utf-8", "surrogatepass").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


@dataclass(frozen=True)
class LoadedEvidence:
    """A past report's evidence, and where it was found."""

    body: dict[str, Any] | None
    """The report file (``None`` when only the runs were found)."""
    runs: list[dict[str, Any]]
    source: str
    """``the work tree`` or ``git <commit>``."""

    def report(self) -> dict[str, Any] | None:
        """The ``--json`` report again: the body with its runs."""
        if self.body is None:
            return None
        return {**self.body, "runs": self.runs}


def evidence_directory(store: KnowledgeStore, directory: Path | None = None) -> Path:
    """Where a store's evidence lives (``directory`` when given)."""
    return directory if directory is not None else store.path.parent / DEFAULT_EVIDENCE_DIR


def load_evidence(
    store: KnowledgeStore, report_id: str, directory: Path | None = None
) -> LoadedEvidence | None:
    """A report's evidence from the work tree, else from git history (``None``: nowhere)."""
    runs_path, report_path = evidence_paths(evidence_directory(store, directory), report_id)
    if runs_path.is_file():
        body = json.loads(report_path.read_text("utf-8")) if report_path.is_file() else None
        return LoadedEvidence(body, parse_runs(runs_path.read_bytes()), "the work tree")
    git = store.git
    found = git.last_version_of(runs_path) if git is not None else None
    if git is None or found is None:
        return None
    commit, data = found
    blob = git.blob_in_path(commit, git.rel_of(report_path) or "")
    body = json.loads(git.read_blob(blob)) if blob else None
    return LoadedEvidence(body, parse_runs(data), f"git {commit[:12]}")


def earlier_reports(directory: Path, observed_at: str) -> list[dict[str, Any]]:
    """Report files in ``directory`` observed before ``observed_at``, oldest first."""
    found = []
    for path in directory.glob("*.report.json") if directory.is_dir() else ():
        try:
            body = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(body, dict) and str(body.get("observedAt", "")) < observed_at:
            found.append(body)
    return sorted(found, key=lambda body: str(body["observedAt"]))


def cell_history(reports: Sequence[Mapping[str, Any]]) -> History:
    """Each cell's earlier points (oldest first) from earlier report bodies."""
    history: dict[tuple[str, str], list[CellPoint]] = {}
    for body in reports:
        for cell in body.get("cells", []):
            key = (subject_key_of(cell), str(cell["taskClass"]))
            history.setdefault(key, []).append(
                CellPoint(
                    str(body["observedAt"]),
                    str(body["reportId"]),
                    float(cell["passRate"]),
                    cell.get("outcome") != "incomplete",
                )
            )
    return history
