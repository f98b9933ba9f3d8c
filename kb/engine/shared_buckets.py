"""Rate-limit buckets shared by every process that calls with one key (SPEC 14.4).

A bucket's pace (:class:`kb.engine.pacing.BucketPace`) mirrors the provider's
bucket from its headers, takes off the calls in flight and holds the bucket
after a 429. Four shards of one night on one key, each pacing alone, each
believe they have the whole bucket: they send four times what it holds, and a
third of their calls come back 429. Shared, the bucket's state — the newest
reading, every process's calls in flight, the 429 hold, the learned cost of a
call — is one document, read and written whole under a lock by each process
whenever it sends a call or hears one back:

* **On one machine** (the default) it is a file in a per-user runtime folder
  (``$XDG_RUNTIME_DIR/kb``, else ``kb-<uid>`` in the temp folder), one per
  bucket, under an exclusive ``flock``: shards in separate clones on one
  runner share it without being told.
* **Across machines** it is a Redis key (``rate_limits = "redis://HOST:PORT/DB"``
  in ``[sweep]``, or ``KB_RATE_LIMITS``), updated atomically (``WATCH`` and
  ``MULTI``, retried when another process wrote in between) and expiring when
  no process touched it for :data:`IDLE_S`.

The bucket's id is what :func:`kb.engine.scheduler` keys a bucket by: the
provider, its endpoint, the *name* of the key's variable and the model; a
key's value is never in it. What each process keeps for itself: its own
concurrency window (the engine's ceiling, halved on its own 429s), which
calls are its own, and whether it said a spent quota.

A share that fails (Redis down or unreachable, a folder that cannot be
written) is said once and the job paces per process from then on: pacing is
an optimisation, never a reason a night fails. A process killed with calls in
flight leaves them in the document; they are dropped when a process on its
machine sees its pid gone, or after :data:`STALE_IN_FLIGHT_S` from anywhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from kb.engine.pacing import BucketMirror, BucketPace, RateReading
from kb.errors import ConfigError

SETTING_ENV = "KB_RATE_LIMITS"
"""The environment variable that chooses where buckets are shared (over the spec's)."""
IDLE_S = 900.0
"""A bucket's shared state no process touched for this long is forgotten (Redis: expires)."""
STALE_IN_FLIGHT_S = 900.0
"""A call in flight this long belongs to a process that died on another machine."""
POLL_S = 0.5
"""A process waiting on a shared bucket looks again at least this often: another
process's answer may have brought a reading with room, or a 429's hold."""
FORMAT = 1

Kind = Literal["file", "redis", "process"]
T = TypeVar("T")


@dataclass(frozen=True)
class RateLimitSetting:
    """Where a job's buckets are shared: a folder, a Redis URL, or nowhere (``process``)."""

    kind: Kind
    where: str = ""

    @property
    def shown(self) -> str:
        """The setting as a line may show it (a Redis URL without its password)."""
        if self.kind == "redis":
            parts = urlsplit(self.where)
            host = parts.hostname or ""
            port = f":{parts.port}" if parts.port else ""
            return f"{parts.scheme}://{host}{port}{parts.path}"
        return f"file:{self.where}" if self.kind == "file" else "process"


def default_folder(environ: Mapping[str, str], uid: int) -> str:
    """The per-user runtime folder: ``$XDG_RUNTIME_DIR/kb``, else the temp folder's ``kb-<uid>``."""
    runtime = environ.get("XDG_RUNTIME_DIR", "").strip()
    if runtime:
        return str(Path(runtime) / "kb")
    return str(Path(tempfile.gettempdir()) / f"kb-{uid}")


def rate_limit_setting(
    spec_value: str | None, environ: Mapping[str, str], uid: int, spec_folder: Path | None = None
) -> RateLimitSetting:
    """What ``KB_RATE_LIMITS`` (else the spec's ``rate_limits``, else the default) says.

    ``file:DIR`` shares through a folder, ``redis://HOST:PORT/DB`` (or
    ``rediss://``) through Redis, ``process`` not at all; unset, the per-user
    runtime folder (:func:`default_folder`). A relative ``file:`` folder in the
    spec is the spec's folder's (as a dataset's path is); in ``KB_RATE_LIMITS``,
    the current folder's.
    """
    from_env = environ.get(SETTING_ENV, "").strip()
    source = SETTING_ENV if from_env else "rate_limits"
    raw = from_env or (spec_value or "").strip()
    if not raw:
        return RateLimitSetting("file", default_folder(environ, uid))
    if raw == "process":
        return RateLimitSetting("process")
    if raw.startswith("file:"):
        folder = raw.removeprefix("file:").strip()
        if not folder:
            raise ConfigError(source, "file: needs a folder (file:DIR)")
        where = Path(folder).expanduser()
        if not from_env and spec_folder is not None and not where.is_absolute():
            where = spec_folder / where
        return RateLimitSetting("file", str(where))
    parts = urlsplit(raw)
    if parts.scheme in ("redis", "rediss"):
        database = parts.path.strip("/")
        try:
            port = parts.port
        except ValueError:
            port = -1
        if port == -1:
            raise ConfigError(source, f"{_safe(raw)}: the port is not a number from 1 to 65535")
        if not parts.hostname or (database and not database.isdigit()):
            raise ConfigError(source, f"{_safe(raw)} is not redis://HOST:PORT/DB")
        from redis.connection import parse_url

        try:
            parse_url(raw)  # type: ignore[no-untyped-call]  # its query, as the client reads it
        except ValueError as error:
            raise ConfigError(source, f"{_safe(raw)}: {error}") from None
        return RateLimitSetting("redis", raw)
    raise ConfigError(
        source, f"must be file:DIR, redis://HOST:PORT/DB or process, got {_safe(raw)!r}"
    )


def _safe(url: str) -> str:
    """``url`` as a message may quote it: no user, password (either may be a token) or query.

    redis reads ``?password=`` too, so the query never shows; a cut one is marked.
    """
    head, query, _ = url.partition("?")
    scheme, sep, rest = head.partition("://")
    if not sep:
        return url if not query else f"{head}?…"
    user, at, where = rest.rpartition("@")
    shown = f"{scheme}://***@{where}" if at else head
    return f"{shown}?…" if query else shown


class ShareUnavailable(Exception):
    """The shared state could not be read or written (the job paces per process)."""


class BucketShare:
    """Atomic read-modify-write of one JSON document per bucket id."""

    setting: RateLimitSetting

    def update(
        self, bucket: str, change: Callable[[dict[str, Any] | None], dict[str, Any]]
    ) -> None:
        """Replace ``bucket``'s document with ``change(document)``, atomically.

        ``change`` may be called more than once (a concurrent writer won): it
        must compute from what it is given.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Let go of what the share holds open."""


MAX_DOCUMENT_BYTES = 1 << 20
"""A shared document larger than this is not read (a hostile or runaway one: forgotten)."""
LOCK_WAIT_S = 2.0
"""How long a step waits for the folder's lock before the share counts as lost (a
process stopped inside it, a hung network folder)."""
SLOW_STEP_S = 0.1
"""A share whose steps take longer than this on average (over :data:`SLOW_STEPS`) is
too slow to pace by (a distant Redis): the job paces per process."""
SLOW_STEPS = 20
OFFSET_MOVED_S = 0.01
"""The wall clock moved this far from the monotonic one: a step takes the new distance."""


def parse_document(raw: bytes | None) -> dict[str, Any] | None:
    """A shared document, or ``None`` when absent, too large or not a JSON object."""
    if not raw or len(raw) > MAX_DOCUMENT_BYTES:
        return None
    try:
        found = json.loads(raw)
    except Exception:  # noqa: BLE001 - torn, hostile or nested past the recursion limit
        return None
    return found if isinstance(found, dict) else None


class FileShare(BucketShare):
    """A folder of one file per bucket, each updated under an exclusive ``flock``.

    The folder must be this user's own and closed to others (mode ``0700``): a
    folder another user made first at the predictable default path
    (``/tmp/kb-<uid>``) is refused, never written into. Files are opened
    without following links and written ``0600``.
    """

    def __init__(self, setting: RateLimitSetting) -> None:
        self.setting = setting
        self.folder = Path(setting.where)
        self._locks: dict[str, int] = {}
        self._checked = False

    def _own_folder(self) -> None:
        if self._checked:
            return
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = os.lstat(self.folder)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
            raise ShareUnavailable(f"{self.setting.shown}: not a folder of this user's own")
        if found.st_mode & 0o077:
            raise ShareUnavailable(
                f"{self.setting.shown}: open to other users (mode "
                f"{stat.S_IMODE(found.st_mode):o}; chmod 700 it)"
            )
        self._checked = True

    def _lock_fd(self, name: str) -> int:
        found = self._locks.get(name)
        if found is None:
            self._own_folder()
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
            found = os.open(self.folder / f"{name}.lock", flags, 0o600)
            self._locks[name] = found
        return found

    def _lock(self, fd: int) -> None:
        import fcntl  # (POSIX: a Windows kb paces per process, the share lost at once)

        waited = 0.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if waited >= LOCK_WAIT_S:
                    raise ShareUnavailable(
                        f"{self.setting.shown}: its lock was held for {LOCK_WAIT_S:.0f} s "
                        "(a kb process stopped inside it?)"
                    ) from None
                time.sleep(0.002)  # another process's step takes about a millisecond
                waited += 0.002

    def update(
        self, bucket: str, change: Callable[[dict[str, Any] | None], dict[str, Any]]
    ) -> None:
        """See :meth:`BucketShare.update`."""
        name = hashlib.sha256(bucket.encode()).hexdigest()[:32]
        path = self.folder / f"{name}.json"
        try:
            fd = self._lock_fd(name)
            self._lock(fd)
            try:
                try:
                    reader = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                except FileNotFoundError:
                    raw = None
                else:
                    with os.fdopen(reader, "rb") as opened:
                        raw = opened.read(MAX_DOCUMENT_BYTES + 1)
                text = json.dumps(change(parse_document(raw))).encode()
                scratch = path.with_name(f"{path.name}.{os.getpid()}")
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(scratch)  # a killed step's leftover (never followed: unlinked)
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                with os.fdopen(os.open(scratch, flags, 0o600), "wb") as out:
                    out.write(text)
                os.replace(scratch, path)
            finally:
                _unlock(fd)
        except OSError as error:
            raise ShareUnavailable(f"{self.setting.shown}: {error.strerror or error}") from error

    def close(self) -> None:
        """Close the lock files."""
        for fd in self._locks.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._locks.clear()


def _unlock(fd: int) -> None:
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_UN)


