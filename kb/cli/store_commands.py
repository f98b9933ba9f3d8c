"""Commands that read or hand-edit the store.

``init``, ``list``, ``matrix``, ``compare``, ``show``, ``diff``, ``verify``, ``settle``,
``queue``, ``note``, ``compact``, ``archive``, ``deprecate``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kb.cli.app import (
    App,
    cli,
    complete_claim_ids,
    echo_commit,
    echo_json,
    global_options,
    pass_app,
)
from kb.cli.options import (
    archive_reason_choice,
    attempts_option,
    committer_option,
    confidence_choice,
    evidence_dir_option,
    json_option,
    margin_option,
    one_output_format,
    polarity_choice,
    push_option,
    resolve_attempts,
    ruled_out_choice,
    status_choice,
)
from kb.errors import ConfigError
from kb.examples import ExampleName
from kb.schema import DEFAULT_MARGIN, ArchiveReason, Confidence, Polarity, RuledOut

if TYPE_CHECKING:
    from kb.store.filestore import KnowledgeStore


INIT_EPILOG = """\b
Examples:
  kb init                       the empty store, committed (inside git)
  kb init --example scripted    and a working spec beside it: kb sweep kb.toml
  kb init --example openai      for your own OpenAI-compatible endpoint
  kb init --example local       for the bundled SmolLM2 (kb[local])
"""


@cli.command(epilog=INIT_EPILOG)
@click.option(
    "--example",
    type=click.Choice(["openai", "local", "scripted"]),
    default=None,
    help="Also write a working spec, a 40-case dataset and a ladders file beside the store "
    "(never over an existing file).",
)
@committer_option
@global_options
@pass_app
def init(app: App, example: ExampleName | None, committer: str) -> None:
    """Create an empty store (version 0), committed inside git; --example adds a first spec."""
    from kb.examples import example_conflicts, write_example
    from kb.store.filestore import CommitContext

    app.creating = True
    store = app.store
    directory = store.home.directory
    if example is not None and example_conflicts(directory, example):
        write_example(directory, example)  # refuses, naming the files, before anything
    if example is not None and store.path.exists():
        click.echo(f"{store.path} exists: the example goes beside it")
    elif store.git is None:
        store.initialize(CommitContext(action="init", committer=committer))
        click.echo(f"initialized {store.path} (store v0, plain file, not in git)")
    else:
        _init_in_git(store, committer)
    if example is not None:
        written = write_example(directory, example)
        names = ", ".join(str(p.relative_to(directory)) for p in written)
        click.echo(f"wrote the {example} example: {names}")
        click.echo("next: kb sweep kb.toml --dry-run, then kb sweep kb.toml --html night.html")


def _init_in_git(store: KnowledgeStore, committer: str) -> None:
    from kb.store.filestore import CommitContext
    from kb.store.git import register_merge_driver
    from kb.store.merge import driver_files
    from kb.textwidth import wrapped

    assert store.git is not None
    store.initialize(
        CommitContext(action="init", committer=committer), files=lambda: driver_files(store)
    )
    register_merge_driver(store.git, merge_driver_command())
    lines = [f"initialized {store.path} (store v0, committed to git)"]
    lines += wrapped(
        "merge driver installed: git merges of the store re-apply the other branch's changes"
    )
    click.echo("\n".join(lines))


def merge_driver_command() -> str:
    """How git runs kb's merge driver (see :func:`kb.store.merge.driver_command`)."""
    from kb.store.merge_driver import driver_command

    return driver_command(sys.executable)


MERGE_DRIVER_EPILOG = """\b
Examples:
  kb merge-driver --install         in a clone made before kb init installed it
  git merge feature                 then merges stores by re-applying theirs' changes
"""


