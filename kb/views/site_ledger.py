"""``kb site`` builds incrementally: a night's pages are written once (SPEC 14.3).

A night's pages depend on the night's own evidence, on every earlier night
(the trend beside each rate, each answer's "before") and on the site's own
code — nothing later. So each night gets a key: the sha256 of the site's code
and of the chain of the nights up to it (each night's id and its evidence
identity, :class:`kb.evidence_index.RecordedReport`). ``kb-site.json`` in the
site directory records, per night built, its key, its pages, which page holds
each case's answers and the claims it links, and the earlier answers folded
through the newest night (what the next night's "before" reads). A build
renders only the nights whose key changed or whose pages are gone — a new
night, or every night after one that was left out, came back or was
compacted away — and reads no other night's runs for its pages.

Claim links never make a night stale: every claim a night links gets a page
as long as the site is built (a claim no longer live says so on its page),
so a retirement does not change the pages of the night that made the claim.

The ledger is removed before a build writes anything and written after the
last page: a build that dies half-way leaves no ledger, and the next build
renders every night again. A ledger kb cannot read is ignored the same way.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from kb.evidence_index import UNREADABLE, RecordedReport
from kb.views.site_night import NightLayout, PriorAnswer, answers_of, night_files
from kb.views.site_pages import GENERATOR, Night, claim_page

LEDGER_FILE = "kb-site.json"
LEDGER_FORMAT = 1

PriorAnswers = dict[tuple[str, str], PriorAnswer]


@cache
def site_code() -> str:
    """sha256 of kb's version and code: any other kb draws every night again.

    All of kb, not only its views: a night's page also reads money, alarms and
    the evidence readers; the version too, for an install without sources.
    """
    import kb

    package = Path(kb.__file__).parent
    digest = hashlib.sha256(f"{GENERATOR}\0{getattr(kb, '__version__', '')}".encode())
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


_PAGE = re.compile(r"[A-Za-z0-9._%-]+\.html")
_ANSWER = re.compile(r"[A-Za-z0-9._%-]+\.html#case-[0-9a-f]{16}")


def _page(value: Any) -> str:
    """A page name the site itself writes (a hand-edited ledger names nothing else)."""
    if not isinstance(value, str) or not _PAGE.fullmatch(value):
        raise ValueError(f"not a page of this site: {str(value)[:60]!r}")
    return value


def _answer(value: Any) -> str | None:
    """A link to an answer on a page of this site (``None``: none)."""
    if value is not None and (not isinstance(value, str) or not _ANSWER.fullmatch(value)):
        raise ValueError(f"not an answer of this site: {str(value)[:60]!r}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"not a text: {str(value)[:60]!r}")
    return value


@dataclass(frozen=True)
class BuiltNight:
    """What an earlier build wrote for one night."""

    key: str
    pages: tuple[str, ...]
    case_pages: dict[tuple[str, str], str]
    claims: tuple[str, ...]
    """The claims its pages link (each must keep a page)."""


@dataclass
class SiteLedger:
    """``kb-site.json``: the nights an earlier build wrote, and the answers folded so far."""

    nights: dict[str, BuiltNight] = field(default_factory=dict)
    fold_key: str = ""
    """The key of the newest night folded into :attr:`fold` (``""``: none)."""
    fold: PriorAnswers = field(default_factory=dict)

    @classmethod
    def read(cls, directory: Path) -> tuple[SiteLedger, str | None]:
        """The ledger in ``directory``, or an empty one (every night is drawn again).

        The second value says why a ledger that is there could not be read.
        """
        path = directory / LEDGER_FILE
        if not path.exists():
            return cls(), None
        try:
            return cls._parsed(json.loads(path.read_text("utf-8"))), None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            return cls(), (
                f"{path}: cannot be read ({str(exc)[:120]}): every night's pages are drawn again"
            )

    @classmethod
    def _parsed(cls, data: Any) -> SiteLedger:
        if data.get("format") != LEDGER_FORMAT or data.get("code") != site_code():
            return cls()  # another kb drew these pages: it draws them again, as it should
        nights = {
            _text(night_id): BuiltNight(
                _text(entry["key"]),
                tuple(_page(page) for page in entry["pages"]),
                {(_text(tc), _text(case)): _page(page) for tc, case, page in entry["casePages"]},
                tuple(_text(claim) for claim in entry["claims"]),
            )
            for night_id, entry in data["nights"].items()
        }
        fold = {
            (_text(subject), _text(case)): PriorAnswer(
                passed is True, _text(observed), _answer(href)
            )
            for subject, case, passed, observed, href in data["fold"]
        }
        return cls(nights, _text(data["foldKey"]), fold)

    def render(self) -> str:
        data: dict[str, Any] = {
            "format": LEDGER_FORMAT,
            "code": site_code(),
            "nights": {
                night_id: {
                    "key": built.key,
                    "pages": list(built.pages),
                    "casePages": [[*where, page] for where, page in built.case_pages.items()],
                    "claims": list(built.claims),
                }
                for night_id, built in self.nights.items()
            },
            "foldKey": self.fold_key,
            "fold": [
                [subject, case, answer.passed, answer.observed_at, answer.href]
                for (subject, case), answer in self.fold.items()
            ],
        }
        return json.dumps(data, separators=(",", ":")) + "\n"  # ASCII: any name survives


def night_keys(sources: Sequence[RecordedReport]) -> list[str]:
    """Each night's key: the site's code and every night up to it."""
    keys, chain = [], ""
    for source in sources:
        link = f"{chain}\0{source.report.report_id}\0{source.identity}"
        chain = hashlib.sha256(link.encode("utf-8", "surrogatepass")).hexdigest()
        keys.append(hashlib.sha256(f"{site_code()}\0{chain}".encode()).hexdigest())
    return keys


@dataclass
class NightsWritten:
    """The nights' pages after a build: drawn now or kept from an earlier build."""

    hrefs: dict[str, Callable[[str, str], str]]
    """Night id → where a case's answers are (``page#anchor``)."""
    kept: list[str]
    """Pages an earlier build wrote that still hold."""
    drawn: int
    """Nights drawn by this build."""
    linked: set[str]
    """Every claim a night page links."""
    ledger: SiteLedger