class RedisShare(BucketShare):
    """One Redis key per bucket, updated with ``WATCH``/``MULTI`` and expiring when idle."""

    def __init__(self, setting: RateLimitSetting) -> None:
        import redis

        self.setting = setting
        self._client = redis.Redis.from_url(
            setting.where, socket_timeout=2.0, socket_connect_timeout=2.0
        )

    def update(
        self, bucket: str, change: Callable[[dict[str, Any] | None], dict[str, Any]]
    ) -> None:
        """See :meth:`BucketShare.update`."""
        import redis

        key = f"kb:rate-limits:{bucket}"
        try:
            with self._client.pipeline() as pipe:
                while True:
                    try:
                        pipe.watch(key)  # type: ignore[no-untyped-call]
                        raw = pipe.get(key)
                        found = parse_document(raw if isinstance(raw, bytes) else None)
                        text = json.dumps(change(found))
                        pipe.multi()
                        pipe.set(key, text, px=int(IDLE_S * 1000))
                        pipe.execute()
                        return
                    except redis.WatchError:
                        continue  # another process wrote first: read again
        except redis.RedisError as error:
            raise ShareUnavailable(f"{self.setting.shown}: {error}") from error

    def probe(self) -> None:
        """Ask Redis once, before any call: a URL it refuses is an error, not a fallback.

        A wrong password or database is the setting's mistake, and a night that
        quietly paced per process would hide it (CI stays green, 429s return):
        :class:`~kb.errors.ConfigError`. A Redis that is down or unreachable
        raises :class:`ShareUnavailable` (the night goes on, per process).
        """
        import redis

        try:
            self._client.ping()
        except (redis.ConnectionError, redis.TimeoutError) as error:
            said = str(error)
            if not _refused(error, said):
                raise ShareUnavailable(f"{self.setting.shown}: {error}") from error
            raise ConfigError("rate_limits", f"{self.setting.shown}: {_why(said)}") from None
        except redis.RedisError as error:  # refused: a password, a database, a protocol
            raise ConfigError("rate_limits", f"{self.setting.shown}: {_why(str(error))}") from None

    def close(self) -> None:
        """Close the connection pool."""
        with contextlib.suppress(Exception):
            self._client.close()


