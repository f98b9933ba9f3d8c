"""Commands that call models or compile knowledge: sweep, canary, card, checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kb.cli.app import (
    App,
    EngineFlags,
    build_engine,
    cli,
    complete_report_ids,
    echo_json,
    echo_warnings,
    global_options,
    pass_app,
    progress_bar,
    shared_buckets_setting,
    start_workers,
)
from kb.cli.options import (
    allow_partial_option,
    attempts_option,
    engine_options,
    evidence_dir_option,
    json_option,
    margin_option,
    push_option,
    resolve_attempts,
    spec_argument,
)
from kb.errors import ConfigError, JobFailedError
from kb.schema import DEFAULT_MARGIN
from kb.textwidth import wrapped

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import ExitStack

    from kb.engine.runs import RunKind, RunResult
    from kb.engine.scheduler import Engine, EngineConfig
    from kb.sweep.plan import SweepPlan
    from kb.sweep.run import PlannedSweep, SweepReport
    from kb.sweep.spec import SweepSpec


def sweep_engine_config(
    spec: SweepSpec,
    concurrency: int | None,
    max_retries: int | None = None,
    batch: bool | None = None,
) -> EngineConfig:
    """A sweep spec's engine settings, with the command line's overrides."""
    from kb.engine.scheduler import EngineConfig

    level = concurrency if concurrency is not None else spec.sweep.concurrency
    return EngineConfig(
        concurrency=level,
        per_provider=spec.sweep.per_provider or level,
        timeout_s=spec.sweep.timeout_s,
        max_retries=max_retries if max_retries is not None else spec.sweep.max_retries,
        batch=batch if batch is not None else spec.sweep.batch,
        batch_poll_s=spec.sweep.batch_poll_s,
        batch_poll_max_s=max(60.0, spec.sweep.batch_poll_s),
        rate_limits=shared_buckets_setting(spec.sweep.rate_limits, spec.path.parent),
    )


def load_job_spec(spec_path: Path, flags: EngineFlags, *, judges: bool = True) -> SweepSpec:
    """The sweep spec, its keys checked unless replaying (a replay needs none).

    ``judges``: whether the job calls the cases' judges (a canary does not).
    """
    from kb.sweep.spec import default_key_warnings, load_spec

    spec = load_spec(spec_path, credentials=flags.replay is None)
    if flags.replay is None:
        for warning in default_key_warnings(spec, judges=judges):
            click.echo(f"warning: {warning}", err=True)
    return spec


def _output_dir_exists(path: Path | None, flag: str) -> None:
    if path is not None and not path.parent.is_dir():
        raise ConfigError(flag, f"{path.parent} is not a directory")


SWEEP_EPILOG = """\b
Examples:
  kb sweep sweeps/nightly.toml                     measure, print, commit
  kb sweep sweeps/nightly.toml --dry-run           pool, runs and worst-case spend only
  kb sweep sweeps/nightly.toml --json --html r.html --record ci.jsonl
  kb sweep sweeps/nightly.toml --replay ci.jsonl --no-commit
  kb sweep sweeps/nightly.toml --resume            finish the night that stopped
  kb sweep sweeps/nightly.toml --fail-on-change    CI: exit 1 when a belief changed

