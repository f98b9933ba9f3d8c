"""``kb judges`` as text, markdown and JSON (:mod:`kb.judging` computes it)."""

from __future__ import annotations

from typing import Any

from kb.judging import WEAK_KAPPA, Alpha, JudgesReport, Kappa
from kb.markdown import table_code


def _interval(value: float | None, low: float | None, high: float | None) -> str:
    if value is None:
        return "undefined (one verdict only)"
    if low is None or high is None:
        return f"{value:.2f}"
    return f"{value:.2f} [{low:.2f}, {high:.2f}]"


def _kappa_text(k: Kappa) -> str:
    return _interval(k.kappa, k.low, k.high)


def _alpha_text(a: Alpha) -> str:
    return _interval(a.alpha, a.low, a.high)


def _confusion(k: Kappa) -> str:
    return (
        f"judge pass: {k.both_pass} labelled pass, {k.first_pass_only} labelled fail; "
        f"judge fail: {k.second_pass_only} labelled pass, {k.both_fail} labelled fail"
    )


def judges_text(report: JudgesReport) -> str:
    """The report for a terminal."""
    lines = [
        f"judges against people's labels ({report.labels} label"
        f"{'s' if report.labels != 1 else ''}; Cohen's kappa, 95 % bootstrap interval over "
        "answers):"
    ]
    if not report.against_labels:
        lines.append(
            "  no labelled answer was judged (label answers with kb label REPORT_ID CASE MODEL "
            "pass|fail)"
        )
    for found in report.against_labels:
        k = found.kappa
        weak = f"  WEAK: upper bound below {WEAK_KAPPA}" if found.weak else ""
        unscored = f", {found.unscored} unscored (left out)" if found.unscored else ""
        lines.append(
            f"  {found.judge} · {found.task_class}: kappa {_kappa_text(k)}, n {k.n}{unscored}{weak}"
        )
        if k.n:
            lines.append(f"    {_confusion(k)}")
    nights = len(report.nights)
    which = "the last night" if nights == 1 else f"the last {nights} nights"
    lines.append(
        "between judges (Krippendorff's alpha, nominal, 95 % bootstrap interval over answers; "
        f"{which}):"
    )
    if not report.between:
        lines.append("  no answer was graded by two or more judges (a panel: models = [...])")
    for panel in report.between:
        a = panel.alpha
        lines.append(
            f"  {panel.task_class}: alpha {_alpha_text(a)} over {a.units} answers "
            f"({', '.join(panel.judges)})"
        )
    lines += [f"left out: {why}" for why in report.left_out]
    return "\n".join(lines)


def judges_markdown(report: JudgesReport) -> str:
    """The report as GFM tables; every name a code span, so nothing in it renders."""
    lines = [f"### Judges against people's labels ({report.labels} labels)", ""]
    if not report.against_labels:
        lines.append("No labelled answer was judged (`kb label REPORT_ID CASE MODEL pass|fail`).")
    else:
        lines += [
            "| judge | task class | κ [95 %] | n | judge pass / label pass | judge pass / label "
            "fail | judge fail / label pass | judge fail / label fail | unscored |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
    for found in report.against_labels:
        k = found.kappa
        weak = " **weak**" if found.weak else ""
        lines.append(
            f"| {table_code(found.judge)} | {table_code(found.task_class)} | "
            f"{_kappa_text(k)}{weak} | {k.n} | {k.both_pass} | {k.first_pass_only} | "
            f"{k.second_pass_only} | {k.both_fail} | {found.unscored} |"
        )
    lines += ["", "### Between judges (Krippendorff's α)", ""]
    if not report.between:
        lines.append("No answer was graded by two or more judges (a panel: `models = [...]`).")
    else:
        lines += ["| task class | α [95 %] | answers | judges |", "|---|---|---|---|"]
    for panel in report.between:
        judges = ", ".join(table_code(j) for j in panel.judges)
        lines.append(
            f"| {table_code(panel.task_class)} | {_alpha_text(panel.alpha)} | "
            f"{panel.alpha.units} | {judges} |"
        )
    return "\n".join(lines) + "\n"


def judges_json(report: JudgesReport) -> dict[str, Any]:
    """The report as a JSON object."""
    return {
        "labels": report.labels,
        "weakKappa": WEAK_KAPPA,
        "againstLabels": [
            {
                "judge": found.judge,
                "taskClass": found.task_class,
                "n": found.kappa.n,
                "kappa": found.kappa.kappa,
                "interval": [found.kappa.low, found.kappa.high],
                "observedAgreement": found.kappa.observed,
                "confusion": {
                    "judgePassLabelPass": found.kappa.both_pass,
                    "judgePassLabelFail": found.kappa.first_pass_only,
                    "judgeFailLabelPass": found.kappa.second_pass_only,
                    "judgeFailLabelFail": found.kappa.both_fail,
                },
                "unscored": found.unscored,
                "weak": found.weak,
            }
            for found in report.against_labels
        ],
        "betweenJudges": [
            {
                "taskClass": panel.task_class,
                "judges": list(panel.judges),
                "answers": panel.alpha.units,
                "alpha": panel.alpha.alpha,
                "interval": [panel.alpha.low, panel.alpha.high],
            }
            for panel in report.between
        ],
        "nights": list(report.nights),
        "leftOut": list(report.left_out),
    }
