"""The ``kb`` command line: thin commands over the public core.

Every command parses its options, calls one or two core functions and
prints. Errors from the core (``KbError``) become one line on stderr and
an exit code in one place, :func:`exit_code_for`; ``KB_DEBUG=1`` shows the
traceback instead. The clock is read here and only here (``--as-of``
defaults to now).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from kb.errors import (
    CasAttemptsExhausted,
    ConfigError,
    GitError,
    JobFailedError,
    KbError,
    KnowledgeCasError,
)

F = TypeVar("F", bound=Callable[..., Any])

#: The one mapping from errors to exit codes (first match wins).
EXIT_CODES: tuple[tuple[type[KbError], int], ...] = (
    (CasAttemptsExhausted, 3),
    (KnowledgeCasError, 3),
    (ConfigError, 2),
    (JobFailedError, 1),
    (GitError, 1),
    (KbError, 1),
)


def exit_code_for(error: KbError) -> int:
    """The documented exit code of an error: 1 failed job, 2 bad input, 3 CAS exhausted."""
    for kind, code in EXIT_CODES:
        if isinstance(error, kind):
            return code
    return 1  # pragma: no cover - KbError is in the table


class KbClickError(click.ClickException):
    """A core error on its way to stderr with its exit code."""

    def __init__(self, error: KbError) -> None:
        super().__init__(str(error))
        # click types exit_code as a ClassVar but reads it from the instance.
        self.exit_code = exit_code_for(error)  # type: ignore[misc]


class KbGroup(click.Group):
    """The root group: converts core errors in one place."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; turn a ``KbError`` into its exit code unless ``KB_DEBUG=1``."""
        try:
            return super().invoke(ctx)
        except KbError as error:
            if os.environ.get("KB_DEBUG") == "1":
                raise
            raise KbClickError(error) from error
        except OSError as error:  # a full disk, a vanished directory: one line, exit 1
            if os.environ.get("KB_DEBUG") == "1":
                raise
            where = f": {error.filename}" if error.filename else ""
            raise click.ClickException(f"{error.strerror or error}{where}") from error


@dataclass
class App:
    """What every command receives: the store location and the instant."""

    store_path: Path
    as_of_text: str | None

    @cached_property
    def as_of(self) -> int:
        """The instant (ms) expiry is judged at: ``--as-of``, or now."""
        return self.instant(None, "--as-of")

    def instant(self, text: str | None, flag: str) -> int:
        """``text`` as an instant (ms); else ``--as-of``; else now (the one clock read)."""
        from kb.store.ttl import (
            InstantError,
            check_claim_instant,
            instant_from_datetime,
            parse_instant,
        )

        chosen, where = (text, flag) if text is not None else (self.as_of_text, "--as-of")
        try:
            if chosen is None:
                return instant_from_datetime(datetime.now(UTC))
            return check_claim_instant(parse_instant(chosen), where)
        except InstantError as exc:
            raise ConfigError(where, str(exc)) from None

    @cached_property
    def store(self) -> Any:
        """The writable store (``KnowledgeStore``)."""
        from kb.store.filestore import KnowledgeStore

        return KnowledgeStore(self.store_path)


pass_app = click.make_pass_decorator(App)


DEFAULT_ATTEMPTS = 3
#: With --push every concurrent publisher is a conflict, so the default is roomier.
DEFAULT_PUSH_ATTEMPTS = 10


def attempts_option(func: F) -> F:
    """``--attempts N``: how many times the rebase loop retries a CAS conflict."""
    return click.option(
        "--attempts",
        type=int,
        default=None,
        show_default=f"{DEFAULT_ATTEMPTS}, or {DEFAULT_PUSH_ATTEMPTS} with --push",
        help="Rebase-loop attempts on a concurrent change (positive integer).",
    )(func)


def resolve_attempts(attempts: int | None, push: bool) -> int:
    """``--attempts`` through the core's own check (a ConfigError, exit 2), or the default."""
    from kb.store.filestore import validate_attempts

    if attempts is None:
        return DEFAULT_PUSH_ATTEMPTS if push else DEFAULT_ATTEMPTS
    return validate_attempts(attempts)


def push_option(func: F) -> F:
    """``--push``: publish the commit to the branch's remote (never forced)."""
    return click.option(
        "--push",
        is_flag=True,
        help="Push the commit to the branch's remote; on rejection re-apply and retry.",
    )(func)