\b
Exit codes: 0 every planned cell complete; 1 a cell was incomplete (what was
complete is committed; --allow-incomplete keeps 0), or after committing:
--fail-on-drift and a canary drift, --fail-on-change and a drift or a held
claim falsified; 2 bad input or a spend the envelope could not cover
(--allow-partial runs anyway); 3 CAS attempts exhausted; 130 interrupted
(nothing committed).
"""


@cli.command(epilog=SWEEP_EPILOG)
@spec_argument()
@click.option("--dry-run", is_flag=True, help="Print the pool, planned runs and spend; stop.")
@click.option("--no-commit", is_flag=True, help="Measure and report without writing the store.")
@click.option("--observed-at", default=None, help="The sweep instant (ISO; default --as-of/now).")
@click.option("--report-id", default=None, help="Report id (default kb-sweep-<observedAt>).")
@engine_options
@json_option("Print the report as JSON on stdout.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a self-contained HTML report.",
)
@click.option(
    "--summary",
    "summary_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write a markdown summary (for $GITHUB_STEP_SUMMARY or a PR comment).",
)
@click.option("--quiet", is_flag=True, help="No plan block and no progress bar.")
@click.option("--no-evidence", is_flag=True, help="Do not write the evidence files (kb-evidence/).")
@allow_partial_option("run")
@click.option("--allow-incomplete", is_flag=True, help="Exit 0 even when a cell is incomplete.")
@click.option(
    "--resume",
    is_flag=True,
    help="Finish a night that stopped (skip its committed cells, reuse its journaled runs); "
    "start it when nothing is journaled; exit 0 when it is committed already.",
)
@click.option(
    "--new-epoch",
    is_flag=True,
    help="Start a new epoch in every cell: pool nothing from earlier nights.",
)
@click.option(
    "--fail-on-drift",
    is_flag=True,
    help="Exit 1 (after committing) when the canary saw a model change.",
)
@click.option(
    "--fail-on-change",
    is_flag=True,
    help="Exit 1 (after committing) when a held claim was falsified or the canary drifted.",
)
@click.option(
    "--batch/--no-batch",
    default=None,
    help="Send OpenAI runs through its batch API at the batch price (default: [sweep] batch).",
)
@click.option("--strict", is_flag=True, hidden=True, help="Deprecated; does nothing.")
@click.option(
    "--shard",
    default=None,
    metavar="I/N",
    help="Measure only shard I of N (whole cells; for a CI job matrix).",
)
@attempts_option
@push_option
@global_options
@pass_app
def sweep(
    app: App,
    spec_path: Path,
    dry_run: bool,
    no_commit: bool,
    observed_at: str | None,
    report_id: str | None,
    engine_flags: EngineFlags,
    as_json: bool,
    html_path: Path | None,
    summary_path: Path | None,
    quiet: bool,
    no_evidence: bool,
    allow_partial: bool,
    allow_incomplete: bool,
    resume: bool,
    new_epoch: bool,
    fail_on_drift: bool,
    fail_on_change: bool,
    batch: bool | None,
    strict: bool,
    shard: str | None,
    attempts: int | None,
    push: bool,
) -> None:
    """Measure the pool on the spec's cases and commit the claims (one commit)."""
    from contextlib import ExitStack

    from kb.sweep.plan import parse_shard
    from kb.sweep.run import SweepOptions, run_sweep

    for path, flag in ((html_path, "--html"), (summary_path, "--summary")):
        _output_dir_exists(path, flag)
    _output_dir_exists(engine_flags.record, "--record")
    # first: the workers import litellm while the spec, the store and git are read
    workers = start_workers(dry_run=dry_run, replay=engine_flags.replay)
    spec = load_job_spec(spec_path, engine_flags)
    config = sweep_engine_config(spec, engine_flags.concurrency, batch=batch)
    for warning in spec.warnings + spec.sweep.unused_settings(batch=config.batch):
        click.echo(f"warning: {warning}", err=True)
    engine = build_engine(app, config, engine_flags, workers)
    # a writing sweep settles a night a kill cut short before anything reads the store
    store = app.store if dry_run or no_commit else app.settle()
    options = SweepOptions(
        report_id, parse_shard(shard) if shard else None, not no_commit, resume, new_epoch,
        dry_run, allow_partial, resolve_attempts(attempts, push), push, not no_evidence,
        fail_on_drift, allow_incomplete, fail_on_change,
    )  # fmt: skip
    shown = SweepShown(as_json, quiet, dry_run, config.batch, allow_partial)
    with ExitStack() as bars:
        done = run_sweep(
            spec,
            store,
            engine,
            options,
            observed_at=app.instant(observed_at, "--observed-at") if observed_at else None,
            as_of=app.as_of,
            on_plan=shown.plan,
            on_ready=lambda planned: shown.ready(planned, engine, bars),
        )
    if done is not None:
        show_sweep(done, app, html_path, summary_path, as_json)
        if done.failures():
            raise JobFailedError("; ".join(done.failures()))


