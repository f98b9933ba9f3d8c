"""The site's model-against-model pages: ``kb compare``, answers one click away.

``models.html`` is an overview: per task class, one row per pair of models
with shared cases in their current epochs (the paired difference, its
interval and reading). Each row opens ``pair-<hash>.html``: the pair's
figures, cost and latency (:mod:`kb.compare`), then each discordant case with
a link to each model's answer on the night page that holds it (the newest
night of the model's epoch that ran the case). A page per pair keeps every
page small at a team's size (20 models are 190 pairs per class); an
overview or a pair too long for one page continues on numbered pages. Every
text is escaped; nothing is fetched.
"""

from __future__ import annotations

import hashlib
import html
from collections.abc import Callable, Mapping, Sequence

from kb.compare import ArmCosts, ClassComparison, PairComparison
from kb.money import usd_per_case
from kb.paired import margin_text
from kb.store.canonical import to_fixed_2
from kb.store.epochs import EpochsFile, cell_key
from kb.views.compare import interval_text, reading_text
from kb.views.site_pages import CONTENT_BUDGET, chunked, page_html, pager

MODELS_PAGE = "models.html"


def case_anchor(task_class: str, case: str) -> str:
    """The id of a case's section on a night page (names may hold anything: a hash)."""
    digest = hashlib.sha256(f"{task_class}\0{case}".encode("utf-8", "surrogatepass"))
    return f"case-{digest.hexdigest()[:16]}"


AnswerPages = Mapping[str, Callable[[str, str], str]]
"""Report id → where that night's pages hold a case's answers: ``(task class, case)`` → href."""


def answer_link(
    epochs: EpochsFile, pages: AnswerPages, subject: str, task_class: str, case: str
) -> str | None:
    """The page and anchor of ``subject``'s newest answer to ``case`` in its epoch."""
    epoch = epochs.cells.get(cell_key(subject, task_class))
    if epoch is None:
        return None
    for night in reversed(epoch.nights):
        if case in night.cases and night.report_id in pages:
            return pages[night.report_id](task_class, case)
    return None


def _score(value: float) -> str:
    return "pass" if value == 1 else "fail" if value == 0 else to_fixed_2(value)


def _money(costs: ArmCosts) -> str:
    return usd_per_case(costs.cost_per_case) if costs.cost_per_case is not None else "unknown"


def _ms(value: float | None) -> str:
    return f"{value:.0f} ms" if value is not None else "—"


def _arms_table(pair: PairComparison) -> str:
    """Each model's pass rate, cost and latency on the shared cases (as ``kb compare``)."""
    esc = html.escape
    rows = "".join(
        f'<tr><td class="name">{esc(subject)}</td><td class="num">{to_fixed_2(rate)}</td>'
        f'<td class="num">{_money(costs)}</td><td class="num">{_ms(costs.p50_ms)}</td>'
        f'<td class="num">{_ms(costs.p90_ms)}</td></tr>'
        for subject, rate, costs in (
            (pair.a, pair.rate_a, pair.costs_a),
            (pair.b, pair.rate_b, pair.costs_b),
        )
    )
    return (
        '<div class="scroll"><table class="arms"><thead><tr><th>model</th><th>pass rate</th>'
        "<th>$/case</th><th>p50 (incl. kb's queueing)</th><th>p90 (incl. kb's queueing)</th>"
        "</tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
    )


def pair_page(pair: PairComparison) -> str:
    """The page of one pair on one task class (names may hold anything: a hash)."""
    key = f"{pair.task_class}\0{pair.a}\0{pair.b}".encode("utf-8", "surrogatepass")
    return f"pair-{hashlib.sha256(key).hexdigest()[:16]}.html"


def _discordant_rows(pair: PairComparison, epochs: EpochsFile, pages: AnswerPages) -> list[str]:
    esc = html.escape
    rows = []
    for found in pair.discordant:
        links = []
        for subject, score in ((pair.a, found.a), (pair.b, found.b)):
            link = answer_link(epochs, pages, subject, pair.task_class, found.case)
            text = f"{_score(score)} — answer"
            links.append(
                f'<a href="{esc(link)}" title="{esc(subject)}">{text}</a>'
                if link
                else f"{_score(score)} (no evidence)"
            )
        rows.append(
            f'<tr><td class="name">{esc(found.case)}</td>'
            f"<td>{links[0]}</td><td>{links[1]}</td></tr>"
        )
    return rows


