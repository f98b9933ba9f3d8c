"""What every command shares: the root group, the error boundary, the context object.

Errors from the core (``KbError``) become one line on stderr and an exit
code in one place, :func:`exit_code_for`; ``KB_DEBUG=1`` shows the traceback
instead. The clock is read here and only here (``--as-of`` defaults to now).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

from kb.errors import (
    CasAttemptsExhausted,
    ConfigError,
    GitError,
    JobFailedError,
    JobInconclusive,
    JobInterrupted,
    KbError,
    KnowledgeCasError,
    SignalReceived,
    StoreMissingError,
)


def install_signal_handlers() -> None:
    """SIGINT and SIGTERM end a command with one line and exit 130, never a traceback."""

    def received(signum: int, _frame: object) -> None:
        raise SignalReceived(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, received)


if TYPE_CHECKING:
    from kb.engine.batch import BatchState
    from kb.engine.pacing import PaceNote
    from kb.engine.runs import RunKind, RunResult
    from kb.engine.scheduler import Engine, EngineConfig
    from kb.engine.shared_buckets import RateLimitSetting
    from kb.engine.workers import WorkerPool
    from kb.store.filestore import CommitResult, KnowledgeStore

F = TypeVar("F", bound=Callable[..., Any])

#: The one mapping from errors to exit codes (first match wins).
EXIT_CODES: tuple[tuple[type[KbError], int], ...] = (
    (CasAttemptsExhausted, 3),
    (KnowledgeCasError, 3),
    (ConfigError, 2),
    (JobInterrupted, 130),
    (JobFailedError, 1),
    (JobInconclusive, 4),
    (GitError, 1),
    (KbError, 1),
)


def exit_code_for(error: KbError) -> int:
    """The documented exit code of an error: 1 failed, 2 bad input, 3 CAS, 4 inconclusive."""
    for kind, code in EXIT_CODES:
        if isinstance(error, kind):
            return code
    return 1  # pragma: no cover - KbError is in the table


_DURATION_FLAG = re.compile(r"(\d+(\.\d+)?(h|m|s|ms))+")
"""``--deadline`` as a duration: ``90m``, ``2h``, ``1h30m``, ``45s``."""


def _scrubbed(text: str) -> str:
    """``text`` without the environment's credentials (no job named its models)."""
    from kb.engine.requests import scrub_secrets

    return scrub_secrets(text)


class KbClickError(click.ClickException):
    """A core error on its way to stderr with its exit code."""

    def __init__(self, error: KbError, cut: Callable[[str], str] | None = None) -> None:
        # a provider's error text may quote a key: the job's, else the environment's, go
        super().__init__((cut or _scrubbed)(str(error)))
        # click types exit_code as a ClassVar but reads it from the instance.
        self.exit_code = exit_code_for(error)  # type: ignore[misc]
        self.is_error = not isinstance(error, JobInconclusive)

    def show(self, file: IO[Any] | None = None) -> None:
        """``Error: …`` on stderr; an inconclusive job (not a failure) without the prefix."""
        if self.is_error:
            super().show(file)
        else:
            click.echo(self.format_message(), file=file, err=file is None)


def _quiet_after_interrupt() -> None:
    """Calls cut short leave coroutines behind; their warnings at exit are not news."""
    warnings.filterwarnings("ignore", category=RuntimeWarning)


class KbGroup(click.Group):
    """The root group: converts core errors in one place."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; turn a ``KbError`` into its exit code unless ``KB_DEBUG=1``."""
        try:
            return super().invoke(ctx)
        except SignalReceived as received:
            _quiet_after_interrupt()
            app = ctx.find_object(App)
            engine = app.engine if app is not None else None
            committed = app.last_commit() if app is not None else None
            if engine is None:
                raise KbClickError(
                    JobInterrupted(received.signal_name, 0.0, committed=committed)
                ) from None
            stopped = JobInterrupted(
                received.signal_name,
                engine.spent_usd,
                in_flight=engine.in_flight,  # outside a phase: none
                resumable=engine.resumable,
                committed=committed,
            )
            raise KbClickError(stopped) from None
        except BrokenPipeError:
            # `kb show ... | head`: the reader went away; end quietly.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(0)
        except KbError as error:
            if isinstance(error, JobInterrupted):
                _quiet_after_interrupt()
            if os.environ.get("KB_DEBUG") == "1":
                raise
            app = ctx.find_object(App)
            engine = app.engine if app is not None else None
            raise KbClickError(error, engine.cut if engine is not None else None) from error
        except OSError as error:  # a full disk, a vanished directory: one line, exit 1
            if os.environ.get("KB_DEBUG") == "1":
                raise
            where = f": {error.filename}" if error.filename else ""
            raise click.ClickException(f"{error.strerror or error}{where}") from error