@dataclass(frozen=True)
class SweepShown:
    """How ``kb sweep`` shows a plan before its first call, and its progress."""

    as_json: bool
    quiet: bool
    dry_run: bool
    batch: bool
    allow_partial: bool

    def plan(self, planned: PlannedSweep) -> None:
        """The plan block (a refused plan under ``--json``: one line, not the block)."""
        from kb.sweep.report import plan_json, plan_text

        plan, batches = planned.plan, planned.batches
        if self.dry_run and self.as_json:
            echo_json({**plan_json(plan), "batch": batches.to_json() if batches else None})
        elif self.as_json and not self.quiet:
            plan.check_budget(allow_partial=self.allow_partial)
            click.echo(plan_text(plan, list_runs=False), err=True)
        elif not self.quiet or self.dry_run:
            click.echo(plan_text(plan, list_runs=self.dry_run))
        if self.batch and (not self.quiet or self.dry_run) and not self.as_json:
            said = (
                batches.text if batches else "batch mode: off for --replay (no provider is called)"
            )
            click.echo("\n".join(wrapped(said, more="  ")))

    def ready(self, planned: PlannedSweep, engine: Engine, bars: ExitStack) -> None:
        """The warnings, then a progress bar over the night's runs (a terminal only)."""
        for warning in planned.warnings:
            click.echo(f"warning: {warning}", err=True)
        if self.dry_run:
            return
        job = planned.plan.job
        planned_runs: dict[RunKind, int] = {
            "canary": job.phase("canary").size,
            "target": job.phase("targets").size,
            "judge": job.phase("judges").size,
        }
        bar = progress_bar(
            job.size,
            enabled=not self.quiet,
            planned=planned_runs,
            grade=running_grade(planned.plan),
        )
        engine.on_settled = engine.on_batch = engine.on_pace = bars.enter_context(bar)


def pacing_line(app: App) -> None:
    """One stderr line, once a provider spoke of its limits: the 429s and where buckets live.

    A CI log has no progress bar: this says whether shards shared their key's limit.
    """
    engine = app.engine
    if engine is None or not engine.rate_limits.heard:
        return
    sharing = engine.sharing
    where = (
        f"buckets shared through {sharing.share.setting.shown}"
        if sharing is not None and sharing.share is not None
        else "buckets paced in this process alone"
    )
    click.echo(f"rate limits: {engine.rate_limits.limited} answered 429; {where}", err=True)


def show_sweep(
    done: SweepReport, app: App, html_path: Path | None, summary_path: Path | None, as_json: bool
) -> None:
    """What a sweep did: the files asked for, the report, drifts and alarms (stderr)."""
    from kb.evidence_index import reports_before
    from kb.judging import weak_judges_of
    from kb.store.diff import diff_markdown
    from kb.views.html import cell_history, report_html
    from kb.views.report_text import (
        SHIFT,
        alarm_lines,
        shift_lines,
        summary_text,
        sweep_markdown,
    )

    report = done.report
    asked = {run.subject_key for run in report.runs or () if run.kind == "judge"}
    weak = weak_judges_of(app.store, asked) if asked else []
    # a re-run CI job of a committed night still writes its page and its step summary
    # (the committed night's: every shard's cells), so the job's artifacts are there
    if html_path:
        assert done.history_dir is not None
        earlier = reports_before(done.history_dir, report.observed_at)
        html_path.write_text(report_html(report, cell_history(earlier)), encoding="utf-8")
    if summary_path:
        changes = diff_markdown(done.store_diff) if done.store_diff is not None else None
        summary_path.write_text(sweep_markdown(report, changes, weak), encoding="utf-8")
    if done.already_committed:
        version = (
            f" (store v{report.committed_version})" if report.committed_version is not None else ""
        )
        click.echo(f"the night {report.report_id} is already committed{version}: nothing to resume")
        return
    if as_json:
        echo_json(report.to_wire())
    else:
        click.echo(summary_text(report, done.git_commit))
    echo_warnings(app)
    pacing_line(app)
    for resumed in done.measurement.resumed:
        click.echo(f"resume: {resumed.line()}", err=True)
    for line in done.measurement.rechecks:
        click.echo(f"asked again: {line}", err=True)
    if done.drifted:
        committed = report.committed_version is not None
        where = " (kb diff HEAD~1 HEAD)" if app.store.git is not None else ""
        what = f"its claims were flipped stale{where}" if committed else "nothing was committed"
        click.echo(
            f"drift: the canary saw the provider change {', '.join(done.drifted)}; {what}",
            err=True,
        )
    for line in alarm_lines(report):  # no canary needed: as loud as a drift
        click.echo(f"alarm: {line}", err=True)
    for line in weak:
        click.echo(line, err=True)
    for line in shift_lines(report):
        click.echo(f"{SHIFT} — {line}", err=True)


