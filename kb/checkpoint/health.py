"""The sweep's answer health on every arm of a checkpoint (SPEC 14.7 item 4).

An arm whose provider answers one error page, or one stuck text, to some of
its cases would be graded as a model failing them and read as a worse model:
a checkpoint would fail the knowledge for an outage. So each arm's answers
go through the rule a sweep's cells go through (:mod:`kb.sweep.health`), per
model and task class: mostly empty replies, or one failing reply for many
prompts, make the group **suspect**. A suspect reply that may be the model's
own — not an error page, not given by another model on the same endpoint,
not its answer to everything from some request on — is asked again once (up
to :data:`~kb.sweep.health.RECHECKS` of its prompts, paid from the
envelope): the same text again is the model's canned answer and is scored;
anything else leaves the group suspect. An arm holding a suspect group is
*contaminated*: its verdict is never a pass or a fail, and the report says
which model, class and reply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from kb.engine.budget import SpendEnvelope
from kb.engine.requests import endpoint
from kb.engine.runs import PlannedRun
from kb.engine.scheduler import Engine
from kb.evals.cases import Case
from kb.evals.suite import CaseVerdict
from kb.sweep.health import RECHECKS, answer_health, model_answer, not_an_answer, reply_kind
from kb.textwidth import shorten

Group = tuple[str, str]
"""A model (its key) and a task class: the unit the health rule reads, as a sweep's cell."""
AGAIN = "~again"


@dataclass
class ArmHealth:
    """What the checkpoint's answers look like, group by group, asked again where it may help."""

    engine: Engine
    envelope: SpendEnvelope
    planned: dict[str, PlannedRun] = field(default_factory=dict)
    """Every target run so far, by label (what a re-ask sends again)."""
    accepted: dict[Group, frozenset[str]] = field(default_factory=dict)
    suspects: dict[Group, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _asked: set[tuple[Group, str]] = field(default_factory=set)

    def sent(self, runs: Iterable[PlannedRun]) -> None:
        """Target runs a phase sent (a re-ask sends one of them again)."""
        self.planned |= {run.label: run for run in runs}

    def check(self, verdicts: Sequence[CaseVerdict], cases: Mapping[str, Case]) -> None:
        """Judge every group in ``verdicts`` (all of an experiment's so far), asking again once.

        ``cases``: the verdicts' cases by name.
        """
        groups: dict[Group, list[CaseVerdict]] = {}
        for verdict in verdicts:
            groups.setdefault((verdict.target.model, verdict.task_class), []).append(verdict)
        replies = _replies_by_endpoint(self.planned, verdicts)
        asks: list[tuple[Group, str, list[str]]] = []
        for group, found in groups.items():
            unique = list({v.target.label: v for v in found}.values())  # a rung two arms share
            suspicion = answer_health(unique, cases, self.accepted.get(group, frozenset()))
            if suspicion is None:
                self.suspects.pop(group, None)
                continue
            self.suspects[group] = suspicion.reason
            reply = suspicion.reply
            if reply is None or (group, reply) in self._asked:
                continue
            self._asked.add((group, reply))
            labels = [v.target.label for v in unique if v.target.label in suspicion.labels]
            where = _endpoint_of(self.planned.get(labels[0]))
            others = {
                k for m, kinds in replies.get(where, {}).items() if m != group[0] for k in kinds
            }
            sent = sorted(
                (v.target for v in unique if v.target.status == "ok"),
                key=lambda run: run.started_at or 0.0,
            )
            why = not_an_answer(reply, [r.output for r in sent], others)
            if why is not None:
                self.suspects[group] = f"{suspicion.reason}; {why}"
                continue
            asks.append((group, reply, [label for label in labels if label in self.planned]))
        if asks:
            self._ask(asks)

    def _ask(self, asks: Sequence[tuple[Group, str, list[str]]]) -> None:
        again = [
            replace(self.planned[label], label=f"{label}{AGAIN}")
            for _, _, labels in asks
            for label in labels[:RECHECKS]
        ]
        ran = self.engine.run(again, self.envelope)
        said = {
            run.label.removesuffix(AGAIN): run.output if run.status == "ok" else None for run in ran
        }
        for group, reply, labels in asks:
            asked = (
                f"{group[0]} · {group[1]}: {len(labels[:RECHECKS])} prompts answered "
                f"{shorten(reply, 40)!r} asked again"
            )
            if model_answer(reply, [said.get(label) for label in labels[:RECHECKS]]):
                self.accepted[group] = self.accepted.get(group, frozenset()) | {reply}
                self.suspects.pop(group, None)
                self.notes.append(f"{asked}: the same text, the model's own answer (scored)")
            else:
                self.suspects[group] = (
                    f"{self.suspects[group]}; asked again, it did not come back the same"
                )
                self.notes.append(f"{asked}: another text came back (the arm is contaminated)")

    def of(self, verdicts: Iterable[CaseVerdict]) -> dict[Group, str]:
        """The suspect groups among ``verdicts`` (an arm's), with why."""
        groups = {(v.target.model, v.task_class) for v in verdicts}
        return {group: why for group, why in self.suspects.items() if group in groups}


def _endpoint_of(run: PlannedRun | None) -> tuple[str, str]:
    if run is None:
        return "", ""
    return run.spec.provider, endpoint(run.request) or ""


def _replies_by_endpoint(
    planned: Mapping[str, PlannedRun], verdicts: Sequence[CaseVerdict]
) -> dict[tuple[str, str], dict[str, set[str]]]:
    """Every reply so far (:func:`reply_kind`), by endpoint and model."""
    found: dict[tuple[str, str], dict[str, set[str]]] = {}
    for verdict in verdicts:
        run = verdict.target
        if run.status != "ok":
            continue
        where = _endpoint_of(planned.get(run.label))
        found.setdefault(where, {}).setdefault(run.model, set()).add(reply_kind(run.output))
    return found
