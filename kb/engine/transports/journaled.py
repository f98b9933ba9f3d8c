"""The run journal around any transport: paid runs are never paid twice.

A sweep journals every settled run the moment it settles (:mod:`kb.engine.journal`)
— through :meth:`JournaledTransport.settled`, which the scheduler calls in
the step that settles the run, before its slot lets another call start, so a
journal that cannot write stops the phase before another call is sent. A
resumed night's journaled ok runs answer :meth:`~JournaledTransport.prepaid`
for the very same request, before the envelope authorizes anything. Batches
are noted here too (:class:`kb.engine.transports.base.BatchLedger`), so a
resume polls a batch that is still running instead of paying for another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kb.engine.journal import JournalState, RunJournal
from kb.engine.runs import PlannedRun, RunResult
from kb.engine.transports.base import Transport, TransportWrapper


class JournaledTransport(TransportWrapper):
    """Serves journaled runs and journals every settled one (see the module docstring)."""

    def __init__(
        self, inner: Transport, journal: RunJournal | None, state: JournalState | None = None
    ) -> None:
        super().__init__(inner)
        self.journal = journal
        self.state = state

    @property
    def resumable(self) -> bool:
        """A stopped job can be resumed from what this journal holds."""
        return self.journal is not None

    def prepaid(self, run: PlannedRun) -> RunResult | None:
        """The journaled ok run of an earlier invocation that asked exactly this."""
        found = self.state.reusable(run.label, run.request.key) if self.state else None
        if found is None:
            return self.inner.prepaid(run)
        return replace(found, request=run.request, label=run.label, kind=run.kind)

    def forget(self, labels: Sequence[str]) -> None:
        """Never serve these journaled runs again, now or on a later resume.

        They stay in the journal (a ``discard`` line marks them): paid for, kept,
        never pooled with answers asked after them.
        """
        if self.state is None or not labels:
            return
        self.state = self.state.without(labels)
        if self.journal is not None:
            self.journal.discard(labels)

    def settled(self, run: PlannedRun, occurrence: int, seq: int, result: RunResult) -> None:
        """Journal the run (a refused write raises :class:`kb.errors.JournalUnwritable`)."""
        self.inner.settled(run, occurrence, seq, result)
        if self.journal is not None and result.status != "cancelled":
            self.journal.record(result)

    def batch_for(self, members: str) -> str | None:
        """The batch an earlier invocation created for these runs and did not end."""
        return self.state.batches.get(members) if self.state is not None else None

    def record_batch(self, members: str, batch_id: str) -> None:
        """A batch was created."""
        if self.journal is not None:
            self.journal.record_batch(members, batch_id)

    def record_batch_end(self, batch_id: str, status: str) -> None:
        """The batch ended without completing."""
        if self.journal is not None:
            self.journal.record_batch_end(batch_id, status)
