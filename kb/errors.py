"""The one error tree of kb.

Every failure the core can report is a subclass of :class:`KbError`. The core
raises them and never prints; the CLI turns them into one line on stderr and an
exit code, in one place (``kb.cli.app.exit_code_for``)::

    KbError                         base; never raised directly
    ├── ConfigError                 bad input: store file, spec, flag, ops batch (exit 2)
    │   ├── StoreDirtyError         the store file has edits git has not committed (exit 2)
    │   ├── StoreMissingError       no store where one was expected (run kb init) (exit 2)
    │   └── VcrMissError            a replayed request is not in the cassette (exit 2)
    ├── KnowledgeCasError           the store moved under a commit; retryable
    │   └── CasAttemptsExhausted    the rebase loop gave up (exit 3)
    ├── MergeConflict               two branches' stores cannot both stand (exit 1)
    ├── GitError                    git itself failed (not a conflict) (exit 1)
    ├── PushRejected                a push lost a race to another push (retried, then exit 3)
    ├── GraderError                 a grader could not grade: a defect of the suite (exit 1)
    ├── ProviderFailure             one provider attempt failed (the engine retries it or
    │                               settles the run ``error``; it never reaches the user)
    ├── JobFailedError              the job ran and its outcome is a failure (exit 1)
    ├── JobInconclusive             the job ran and its evidence decides nothing yet: an
    │                               inconclusive checkpoint (exit 4)
    ├── JournalUnwritable           a settled run could not be journaled (a full disk): the
    │                               job stopped before another call; nothing committed (exit 1)
    ├── JobInterrupted              SIGINT/SIGTERM stopped the job; nothing committed (exit 130)
    └── DeadlinePassed              ``--deadline`` passed mid-job: stopped like an interrupt,
                                    its runs journaled, nothing committed (exit 1)

Signals between kb's own modules, never shown as errors (each is caught a
step away and turned into one of the above, or into a settled run)::

    ValueError
    ├── ModelRefError               text that is not ``provider:model``
    └── InstantError                a string that is not an instant kb and V8 agree on
    Exception
    ├── ScriptedFault               the scripted provider's drill: an error or a timeout
    └── MergeClash                  why the merge driver cannot merge (becomes MergeConflict)
    BaseException
    └── SignalReceived              SIGINT/SIGTERM outside a running phase (becomes
                                    JobInterrupted)

``ConfigError`` carries every problem it found in ``issues`` (each already
prefixed with its path, e.g. ``claims[3].polarity: …``); its message joins them
so the user sees all of them at once instead of fixing one per run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from kb.money import usd


class KbError(Exception):
    """Base of every error kb raises on purpose."""


class ConfigError(KbError):
    """Input that kb refuses: a malformed store, spec, flag or batch of ops.

    ``source`` names what was read (a file path, ``--attempts``, ``ops``);
    ``issues`` lists every problem found, each with its own path.
    """

    def __init__(self, source: str, issues: Sequence[str] | str) -> None:
        self.source = source
        self.issues: tuple[str, ...] = (issues,) if isinstance(issues, str) else tuple(issues)
        super().__init__(str(self))

    SHOWN: ClassVar[int] = 12
    """Issues named in the message; the rest are counted (a line a terminal can show)."""

    def __str__(self) -> str:
        if len(self.issues) == 1:
            return f"{self.source}: {self.issues[0]}"
        shown = "; ".join(self.issues[: self.SHOWN])
        rest = len(self.issues) - self.SHOWN
        more = f"; and {rest} more" if rest > 0 else ""
        return f"{self.source}: {len(self.issues)} issues: {shown}{more}"


class StoreDirtyError(ConfigError):
    """The store file differs from what git has committed, so kb will not commit over it."""


class VcrMissError(ConfigError):
    """A replayed request has no recorded exchange left in the cassette."""


class StoreMissingError(ConfigError):
    """No store where one was expected; kb never creates one implicitly."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(str(path), "no store")

    def __str__(self) -> str:
        return f"no store at {self.path} (run kb init)"


class KnowledgeCasError(KbError):
    """The store is no longer at the version the caller read; re-read and retry."""

    def __init__(self, detail: str, expected_version: int | None = None) -> None:
        self.detail = detail
        self.expected_version = expected_version
        super().__init__(f"store moved: {detail}; re-read and retry")


class CasAttemptsExhausted(KnowledgeCasError):
    """Every attempt of the rebase loop met a concurrent change."""

    def __init__(self, attempts: int, last: KnowledgeCasError) -> None:
        self.attempts = attempts
        self.last = last
        KbError.__init__(
            self,
            f"gave up after {attempts} attempt{'s' if attempts != 1 else ''}: {last}",
        )


class MergeConflict(KbError):
    """Two branches changed the store (or its baselines) in ways that cannot both stand.

    kb's merge driver then leaves git's usual conflict markers in the file;
    ``reason`` says, in one line, what clashed.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"{path}: cannot merge: {reason}; left as a git conflict: take one side "
            f"(git checkout --ours {path} or --theirs) and redo what still applies of the "
            "other side's change with kb"
        )


class GitError(KbError):
    """A git command failed for a reason other than a compare-and-swap conflict."""


class PushRejected(KbError):
    """The remote refused a fast-forward push (someone else pushed first)."""


class GraderError(KbError):
    """A grader could not grade (a defect of the suite, not of the model)."""


class ProviderFailure(KbError):
    """A failed provider call, with whether to retry it and after how long."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        retry_after: float | None = None,
        status_code: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after
        self.status_code = status_code
        self.headers = headers
        """The failed reply's headers, where it had any (a 429's rate-limit headers)."""


class JobFailedError(KbError):
    """The job ran to the end and its outcome is a failure (e.g. checkpoint not passed)."""


