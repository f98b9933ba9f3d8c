"""Where an answer comes from: one seam, as httpx's transports (see :mod:`.base`).

* :class:`~.live.LiveTransport` — litellm, in this process or in worker processes;
* :class:`~.replay.ReplayTransport` — a cassette's recorded outcomes;
* :class:`~.mock.MockTransport` — a function (tests, drills);
* :class:`~.record.RecordingTransport`, :class:`~.journaled.JournaledTransport` —
  wrappers around any of them;
* batch transports (:mod:`.batches`): a provider's batch API, one file each,
  registered in :data:`.batches.BATCH_APIS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kb.engine.cassette import Cassette
    from kb.engine.config import EngineConfig
    from kb.engine.transports.base import BatchTransport, Transport
    from kb.engine.workers import WorkerPool


def compose(
    config: EngineConfig, cassette: Cassette | None, workers: WorkerPool | None
) -> tuple[Transport, BatchTransport | None]:
    """A job's transports, composed in this one place.

    Live calls (in ``workers`` where they can make them), or a cassette's
    replay; a recording around the live calls when the cassette records;
    every registered batch API in batch mode (never for a replay).
    """
    from kb.engine.transports.batches import BatchRouter
    from kb.engine.transports.live import LiveTransport
    from kb.engine.transports.record import RecordingTransport
    from kb.engine.transports.replay import ReplayTransport

    if cassette is not None and cassette.mode == "replay":
        return ReplayTransport(cassette), None
    live = LiveTransport(workers)
    transport: Transport = live if cassette is None else RecordingTransport(live, cassette)
    batches = (
        BatchRouter.of(live, config.batch_poll_s, config.batch_poll_max_s) if config.batch else None
    )
    return transport, batches


def save_recordings(transport: object) -> None:
    """Write every cassette a recording in ``transport``'s wrapper chain holds."""
    from kb.engine.transports.record import RecordingTransport

    while transport is not None:
        if isinstance(transport, RecordingTransport):
            transport.cassette.save()
        transport = getattr(transport, "inner", None)