class NightUnreadable(Exception):
    """A night's runs could not be read while drawing it (it is left out)."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(reason)
        self.index = index
        self.reason = reason


def write_nights(
    sources: Sequence[RecordedReport],
    earlier: SiteLedger,
    directory: Path,
    write: Callable[[str, str], None],
) -> NightsWritten:
    """Draw the nights whose pages are not current, oldest first; keep the others.

    Raises :class:`NightUnreadable` naming a night whose runs cannot be read.
    """
    keys = night_keys(sources)
    current = [
        _current(earlier, source, key, directory) for source, key in zip(sources, keys, strict=True)
    ]
    first = current.index(False) if False in current else len(sources)
    fold = _fold_before(sources, earlier, keys, first)
    reports = [Night(source.report, ()) for source in sources]
    found = NightsWritten({}, [], 0, set(), SiteLedger())
    for index, source in enumerate(sources):
        night_id = source.report.report_id
        if index < first:
            built = earlier.nights[night_id]
            found.kept.extend(built.pages)
        else:
            assert fold is not None  # known before the first night drawn
            night = _night(source, index)
            linked: set[str] = set()

            def claim_href(claim_id: str, linked: set[str] = linked) -> str:
                linked.add(claim_id)
                return claim_page(claim_id)

            layout, files = night_files(night, reports[:index], claim_href, fold)
            for name, text in files.items():
                write(name, text)
            fold |= answers_of(night, layout)
            built = BuiltNight(
                keys[index], tuple(files), dict(layout.case_pages), tuple(sorted(linked))
            )
            found.drawn += 1
        found.linked.update(built.claims)
        found.ledger.nights[night_id] = built
        found.hrefs[night_id] = NightLayout(reports[index].page, built.case_pages).href
    if fold is not None and sources:
        found.ledger.fold, found.ledger.fold_key = fold, keys[-1]
    return found


def _night(source: RecordedReport, index: int) -> Night:
    """The night with its runs, or :class:`NightUnreadable` naming it."""
    try:
        return Night(source.report, source.runs())
    except UNREADABLE as exc:
        raise NightUnreadable(index, str(exc)[:200]) from None


def _current(earlier: SiteLedger, source: RecordedReport, key: str, directory: Path) -> bool:
    built = earlier.nights.get(source.report.report_id)
    return (
        built is not None
        and built.key == key
        and all((directory / page).is_file() for page in built.pages)
    )


def _fold_before(
    sources: Sequence[RecordedReport],
    earlier: SiteLedger,
    keys: Sequence[str],
    first: int,
) -> PriorAnswers | None:
    """Every model's latest answer before night ``first`` (``None``: not needed, not known).

    The ledger's when it was folded through the night before; else read from
    the earlier nights' runs (a night in the middle is drawn again).
    """
    if first == 0:
        return {}
    if earlier.fold_key == keys[first - 1]:
        return dict(earlier.fold)
    if first == len(sources):
        return None
    fold: PriorAnswers = {}
    for index in range(first):
        source = sources[index]
        built = earlier.nights[source.report.report_id]
        night = _night(source, index)
        fold |= answers_of(night, NightLayout(night.page, built.case_pages))
    return fold