from kb.schema import STORE_NAME  # noqa: E402 - the one store name


def find_store(start: Path) -> Path:
    """``rulvar.models.json`` here, else in the nearest parent up to the git work tree's top.

    Outside a git work tree only ``start`` is looked at. When there is none,
    the path it would have here (commands other than ``kb init`` refuse it).
    """
    here = start.absolute()
    top = next((d for d in (here, *here.parents) if (d / ".git").exists()), None)
    searched = (
        [here] if top is None else [d for d in (here, *here.parents) if d.is_relative_to(top)]
    )
    for directory in searched:
        candidate = directory / STORE_NAME
        if candidate.is_file():
            return candidate
    return here / STORE_NAME


@dataclass
class App:
    """What every command receives: the store location and the instant."""

    store_path: Path
    as_of_text: str | None
    creating: bool = False
    """Set by ``kb init``, the one command that may find no store."""
    as_of_source: str = "--as-of"
    """Where ``as_of_text`` came from (``KB_AS_OF`` when the environment set it)."""
    engine: Engine | None = None
    """The engine a job command built (for what it spent, when a signal stops it)."""

    @cached_property
    def as_of(self) -> int:
        """The instant (ms) expiry is judged at: ``--as-of``, or now."""
        return self.instant(None, "--as-of")

    def instant(self, text: str | None, flag: str) -> int:
        """``text`` as an instant (ms); else ``--as-of``; else now (the one clock read)."""
        from kb.errors import InstantError
        from kb.store.ttl import check_claim_instant, instant_from_datetime, parse_flag_instant

        chosen, where = (text, flag) if text is not None else (self.as_of_text, self.as_of_source)
        try:
            if chosen is None:
                return instant_from_datetime(datetime.now(UTC))
            return check_claim_instant(parse_flag_instant(chosen), "the instant")
        except InstantError as exc:
            raise ConfigError(where, str(exc)) from None

    def deadline(self, text: str) -> float:
        """``--deadline``: an instant, or a duration (``90m``, ``2h``, ``1h30m``) from now.

        Wall-clock seconds since the epoch; one that has passed already is refused.
        """
        from kb.engine.pacing import duration_s
        from kb.errors import InstantError
        from kb.store.ttl import parse_flag_instant

        now = datetime.now(UTC).timestamp()
        lasting = duration_s(text) if _DURATION_FLAG.fullmatch(text.strip()) else None
        if lasting is not None:
            if lasting <= 0:
                raise ConfigError("--deadline", f"{text} must lie in the future")
            return now + lasting
        try:
            at = parse_flag_instant(text) / 1000.0
        except InstantError:
            raise ConfigError(
                "--deadline",
                f"{text!r} is neither an instant (2026-12-06T06:00:00Z) nor a duration (90m, 2h)",
            ) from None
        if at <= now:
            raise ConfigError("--deadline", f"{text} has passed already")
        return at

    writing: bool = False
    """Set by a command that writes (:meth:`settle`): it settles, rather than reports,
    a commit a kill interrupted."""
    reports_pending: bool = False
    """Set by ``kb verify``, which reports an interrupted commit as an issue itself."""

    @cached_property
    def store(self) -> KnowledgeStore:
        """The store; a store that does not exist is refused (never created).

        A command that only reads says so when a commit a kill interrupted
        waits to be settled, and what settles it.
        """
        from kb.store.filestore import KnowledgeStore

        if not self.creating and not self.store_path.exists():
            raise StoreMissingError(self.store_path)
        store = KnowledgeStore(self.store_path)
        if not (self.writing or self.creating or self.reports_pending):
            pending = store.pending_commit()
            if pending is not None:
                click.echo(f"warning: {pending}", err=True)
        return store

    def last_commit(self) -> str | None:
        """The subject of the last commit this command made (``None``: none)."""
        store = self.__dict__.get("store")  # only a store this command opened
        return store.commits[-1] if store is not None and store.commits else None

    def settle(self) -> KnowledgeStore:
        """The store for a command that writes, after settling an interrupted commit.

        Finished when every file of it was complete on disk, else undone; one
        line on stderr says which.
        """
        self.writing = True
        store = self.store
        said = store.settle().describe()
        if said is not None:
            click.echo(f"kb: {said}", err=True)
        return store