@cli.command("merge-driver", epilog=MERGE_DRIVER_EPILOG)
@click.option("--install", is_flag=True, help="Register the driver for the store's repository.")
@click.argument("sides", nargs=-1, metavar="[BASE OURS THEIRS PATH]")
@committer_option
@global_options
@pass_app
def merge_driver(app: App, install: bool, sides: tuple[str, ...], committer: str) -> None:
    """Merge two branches' stores: theirs' changes re-applied onto ours (git calls this).

    With --install: register the driver in this clone's git config and
    commit the .gitattributes lines that route the store (and its canary
    baselines) to it. kb init does both; a fresh clone needs --install once.
    """
    if install:
        from kb.store.merge import install_merge_driver

        if sides:
            raise ConfigError("merge-driver", "--install takes no BASE OURS THEIRS PATH")
        changed = install_merge_driver(app.settle(), merge_driver_command(), committer)
        routed = "the store, its epochs and canary baselines"
        what = (
            f"committed .gitattributes (routes {routed})"
            if changed
            else f".gitattributes already routes {routed}"
        )
        click.echo(f"merge driver installed for {app.store.path.name} ({what})")
        return
    if len(sides) != 4:
        raise ConfigError(
            "merge-driver",
            "git passes BASE OURS THEIRS PATH (%O %A %B %P); run kb merge-driver --install",
        )
    base, ours, theirs = (Path(side) for side in sides[:3])
    name = sides[3]
    missing = [str(path) for path in (base, ours, theirs) if not path.is_file()]
    if missing:
        raise ConfigError(
            "merge-driver", f"no such file: {', '.join(missing)} (git passes three that exist)"
        )
    from kb.store.merge_driver import run_merge_driver

    click.echo(run_merge_driver(base, ours, theirs, name), err=True)


LIST_EPILOG = """\b
Examples:
  kb list                                   active claims, newest first, one line each
  kb list --model openai:gpt-4o-mini --long the full view of that model's active claims
  kb list --all                             every claim, every status (the full view)
  kb list --task-class extraction --expired
  kb --as-of 2026-12-01 list --json         every claim as stored, plus ttl and wilson95
"""


@cli.command("list", epilog=LIST_EPILOG)
@click.option("--model", help="Only this provider:model (add @effort to pin the effort).")
@click.option("--task-class", help="Only this task class.")
@click.option(
    "--status", "statuses", multiple=True, type=status_choice, help="Only these (repeatable)."
)
@click.option("--expired/--unexpired", default=None, help="Only expired / unexpired claims.")
@click.option("--long", "long_view", is_flag=True, help="The full view: every field of each.")
@click.option("--all", "all_claims", is_flag=True, help="Every claim, every status (full view).")
@click.option("--ids", "with_ids", is_flag=True, help="Add each claim's id (for kb show).")
@json_option("Print the claims as stored, plus ttl and wilson95 (every claim unless filtered).")
@global_options
@pass_app
def list_command(
    app: App,
    model: str | None,
    task_class: str | None,
    statuses: tuple[str, ...],
    expired: bool | None,
    long_view: bool,
    all_claims: bool,
    with_ids: bool,
    as_json: bool,
) -> None:
    """List the active claims, newest first, one line each (--long, --all: the full view)."""
    from kb.store.query import ClaimFilter, check_model_filter, select
    from kb.views.claims import claims_json, format_claims
    from kb.views.decision import list_lines, newest_first

    if model is not None:
        check_model_filter(model)
    snapshot = app.store.read()
    if as_json or all_claims:  # every claim unless filtered (what scripts read since v1)
        wanted = ClaimFilter(model, task_class, frozenset(statuses) or None, expired)
    else:  # what steers today, unless asked otherwise
        live = expired if expired is not None else (None if statuses else False)
        wanted = ClaimFilter(model, task_class, frozenset(statuses or ("active",)), live)
    indexes = list(select(snapshot, wanted, app.as_of))
    if as_json:
        click.echo(claims_json(snapshot, indexes, app.as_of))
        return
    chosen = [snapshot.claim_at(i) for i in indexes]
    if all_claims or long_view:
        shown = chosen if all_claims else newest_first(chosen)
        click.echo(format_claims(shown, len(snapshot), app.as_of))
    else:
        click.echo(list_lines(chosen, snapshot, app.as_of, ids=with_ids))


MATRIX_EPILOG = """\b
Examples:
  kb matrix                  which model for which task class, today
  kb matrix --markdown       for a pull-request comment or a wiki page
  kb --as-of 2027-01-15 matrix --json
  kb matrix --cost           add $/case and p90 latency; mark the cheapest model as good as the best
  kb matrix --pareto         per task class, cost per case against pass rate: the frontier
"""


