"""Answer health: a measurement that looks like an outage is not knowledge about a model.

A provider that fails loudly (HTTP 5xx, a timeout) leaves failed runs and an
incomplete cell. One that fails quietly — HTTP 200 with empty text, the same
error page for every prompt — would be graded like a model and turned into a
weakness, archiving a true strength on the way. So a cell is **suspect**,
and then incomplete (no claim, no retirement, exit 1 with the cause), when
its answered target runs show either sign:

* **mostly empty**: more than :data:`EMPTY_SHARE` (half) of the replies are
  empty or whitespace;
* **one reply for everything**: every reply is the same text (after
  trimming and collapsing whitespace) across at least
  :data:`SAME_REPLY_MIN_PROMPTS` distinct prompts, while the cases do not
  all expect that one answer.

A case whose expected answer is empty (a golden grader expecting ``""``) is
exempt from both counts: an empty reply is its right answer. A reply
without choices at all is a provider failure already (retried, then the
run settles ``error``). The canary applies the same idea to its probes: a
canary whose probes all came back empty is incomplete, never drift
(:mod:`kb.sweep.canary`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kb.evals.cases import Case, GoldenGrader
from kb.evals.suite import CaseVerdict

EMPTY_SHARE = 0.5
"""A cell is suspect when more than this share of its replies are empty."""
SAME_REPLY_MIN_PROMPTS = 3
"""… or when one reply answers at least this many distinct prompts."""


def expected_answer(case: Case) -> str | None:
    """The case's golden answer, when a golden grader names one as text."""
    for grader in case.graders:
        if isinstance(grader, GoldenGrader) and isinstance(grader.expected, str):
            return grader.expected
    return None


def _flat(text: str | None) -> str:
    return " ".join((text or "").split())


def answer_health(verdicts: Sequence[CaseVerdict], cases: Mapping[str, Case]) -> str | None:
    """Why a cell's answers look like an outage (``None``: they look like a model's)."""
    judged = [
        v for v in verdicts if v.target.status == "ok" and expected_answer(cases[v.name]) != ""
    ]
    if not judged:
        return None
    empty = sum(1 for v in judged if not _flat(v.target.output))
    if empty > EMPTY_SHARE * len(judged):
        return (
            f"suspect: {empty} of {len(judged)} replies were empty (a provider answering "
            "without text?)"
        )
    prompts = {(cases[v.name].system, cases[v.name].prompt) for v in judged}
    replies = {_flat(v.target.output) for v in judged}
    expected = {
        _flat(e).casefold() if e is not None else None
        for e in map(expected_answer, (cases[v.name] for v in judged))
    }
    same = {reply.casefold() for reply in replies}
    if len(prompts) >= SAME_REPLY_MIN_PROMPTS and len(replies) == 1 and expected != same:
        (reply,) = replies
        shown = reply if len(reply) <= 60 else reply[:59] + "…"
        return (
            f"suspect: every reply was {shown!r}, to {len(prompts)} different prompts (an "
            "error page or a stuck provider?)"
        )
    return None