pass_app = click.make_pass_decorator(App)


STORE_HELP = (
    "The knowledge store file (env KB_STORE; default: rulvar.models.json here or in "
    "the nearest parent up to the git work tree's top)."
)
AS_OF_HELP = "Judge expiry at this ISO instant instead of now (env KB_AS_OF)."


@click.group(cls=KbGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    "store_path",
    envvar="KB_STORE",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help=STORE_HELP,
)
@click.option("--as-of", "as_of", envvar="KB_AS_OF", default=None, help=AS_OF_HELP)
@click.version_option(package_name="kb")
@click.pass_context
def cli(ctx: click.Context, store_path: Path | None, as_of: str | None) -> None:
    """Evidence-backed knowledge about which LLM is good at which kind of task."""
    ctx.obj = App(store_path=store_path or find_store(Path.cwd()), as_of_text=as_of)
    ctx.obj.as_of_source = _as_of_source(ctx)


def _set_store(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    if value is not None:
        ctx.ensure_object(App).store_path = value


def _set_as_of(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        app = ctx.ensure_object(App)
        app.as_of_text = value
        app.as_of_source = _as_of_source(ctx)


def _as_of_source(ctx: click.Context) -> str:
    """What set the instant: ``KB_AS_OF`` (the environment) or ``--as-of``."""
    from_env = ctx.get_parameter_source("as_of") is click.core.ParameterSource.ENVIRONMENT
    return "KB_AS_OF" if from_env else "--as-of"


def global_options(func: F) -> F:
    """``--store`` and ``--as-of`` after the subcommand too (``kb list --as-of 2027-01-01``)."""
    func = click.option(
        "--store",
        type=click.Path(dir_okay=False, path_type=Path),
        expose_value=False,
        callback=_set_store,
        help=STORE_HELP,
    )(func)
    return click.option("--as-of", expose_value=False, callback=_set_as_of, help=AS_OF_HELP)(func)


@dataclass(frozen=True)
class EngineFlags:
    """The engine flags a job command takes: concurrency and a cassette."""

    concurrency: int | None
    record: Path | None
    replay: Path | None
    deadline: str | None = None
    """``--deadline`` as given: an instant, or a duration from now."""


def build_engine(
    app: App, config: EngineConfig, flags: EngineFlags, workers: WorkerPool | None = None
) -> Engine:
    """An engine with the cassette ``--record``/``--replay`` ask for (kept on ``app``)."""
    from kb.engine.cassette import Cassette
    from kb.engine.scheduler import Engine

    if flags.record and flags.replay:
        raise ConfigError("--record/--replay", "use one or the other")
    cassette = (
        Cassette(flags.replay, "replay")
        if flags.replay
        else Cassette(flags.record, "record")
        if flags.record
        else None
    )
    if flags.deadline is not None:
        config = replace(config, deadline=app.deadline(flags.deadline))
    if flags.replay:
        config = replace(config, rate_limits=None)  # a replay calls no provider
    elif config.rate_limits is None:
        config = replace(config, rate_limits=shared_buckets_setting(None))
    app.engine = Engine.build(config, cassette=cassette, workers=workers)
    app.engine.on_note = lambda line: click.echo(f"waiting: {line}", err=True)
    app.engine.on_warning = lambda line: click.echo(f"warning: {line}", err=True)
    click.get_current_context().call_on_close(app.engine.close)
    if app.engine.sharing is not None:
        app.engine.sharing.probe()  # a Redis that refuses the setting: exit 2 before any call
    return app.engine


def shared_buckets_setting(
    spec_value: str | None, spec_folder: Path | None = None
) -> RateLimitSetting:
    """Where this job shares its rate-limit buckets: ``KB_RATE_LIMITS``, the spec, the default."""
    from kb.engine.shared_buckets import rate_limit_setting

    uid = os.getuid() if hasattr(os, "getuid") else 0  # (no uid on Windows)
    return rate_limit_setting(spec_value, os.environ, uid, spec_folder)


def start_workers(*, dry_run: bool, replay: Path | None) -> WorkerPool | None:
    """Worker processes for a live job, started now so they import litellm while kb plans.

    ``KB_WORKERS`` sets how many (``0``: every call in this process); the
    default is :data:`kb.engine.workers.DEFAULT_WORKERS` (none), and an empty
    value counts as unset. They are stopped when the command ends, however it ends.
    """
    from kb.engine.workers import DEFAULT_WORKERS, WorkerPool

    raw = os.environ.get("KB_WORKERS", "").strip() or str(DEFAULT_WORKERS)  # empty: unset
    if not raw.isdigit() or int(raw) > 64:
        raise ConfigError("KB_WORKERS", f"must be a whole number from 0 to 64, got {raw!r}")
    if dry_run or replay is not None or int(raw) == 0:
        return None
    pool = WorkerPool(int(raw))
    pool.start()
    click.get_current_context().call_on_close(pool.stop)
    return pool


@contextmanager
def progress_bar(
    total: int,
    *,
    enabled: bool,
    planned: Mapping[RunKind, int] | None = None,
    grade: Callable[[RunResult], tuple[str, bool] | None] | None = None,
) -> Iterator[Callable[[RunResult | BatchState | PaceNote], None]]:
    """A progress bar on stderr, only for a terminal; yields the callback.

    It takes each settled run, each poll of a batch (batch mode) and each
    pacing note. Beside the bar: the phase, done/planned per kind, errors,
    the spend so far, the call rate and the 429s (once a provider spoke of
    its rate limits), and each open batch's status and counts.
    """
    if not enabled or total == 0 or not sys.stderr.isatty():
        yield lambda _result: None
        return
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from kb.engine.pacing import PaceNote
    from kb.engine.progress import RunTally
    from kb.engine.runs import RunResult

    tally = RunTally(planned or {"target": total}, grade=grade)
    from rich.console import Console

    columns = (BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(escape(tally.describe()), total=total)

        def advance(result: RunResult | BatchState | PaceNote) -> None:
            if isinstance(result, RunResult):
                tally.add(result)
                progress.update(task, advance=1, description=escape(tally.describe()))
            elif isinstance(result, PaceNote):  # a call came back: the rate, the 429s
                tally.add_pace(result)
                progress.update(task, description=escape(tally.describe()))
            else:  # a batch was polled: what it has done so far, no run settled yet
                tally.add_batch(result)
                progress.update(task, description=escape(tally.describe()))

        yield advance


def echo_json(value: Any) -> None:
    """JSON on stdout, numbers as JavaScript prints them (``1``, not ``1.0``), like the store."""
    from kb.store.canonical import js_stringify

    click.echo(js_stringify(value, indent=2))


def echo_commit(result: CommitResult, app: App) -> None:
    """The commit line (subject and git commit), then any warnings."""
    git = f" [git {result.git_commit[:12]}]" if result.git_commit else ""
    click.echo(f"{result.message}{git}")
    echo_warnings(app)


def echo_warnings(app: App) -> None:
    """What the store asked the user to know although the command succeeded.

    And each model the job stopped calling (its first calls all refused alike).
    """
    for warning in app.store.warnings:
        click.echo(f"warning: {warning}", err=True)
    for stopped in app.engine.refusals.stopped if app.engine is not None else []:
        click.echo(f"stopped: {stopped.line()}", err=True)


def _completion_store(ctx: click.Context) -> KnowledgeStore | None:
    from kb.store.filestore import KnowledgeStore

    root = ctx.find_root()
    given = root.params.get("store_path") if root is not None else None
    path = Path(given) if given else find_store(Path.cwd())
    return KnowledgeStore(path) if path.exists() else None


def complete_claim_ids(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion: the store's claim ids that start with what was typed."""
    try:
        store = _completion_store(ctx)
        if store is None:
            return []
        return [i for i in store.read().index if i.startswith(incomplete)][:200]
    except Exception:  # noqa: BLE001 - completion never fails the shell
        return []


def complete_report_ids(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion: report ids with evidence beside the store."""
    try:
        store = _completion_store(ctx)
        if store is None:
            return []
        found = {
            path.name.removesuffix(".report.json")
            for directory in store.home.evidence_dirs()
            if directory.is_dir()
            for path in directory.glob("*.report.json")
        }
        return sorted(i for i in found if i.startswith(incomplete))[:200]
    except Exception:  # noqa: BLE001 - completion never fails the shell
        return []