def committer_option(func: F) -> F:
    """``--by NAME``: who is recorded as the committer."""
    return click.option(
        "--by",
        "committer",
        default=lambda: os.environ.get("KB_COMMITTER") or os.environ.get("USER") or "kb-cli",
        show_default="$KB_COMMITTER or $USER",
        help="Who is recorded in the Kb-Committer trailer.",
    )(func)


@click.group(cls=KbGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    "store_path",
    envvar="KB_STORE",
    default="rulvar.models.json",
    show_default=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The knowledge store file (env KB_STORE).",
)
@click.option(
    "--as-of",
    "as_of",
    envvar="KB_AS_OF",
    default=None,
    help="Judge expiry at this ISO instant instead of now (env KB_AS_OF).",
)
@click.version_option(package_name="kb")
@click.pass_context
def cli(ctx: click.Context, store_path: Path, as_of: str | None) -> None:
    """Evidence-backed knowledge about which LLM is good at which kind of task."""
    ctx.obj = App(store_path=store_path, as_of_text=as_of)


@cli.command()
@committer_option
@pass_app
def init(app: App, committer: str) -> None:
    """Create an empty store (version 0) and commit it when inside git."""
    from kb.store.filestore import CommitContext

    app.store.initialize(CommitContext(action="init", committer=committer))
    where = "committed to git" if app.store.git is not None else "plain file, not in git"
    click.echo(f"initialized {app.store.path} (store v0, {where})")


LIST_EPILOG = """\b
Examples:
  kb list --model openai:gpt-4o-mini --status active
  kb list --task-class extraction --expired
  kb --as-of 2026-12-01 list --json
"""


@cli.command("list", epilog=LIST_EPILOG)
@click.option("--model", help="Only this provider:model (add @effort to pin the effort).")
@click.option("--task-class", help="Only this task class.")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(["active", "stale", "superseded", "archived"]),
    help="Only these statuses (repeatable).",
)
@click.option("--expired/--unexpired", default=None, help="Only expired / unexpired claims.")
@click.option("--json", "as_json", is_flag=True, help="Print the claims as stored, plus ttl.")
@pass_app
def list_command(
    app: App,
    model: str | None,
    task_class: str | None,
    statuses: tuple[str, ...],
    expired: bool | None,
    as_json: bool,
) -> None:
    """List claims with their status, lifetime, evidence and metrics."""
    from kb.store.query import ClaimFilter, select
    from kb.views import claims_json, format_claims

    snapshot = app.store.read()
    claim_filter = ClaimFilter(model, task_class, frozenset(statuses) or None, expired)
    indexes = list(select(snapshot, claim_filter, app.as_of))
    if as_json:
        click.echo(claims_json(snapshot, indexes, app.as_of, plain=snapshot.js_plain))
    else:
        chosen = [snapshot.claims[i] for i in indexes]
        click.echo(format_claims(chosen, len(snapshot.claims), app.as_of))


@cli.command()
@click.argument("claim_id")
@pass_app
def show(app: App, claim_id: str) -> None:
    """Show one claim and the git commits that touched it."""
    from kb.store.audit import claim_history
    from kb.views import format_claim, format_history

    claim = app.store.read().get(claim_id)
    if claim is None:
        raise ConfigError("show", f"no claim with id {claim_id!r}")
    click.echo(format_claim(claim, app.as_of))
    click.echo(format_history(claim_history(app.store, claim_id)))


@cli.command()
@pass_app
def verify(app: App) -> None:
    """Check the store and every version of it in git (exit 0 valid, 2 invalid)."""
    from kb.store.audit import verify_store

    report = verify_store(app.store)
    history = (
        f", {report.history_checked} versions in git checked"
        if app.store.git is not None
        else ", not in git"
    )
    click.echo(f"ok: store v{report.version}, {report.claims} claims{history}")


@cli.command()
@pass_app
def queue(app: App) -> None:
    """List the remeasurement queue: active eval-measured claims that have expired."""
    from kb.store.ttl import remeasurement_queue

    due = remeasurement_queue(app.store.read().claims, app.as_of)
    for claim in due:
        fields = (claim.subject_key, claim.task_class, claim.id, f"expired {claim.expires_at}")
        click.echo("\t".join(fields))
    click.echo(f"{len(due)} claim{'s' if len(due) != 1 else ''} due for remeasurement")


NOTE_EPILOG = """\b
Example:
  kb note --model openai:gpt-4o-mini --task-class extraction --polarity weakness \\
    --statement "drops nested fields in long invoices" --approver alice \\
    --ruled-out prompt --ruled-out tools --evidence journal:run-42:7
"""


