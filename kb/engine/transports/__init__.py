"""Where an answer comes from: one seam, as httpx's transports (see :mod:`.base`).

* :class:`~.live.LiveTransport` — litellm, in this process or in worker processes;
* :class:`~.replay.ReplayTransport` — a cassette's recorded outcomes;
* :class:`~.mock.MockTransport` — a function (tests, drills);
* :class:`~.record.RecordingTransport`, :class:`~.journaled.JournaledTransport` —
  wrappers around any of them;
* batch transports (:mod:`.batches`): a provider's batch API, one file each,
  registered in :data:`.batches.BATCH_APIS`.
"""
