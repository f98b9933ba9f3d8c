"""Answer health: a measurement that looks like an outage is not knowledge about a model.

A provider that fails loudly (HTTP 5xx, a timeout) leaves failed runs and an
incomplete cell. One that fails quietly — HTTP 200 with empty text, the same
error page for every prompt — would be graded like a model and turned into a
weakness, archiving a true strength on the way. So a cell is **suspect**,
and then incomplete (no claim, no retirement, exit 1 with the cause), when
its answered target runs show either sign:

* **mostly empty**: more than :data:`EMPTY_SHARE` (half) of the replies are
  empty or whitespace;
* **one failing reply for many** (an error page, from the first request
  or from some request on): one reply text (after trimming and collapsing
  whitespace; for an HTML page, its title: a CDN's page differs per request
  only in its body) answers at least :data:`SAME_REPLY_MIN_PROMPTS` distinct
  prompts, makes up at least :data:`SAME_REPLY_SHARE` of the replies, and
  fails every case it answered. A weak classifier that always answers one
  label passes the cases that expect that label, so it is still measured
  (kb 3 called any cell whose every reply was one text suspect, unless every
  case expected it).

Only the replies that made the cell suspect — the empty ones, the one
repeated reply — are journaled as not to be reused: ``--resume`` asks them
again, and reuses the cell's other, real answers.

A case whose expected answer is empty (a golden grader expecting ``""``) is
exempt from both counts: an empty reply is its right answer. A reply
without choices at all is a provider failure already (retried, then the
run settles ``error``). The canary applies the same idea to its probes: a
canary whose probes all came back empty is incomplete, never drift
(:mod:`kb.sweep.canary`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kb.evals.cases import Case, GoldenGrader
from kb.evals.suite import CaseVerdict
from kb.textwidth import shorten

EMPTY_SHARE = 0.5
"""A cell is suspect when more than this share of its replies are empty."""
SAME_REPLY_MIN_PROMPTS = 3
"""… or when one reply answers at least this many distinct prompts (every reply, or a
failing one that makes up :data:`SAME_REPLY_SHARE` of them)."""
SAME_REPLY_SHARE = 0.1
"""The share of a cell's replies one failing reply must make up to make the cell suspect."""


@dataclass(frozen=True)
class Suspicion:
    """Why a cell's answers look like an outage, and which runs gave those answers."""

    reason: str
    labels: frozenset[str]
    """The target runs whose replies made the cell suspect (asked again on ``--resume``)."""
    reply: str | None = None
    """The one reply (:func:`reply_kind`) that answered them all (``None``: empty replies)."""


def expected_answer(case: Case) -> str | None:
    """The case's golden answer, when a golden grader names one as text."""
    for grader in case.graders:
        if isinstance(grader, GoldenGrader) and isinstance(grader.expected, str):
            return grader.expected
    return None


def _flat(text: str | None) -> str:
    return " ".join((text or "").split())


def answer_health(
    verdicts: Sequence[CaseVerdict],
    cases: Mapping[str, Case],
    accepted: frozenset[str] = frozenset(),
) -> Suspicion | None:
    """Why a cell's answers look like an outage (``None``: they look like a model's).

    ``accepted``: replies asked again that proved to be the model's own answer
    (:func:`model_answer`): they are scored, never suspect.
    """
    judged = [
        v for v in verdicts if v.target.status == "ok" and expected_answer(cases[v.name]) != ""
    ]
    if not judged:
        return None
    empty = [v for v in judged if not _flat(v.target.output)]
    if len(empty) > EMPTY_SHARE * len(judged):
        return Suspicion(
            f"suspect: {len(empty)} of {len(judged)} replies were empty (a provider answering "
            "without text?)",
            frozenset(v.target.label for v in empty),
        )
    by_reply: dict[str, list[CaseVerdict]] = {}
    for verdict in judged:
        by_reply.setdefault(reply_kind(verdict.target.output), []).append(verdict)
    for kind, answered in by_reply.items():
        if kind in accepted:
            continue
        prompts = {(cases[v.name].system, cases[v.name].prompt) for v in answered}
        if (
            len(prompts) >= SAME_REPLY_MIN_PROMPTS
            and len(answered) >= SAME_REPLY_SHARE * len(judged)
            and not any(v.passed for v in answered)
        ):
            many = (
                "every reply was"
                if len(answered) == len(judged)
                else f"{len(answered)} of {len(judged)} replies were"
            )
            example = _flat(answered[0].target.output)  # pages of one title may differ
            return Suspicion(
                f"suspect: {many} {_shown(example)}, to {len(prompts)} different prompts, "
                "failing every case (an error page or a stuck provider?)",
                frozenset(v.target.label for v in answered),
                kind,
            )
    return None