@cli.command(epilog=MATRIX_EPILOG)
@click.option("--markdown", is_flag=True, help="Print a markdown table.")
@click.option(
    "--cost",
    is_flag=True,
    help="Add $/case and p90 latency per cell; mark the cheapest model as good as the best.",
)
@click.option(
    "--pareto",
    is_flag=True,
    help="Per task class, each model's cost per case against its pass rate, and the "
    "frontier (dominated: another model as good, paired, for no more money).",
)
@margin_option
@json_option("Print every cell with its claims' numbers.")
@evidence_dir_option
@global_options
@pass_app
def matrix(
    app: App,
    markdown: bool,
    cost: bool,
    pareto: bool,
    margin: float,
    as_json: bool,
    evidence_dir: Path | None,
) -> None:
    """Model × task class: each live claim's polarity, pass rate, interval, n and age."""
    from kb.store.audit import archive_reasons
    from kb.views.decision import (
        claim_matrix,
        matrix_json,
        matrix_markdown,
        matrix_text,
        retired_cells,
    )

    one_output_format(as_json, markdown)
    if pareto:
        matrix_pareto(app, cost, margin, as_json, markdown, evidence_dir)
        return
    snapshot = app.store.read()
    found = claim_matrix(snapshot, app.as_of)
    if retired_cells(found):  # the history is read only when a cell needs its reason
        found = claim_matrix(snapshot, app.as_of, archive_reasons(app.store))
    if cost:
        from kb.compare import class_costs
        from kb.evidence_index import EvidenceIndex

        index = EvidenceIndex.load(app.store, evidence_dir)
        found = found.with_costs(class_costs(index, margin=margin), margin)
        warn_missing_evidence(index.warning())
    elif margin != DEFAULT_MARGIN:
        raise ConfigError(
            "--margin", "applies to --cost and --pareto only: kb matrix --cost --margin D"
        )
    if as_json:
        echo_json(matrix_json(found))
    elif markdown:
        click.echo(matrix_markdown(found), nl=False)
    else:
        click.echo(matrix_text(found))


def matrix_pareto(
    app: App, cost: bool, margin: float, as_json: bool, markdown: bool, evidence_dir: Path | None
) -> None:
    """``kb matrix --pareto``: the current epochs' cost against pass rate, per task class."""
    from kb.evidence_index import EvidenceIndex
    from kb.views.pareto import pareto_classes, pareto_json, pareto_markdown, pareto_text

    if cost:
        raise ConfigError("--pareto", "already shows each model's cost (drop --cost)")
    index = EvidenceIndex.load(app.store, evidence_dir)
    found = pareto_classes(index, margin=margin)
    warn_missing_evidence(index.warning())
    if as_json:
        echo_json(pareto_json(found, margin))
    elif markdown:
        click.echo(pareto_markdown(found), nl=False)
    else:
        click.echo(pareto_text(found))


def warn_missing_evidence(line: str | None) -> None:
    """The nights whose evidence was not found, as one warning on stderr."""
    if line is not None:
        click.echo(f"warning: {line}", err=True)


COMPARE_EPILOG = """\b
Examples:
  kb compare                                  every pair of models, per task class
  kb compare --task-class extraction --model openai:gpt-4o-mini
                                              that model against every other
  kb compare --model a:x --model b:y --margin 0.05 --markdown
"""


