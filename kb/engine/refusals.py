"""What cannot succeed is not paid for: a model that refuses its first calls is stopped.

A wrong key (401), a key without access (403) or a model the endpoint does
not know (404) answers every call the same way; v4 sent all of a night's
runs anyway (90 calls to an unknown model, 117 with a wrong key). Here the
first :data:`FIRST_CALLS` runs of each model (per endpoint) that settle are
watched: when every one of them failed with the same one of those statuses,
the model is stopped for the rest of the job — its remaining runs (targets,
judges, probes) settle ``error`` without a call, saying why — and one line
names the model, the endpoint and the status. The other models go on.

A single refusal among answers (one case's prompt the provider rejects) is
a case's failure, not a dead model: only the first calls, all alike, stop it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from kb.engine.requests import endpoint
from kb.engine.runs import PlannedRun

REFUSED_STATUSES = frozenset({401, 403, 404})
"""Statuses that come back the same on every call: the key, the access, the model."""
FIRST_CALLS = 3
"""How many of a model's first settled calls must all be refused alike."""

_WHY = {
    401: "the key was refused",
    403: "the key has no access to it",
    404: "the endpoint does not know this model",
}
_FIX = {
    401: "check the key's value",
    403: "give the key access to the model, or use another key",
    404: "check the model's name and its api_base",
}

ModelAt = tuple[str, str]
"""(model key, endpoint or ``""``)."""


@dataclass(frozen=True)
class StoppedModel:
    """A model the job stopped calling, and why."""

    model: str
    endpoint: str
    status: int
    error: str
    """The provider's own message on the first refusal (secrets cut)."""
    skipped: int = 0
    """Runs not sent because of it."""

    @property
    def reason(self) -> str:
        """Why its runs were not sent (each skipped run's error)."""
        where = f" at {self.endpoint}" if self.endpoint else ""
        return (
            f"not sent: {self.model}{where} answered HTTP {self.status} to its first "
            f"{FIRST_CALLS} calls ({_WHY[self.status]}), so it is not called again tonight"
        )

    def line(self) -> str:
        """The one line the job prints."""
        where = f" at {self.endpoint}" if self.endpoint else ""
        runs = f"{self.skipped} more run{'s' if self.skipped != 1 else ''}"
        return (
            f"{self.model}{where}: HTTP {self.status} on its first {FIRST_CALLS} calls "
            f"({_WHY[self.status]}: {_FIX[self.status]}); {runs} not sent tonight, its cells "
            f"are incomplete; the provider said: {self.error}"
        )


class ModelRefusals:
    """Watches each model's first calls; stops a model they all refused alike."""

    def __init__(self) -> None:
        self._trying: dict[ModelAt, int] = {}
        """Runs of each model sent before its first calls were all answered (at most 3)."""
        self._first: dict[ModelAt, list[int | None]] = {}
        self._first_error: dict[ModelAt, str] = {}
        self._stopped: dict[ModelAt, StoppedModel] = {}
        self._skipped: Counter[ModelAt] = Counter()

    @staticmethod
    def _at(run: PlannedRun) -> ModelAt:
        return run.spec.key, endpoint(run.request) or ""

    def may_send(self, run: PlannedRun) -> bool:
        """Whether ``run`` may go now.

        A model sends no more than its first :data:`FIRST_CALLS` runs until they
        have all been answered (else a concurrency of 16 would pay 16 calls to
        learn what 3 tell).
        """
        at = self._at(run)
        return len(self._first.get(at, ())) >= FIRST_CALLS or self._trying.get(at, 0) < FIRST_CALLS

    def sending(self, run: PlannedRun) -> None:
        """``run`` is about to make its first attempt."""
        at = self._at(run)
        if len(self._first.get(at, ())) < FIRST_CALLS:
            self._trying[at] = self._trying.get(at, 0) + 1

    def unsent(self, run: PlannedRun) -> None:
        """``run`` counted by :meth:`sending` ended without an answer (cancelled, not sent)."""
        at = self._at(run)
        if self._trying.get(at, 0) > len(self._first.get(at, ())):
            self._trying[at] -= 1

    def stopped_for(self, run: PlannedRun) -> StoppedModel | None:
        """The stop that applies to ``run``'s model (``None``: call it)."""
        return self._stopped.get(self._at(run))

    def skip(self, run: PlannedRun) -> str:
        """Count ``run`` as not sent; the error it settles with."""
        at = self._at(run)
        self._skipped[at] += 1
        return self._stopped[at].reason

    def settled(self, run: PlannedRun, status: int | None, error: str | None = None) -> None:
        """A call of ``run``'s model ended: ``status`` of its failure (``None``: answered)."""
        at = self._at(run)
        first = self._first.setdefault(at, [])
        if len(first) >= FIRST_CALLS or at in self._stopped:
            return
        first.append(status)
        if error and at not in self._first_error:
            self._first_error[at] = error
        if len(first) == FIRST_CALLS and len(set(first)) == 1:
            (code,) = set(first)
            if code in REFUSED_STATUSES:
                assert code is not None
                self._stopped[at] = StoppedModel(at[0], at[1], code, self._first_error[at])

    @property
    def stopped(self) -> list[StoppedModel]:
        """Every model stopped so far, with the runs it skipped."""
        return [replace(found, skipped=self._skipped[at]) for at, found in self._stopped.items()]