def _pair_summary(pair: PairComparison) -> str:
    esc = html.escape
    ratio = pair.cost_ratio
    cost = f" · cost ratio {ratio:.2f}x" if ratio is not None else " · cost unknown"
    return (
        f"n={pair.n} shared cases · difference {esc(interval_text(pair))} · "
        f"<b>{esc(reading_text(pair))}</b>{cost}"
    )


def _pair_files(pair: PairComparison, epochs: EpochsFile, pages: AnswerPages) -> dict[str, str]:
    """The pair's page: the reading, both arms, every discordant case (numbered pages if long)."""
    esc = html.escape
    first = pair_page(pair)
    stem = first.removesuffix(".html")
    rows = _discordant_rows(pair, epochs, pages)
    chunks = chunked(rows, CONTENT_BUDGET) if rows else [[]]
    names = [first] + [f"{stem}-{i}.html" for i in range(2, len(chunks) + 1)]
    title = (
        f'<span class="name">{esc(pair.a)}</span> vs <span class="name">{esc(pair.b)}</span> '
        f'<small class="meta name">{esc(pair.task_class)}</small>'
    )
    files = {}
    for i, (name, chunk) in enumerate(zip(names, chunks, strict=True)):
        table = (
            '<div class="scroll"><table class="discordant"><thead><tr><th>discordant case</th>'
            f'<th class="name">{esc(pair.a)}</th><th class="name">{esc(pair.b)}</th></tr>'
            f"</thead><tbody>{''.join(chunk)}</tbody></table></div>"
            if chunk
            else '<p class="meta">no discordant case: every shared case scored the same</p>'
        )
        links = pager(names, i, "discordant cases, pages")
        body = (
            f'<p><a href="{MODELS_PAGE}">← models compared</a></p>'
            f'<section class="pair"><h1>{title}</h1><p>{_pair_summary(pair)}</p>'
            f"{_arms_table(pair)}{links}{table}{links}</section>"
        )
        files[name] = page_html(f"kb {pair.a} vs {pair.b} ({pair.task_class})", body)
    return files


def _class_section(group: ClassComparison) -> str:
    esc = html.escape
    rows = "".join(
        f'<tr><td><a href="{pair_page(pair)}"><span class="name">{esc(pair.a)}</span> vs '
        f'<span class="name">{esc(pair.b)}</span></a></td><td>{_pair_summary(pair)}</td></tr>'
        for pair in group.pairs
    )
    return (
        f'<h2><span class="name">{esc(group.task_class)}</span></h2>'
        f'<p class="meta">margin {margin_text(group.margin)}; 95% intervals'
        + (f", Bonferroni over {len(group.pairs)} pairs" if len(group.pairs) > 1 else "")
        + "</p>"
        '<div class="scroll"><table class="pairs"><thead><tr><th>pair (its cases →)</th>'
        f"<th>reading</th></tr></thead><tbody>{rows}</tbody></table></div>"
    )


_INTRO = (
    '<p><a href="index.html">← all nights</a></p><h1>Models compared</h1>'
    '<p class="meta">Each pair on the cases both measured in their current epochs; the '
    "difference is the first model minus the second (the cheaper first when both costs "
    "are known). A pair's page lists each discordant case with links to both answers.</p>"
)


def models_files(
    found: Sequence[ClassComparison], epochs: EpochsFile, pages: AnswerPages
) -> dict[str, str]:
    """``models.html`` and one page per pair: no page over the budget at any team size.

    ``models.html`` holds one table per task class, a row per pair (numbered
    pages when long); a pair's page holds its discordant cases (numbered too).
    """
    if not found:
        empty = '<p class="meta">No task class has two models measured in their current epochs.</p>'
        return {MODELS_PAGE: page_html("kb models compared", _INTRO + empty)}
    files: dict[str, str] = {}
    for group in found:
        for pair in group.pairs:
            files.update(_pair_files(pair, epochs, pages))
    chunks = chunked([_class_section(group) for group in found], CONTENT_BUDGET)
    names = [MODELS_PAGE] + [f"models-{i}.html" for i in range(2, len(chunks) + 1)]
    for i, (name, chunk) in enumerate(zip(names, chunks, strict=True)):
        links = pager(names, i, "pages")
        files[name] = page_html("kb models compared", _INTRO + links + "".join(chunk) + links)
    return files