def running_grade(plan: SweepPlan) -> Callable[[RunResult], tuple[str, bool] | None]:
    """For the progress line: a settled target run's cell and whether it passed."""
    from kb.evals.suite import quick_pass, target_label

    pairs = {target_label(pair): pair for pair in plan.pairs}

    def graded(result: RunResult) -> tuple[str, bool] | None:
        pair = pairs.get(result.label)
        passed = quick_pass(pair, result) if pair is not None else None
        if pair is None or passed is None:
            return None
        return f"{pair.member.key}·{pair.case.task_class}", passed

    return graded


CANARY_EPILOG = """\b
Examples:
  kb canary sweeps/nightly.toml                   probe, flip drifted claims stale
  kb canary sweeps/nightly.toml --repeats 3       unstable answers are noise, not drift
  kb canary sweeps/nightly.toml --json --fail-on-drift
"""


@cli.command(epilog=CANARY_EPILOG)
@spec_argument()
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=None,
    help="Ask each probe K times; disagreement is reported unstable.",
)
@json_option("Print a JSON array, one object per model.")
@click.option("--fail-on-drift", is_flag=True, help="Exit 1 when any model drifted.")
@allow_partial_option("probe")
@click.option("--no-commit", is_flag=True, help="Report drift without flipping claims.")
@click.option(
    "--calibrate",
    is_flag=True,
    help="Choose each model's border probes for the sensitive tier and record their baselines.",
)
@click.option(
    "--max-retries",
    type=click.IntRange(min=0),
    default=None,
    help="Provider retries per probe (spec default).",
)
@engine_options
@attempts_option
@push_option
@global_options
@pass_app
def canary(
    app: App,
    spec_path: Path,
    repeats: int | None,
    as_json: bool,
    fail_on_drift: bool,
    allow_partial: bool,
    no_commit: bool,
    calibrate: bool,
    max_retries: int | None,
    engine_flags: EngineFlags,
    attempts: int | None,
    push: bool,
) -> None:
    """Probe every model with the canary; flip claims stale where the model changed."""
    from kb.sweep.canary import canary_line, run_canary

    tries = resolve_attempts(attempts, push)
    spec = load_job_spec(spec_path, engine_flags, judges=False)
    config = sweep_engine_config(spec, engine_flags.concurrency, max_retries)
    engine = build_engine(app, config, engine_flags)
    if calibrate:
        from kb.sweep.calibrate import calibrate as run_calibration

        if as_json or fail_on_drift or repeats:
            raise click.UsageError("--calibrate takes none of --json, --fail-on-drift, --repeats")
        store = app.store if no_commit else app.settle()
        found = run_calibration(
            spec, store, engine, at=app.as_of, commit=not no_commit, allow_partial=allow_partial
        )
        for calibration in found:
            click.echo(calibration.line())
        return
    results = run_canary(
        spec,
        app.store if no_commit else app.settle(),
        engine,
        at=app.as_of,
        repeats=repeats,
        commit=not no_commit,
        attempts=tries,
        push=push,
        allow_partial=allow_partial,
    )
    if as_json:
        echo_json([r.to_record().to_wire() for r in results])
    else:
        for result in results:
            click.echo(canary_line(result))
    drifted = sum(1 for r in results if r.status == "drift")
    if fail_on_drift and drifted:
        raise JobFailedError(f"drift in {drifted} model{'s' if drifted != 1 else ''}")