def _refused(error: Exception, said: str) -> bool:
    """Whether a connection error is Redis refusing the setting (a password), not a network."""
    import redis

    return isinstance(error, redis.AuthenticationError) or any(
        word in said for word in ("HELLO must be called", "NOAUTH", "username-password", "AUTH")
    )


def _why(said: str) -> str:
    if "HELLO must be called" in said or "NOAUTH" in said:
        return "it needs a password (redis://:PASSWORD@HOST:PORT/DB)"
    return said


def open_share(setting: RateLimitSetting | None) -> BucketShare | None:
    """The share a setting names (``None`` for ``process``); nothing is opened yet."""
    if setting is None or setting.kind == "process":
        return None
    return RedisShare(setting) if setting.kind == "redis" else FileShare(setting)


UNSHARED_PROVIDERS = frozenset({"scripted", "local"})
"""Providers whose calls never leave this process's machine (no provider's limits to share)."""


@dataclass
class SharedBuckets:
    """A job's share of buckets: makes their paces (:attr:`RateLimits.make`) and says a loss."""

    share: BucketShare | None
    owner: str
    """Who this process's calls in flight belong to: machine, pid and a random tag."""
    offset: float
    """Wall-clock minus monotonic seconds, read once: the document's times are wall-clock."""
    on_lost: Callable[[str], None] | None = None
    """Told once, in one line, when the share failed and the job paces alone."""
    steps: int = 0
    step_s: float = 0.0

    @classmethod
    def of(cls, share: BucketShare, wall_now: float, monotonic_now: float) -> SharedBuckets:
        """The sharing of ``share`` by this process, its clocks as read now."""
        owner = f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(4)}"
        return cls(share, owner, wall_now - monotonic_now)

    def __call__(self, key: Hashable, ceiling: int) -> BucketPace | None:
        """The shared pace of the bucket ``key`` (``None``: a bucket kept to this process)."""
        if not isinstance(key, tuple) or not key or key[0] in UNSHARED_PROVIDERS:
            return None
        bucket = "|".join(_public(str(part)) for part in key)
        return SharedBucketPace(
            ceiling, sharing=self, bucket=bucket, owner=self.owner, offset=self.offset
        )

    def timed(self, seconds: float) -> None:
        """A step took ``seconds``: a share too slow to pace by is given up (one line)."""
        self.steps += 1
        self.step_s += seconds
        if self.steps >= SLOW_STEPS and self.step_s / self.steps > SLOW_STEP_S:
            self.lost(
                ShareUnavailable(
                    f"{self.share.setting.shown if self.share else 'the share'}: its steps "
                    f"take {1000 * self.step_s / self.steps:.0f} ms on average (more than "
                    f"{1000 * SLOW_STEP_S:.0f} ms: too far to pace by)"
                )
            )
        if self.steps >= SLOW_STEPS:
            self.steps, self.step_s = 0, 0.0  # judged over the latest steps, not the night

    def lost(self, error: ShareUnavailable) -> None:
        """The share failed: from now on every bucket paces in this process alone."""
        share, self.share = self.share, None
        if share is None:
            return
        share.close()
        if self.on_lost is not None:
            said = str(error).rstrip(". ")
            self.on_lost(f"rate limits shared through {said}; pacing per process from now on")

    def probe(self) -> None:
        """Ask the share once before any call (only Redis can refuse a setting).

        A Redis that refuses it raises ``ConfigError``; one that is down is said in
        one line and the job paces per process.
        """
        if isinstance(self.share, RedisShare):
            try:
                self.share.probe()
            except ShareUnavailable as error:
                self.lost(error)

    def close(self) -> None:
        """Let go of the share (the job ended)."""
        if self.share is not None:
            self.share.close()