@cli.command(epilog=COMPARE_EPILOG)
@click.option("--task-class", help="Only this task class.")
@click.option(
    "--model",
    "models",
    multiple=True,
    help="Keep the pairs among these (repeatable); one model: its pairs with every other.",
)
@margin_option
@click.option(
    "--family",
    type=click.Choice(["class", "all"]),
    default="class",
    show_default=True,
    help="What the 95 % holds for: each task class's pairs, or every pair shown (wider).",
)
@click.option("--markdown", is_flag=True, help="Print markdown tables (inert names).")
@json_option("Print every pair with every number and every discordant case.")
@evidence_dir_option
@global_options
@pass_app
def compare(
    app: App,
    task_class: str | None,
    models: tuple[str, ...],
    margin: float,
    family: str,
    markdown: bool,
    as_json: bool,
    evidence_dir: Path | None,
) -> None:
    """Compare models pairwise on the cases both measured: difference, interval, reading, cost."""
    from kb.compare import check_compare_filters, compare_models
    from kb.evidence_index import EvidenceIndex
    from kb.views.compare import compare_json, compare_markdown, compare_text

    one_output_format(as_json, markdown)
    check_compare_filters(EvidenceIndex.load(app.store, runs=False), task_class, models)
    index = EvidenceIndex.load(app.store, evidence_dir, task_class=task_class)
    found = compare_models(
        index, task_class=task_class, models=models, margin=margin, every_pair=family == "all"
    )
    warn_missing_evidence(index.warning())
    if as_json:
        echo_json(compare_json(found))
    elif markdown:
        click.echo(compare_markdown(found), nl=False)
    else:
        click.echo(compare_text(found))


@cli.command()
@click.argument("claim_id", shell_complete=complete_claim_ids)
@evidence_dir_option
@global_options
@pass_app
def show(app: App, claim_id: str, evidence_dir: Path | None) -> None:
    """Show one claim, the git commits that touched it, and the cases behind it."""
    from kb.evidence_index import claim_nights
    from kb.store.audit import claim_history, compacted_claim
    from kb.store.baselines import read_baselines
    from kb.store.epochs import read_epochs
    from kb.views.claims import (
        claim_evidence,
        format_canary_baselines,
        format_claim,
        format_epoch,
        format_history,
    )

    snapshot = app.store.read()
    claim = snapshot.get(claim_id)
    if claim is None:
        found = compacted_claim(app.store, claim_id) if app.store.git is not None else None
        if found is None:
            from kb.store.query import near_miss

            hint = near_miss(claim_id, snapshot.index)
            raise ConfigError("show", f"no claim with id {claim_id!r}{hint}")
        claim, compaction = found
        click.echo(
            f"compacted: removed from the file by commit {compaction.commit[:12]} "
            f"({compaction.change.removeprefix('compacted ')}); shown as the file last held it"
        )
    click.echo(format_claim(claim, app.as_of))
    epoch = format_epoch(claim, read_epochs(app.store.home.epochs_file))
    if epoch is not None:
        click.echo(epoch)
    canary = format_canary_baselines(claim, read_baselines(app.store.home.canary_baselines))
    if canary is not None:
        click.echo(canary)
    click.echo(format_history(claim_history(app.store, claim_id)))
    click.echo(claim_evidence(claim_nights(app.store, claim, evidence_dir)))


DIFF_EPILOG = """\b
Examples:
  kb diff                          the last commit: HEAD~1 vs HEAD
  kb diff main                     main vs the work tree
  kb diff v12 HEAD --markdown      for a pull-request comment or $GITHUB_STEP_SUMMARY
  kb diff --all                    also each re-measurement that changed no belief

\b
Falsified claims lead, then canary drifts, new claims and lost ones (archived,
expired); re-measurements that changed no belief (same polarity and claim
class, pass rate the same to two decimals) are one count line.
"""


@cli.command(epilog=DIFF_EPILOG)
@click.argument("rev_a", required=False)
@click.argument("rev_b", required=False)
@click.option("--markdown", is_flag=True, help="Markdown for a PR comment or step summary.")
@click.option(
    "--all", "list_all", is_flag=True, help="List re-measurements that changed no belief."
)
@json_option("Print the changes as JSON (every change, each flagged).")
@global_options
@pass_app
def diff(
    app: App, rev_a: str | None, rev_b: str | None, markdown: bool, list_all: bool, as_json: bool
) -> None:
    """What changed in the store between two revisions (claims falsified, added, lost)."""
    from kb.store.audit import diff_revisions
    from kb.store.diff import diff_json, diff_markdown
    from kb.views.claims import format_diff

    one_output_format(as_json, markdown)
    changes = diff_revisions(app.store, rev_a, rev_b, app.as_of)
    if as_json:
        echo_json(diff_json(changes))
    elif markdown:
        click.echo(diff_markdown(changes, list_all), nl=False)
    else:
        click.echo(format_diff(changes, list_all))


