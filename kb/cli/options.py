"""Options more than one command takes, each declared once (pip-tools' ``options.py``)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kb.cli.app import EngineFlags
from kb.errors import ConfigError
from kb.schema import (
    ARCHIVE_REASONS,
    CLAIM_STATUSES,
    CONFIDENCES,
    DEFAULT_ATTEMPTS,
    DEFAULT_MARGIN,
    POLARITIES,
    RULED_OUT_VALUES,
)

F = TypeVar("F", bound=Callable[..., Any])

#: With --push every concurrent publisher is a conflict, so the default is roomier.
DEFAULT_PUSH_ATTEMPTS = 10

status_choice = click.Choice(CLAIM_STATUSES)
polarity_choice = click.Choice(POLARITIES)
confidence_choice = click.Choice(CONFIDENCES)
archive_reason_choice = click.Choice(ARCHIVE_REASONS)
ruled_out_choice = click.Choice(RULED_OUT_VALUES)


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


def allow_partial_option(unit: str) -> Callable[[F], F]:
    """``--allow-partial``: run although the envelope cannot pay for every ``unit``."""
    return click.option(
        "--allow-partial",
        is_flag=True,
        help=f"Run even when the envelope cannot pay for every {unit} (the overflow is refused).",
    )


def evidence_dir_option(func: F) -> F:
    """``--evidence-dir DIR``: where a store's evidence files are."""
    return click.option(
        "--evidence-dir",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None,
        help=(
            "Where the evidence files are (default: where the store's settings say sweeps "
            "put them, else kb-evidence/ beside the store)."
        ),
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


def margin_option(func: F) -> F:
    """``--margin``: how much worse a model may be and still read non-inferior (SPEC 13.3)."""
    return click.option(
        "--margin",
        type=click.FloatRange(0, 1, max_open=True),
        default=DEFAULT_MARGIN,
        show_default=True,
        help="How much worse (in pass rate) still reads non-inferior.",
    )(func)


def one_output_format(as_json: bool, markdown: bool) -> None:
    """``--json`` and ``--markdown`` together: refused, never one of them chosen silently."""
    if as_json and markdown:
        raise ConfigError("--json", "choose one of --json and --markdown")


def json_option(help_text: str) -> Callable[[F], F]:
    """``--json``: machine-readable output on stdout."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def spec_argument(metavar: str = "SPEC.toml") -> Callable[[F], F]:
    """The spec file a job command reads."""
    return click.argument("spec_path", metavar=metavar, type=click.Path(path_type=Path))


def engine_options(func: F) -> F:
    """``--concurrency``, ``--record``, ``--replay``, ``--deadline``: as ``engine_flags``."""

    @functools.wraps(func)
    def wrapper(
        *args: Any,
        concurrency: int | None,
        record_path: Path | None,
        replay_path: Path | None,
        deadline: str | None,
        **kwargs: Any,
    ) -> Any:
        if concurrency is not None and concurrency < 1:
            raise ConfigError("--concurrency", f"must be a positive integer, got {concurrency}")
        flags = EngineFlags(concurrency, record_path, replay_path, deadline)
        return func(*args, engine_flags=flags, **kwargs)

    options = [
        click.option(
            "--concurrency", type=int, default=None, help="Calls in flight (spec default)."
        ),
        click.option(
            "--record",
            "record_path",
            type=click.Path(path_type=Path),
            default=None,
            help="Write a cassette (JSONL) of every provider exchange.",
        ),
        click.option(
            "--replay",
            "replay_path",
            type=click.Path(path_type=Path),
            default=None,
            help="Answer every call from a cassette; no provider is called.",
        ),
        click.option(
            "--deadline",
            metavar="ISO|DURATION",
            default=None,
            help="Stop when this instant passes (or after 90m, 2h, 1h30m): runs journaled.",
        ),
    ]
    decorated: Any = wrapper
    for option in reversed(options):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]