def _public(part: str) -> str:
    """A bucket id's part as others may read it: an endpoint without user, password or query."""
    if "://" not in part:
        return part
    parts = urlsplit(part)
    host = parts.hostname or ""
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _alive(owner: str, host: str) -> bool:
    """Whether the process ``owner`` names may still run (only this machine's can be checked)."""
    parts = owner.split("/")
    if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
        return True
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):
        return True  # another user's process (it exists), or no pid at all
    return True


@dataclass(eq=False)
class SharedBucketPace(BucketPace):
    """A :class:`BucketPace` whose state is the share's, read and written around each step.

    Times in the document are wall-clock seconds (comparable across
    processes and, near enough, machines); this process's steps use its
    monotonic clock, ``offset`` apart (wall − monotonic, read once).
    """

    sharing: SharedBuckets | None = None
    bucket: str = ""
    owner: str = ""
    offset: float = 0.0
    owners: dict[int, str] = field(default_factory=dict)
    """Send number → the process whose call it is, for the calls in flight."""

    def own_in_flight(self) -> int:
        """The calls in flight that are this process's (its window counts only its own)."""
        return sum(1 for seq in self.in_flight if self.owners.get(seq, self.owner) == self.owner)

    def send(self, tokens: float, now: float) -> int:
        """See :meth:`BucketPace.send` (the call is this process's)."""
        seq = super().send(tokens, now)
        self.owners[seq] = self.owner
        return seq

    def try_send(self, tokens: float, now: float) -> tuple[int | None, float | None]:
        """See :meth:`BucketPace.try_send`, on the shared state."""
        sent, wait = self._shared(now, lambda: super(SharedBucketPace, self).try_send(tokens, now))
        if sent is None and self.sharing is not None and self.sharing.share is not None:
            wait = POLL_S if wait is None else min(wait, POLL_S)
        return sent, wait

    def unsent(self, seq: int) -> None:
        """See :meth:`BucketPace.unsent`, on the shared state."""
        self._shared(self.last_sent_at, lambda: super(SharedBucketPace, self).unsent(seq))

    def answered(
        self, seq: int, reading: RateReading | None, limited: bool, now: float
    ) -> float | None:
        """See :meth:`BucketPace.answered`, on the shared state."""
        return self._shared(
            now, lambda: super(SharedBucketPace, self).answered(seq, reading, limited, now)
        )

    def _shared(self, now: float | None, step: Callable[[], T]) -> T:
        sharing = self.sharing
        share = sharing.share if sharing is not None else None
        if sharing is None or share is None:
            self._alone()
            return step()
        mine = (self.window, self.shrunk_at, self.quota_told)
        # the wall clock's distance from this process's monotonic one, read at each step:
        # a suspended machine or a stepped clock moves it (its jitter, microseconds, not)
        began = time.monotonic()
        if abs(time.time() - began - self.offset) > OFFSET_MOVED_S:
            self.offset = time.time() - began
        before = self._dump(now)
        done: list[T] = []

        def change(found: dict[str, Any] | None) -> dict[str, Any]:
            # each attempt starts from the state before the first: a step a concurrent
            # writer undid (Redis retries) must leave nothing behind (a phantom send)
            self._restore(mine, before, now)
            self._load(found, now)
            done[:] = [step()]
            return self._dump(now)

        try:
            share.update(self.bucket, change)
            sharing.timed(time.monotonic() - began)
        except Exception as error:  # noqa: BLE001 - pacing never fails a night: paced alone
            if not isinstance(error, ShareUnavailable):
                error = ShareUnavailable(f"{share.setting.shown}: {type(error).__name__}: {error}")
            sharing.lost(error)
            self._restore(mine, before, now)
            self._alone()
            return step()
        return done[0]

    def _restore(
        self, mine: tuple[float, int, bool], before: dict[str, Any], now: float | None
    ) -> None:
        """Back to the state ``before`` a step and this process's own ``mine``."""
        self.window, self.shrunk_at, self.quota_told = mine
        self.in_flight, self.owners, self.sent = {}, {}, 0
        self._take(before, None)

    def _alone(self) -> None:
        """Forget the other processes' calls in flight (their answers never come here)."""
        for seq in [s for s in self.in_flight if self.owners.get(s, self.owner) != self.owner]:
            del self.in_flight[seq]
        self.owners = {s: o for s, o in self.owners.items() if s in self.in_flight}

    def _wall(self, at: float) -> float:
        return at + self.offset

    def _local(self, at: float) -> float:
        return at - self.offset

    def _dump(self, now: float | None) -> dict[str, Any]:
        touched = self._wall(now) if now is not None else None
        return {
            "format": FORMAT,
            "bucket": self.bucket,
            "touched": touched,
            "sent": self.sent,
            "in_flight": [
                [seq, cost, self._wall(at), self.owners.get(seq, self.owner)]
                for seq, (cost, at) in self.in_flight.items()
            ],
            "hold_until": self._wall(self.hold_until),
            "requests": self._mirror_dump(self.requests),
            "tokens": self._mirror_dump(self.tokens),
            "tokens_per_call": self.tokens_per_call,
            "limited_seqs": sorted(self.limited_seqs),
            "reading_level": self.reading_level,
            "reading_at": self._wall(self.reading_at),
            "last_sent_at": None if self.last_sent_at is None else self._wall(self.last_sent_at),
            "doubted": self.doubted,
        }

    def _mirror_dump(self, mirror: BucketMirror) -> list[Any]:
        return [mirror.limit, mirror.rate_per_s, mirror.level, self._wall(mirror.at), mirror.seq]

    def _load(self, found: dict[str, Any] | None, now: float | None) -> None:
        """Take the document's state (absent, idle, foreign or malformed: keep this process's)."""
        if found is None or found.get("format") != FORMAT or found.get("bucket") != self.bucket:
            self._alone()
            return
        touched = found.get("touched")
        wall_now = self._wall(now) if now is not None else None
        if (
            isinstance(touched, int | float)
            and wall_now is not None
            and touched < wall_now - IDLE_S
        ):
            self._alone()  # idle: what it says is too old to pace by
            return
        try:
            self._take(found, wall_now)
        except Exception:  # noqa: BLE001 - whatever a hostile writer put there: forgotten
            self._alone()

    def _take(self, found: dict[str, Any], wall_now: float | None) -> None:
        """Take ``found``'s state, all of it or (a value kb never writes: raises) none."""
        host = self.owner.split("/")[0]
        mine = {s: v for s, v in self.in_flight.items() if self.owners.get(s) == self.owner}
        in_flight: dict[int, tuple[float, float]] = {}
        owners: dict[int, str] = {}
        if len(found["in_flight"]) > MAX_IN_FLIGHT:
            raise ValueError("more calls in flight than any job sends")
        for seq, cost, at, owner in found["in_flight"]:
            seq, cost, at, owner = _count(seq), _finite(cost), _finite(at), str(owner)
            if owner != self.owner:
                if wall_now is not None and at < wall_now - STALE_IN_FLIGHT_S:
                    continue
                if not _alive(owner, host):
                    continue
            in_flight[seq] = (cost, self._local(at))
            owners[seq] = owner
        for seq, value in mine.items():  # never lose this process's own calls
            in_flight.setdefault(seq, value)
            owners.setdefault(seq, self.owner)
        sent = max(_count(found["sent"]), self.sent)
        hold_until = self._local(_finite(found["hold_until"]))
        requests, tokens = self._mirror(found["requests"]), self._mirror(found["tokens"])
        per_call = found["tokens_per_call"]
        tokens_per_call = None if per_call is None else _finite(per_call)
        if len(found["limited_seqs"]) > MAX_IN_FLIGHT:
            raise ValueError("more 429s remembered than any job meets")
        limited_seqs = {_count(s) for s in found["limited_seqs"]}
        reading_level = _finite(found["reading_level"])
        reading_at = self._local(_finite(found["reading_at"]))
        last = found["last_sent_at"]
        last_sent_at = None if last is None else self._local(_finite(last))
        doubted = found["doubted"]
        if not isinstance(doubted, bool):
            raise ValueError(f"not a boolean: {doubted!r}")
        self.sent, self.in_flight, self.owners = sent, in_flight, owners
        self.hold_until, self.requests, self.tokens = hold_until, requests, tokens
        self.tokens_per_call, self.limited_seqs = tokens_per_call, limited_seqs
        self.reading_level, self.reading_at = reading_level, reading_at
        self.last_sent_at, self.doubted = last_sent_at, doubted

    def _mirror(self, raw: list[Any]) -> BucketMirror:
        limit, rate, level, at, seq = raw
        return BucketMirror(
            None if limit is None else _finite(limit),
            _finite(rate),
            _finite(level),
            self._local(_finite(at)),
            _count(seq + 1) - 1,  # -1: no reading yet
        )


MAX_IN_FLIGHT = 10_000
"""More calls in flight than this (or 429s remembered) is not a document kb wrote."""


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
        raise ValueError(f"not a count: {value!r}")
    return value


def _finite(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    return float(value)
