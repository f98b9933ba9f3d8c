"""``kb sweep --resume``: finish a night that stopped, paying for nothing twice.

A night can stop three ways: an interrupt or a crash (nothing committed;
the journal holds every run that settled), or a partly failed night (the
complete cells committed, the incomplete ones not; exit 1). Resuming the
same report id:

* **done cells** — the cells the night already committed complete (read
  from its committed report) — are not measured again; their cells, claims,
  retirements and runs are carried into the resumed report unchanged;
* every other cell is planned again, and each of its runs that the journal
  holds as settled ``ok`` for the very same request is served from the
  journal (:mod:`kb.engine.journal`); only missing and failed runs call a
  provider;
* the commit goes under the same report id, and the evidence files become
  the whole night's.

Without a journal (a CI re-run on a fresh machine) the done cells are still
skipped; the incomplete ones run again in full.

A journal names its spec relative to the store's git work tree
(:class:`SweptSpec`), so a runner that resumes in another checkout of the
same repository, or the same checkout moved, is accepted; another spec is
refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kb.engine.journal import JournalState, read_journal
from kb.errors import ConfigError
from kb.store.evidence import evidence_stem, load_evidence
from kb.store.filestore import REPORT_TRAILER, KnowledgeStore
from kb.store.records import CellRecord, ReportFile, RunRecord

JOURNAL_SUFFIX = ".journal.jsonl"


@dataclass(frozen=True)
class SweptSpec:
    """The spec a night sweeps, as its journal names it."""

    name: str
    """Relative to the top of the store's git work tree (outside git: to the store's
    directory), ``/``-separated; the absolute path when the spec lies outside it."""
    path: Path
    """The spec file's absolute path, symlinks resolved."""

    @classmethod
    def of(cls, spec_path: Path, store: KnowledgeStore) -> SweptSpec:
        """How a journal of a sweep of ``spec_path`` into ``store`` names the spec."""
        resolved = spec_path.resolve()
        git = store.git
        base = git.top if git is not None else store.path.parent.resolve()
        try:
            return cls(resolved.relative_to(base).as_posix(), resolved)
        except ValueError:
            return cls(str(resolved), resolved)

    def swept(self, recorded: str) -> bool:
        """Whether a journal naming ``recorded`` is of a sweep of this spec.

        Journals written before the spec was named relative (the absolute path)
        still match where they were written; one naming no spec matches any.
        """
        return recorded in ("", self.name, str(self.path))


def journal_path(directory: Path, report_id: str) -> Path:
    """Where a sweep of ``report_id`` journals its runs (beside its evidence)."""
    return directory / f"{evidence_stem(report_id)}{JOURNAL_SUFFIX}"


@dataclass(frozen=True)
class Resume:
    """What an earlier, stopped invocation of one night left to build on."""

    report_id: str
    observed_at: str
    journal: JournalState | None
    committed: ReportFile | None
    """The night's committed report, when part of it was committed."""
    committed_runs: tuple[RunRecord, ...] = ()

    @property
    def done(self) -> tuple[CellRecord, ...]:
        """The cells the night already committed complete."""
        return tuple(c for c in self.committed.cells if c.complete) if self.committed else ()

    def is_done(self, subject_key: str, task_class: str) -> bool:
        """Whether the night already committed this cell."""
        return any(c.subject_key == subject_key and c.task_class == task_class for c in self.done)

    def done_runs(self) -> list[RunRecord]:
        """The committed runs of the done cells (targets and judges), in their order."""
        return [
            run
            for run in self.committed_runs
            if run.kind != "canary"
            and run.task_class is not None
            and self.is_done(run.subject_key, run.task_class)
        ]


def newest_journal(directory: Path, spec: SweptSpec | None = None) -> JournalState | None:
    """The journal of the latest night in ``directory`` (of ``spec``'s sweeps, when given)."""
    found = [read_journal(path) for path in directory.glob(f"*{JOURNAL_SUFFIX}")]
    journals = [j for j in found if j is not None and (spec is None or spec.swept(j.spec))]
    return max(journals, key=lambda j: j.observed_at) if journals else None


def night_committed(store: KnowledgeStore, report_id: str) -> bool:
    """Whether the store's history records a commit of the night ``report_id``.

    In git: a commit on ``HEAD``'s history carries ``Kb-Report: <id>`` —
    whatever claims it made, with or without evidence files; files the user
    committed by hand from an interrupted commit do not count. Outside git
    (no history) the night's evidence beside the store counts, which a
    settled commit leaves only when it stood.
    """
    git = store.git
    if git is not None:
        return bool(git.commits_with_trailer(REPORT_TRAILER, report_id, first_parent=False))
    return load_evidence(store, report_id) is not None


def find_resume(
    store: KnowledgeStore, directory: Path, report_id: str | None, spec: SweptSpec | None = None
) -> Resume:
    """What there is to resume of ``report_id`` (else of ``spec``'s newest journaled night)."""
    if report_id is None:
        latest = newest_journal(directory, spec)
        if latest is None:
            others = newest_journal(directory)
            hint = (
                f" (the newest stopped night, {others.report_id}, is a sweep of {others.spec})"
                if others is not None
                else ""
            )
            raise ConfigError(
                "--resume",
                f"nothing to resume: no journal of a stopped sweep of this spec in {directory}"
                f"{hint}; name the night with --observed-at or --report-id",
            )
        report_id = latest.report_id
    journal = read_journal(journal_path(directory, report_id))
    evidence = load_evidence(store, report_id) if night_committed(store, report_id) else None
    committed = evidence.report if evidence is not None else None
    if journal is None and committed is None:
        raise ConfigError(
            "--resume",
            f"nothing to resume for report {report_id!r}: no journal in {directory} and no "
            "committed evidence of it",
        )
    if journal is not None:
        observed = journal.observed_at
    else:
        assert committed is not None
        observed = committed.observed_at
    runs = tuple(evidence.runs) if evidence is not None else ()
    return Resume(report_id, observed, journal, committed, runs)