@cli.command()
@click.option(
    "--all",
    "check_all",
    is_flag=True,
    help="Read every version in git, not only those after the commit the last verify "
    "checked through.",
)
@global_options
@pass_app
def verify(app: App, check_all: bool) -> None:
    """Check the store and its versions in git (exit 0 valid, 2 invalid).

    The first run reads every version; then only the commits after the one
    the last passing run checked through (a note under .git, never
    committed). --all reads them all again.
    """
    from kb.store.audit import verify_store

    app.reports_pending = True
    report = verify_store(app.store, full=check_all)
    if app.store.git is None:
        history = ", not in git"
    elif report.since is not None:
        history = (
            f", {report.history_checked} new version{'s' if report.history_checked != 1 else ''}"
            f" checked since {report.since[:12]} (--all: every one)"
        )
    else:
        history = f", {report.history_checked} versions in git checked"
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    claims = f"{report.claims} claim{'s' if report.claims != 1 else ''}"
    click.echo(f"ok: store v{report.version}, {claims}{history}")


@cli.command(name="export")
@click.option(
    "--parquet",
    "directory",
    type=click.Path(path_type=Path),
    required=True,
    help="Write runs.parquet, cells.parquet and claims.parquet (zstd) into this directory.",
)
@global_options
@pass_app
def export_tables(app: App, directory: Path) -> None:
    """Evidence as tables for DuckDB, polars or pandas: every night's runs and cells, the claims.

    Needs the optional pyarrow (pip install 'kb[table]').
    """
    from kb.export import evidence_tables, write_parquet

    tables, left_out = evidence_tables(app.store)
    for line in left_out:
        click.echo(f"warning: {line}", err=True)
    for path, table in zip(write_parquet(tables, directory), tables.values(), strict=True):
        click.echo(f"{path}: {table.num_rows} rows")


@cli.command()
@global_options
@pass_app
def settle(app: App) -> None:
    """Finish or undo a kb commit a kill interrupted (every command that writes does it first)."""
    app.writing = True
    said = app.store.settle().describe()
    click.echo(said if said is not None else "nothing to settle: no kb commit was interrupted")


@cli.command()
@global_options
@pass_app
def queue(app: App) -> None:
    """List the remeasurement queue: active eval-measured claims that have expired."""
    from kb.store.ttl import remeasurement_queue

    due = remeasurement_queue(app.store.read().entries, app.as_of)
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
@click.option("--polarity", required=True, type=polarity_choice)
@click.option("--statement", required=True, help="The note (at most 200 characters).")
@click.option("--approver", required=True, help="Who approves the note (the human gate).")
@click.option(
    "--ruled-out",
    multiple=True,
    required=True,
    type=ruled_out_choice,
    help="Causes ruled out before blaming the model (repeatable, at least one).",
)
@click.option("--contrast-evidence", default=None, help="What contrasted the model with others.")
@click.option(
    "--evidence",
    "evidence_texts",
    multiple=True,
    required=True,
    help="eval:REPORT_ID[#case1,case2] or journal:RUN_ID:ENTRY (repeatable).",
)
@click.option("--confidence", type=confidence_choice, default="low")
@click.option("--id", "claim_id", default=None, help="Claim id (default note/<subject>/...).")
@attempts_option
@push_option
@global_options
@pass_app
def note(
    app: App,
    model: str,
    effort: str | None,
    task_class: str,
    polarity: Polarity,
    statement: str,
    approver: str,
    ruled_out: tuple[RuledOut, ...],
    contrast_evidence: str | None,
    evidence_texts: tuple[str, ...],
    confidence: Confidence,
    claim_id: str | None,
    attempts: int | None,
    push: bool,
) -> None:
    """Add a human-editorial claim through the human gate."""
    from kb.store.editorial import editorial_claim, human_gate, parse_evidence
    from kb.store.filestore import CommitContext
    from kb.store.ops import AddClaim

    tries = resolve_attempts(attempts, push)
    claim = editorial_claim(
        model=model,
        effort=effort,
        task_class=task_class,
        polarity=polarity,
        statement=statement,
        approver=approver,
        evidence=[parse_evidence(text) for text in evidence_texts],
        observed_at=app.as_of,
        confidence=confidence,
        claim_id=claim_id,
    )
    gate = human_gate(approver, app.as_of, ruled_out, contrast_evidence)
    trailer = ("Kb-Gate", f"human; ruled out {', '.join(gate.ruled_out)}")
    context = CommitContext("note", approver, label=claim.id, extra_trailers=(trailer,))
    result = app.settle().commit_with_rebase(
        lambda _: [AddClaim(claim, gate)], context, attempts=tries, push=push
    )
    assert result is not None  # the batch always holds the note
    echo_commit(result, app)


