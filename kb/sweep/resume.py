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
  the whole night's;
* with a canary, the canary is asked again before anything is reused, and a
  model whose exact fingerprint is not the one its journaled probes gave has
  none of its journaled runs reused (:class:`ResumeGuard`): the provider may
  have changed the model meanwhile, and one claim must never pool two models.

Without a journal (a CI re-run on a fresh machine) the done cells are still
skipped; the incomplete ones run again in full.

A journal names its spec relative to the store's git work tree
(:class:`SweptSpec`), so a runner that resumes in another checkout of the
same repository, or the same checkout moved, is accepted; another spec is
refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kb.engine.journal import JournalState, read_journal
from kb.errors import ConfigError
from kb.store.evidence import evidence_stem, load_evidence
from kb.store.filestore import REPORT_TRAILER, KnowledgeStore
from kb.store.records import CellRecord, ReportFile, RunRecord
from kb.sweep.canary import CanaryResult, fingerprint, probe_output
from kb.sweep.shard_join import cell_of

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
            and self.is_done(cell_of(run), run.task_class)
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


class NothingToResume(ConfigError):
    """``--resume`` found no stopped and no committed night to build on (the night starts)."""


def find_resume(
    store: KnowledgeStore, directory: Path, report_id: str | None, spec: SweptSpec | None = None
) -> Resume:
    """What there is to resume of ``report_id`` (else of ``spec``'s newest journaled night).

    Raises :class:`NothingToResume` when there is neither a journal nor a committed
    night: ``kb sweep --resume`` then starts the night (SPEC 14.4: one safe CI command).
    """
    if report_id is None:
        latest = newest_journal(directory, spec)
        if latest is None:
            others = newest_journal(directory)
            hint = (
                f" (the newest stopped night, {others.report_id}, is a sweep of {others.spec})"
                if others is not None
                else ""
            )
            raise NothingToResume(
                "--resume",
                f"nothing to resume: no journal of a stopped sweep of this spec in {directory}"
                f"{hint}",
            )
        report_id = latest.report_id
    journal = read_journal(journal_path(directory, report_id))
    in_history = night_committed(store, report_id)
    evidence = load_evidence(store, report_id) if in_history else None
    committed = evidence.report if evidence is not None else None
    if journal is None and committed is None and in_history:
        raise ConfigError(  # never measured and paid again: it is committed
            "--resume",
            f"the night {report_id!r} is committed already (its commit is in git) but its "
            f"evidence is not in {directory} (written with --no-evidence, or elsewhere): "
            "nothing to resume, and it is not measured again",
        )
    if journal is None and committed is None:
        raise NothingToResume(
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


@dataclass(frozen=True)
class ResumedModel:
    """A model whose journaled runs a resume does not reuse, and why (SPEC 14.1 item 1)."""

    member: str
    """The model's key (``model[@effort]``)."""
    runs: int
    """Its journaled target and judge runs asked again (they stay in the journal)."""
    before: str | None
    """The stopped invocation's exact canary fingerprint (``None``: it has none to compare:
    a probe missing, failed or asked differently then)."""
    after: str | None
    """Tonight's (``None``: not usable tonight: incomplete, unstable or an outage's)."""

    @property
    def changed(self) -> bool:
        """The model answers its canary differently now: its cells start a new epoch."""
        return self.before is not None and self.after is not None and self.before != self.after

    def line(self) -> str:
        """What the resume says about it (one line)."""
        runs = f"its {self.runs} journaled run{'s' if self.runs != 1 else ''}"
        if self.changed:
            assert self.before is not None and self.after is not None
            return (
                f"{self.member} answers its canary differently than when the night stopped "
                f"(fingerprint {self.before[:12]} -> {self.after[:12]}): {runs} are asked "
                "again, never pooled with tonight's answers, and its cells start a new epoch"
            )
        when = "then" if self.before is None else "tonight"
        return (
            f"{self.member}'s canary cannot be compared with the stopped night's (it did not "
            f"answer whole {when}): {runs} are asked again, never pooled with tonight's"
        )


@dataclass(frozen=True)
class ResumeGuard:
    """What a resume checks before it reuses a model's journaled runs: its canary, again.

    The canary is asked afresh (never served from the journal); a model whose
    exact fingerprint tonight is not the one its journaled canary gave — or
    that cannot be compared, because either canary did not answer whole — has
    its journaled target and judge runs taken back from reuse (``forget``):
    answers of two models are never pooled into one claim.
    """

    journal: JournalState
    forget: Callable[[Sequence[str]], None]
    """Takes journaled runs back from reuse (:meth:`JournaledTransport.forget`)."""
    repeats: int = 1

    @staticmethod
    def served(journal: JournalState) -> JournalState:
        """What the resumed night may serve from ``journal`` before its canary: no probe.

        Unless the stopped invocation measured the whole night (it stopped in its
        commit): the resume then asks no provider anything, every answer it pools
        is the stopped night's, and its journaled canary is that night's too.
        """
        if journal.measured:
            return journal
        return journal.without(
            label for label, (_, run) in journal.settled.items() if run.kind == "canary"
        )

    def check(self, canaries: Sequence[CanaryResult]) -> tuple[ResumedModel, ...]:
        """Tonight's canaries against the journaled ones; forget what cannot be reused."""
        if self.journal.measured:
            return ()  # the canary was the stopped night's own: nothing was asked again
        found = []
        for canary in canaries:
            key = canary.member.key
            mine = (f"target:{key}/", f"judge:{key}/")
            labels = [label for label in self.journal.settled if label.startswith(mine)]
            before = self._stopped_fingerprint(canary)
            after = canary.fingerprint if canary.may_flip else None
            if not labels or (before is not None and before == after):
                continue
            self.forget(labels)
            found.append(ResumedModel(key, len(labels), before, after))
        return tuple(found)

    def _stopped_fingerprint(self, canary: CanaryResult) -> str | None:
        """The fingerprint the journal's probes of this model gave, when they answered whole."""
        outputs = []
        for index, probe in enumerate(canary.probes):
            label = f"canary:{canary.member.key}/{index}" + ("#1" if self.repeats > 1 else "")
            found = self.journal.settled.get(label)
            asked = probe.runs[0].request if probe.runs else None
            if found is None or asked is None or found[0] != asked.key:
                return None
            outputs.append(probe_output(found[1]))
        return fingerprint(len(canary.probes), outputs)