@cli.command(epilog=NOTE_EPILOG)
@click.option("--model", required=True, help="provider:model the note is about.")
@click.option("--effort", default=None, help="Effort, when the note is about one effort.")
@click.option("--task-class", required=True)
@click.option("--polarity", required=True, type=click.Choice(["strength", "weakness"]))
@click.option("--statement", required=True, help="The note (at most 200 characters).")
@click.option("--approver", required=True, help="Who approves the note (the human gate).")
@click.option(
    "--ruled-out",
    multiple=True,
    required=True,
    type=click.Choice(["prompt", "tools", "difficulty", "transient-provider"]),
    help="Causes ruled out before blaming the model (repeatable, at least one).",
)
@click.option("--contrast-evidence", default=None, help="What contrasted the model with others.")
@click.option(
    "--evidence",
    "evidence_texts",
    multiple=True,
    required=True,
    help="eval:REPORT[:case1,case2] or journal:RUN:ENTRY (repeatable).",
)
@click.option("--confidence", type=click.Choice(["high", "medium", "low"]), default="low")
@click.option("--id", "claim_id", default=None, help="Claim id (default note/<subject>/...).")
@attempts_option
@push_option
@pass_app
def note(app: App, /, **opts: Any) -> None:
    """Add a human-editorial claim through the human gate."""
    from kb.store.editorial import editorial_claim, human_gate, parse_evidence
    from kb.store.filestore import CommitContext
    from kb.store.ops import AddClaim

    attempts = resolve_attempts(opts["attempts"], opts["push"])
    claim = editorial_claim(
        model=opts["model"],
        effort=opts["effort"],
        task_class=opts["task_class"],
        polarity=opts["polarity"],
        statement=opts["statement"],
        approver=opts["approver"],
        evidence=[parse_evidence(text) for text in opts["evidence_texts"]],
        observed_at=app.as_of,
        confidence=opts["confidence"],
        claim_id=opts["claim_id"],
    )
    gate = human_gate(opts["approver"], app.as_of, opts["ruled_out"], opts["contrast_evidence"])
    context = CommitContext(
        "note",
        opts["approver"],
        label=claim.id,
        extra_trailers=(("Kb-Gate", f"human; ruled out {', '.join(gate.ruled_out)}"),),
    )
    result = app.store.commit_with_rebase(
        lambda _: [AddClaim(claim, gate)], context, attempts=attempts, push=opts["push"]
    )
    _echo_commit(result, app)


@cli.command()
@click.argument("claim_id")
@click.option(
    "--reason", required=True, type=click.Choice(["deprecated", "stale", "rejected", "falsified"])
)
@committer_option
@attempts_option
@push_option
@pass_app
def archive(
    app: App, claim_id: str, reason: str, committer: str, attempts: int | None, push: bool
) -> None:
    """Archive one claim (it stays in the file with status archived)."""
    from kb.store.editorial import archive_ops
    from kb.store.filestore import CommitContext

    tries = resolve_attempts(attempts, push)
    context = CommitContext("archive", committer, label=claim_id)
    result = app.store.commit_with_rebase(
        lambda snapshot: archive_ops(snapshot, claim_id, reason),  # type: ignore[arg-type]
        context,
        attempts=tries,
        push=push,
    )
    _echo_commit(result, app)


@cli.command()
@click.argument("model")
@committer_option
@attempts_option
@push_option
@pass_app
def deprecate(app: App, model: str, committer: str, attempts: int | None, push: bool) -> None:
    """Archive every active or stale claim about MODEL (reason deprecated)."""
    from kb.store.editorial import deprecate_ops
    from kb.store.filestore import CommitContext

    tries = resolve_attempts(attempts, push)
    context = CommitContext("deprecate", committer, label=model)
    result = app.store.commit_with_rebase(
        lambda snapshot: deprecate_ops(snapshot, model), context, attempts=tries, push=push
    )
    if result is None:
        click.echo(f"no active or stale claims about {model}; nothing committed")
    else:
        _echo_commit(result, app)


SWEEP_EPILOG = """\b
Examples:
  kb sweep sweeps/nightly.toml                     measure, print, commit
  kb sweep sweeps/nightly.toml --dry-run           pool, runs and worst-case spend only
  kb sweep sweeps/nightly.toml --json --html r.html --record ci.jsonl
  kb sweep sweeps/nightly.toml --replay ci.jsonl --no-commit
"""