COMPACT_EPILOG = """\b
Examples:
  kb compact --keep-days 30       weekly, after the nightly sweep
  kb show CLAIM_ID                a compacted claim, from git history
"""


@cli.command(epilog=COMPACT_EPILOG)
@click.option(
    "--keep-days",
    type=int,
    required=True,
    help="Keep superseded/archived claims whose last change is this recent (days, >= 0).",
)
@evidence_dir_option
@committer_option
@attempts_option
@push_option
@global_options
@pass_app
def compact(
    app: App,
    keep_days: int,
    evidence_dir: Path | None,
    committer: str,
    attempts: int | None,
    push: bool,
) -> None:
    """Remove old superseded and archived claims (and unused evidence) from the file.

    One commit, store version + 1; everything removed stays in git history
    (kb show finds a compacted claim there). Needs the store in git.
    """
    from kb.store.compaction import compact as compact_store

    tries = resolve_attempts(attempts, push)
    plan, result = compact_store(
        app.settle(), keep_days, app.as_of, committer, evidence_dir, attempts=tries, push=push
    )
    if result is None:
        click.echo(
            f"nothing to compact: no superseded or archived claim and no unused evidence "
            f"last changed before {plan.cutoff}"
        )
        return
    echo_commit(result, app)


@cli.command()
@click.argument("claim_id", shell_complete=complete_claim_ids)
@click.option("--reason", required=True, type=archive_reason_choice)
@committer_option
@attempts_option
@push_option
@global_options
@pass_app
def archive(
    app: App,
    claim_id: str,
    reason: ArchiveReason,
    committer: str,
    attempts: int | None,
    push: bool,
) -> None:
    """Archive one claim (it stays in the file with status archived)."""
    from kb.store.editorial import archive_ops
    from kb.store.filestore import CommitContext

    tries = resolve_attempts(attempts, push)
    context = CommitContext("archive", committer, label=claim_id)
    result = app.settle().commit_with_rebase(
        lambda snapshot: archive_ops(snapshot, claim_id, reason),
        context,
        attempts=tries,
        push=push,
    )
    assert result is not None  # archive_ops refuses rather than returning nothing
    echo_commit(result, app)
    _warn_reason_unkept(app, reason)


def _warn_reason_unkept(app: App, reason: str) -> None:
    if app.store.git is None:  # the reason is a commit trailer, not a claim field
        click.echo(
            f"warning: not in git: the reason ({reason}) is kept nowhere "
            "(git keeps it in the commit)",
            err=True,
        )


@cli.command()
@click.argument("model")
@committer_option
@attempts_option
@push_option
@global_options
@pass_app
def deprecate(app: App, model: str, committer: str, attempts: int | None, push: bool) -> None:
    """Archive every active or stale claim about MODEL (reason deprecated)."""
    from kb.store.editorial import deprecate_ops
    from kb.store.filestore import CommitContext

    tries = resolve_attempts(attempts, push)
    context = CommitContext("deprecate", committer, label=model)
    result = app.settle().commit_with_rebase(
        lambda snapshot: deprecate_ops(snapshot, model), context, attempts=tries, push=push
    )
    if result is None:
        click.echo(f"no active or stale claims about {model}; nothing committed")
    else:
        echo_commit(result, app)
        _warn_reason_unkept(app, "deprecated")