@cli.command()
@spec_argument("LADDERS.toml")
@json_option("Print the verified recommendations.")
@global_options
@pass_app
def card(app: App, spec_path: Path, as_json: bool) -> None:
    """Render the knowledge card an orchestrator would be taught (tier-relative)."""
    from kb.card import compile_verified_layer, load_ladders, profile_warnings, render_card
    from kb.route import unknown_rungs

    ladders = load_ladders(spec_path)
    claims = app.store.read().claims
    for warning in [*unknown_rungs(ladders, claims, None), *profile_warnings(ladders, claims)]:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        recommendations = compile_verified_layer(claims, ladders.ladders, app.as_of, ladders.floors)
        echo_json([r.to_json() for r in recommendations])
    else:
        click.echo(render_card(claims, ladders, app.as_of), nl=False)


SITE_EPILOG = """\b
Examples:
  kb site public/                 then open public/index.html (works from file://)
"""


@cli.command(epilog=SITE_EPILOG)
@click.argument("directory", type=click.Path(path_type=Path))
@global_options
@pass_app
def site(app: App, directory: Path) -> None:
    """Build a static report site from the evidence: nights, cases, claims, comparisons.

    A night whose evidence cannot be read is left out, named on stderr and in a
    banner on the index; the site is written and kb exits 1.
    """
    from kb.store.epochs import read_epochs
    from kb.views.site import build_site

    epochs = read_epochs(app.store.home.epochs_file)
    built = build_site(app.store, directory, app.as_of, epochs)
    for warning in [*built.warnings, *built.left_out]:
        click.echo(f"warning: {warning}", err=True)
    whose = "1 night's" if built.kept == 1 else f"{built.kept} nights'"
    kept = f" ({whose} pages kept from the earlier build)" if built.kept else ""
    click.echo(
        f"wrote {len(built.written)} pages to {directory}{kept} (open {directory / 'index.html'})"
    )
    if built.left_out:
        count = len(built.left_out)
        raise JobFailedError(
            f"{count} night{'s' if count != 1 else ''} left out: evidence that cannot be read "
            f"(the site was written without {'them' if count != 1 else 'it'})"
        )


ROUTE_EPILOG = """\b
Examples:
  kb route ladders.toml --spec sweeps/nightly.toml > litellm.config.yaml
  kb route ladders.toml --format json
  kb route ladders.toml --policy evidence --margin 0.05
                     per task class the cheapest rung as good as the best measured one
"""


@cli.command(epilog=ROUTE_EPILOG)
@spec_argument("LADDERS.toml")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["litellm", "json"]),
    default="litellm",
    show_default=True,
    help="A LiteLLM Router/proxy config (YAML), or the routes as JSON.",
)
@click.option(
    "--spec",
    "sweep_spec",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A sweep spec whose [[models]] give each rung its api_base and key "
    "(every rung must be there).",
)
@click.option(
    "--policy",
    type=click.Choice(["card", "evidence"]),
    default="card",
    show_default=True,
    help="card: the start tier moved at most one rung by the claims (rulvar's rule); "
    "evidence: the cheapest rung non-inferior (paired) to the best measured one.",
)
@margin_option
@evidence_dir_option
@global_options
@pass_app
def route(
    app: App,
    spec_path: Path,
    output_format: str,
    sweep_spec: Path | None,
    policy: str,
    margin: float,
    evidence_dir: Path | None,
) -> None:
    """Write a LiteLLM routing config: per task class the rung the store recommends."""
    from kb.route import load_route_ladders, route_config
    from kb.sweep.spec import load_spec

    found = route_config(
        load_route_ladders(spec_path),
        app.store,
        app.as_of,
        spec=load_spec(sweep_spec) if sweep_spec else None,
        policy=policy,
        margin=margin,
        evidence_dir=evidence_dir,
    )
    for warning in found.warnings:
        click.echo(f"warning: {warning}", err=True)
    if output_format == "json":
        echo_json(found.json())
    else:
        click.echo(found.yaml(spec_path.name, app.store.path.name), nl=False)


