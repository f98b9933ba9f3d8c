"""Evidence a reviewer can open: every run of a sweep as a :class:`RunRecord`.

A committing sweep writes, beside the store and in the same git commit,
``<report>.jsonl`` (one record per run) and ``<report>.report.json`` (see
:mod:`kb.store.records` for the shapes and :mod:`kb.store.evidence` for
where they go and how they are read back). This module turns settled runs
into records: the answer and what was asked (each text cut at 4,000
characters with the sha256 of the full text), the params the call was made
with, tokens, cost and where the price came from, the graders' verdicts and
the case's fingerprint.

Secrets are cut from every text and error: the values of secret params,
key-shaped tokens and the environment's credentials (see
:func:`kb.engine.requests.scrub_secrets`). A canary record's ``case`` is its
probe prompt and its ``taskClass`` is ``null``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kb.engine.providers.scripted import SCRIPTED_KEYS
from kb.engine.requests import ModelSpec, credentials_of, cut_secrets, secrets_to_cut
from kb.engine.runs import RunResult
from kb.evals.graders import Grade, parse_verdict, unscored_grade
from kb.store.records import RequestRecord, RunRecord, UsageRecord, Verdict, cut_text
from kb.sweep.canary import CanaryResult
from kb.sweep.cells import SweepCell


@dataclass(frozen=True)
class EvidenceContext:
    """What every record needs besides its run: which secrets to cut."""

    secrets: tuple[str, ...]
    """The models' secrets; :meth:`cut` cuts the environment's too."""
    _known: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # the environment is read once for the night's records, not once a text
        object.__setattr__(self, "_known", secrets_to_cut(self.secrets))

    @classmethod
    def of(cls, models: Iterable[ModelSpec]) -> EvidenceContext:
        """Every secret any of ``models`` carries in its params."""
        found: list[str] = []
        for model in models:
            found += credentials_of(model.params)
        return cls(tuple(dict.fromkeys(found)))

    def cut(self, text: str) -> str:
        """``text`` without secrets."""
        return cut_secrets(text, self._known)


def _verdict(grade: Grade, context: EvidenceContext) -> Verdict:
    # A reason may quote the reply or a judge's words, which may echo a secret.
    reason = context.cut(grade.detail) if grade.detail else grade.detail
    return Verdict(grader=grade.grader_id, passed=grade.passed, score=grade.score, reason=reason)


def _request(run: RunResult, context: EvidenceContext) -> RequestRecord | None:
    if run.request is None:
        return None
    texts = {message["role"]: context.cut(message["content"]) for message in run.request.messages}
    system, system_sha = cut_text(texts["system"]) if "system" in texts else (None, None)
    user, user_sha = cut_text(texts.get("user", ""))
    return RequestRecord(system=system, system_sha256=system_sha, user=user, user_sha256=user_sha)


def _params(run: RunResult, context: EvidenceContext) -> dict[str, Any] | None:
    """The params the call was made with; a scripted model's reply table is left out.

    (It is the model, not a setting of the call, and would repeat on every line.)
    """
    if run.request is None:
        return None
    scripted = run.request.model.startswith("scripted/")
    return {
        key: _cut_values(value, context)
        for key, value in run.request.params.items()
        if not (scripted and (key in SCRIPTED_KEYS or key == "script_identity"))
    }


def _cut_values(value: Any, context: EvidenceContext) -> Any:
    if isinstance(value, dict):
        return {key: _cut_values(item, context) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_cut_values(item, context) for item in value]
    return context.cut(value) if isinstance(value, str) else value


def run_record(
    run: RunResult,
    *,
    model: ModelSpec,
    case: str,
    task_class: str | None,
    repeat: int,
    verdicts: Sequence[Grade],
    context: EvidenceContext,
    fingerprint: str | None = None,
    expected: str | None = None,
) -> RunRecord:
    """One line of the evidence file."""
    output, output_sha = cut_text(context.cut(run.output or ""))
    latency = run.latency_ms
    return RunRecord(
        kind=run.kind,
        label=run.label,
        model=model.ref,
        effort=model.effort,
        case=case,
        task_class=task_class,
        repeat=repeat,
        status=run.status,
        output=output,
        output_sha256=output_sha,
        verdicts=tuple(_verdict(grade, context) for grade in verdicts),
        cost_usd=run.cost_usd,
        latency_ms=round(latency, 1) if latency is not None else None,
        attempts=run.attempts,
        error=context.cut(run.error) if run.error else None,
        request=_request(run, context),
        params=_params(run, context),
        usage=UsageRecord(
            prompt_tokens=run.usage.prompt_tokens, completion_tokens=run.usage.completion_tokens
        ),
        price_source=run.price_source,
        case_fingerprint=fingerprint,
        expected=cut_text(context.cut(expected))[0] if expected else None,
        batch=run.batch_id,
    )


def judge_verdict(run: RunResult, judge: ModelSpec) -> Grade:
    """What one judge run said, as its own record's verdict (unscored when unreadable)."""
    said = parse_verdict(judge.key, run.output or "")
    if said is None:
        return unscored_grade(f"judge:{judge.key}", "the reply was not {passed, reason}")
    return said


def cell_records(cell: SweepCell, context: EvidenceContext) -> list[RunRecord]:
    """The target runs of a cell and the judge runs behind their verdicts, in plan order."""
    records = []
    for verdict in cell.verdicts:
        repeat = verdict.repeat or 0
        fingerprint = verdict.fingerprint or None
        records.append(
            run_record(
                verdict.target,
                model=cell.member,
                case=verdict.name,
                task_class=cell.task_class,
                repeat=repeat,
                verdicts=verdict.grades,
                context=context,
                fingerprint=fingerprint,
                expected=verdict.expected or None,
            )
        )
        for judge, spec in zip(verdict.judges, verdict.judge_models, strict=True):
            records.append(
                run_record(
                    judge,
                    model=spec,
                    case=verdict.name,
                    task_class=cell.task_class,
                    repeat=repeat,
                    verdicts=(judge_verdict(judge, spec),) if judge.status == "ok" else (),
                    context=context,
                    fingerprint=fingerprint,
                )
            )
    return records


def canary_records(canaries: Sequence[CanaryResult], context: EvidenceContext) -> list[RunRecord]:
    """Every canary probe run (each repeat)."""
    return [
        run_record(
            run,
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