RECHECKS = 10
"""How many of a suspect reply's prompts are asked again (at most) to tell an answer."""


def error_document(text: str) -> bool:
    """Whether a reply is an HTML page or a JSON error object rather than a model's words."""
    flat = _flat(text)
    lowered = flat[:300].lower()
    if lowered.startswith(("<!doctype", "<html", "<head", "<body")) or "<html" in lowered:
        return True
    if not flat.startswith("{"):
        return False
    try:
        parsed = json.loads(flat)
    except ValueError:
        return False
    keys = {"error", "errors", "detail", "status", "statusCode", "code", "message"}
    return isinstance(parsed, dict) and bool(keys & set(parsed))


def not_an_answer(
    reply: str,
    cell: Sequence[str | None],
    elsewhere: Iterable[str],
    canary: Iterable[str] = (),
) -> str | None:
    """Why a reply that made a cell suspect cannot be the model's own answer (``None``: it may).

    ``cell``: the cell's replies in the order they were sent; ``elsewhere``:
    the replies other models on the same endpoint gave tonight; ``canary``:
    the model's canary answers tonight (all :func:`reply_kind`). A canned
    refusal answers some prompts among real answers; an outage's text answers
    everything from some request on, or other models too, or the canary.
    Told before anything is asked again: such a reply is not worth a call.
    """
    if not reply:
        return "empty replies are never an answer"
    if error_document(reply) or reply.startswith(ERROR_PAGE):
        return "it is an error page or an error object, not words"
    if reply in set(elsewhere):
        return "another model on the same endpoint gave it tonight: the endpoint's, not a model's"
    if reply in set(canary):
        return "the model's canary got it too"
    kinds = [reply_kind(text) for text in cell]
    if reply not in kinds:
        return None
    first = kinds.index(reply)
    if all(kind == reply for kind in kinds[first:]):
        what = "every prompt" if first == 0 else "every prompt from one request on"
        return f"it answered {what}: an outage's pattern, not a refusal's"
    return None


def model_answer(reply: str, again: Sequence[str | None]) -> bool:
    """Whether the prompts a suspect reply answered, asked again, gave the same text."""
    return bool(again) and all(text is not None and reply_kind(text) == reply for text in again)


_TITLE = re.compile(r"<title[^>]*>(.*?)</title", re.IGNORECASE | re.DOTALL)
_ERROR_TITLE = re.compile(
    r"\b[45]\d\d\b|error|unavailable|bad gateway|timed? ?out|forbidden|denied|too many"
    r"|cloudflare|just a moment|maintenance",
    re.IGNORECASE,
)
"""What an error page's title says (a model's own pages are told apart by their text)."""


ERROR_PAGE = "<html> titled "
"""How :func:`reply_kind` names an HTML page whose title reads like an error."""


def reply_kind(text: str | None) -> str:
    """What makes replies "the same reply": the flattened text, or an HTML page's title.

    A CDN's error page differs from request to request only in its body (a
    request id, a time), so a page whose title reads like an error (a status
    code, "unavailable", "bad gateway" …) is told apart by its title alone.
    """
    flat = _flat(text)
    lowered = flat[:200].lower()
    if lowered.startswith(("<!doctype html", "<html")):  # the reply is a page, not about one
        found = _TITLE.search(flat)
        if found is not None and _ERROR_TITLE.search(found.group(1)):
            return f"{ERROR_PAGE}{_flat(found.group(1))}"
    return flat


def _shown(reply: str) -> str:
    return repr(shorten(reply, 60))