@cli.command(epilog=SWEEP_EPILOG)
@click.argument("spec_path", metavar="SPEC.toml", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print the pool, planned runs and spend; stop.")
@click.option("--no-commit", is_flag=True, help="Measure and report without writing the store.")
@click.option("--observed-at", default=None, help="The sweep instant (ISO; default --as-of/now).")
@click.option("--report-id", default=None, help="Report id (default kb-sweep-<observedAt>).")
@click.option("--concurrency", type=int, default=None, help="Calls in flight (spec default).")
@click.option(
    "--record",
    "record_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a cassette of every provider exchange.",
)
@click.option(
    "--replay",
    "replay_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Answer every call from a cassette; no provider is called.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a self-contained HTML report.",
)
@click.option("--quiet", is_flag=True, help="No plan block and no progress bar.")
@click.option("--strict", is_flag=True, help="Exit 1 when any target run failed at the provider.")
@click.option(
    "--shard",
    default=None,
    metavar="I/N",
    help="Measure only shard I of N (whole cells; for a CI job matrix).",
)
@attempts_option
@push_option
@pass_app
def sweep(app: App, /, spec_path: Path, **opts: Any) -> None:
    """Measure the pool on the spec's cases and commit the claims (one commit)."""
    from kb.canary import sweep_canary_step
    from kb.sweep.report import plan_text, report_html, report_json, summary_text
    from kb.sweep.run import execute_sweep, parse_shard, prepare_sweep
    from kb.sweep.spec import load_spec

    attempts = resolve_attempts(opts["attempts"], opts["push"])
    for flag in ("html_path", "record_path"):
        if opts[flag] is not None and not opts[flag].parent.is_dir():
            raise ConfigError(f"--{flag.split('_')[0]}", f"{opts[flag].parent} is not a directory")
    spec = load_spec(spec_path)
    observed_at = app.instant(opts["observed_at"], "--observed-at")
    shard = parse_shard(opts["shard"]) if opts["shard"] else None
    plan = prepare_sweep(
        spec, app.store, observed_at=observed_at, report_id=opts["report_id"], shard=shard
    )
    if not opts["quiet"] or opts["dry_run"]:
        click.echo(plan_text(plan, list_runs=opts["dry_run"]), err=opts["as_json"])
    if opts["dry_run"]:
        return
    engine = build_engine(
        sweep_engine_config(spec, opts["concurrency"]), opts["record_path"], opts["replay_path"]
    )
    total = len(plan.target_runs) + plan.canary_probes + plan.judge_runs_max
    with progress_bar(total, enabled=not opts["quiet"]) as advance:
        engine.on_settled = advance
        report = execute_sweep(
            plan,
            app.store,
            engine,
            commit=not opts["no_commit"],
            attempts=attempts,
            canary_step=sweep_canary_step,
            push=opts["push"],
        )
    if opts["html_path"]:
        opts["html_path"].write_text(report_html(report), encoding="utf-8")
    if opts["as_json"]:
        echo_json(report_json(report))
    else:
        click.echo(summary_text(report))
    _echo_warnings(app)
    if opts["strict"] and report.provider_errors:
        raise JobFailedError(f"{report.provider_errors} target runs failed at the provider")


CANARY_EPILOG = """\b
Examples:
  kb canary sweeps/nightly.toml                   probe, flip drifted claims stale
  kb canary sweeps/nightly.toml --repeats 3       unstable answers are noise, not drift
  kb canary sweeps/nightly.toml --json --fail-on-drift
"""


@cli.command(epilog=CANARY_EPILOG)
@click.argument("spec_path", metavar="SPEC.toml", type=click.Path(path_type=Path))
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=None,
    help="Ask each probe K times; disagreement is reported unstable.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, one object per model.")
@click.option("--fail-on-drift", is_flag=True, help="Exit 1 when any model drifted.")
@click.option("--no-commit", is_flag=True, help="Report drift without flipping claims.")
@click.option("--concurrency", type=int, default=None, help="Calls in flight (spec default).")
@click.option(
    "--max-retries",
    type=click.IntRange(min=0),
    default=None,
    help="Provider retries per probe (spec default).",
)
@click.option("--record", "record_path", type=click.Path(path_type=Path), default=None)
@click.option("--replay", "replay_path", type=click.Path(path_type=Path), default=None)
@attempts_option
@push_option
@pass_app
def canary(app: App, /, spec_path: Path, **opts: Any) -> None:
    """Probe every model with the canary; flip claims stale where the model changed."""
    from kb.canary import canary_line, run_canary
    from kb.sweep.spec import load_spec

    attempts = resolve_attempts(opts["attempts"], opts["push"])
    spec = load_spec(spec_path)
    engine = build_engine(
        sweep_engine_config(spec, opts["concurrency"], opts["max_retries"]),
        opts["record_path"],
        opts["replay_path"],
    )
    results = run_canary(
        spec,
        app.store,
        engine,
        at=app.as_of,
        repeats=opts["repeats"],
        commit=not opts["no_commit"],
        attempts=attempts,
        push=opts["push"],
    )
    if opts["as_json"]:
        echo_json([r.to_json() for r in results])
    else:
        for result in results:
            click.echo(canary_line(result))
    drifted = sum(1 for r in results if r.status == "drift")
    if opts["fail_on_drift"] and drifted:
        raise JobFailedError(f"drift in {drifted} model{'s' if drifted != 1 else ''}")


