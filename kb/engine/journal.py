"""The run journal: every settled run, written as it settles, so a stopped job pays nothing twice.

A sweep opens a journal beside its evidence (``<report>.journal.jsonl``)
before its first call. The engine appends one line per run the moment it
settles — its label, the request's key, status, full output, usage, cost,
price source, attempts, error and latency — written before the run's task
lets another call start, so a Ctrl-C, a crash, a kill or a failed CI job
loses at most the runs still in flight (a written line is in the kernel's
page cache: a killed process cannot lose it).

**Group sync** (SPEC 14.3). Settled runs are fsynced in groups: a group ends
at its 256th line, at the first line written 100 ms or more after the group
began, and at the end of the night, and is synced with one ``fsync`` (one
per run made the disk the pace of a large night). What a power
loss can take is the last group's runs (at most 256), which a resume asks
again. Lines a resume must never miss are synced at once with everything
before them: the header, a batch's id and end, a discard, the "measured"
mark. The first line names the
report, its instant and the spec (relative to the store's work tree, so a
checkout elsewhere resumes it: :mod:`kb.sweep.resume`).

A write that fails (a full disk) raises :class:`~kb.errors.JournalUnwritable`
and the engine stops the job before another call: a run nobody could
journal would be paid again by every resume. A line a crash or a full disk
left half-written is cut before the next append, never joined to it.

A batch (:mod:`kb.engine.batch`) is journaled when it is created (its id
and the key of its runs) and again if it ends without completing; a resume
polls a journaled batch that has not ended instead of sending a second one.

``kb sweep --resume`` reads it back (:func:`read_journal`): a planned run
whose label *and* request key match a journaled run that settled ``ok`` is
served from the journal instead of the provider (and costs the envelope
nothing: it was paid); every other run — missing, failed, exhausted,
cancelled, or asked differently since — runs again. The key is the request
as the provider would see it (model, params, messages), so editing a case
or a model's params never reuses an answer to a different question.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kb.engine.runs import RunResult, Usage
from kb.errors import ConfigError, JournalUnwritable
from kb.logprobs import cut_tokens, parse_top_logprobs
from kb.sidefile import SideFormat

JOURNAL = SideFormat("run journal", key="journal")

GROUP_LINES = 256
"""A sync group's most lines (SPEC 14.3: what a power loss may make a resume ask again)."""
GROUP_SECONDS = 0.1
"""A line written this long after its group began ends the group."""


@dataclass(frozen=True)
class JournalState:
    """What a journal holds: the night it belongs to and its settled runs."""

    path: Path
    report_id: str
    observed_at: str
    spec: str
    """What was swept (the spec file's path)."""
    settled: Mapping[str, tuple[str, RunResult]]
    """Label → (request key, the run), for the runs that settled ``ok`` (the last one wins)."""
    lines: int
    """Runs journaled in all (ok or not)."""
    batches: Mapping[str, str] = field(default_factory=dict)
    """The batches created and not ended: the members' key → the batch id."""
    measured: bool = False
    """The stopped invocation measured the whole night (it stopped in its commit): a
    resume asks nothing of any provider, so its journaled runs are all one night's."""

    def reusable(self, label: str, key: str) -> RunResult | None:
        """The journaled ok run for ``label``, if it answered the same request."""
        found = self.settled.get(label)
        return found[1] if found is not None and found[0] == key else None

    def without(self, labels: Iterable[str]) -> JournalState:
        """A copy that serves none of ``labels`` (they are asked again)."""
        gone = frozenset(labels)
        kept = {label: run for label, run in self.settled.items() if label not in gone}
        return replace(self, settled=kept)


