"""``kb label`` and ``kb judges``: people's verdicts, and how far each judge agrees with them."""

from __future__ import annotations

from pathlib import Path

import click

from kb.cli.app import App, cli, echo_commit, echo_json, global_options, pass_app
from kb.cli.options import (
    attempts_option,
    committer_option,
    evidence_dir_option,
    json_option,
    one_output_format,
    push_option,
    resolve_attempts,
)
from kb.errors import ConfigError

LABEL_EPILOG = """\b
Examples:
  kb label kb-sweep-2026-12-01T02:00:00.000Z invoice-7 openai:gpt-4o fail \\
    --why "the total is wrong; the judge missed it"
  kb label --from labels.jsonl       one {"reportId", "case", "model", "verdict",
                                     "why"?, "repeat"?} object a line
\b
A label changes no committed claim. From the next night the case is graded
by the label on that model (its cell's epoch starts over), and kb judges
compares it with what the judges said about that answer.
"""


@cli.command(epilog=LABEL_EPILOG)
@click.argument("report_id", required=False)
@click.argument("case", required=False)
@click.argument("model", required=False)
@click.argument("verdict", required=False, type=click.Choice(["pass", "fail"]))
@click.option("--why", default=None, help="Why (kept with the label; at most 500 characters).")
@click.option("--repeat", type=click.IntRange(min=1), default=None, help="Which repeat (from 1).")
@click.option(
    "--from",
    "from_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Many labels: a JSON-lines file, one label a line.",
)
@evidence_dir_option
@committer_option
@attempts_option
@push_option
@global_options
@pass_app
def label(
    app: App,
    report_id: str | None,
    case: str | None,
    model: str | None,
    verdict: str | None,
    why: str | None,
    repeat: int | None,
    from_file: Path | None,
    evidence_dir: Path | None,
    committer: str,
    attempts: int | None,
    push: bool,
) -> None:
    """Record a person's verdict on one answer of a night (REPORT_ID CASE MODEL pass|fail)."""
    from kb.judging import record_labels
    from kb.store.labels import LabelRequest, parse_label_requests

    given = [report_id, case, model, verdict]
    if from_file is not None:
        if any(part is not None for part in given) or why is not None or repeat is not None:
            raise ConfigError("--from", "give labels either as arguments or with --from, not both")
        requests = parse_label_requests(from_file.read_bytes(), str(from_file))
    else:
        if any(part is None for part in given):
            raise ConfigError(
                "kb label", "needs REPORT_ID CASE MODEL pass|fail (or --from FILE.jsonl)"
            )
        assert report_id and case and model and verdict in ("pass", "fail")
        requests = [LabelRequest(report_id, case, model, verdict, why, repeat)]  # type: ignore[arg-type]
    result = record_labels(
        app.settle(),
        requests,
        labelled_at=app.as_of,
        by=committer,
        attempts=resolve_attempts(attempts, push),
        push=push,
        directory=evidence_dir,
    )
    if result is None:
        click.echo("the labels file already says this: nothing to commit")
        return
    echo_commit(result, app)


JUDGES_EPILOG = """\b
Examples:
  kb judges                    every judge against people's labels, and panels
  kb judges --json             for scripts
  kb judges --markdown         for a pull-request comment
\b
kappa: Cohen's, of a judge against the labels of the answers it judged;
alpha: Krippendorff's (nominal), between judges that graded the same
answers. Both carry a 95 % bootstrap interval over answers. A judge whose
kappa upper bound is below 0.6 is marked WEAK.
"""


@cli.command(epilog=JUDGES_EPILOG)
@click.option(
    "--nights",
    type=click.IntRange(min=0),
    default=7,
    show_default=True,
    help="How many recent nights alpha between judges reads.",
)
@json_option("Print the report as JSON.")
@click.option("--markdown", is_flag=True, help="Print the report as markdown tables.")
@evidence_dir_option
@global_options
@pass_app
def judges(app: App, nights: int, as_json: bool, markdown: bool, evidence_dir: Path | None) -> None:
    """How far each judge agrees with people's labels (kappa) and with other judges (alpha)."""
    from kb.judging import judges_report
    from kb.store.labels import read_labels
    from kb.views.judges import judges_json, judges_markdown, judges_text

    one_output_format(as_json, markdown)
    store = app.store
    report = judges_report(store, read_labels(store.home.labels_file), nights=nights)
    if as_json:
        echo_json(judges_json(report))
    elif markdown:
        click.echo(judges_markdown(report), nl=False)
    else:
        click.echo(judges_text(report))