@cli.command()
@click.argument("ladders_path", metavar="LADDERS.toml", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the verified recommendations.")
@pass_app
def card(app: App, ladders_path: Path, as_json: bool) -> None:
    """Render the knowledge card an orchestrator would be taught (tier-relative)."""
    from kb.card import compile_verified_layer, load_ladders, render_card

    ladders = load_ladders(ladders_path)
    claims = app.store.read().claims
    if as_json:
        recommendations = compile_verified_layer(claims, ladders.ladders, app.as_of, ladders.floors)
        echo_json([r.to_json() for r in recommendations])
    else:
        click.echo(render_card(claims, ladders, app.as_of), nl=False)


@cli.command()
@click.argument("spec_path", metavar="SPEC.toml", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--concurrency", type=int, default=None, help="Calls in flight (spec default).")
@click.option("--record", "record_path", type=click.Path(path_type=Path), default=None)
@click.option("--replay", "replay_path", type=click.Path(path_type=Path), default=None)
@pass_app
def checkpoint(app: App, /, spec_path: Path, **opts: Any) -> None:
    """A/B-test whether routing by the knowledge beats routing without it (exit 0/1)."""
    from kb.checkpoint import checkpoint_table, load_checkpoint_spec, run_checkpoint
    from kb.engine.scheduler import EngineConfig

    spec = load_checkpoint_spec(spec_path)
    claims = app.store.read().claims
    level = opts["concurrency"] or spec.section.concurrency
    engine = build_engine(
        EngineConfig(concurrency=level, per_provider=level),
        opts["record_path"],
        opts["replay_path"],
    )
    report = run_checkpoint(spec, claims, engine, as_of=app.as_of)
    if opts["as_json"]:
        echo_json(report.to_json())
    else:
        click.echo(checkpoint_table(report))
    if not report.passed:
        raise JobFailedError("checkpoint not passed")


def sweep_engine_config(spec: Any, concurrency: int | None, max_retries: int | None = None) -> Any:
    """A sweep spec's engine settings, with the command line's overrides."""
    from kb.engine.scheduler import EngineConfig

    level = concurrency if concurrency is not None else spec.sweep.concurrency
    return EngineConfig(
        concurrency=level,
        per_provider=spec.sweep.per_provider or level,
        timeout_s=spec.sweep.timeout_s,
        max_retries=max_retries if max_retries is not None else spec.sweep.max_retries,
    )


def build_engine(config: Any, record: Path | None, replay: Path | None) -> Any:
    """An engine with the cassette ``--record``/``--replay`` ask for."""
    from kb.engine.cassette import Cassette
    from kb.engine.scheduler import Engine

    if record and replay:
        raise ConfigError("--record/--replay", "use one or the other")
    cassette = (
        Cassette(replay, "replay") if replay else Cassette(record, "record") if record else None
    )
    return Engine(config, cassette=cassette)


@contextmanager
def progress_bar(total: int, *, enabled: bool) -> Iterator[Callable[[Any], None]]:
    """A progress bar on stderr, only for a terminal; yields the per-run callback."""
    if not enabled or total == 0 or not sys.stderr.isatty():
        yield lambda _result: None
        return
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task("runs", total=total)
        yield lambda _result: progress.advance(task)


def echo_json(value: Any) -> None:
    """JSON on stdout, numbers as JavaScript prints them (``1``, not ``1.0``), like the store."""
    from kb.store.canonical import js_stringify

    click.echo(js_stringify(value, indent=2))


def _echo_commit(result: Any, app: App) -> None:
    git = f" [git {result.git_commit[:12]}]" if result.git_commit else ""
    click.echo(f"{result.message}{git}")
    _echo_warnings(app)


def _echo_warnings(app: App) -> None:
    for warning in app.store.warnings:
        click.echo(f"warning: {warning}", err=True)


def main(argv: list[str] | None = None) -> NoReturn:
    """Console entry point."""
    cli.main(args=argv, prog_name="kb")
    sys.exit(0)  # pragma: no cover - click exits itself