class RunJournal:
    """An open journal the engine appends to (append-only, fsynced in groups).

    Invariant: the file is whole lines only, except for the tail a crash may
    leave mid-write, which :meth:`open` cuts before the first append. A write
    that fails (a full disk) is cut back too, and every write after it
    raises the same :class:`JournalUnwritable`: nothing is ever appended to
    a line that did not end.
    """

    def __init__(
        self,
        path: Path,
        fd: int,
        size: int,
        cut: Callable[[str], str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._fd = fd
        self._size = size
        self._cut = cut
        self._failed: JournalUnwritable | None = None
        self._clock = clock
        self._pending = 0
        """Lines written since the last fsync."""
        self._group_began = 0.0
        self.syncs = 0
        """fsyncs so far (the bench reads it)."""

    @classmethod
    def open(
        cls,
        path: Path,
        report_id: str,
        observed_at: str,
        *,
        spec: str,
        cut: Callable[[str], str] = lambda text: text,
        clock: Callable[[], float] = time.monotonic,
    ) -> RunJournal:
        """Open ``path`` for appending (written with its header line when new).

        ``spec`` names what was swept (a resume of another spec is refused);
        ``cut`` takes secrets out of every text before it reaches the disk;
        ``clock`` times the sync groups (monotonic seconds; it decides only
        when an fsync happens, never what is written). A torn last line (a
        crash mid-write) is cut off first.
        """
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
        except OSError as exc:
            raise _unwritable(path, exc) from None
        try:
            size = _cut_torn_tail(fd)
        except OSError as exc:
            os.close(fd)
            raise _unwritable(path, exc) from None
        journal = cls(path, fd, size, cut, clock)
        if size == 0:
            journal._write(
                {
                    **JOURNAL.stamp(),
                    "reportId": report_id,
                    "observedAt": observed_at,
                    "spec": spec,
                },
                durable=True,
            )
        return journal

    def record_measured(self) -> None:
        """Every run of the night settled and none is to be asked again.

        Only the commit is left: a resume of it calls no provider.
        """
        self._write({"measured": True}, durable=True)

    def discard(self, labels: Iterable[str]) -> None:
        """Mark settled runs as not to be reused (a suspect cell's answers: an outage's)."""
        found = list(labels)
        if found:
            self._write({"discard": found}, durable=True)

    def _write(self, value: Mapping[str, Any], *, durable: bool = False) -> None:
        """Append one line (synced with its group, or at once when ``durable``).

        Raises :class:`JournalUnwritable` leaving no part of the line; after
        a failed write or fsync every later write raises the same error.
        """
        if self._failed is not None:
            raise self._failed
        encoded = (json.dumps(value, ensure_ascii=False) + "\n").encode()
        try:
            left = memoryview(encoded)
            while left:  # a write may take part of the line (the disk filled up mid-line)
                left = left[os.write(self._fd, left) :]
        except OSError as exc:
            self._failed = _unwritable(self.path, exc)
            with contextlib.suppress(OSError):  # else the next open cuts the torn tail
                os.ftruncate(self._fd, self._size)
            raise self._failed from None
        self._size += len(encoded)
        now = self._clock()
        if self._pending == 0:
            self._group_began = now
        self._pending += 1
        if durable or self._pending >= GROUP_LINES or now - self._group_began >= GROUP_SECONDS:
            self.sync()

    def sync(self) -> None:
        """Sync the lines written since the last fsync (nothing to do when there are none).

        A failed fsync stops the job like a failed write (:class:`JournalUnwritable`);
        the lines stay (they are whole): if the kernel could not keep them, the
        next open cuts what it lost.
        """
        if self._pending == 0:
            return
        if self._failed is not None:
            raise self._failed
        try:
            os.fsync(self._fd)
        except OSError as exc:
            self._failed = _unwritable(self.path, exc)
            raise self._failed from None
        self._pending = 0
        self.syncs += 1

    def record_batch(self, members: str, batch_id: str) -> None:
        """A batch was created for the runs ``members`` names (a resume polls it again)."""
        self._write({"batch": batch_id, "members": members}, durable=True)

    def record_batch_end(self, batch_id: str, status: str) -> None:
        """The batch ended without completing: a resume never waits on it again."""
        self._write({"batchEnded": batch_id, "status": status}, durable=True)

    def record(self, result: RunResult) -> None:
        """Append one settled run (a run served from the journal is not written again)."""
        if result.reused or result.request is None:
            return
        latency = result.latency_ms
        self._write(
            {
                "label": result.label,
                "key": result.request.key,
                "kind": result.kind,
                "model": result.model,
                "status": result.status,
                "output": self._cut(result.output) if result.output is not None else None,
                "usage": {
                    "promptTokens": result.usage.prompt_tokens,
                    "completionTokens": result.usage.completion_tokens,
                },
                "costUsd": result.cost_usd,
                "priceSource": result.price_source,
                **({"batchId": result.batch_id} if result.batch_id else {}),
                **(
                    {
                        "topLogprobs": [
                            dict(token) for token in cut_tokens(result.logprobs, self._cut)
                        ]
                    }
                    if result.logprobs is not None
                    else {}
                ),
                "attempts": result.attempts,
                "error": self._cut(result.error) if result.error else result.error,
                "latencyMs": latency,
            }
        )

    def close(self) -> None:
        """Sync the last group and close the file (a failed fsync still closes it)."""
        try:
            if self._failed is None:
                self.sync()
        finally:
            os.close(self._fd)


def _unwritable(path: Path, error: OSError) -> JournalUnwritable:
    return JournalUnwritable(str(path), error.strerror or str(error))


def _cut_torn_tail(fd: int) -> int:
    """Cut the file after its last newline (a crash mid-write left the rest); its new size."""
    size = os.fstat(fd).st_size
    end = size
    while end > 0:
        start = max(0, end - 65536)
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    if end != size:
        os.ftruncate(fd, end)
        os.fsync(fd)
    return end


def read_journal(path: Path) -> JournalState | None:
    """The journal at ``path`` (``None``: there is none); a broken line is a ``ConfigError``.

    A last line cut short by a crash mid-write is ignored: it never settled.
    """
    try:
        lines = path.read_text(encoding="utf-8").split("\n")  # never at U+2028 in a reply
        lines = lines[:-1] if lines and not lines[-1] else lines
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot be read: {exc}") from None
    if not lines:
        return None
    try:
        header = JOURNAL.load(lines[0], f"{path}:1")
        report_id, observed_at = str(header["reportId"]), str(header["observedAt"])
        spec = str(header.get("spec", ""))
    except (ValueError, KeyError, AttributeError, RecursionError) as exc:
        raise ConfigError(str(path), f"not a kb run journal: {exc}") from None
    settled: dict[str, tuple[str, RunResult]] = {}
    batches: dict[str, str] = {}
    measured = False
    count = 0
    for number, line in enumerate(lines[1:], 2):
        try:
            entry = json.loads(line)
            if isinstance(entry, dict) and "discard" in entry:
                for label in entry["discard"]:
                    settled.pop(str(label), None)
                measured = False
                continue
            if isinstance(entry, dict) and "measured" in entry:
                measured = bool(entry["measured"])
                continue
            if isinstance(entry, dict) and "batch" in entry:
                batches[str(entry["members"])] = str(entry["batch"])
                continue
            if isinstance(entry, dict) and "batchEnded" in entry:
                ended = str(entry["batchEnded"])
                batches = {k: v for k, v in batches.items() if v != ended}
                continue
            result = _result(entry)
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            if number == len(lines):
                break  # the last write was cut short by a crash: that run never settled
            raise ConfigError(
                f"{path}:{number}",
                f"not a journaled run: {exc}; delete that line (its run is asked again on "
                "--resume) or the whole journal (the night is paid again from its start)",
            ) from None
        count += 1
        if result.status == "ok":
            settled[result.label] = (str(entry["key"]), result)
        else:
            settled.pop(result.label, None)
    return JournalState(path, report_id, observed_at, spec, settled, count, batches, measured)


def _result(entry: Mapping[str, Any]) -> RunResult:
    usage = entry["usage"]
    latency = entry.get("latencyMs")
    result = RunResult(
        label=str(entry["label"]),
        kind=entry["kind"],
        model=str(entry["model"]),
        status=entry["status"],
        output=entry.get("output"),
        usage=Usage(int(usage["promptTokens"]), int(usage["completionTokens"])),
        cost_usd=float(entry["costUsd"]),
        error=entry.get("error"),
        attempts=int(entry["attempts"]),
        price_source=entry.get("priceSource"),
        batch_id=entry.get("batchId"),
        logprobs=parse_top_logprobs(entry["topLogprobs"]) if "topLogprobs" in entry else None,
        reused=True,
    )
    if isinstance(latency, int | float):
        result = replace(result, started_at=0.0, ended_at=float(latency) / 1000.0)
    return result