class JobInconclusive(KbError):
    """The job ran to the end and its evidence decides neither way.

    A checkpoint whose interval still spans its margin: neither a pass nor a failure,
    so the CLI prints its line without the ``Error:`` prefix (exit 4).
    """


def in_flight_phrase(in_flight: int, resumable: bool) -> str:
    """What a stop says of the calls it cut short: sent, maybe billed, never journaled."""
    if in_flight == 0:
        return "no call was in flight"
    calls = "1 call was" if in_flight == 1 else f"{in_flight} calls were"
    again = f"; kb sweep --resume asks {'it' if in_flight == 1 else 'them'} again"
    again = again if resumable else ""
    return f"{calls} in flight (cut short, possibly billed by the provider{again})"


def _open_batches_phrase(open_batches: Sequence[str]) -> str:
    if not open_batches:
        return ""
    return (
        f"; batch {', '.join(open_batches)} is still open at the provider, which bills "
        "what it answers: kb sweep --resume collects it"
    )


class JobInterrupted(KbError):
    """A signal stopped the job (``committed``: after its commit was made whole).

    ``in_flight`` counts the calls sent and not settled when the signal came
    (``None``: the job had no engine): the provider may bill them, and nothing
    journaled them, so a resume (``resumable``: the job journals its runs)
    asks them again.
    """

    def __init__(
        self,
        signal_name: str,
        spent_usd: float,
        open_batches: Sequence[str] = (),
        *,
        in_flight: int | None = None,
        resumable: bool = False,
        committed: str | None = None,
    ) -> None:
        self.signal_name = signal_name
        self.spent_usd = spent_usd
        self.open_batches = tuple(open_batches)
        self.in_flight = in_flight
        calls = f"; {in_flight_phrase(in_flight, resumable)}" if in_flight is not None else ""
        # A signal during a commit waits for it: the commit is then whole, and said so.
        what = (
            f"after the commit was made ({committed})"
            if committed
            else "nothing committed, the store is unchanged"
        )
        super().__init__(
            f"interrupted by {signal_name}: {what}; "
            f"{usd(spent_usd)} spent on the runs that finished"
            f"{calls}{_open_batches_phrase(self.open_batches)}"
        )


class DeadlinePassed(KbError):
    """``--deadline`` passed while the job ran: it stopped as an interrupt stops it.

    No call starts after it; the calls in flight are cut short (``in_flight``);
    what settled is journaled, so ``kb sweep --resume`` finishes the night.
    """

    def __init__(
        self,
        deadline: str,
        spent_usd: float,
        open_batches: Sequence[str] = (),
        *,
        in_flight: int = 0,
        resumable: bool = False,
    ) -> None:
        self.deadline = deadline
        self.in_flight = in_flight
        self.open_batches = tuple(open_batches)
        finish = "; kb sweep SPEC --resume finishes the night" if resumable else ""
        super().__init__(
            f"the deadline {deadline} passed: the job stopped, nothing committed, the store is "
            f"unchanged; {usd(spent_usd)} spent on the runs that finished; "
            f"{in_flight_phrase(in_flight, resumable)}{_open_batches_phrase(self.open_batches)}"
            f"{finish}"
        )


class JournalUnwritable(KbError):
    """The run journal refused a write (a full disk, an I/O error).

    The journal raises it with ``path`` and ``reason``; the engine, which
    stops the job at once, raises it again through :meth:`stopped` with the
    calls it cut short (``in_flight``), so the user reads one line.
    """

    def __init__(
        self,
        path: str,
        reason: str,
        *,
        in_flight: int | None = None,
        open_batches: Sequence[str] = (),
        unjournaled_batches: Sequence[str] = (),
    ) -> None:
        self.path = path
        self.reason = reason
        self.in_flight = in_flight
        self.open_batches = tuple(open_batches)
        self.unjournaled_batches = tuple(unjournaled_batches)
        lost = (
            f"; batch {', '.join(self.unjournaled_batches)} was created at the provider but not "
            "journaled: it bills what it answers and a resume sends its runs again (cancel it "
            "there)"
            if self.unjournaled_batches
            else ""
        )
        stop = (
            f"; the sweep stopped before sending another call, nothing committed, the store "
            f"is unchanged; {in_flight_phrase(in_flight, True)}; the runs journaled before "
            "are kept: free the space, then kb sweep --resume reuses them"
            if in_flight is not None
            else ""
        )
        super().__init__(
            f"cannot write the run journal {path}: {reason}{stop}"
            f"{_open_batches_phrase(self.open_batches)}{lost}"
        )

    def stopped(
        self, in_flight: int, open_batches: Sequence[str], unjournaled_batches: Sequence[str]
    ) -> JournalUnwritable:
        """The same failure, saying what the job cut short (and left billing) when it stopped."""
        return JournalUnwritable(
            self.path,
            self.reason,
            in_flight=in_flight,
            open_batches=open_batches,
            unjournaled_batches=unjournaled_batches,
        )


class ModelRefError(ValueError):
    """Text that is not ``provider:model``."""


class InstantError(ValueError):
    """A string that is not an instant kb and JavaScript agree on."""


class ScriptedFault(Exception):
    """A scripted failure: ``kind`` is ``error`` or ``timeout``."""

    def __init__(self, kind: str, prompt: str) -> None:
        self.kind = kind
        super().__init__(f"scripted {kind} for prompt {prompt[:60]!r}")


class MergeClash(Exception):
    """Why the merge cannot stand (the caller names the file: :class:`MergeConflict`)."""


class SignalReceived(BaseException):
    """SIGINT or SIGTERM outside a running phase (inside one, the engine stops itself)."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