CHECKPOINT_EPILOG = """\b
Examples:
  kb checkpoint cp.toml                 decide with intervals (exit 0 passed, 1 not, 4 neither)
  kb checkpoint cp.toml --dry-run       the planned runs per arm and the worst-case spend
  kb checkpoint cp.toml --sequential    rounds of cases; stop once the interval decides
  kb checkpoint cp.toml --rule rulvar   the seed's point rule (exit 0/1); --json carries both
"""


@cli.command(epilog=CHECKPOINT_EPILOG)
@spec_argument()
@json_option("Print the report as JSON.")
@click.option(
    "--rule",
    default="interval",
    metavar="interval|rulvar",
    help="Decide with paired intervals (default) or the seed's point rule.",
)
@click.option(
    "--margin",
    type=float,
    default=DEFAULT_MARGIN,
    show_default=True,
    help="How much worse (in pass rate) still reads non-inferior.",
)
@click.option("--sequential", is_flag=True, help="Run criterion 1 in rounds; stop once decided.")
@click.option("--round", "round_size", type=int, default=None, help="Cases per round (5).")
@click.option("--dry-run", is_flag=True, help="Print the planned runs and spend; stop.")
@engine_options
@allow_partial_option("run")
@global_options
@pass_app
def checkpoint(
    app: App,
    spec_path: Path,
    as_json: bool,
    rule: str,
    margin: float,
    sequential: bool,
    round_size: int | None,
    dry_run: bool,
    engine_flags: EngineFlags,
    allow_partial: bool,
) -> None:
    """A/B-test whether routing by the knowledge beats routing without it (exit 0/1/4)."""
    from kb.checkpoint import (
        checkpoint_options,
        checkpoint_table,
        load_checkpoint_spec,
        plan_checkpoint,
        plan_text,
        run_checkpoint,
    )
    from kb.engine.scheduler import EngineConfig

    options = checkpoint_options(rule, margin, sequential, round_size)
    spec = load_checkpoint_spec(spec_path)
    if dry_run:
        click.echo(plan_text(plan_checkpoint(spec, app.store.read_only(), as_of=app.as_of)))
        return
    level = engine_flags.concurrency or spec.section.concurrency
    engine = build_engine(app, EngineConfig(concurrency=level, per_provider=level), engine_flags)
    report = run_checkpoint(
        spec,
        app.store.read_only(),
        engine,
        as_of=app.as_of,
        allow_partial=allow_partial,
        options=options,
    )
    if as_json:
        echo_json(report.to_json())
    else:
        click.echo(checkpoint_table(report))
    report.raise_for_verdict()


REPORT_EPILOG = """\b
Examples:
  kb report kb-sweep-2026-11-29T02:00:00.000Z                 the summary again
  kb report kb-sweep-2026-11-29T02:00:00.000Z --html r.html   the page, with deltas
  kb report nightly-42 --json                                 the sweep's --json report
"""


@cli.command(epilog=REPORT_EPILOG)
@click.argument("report_id", shell_complete=complete_report_ids)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the self-contained HTML report.",
)
@json_option("Print the report as JSON (as the sweep's --json printed it).")
@evidence_dir_option
@global_options
@pass_app
def report(
    app: App, report_id: str, html_path: Path | None, as_json: bool, evidence_dir: Path | None
) -> None:
    """Re-render a past sweep's report from its evidence (work tree or git history)."""
    from kb.evidence_index import night_evidence, reports_before
    from kb.views.html import cell_history, report_html
    from kb.views.report_text import report_header, summary_text

    _output_dir_exists(html_path, "--html")
    found = night_evidence(app.store, report_id, evidence_dir)
    report = found.full_report() if found is not None else None
    if found is None or report is None:
        where = app.store.home.evidence_dir(evidence_dir)
        history = " or its git history" if app.store.git is not None else ""
        raise ConfigError("report", f"no evidence for report {report_id!r} in {where}{history}")
    if html_path:
        earlier = reports_before(app.store.home.evidence_dir(evidence_dir), report.observed_at)
        html_path.write_text(report_html(report, cell_history(earlier)), encoding="utf-8")
    if as_json:
        echo_json(report.to_wire())
    elif not html_path:
        click.echo(report_header(report))
        click.echo(summary_text(report))
        click.echo(f"(from the evidence in {found.source})")
