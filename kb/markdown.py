r"""Untrusted text made inert for markdown: a code span that shows the text and does nothing else.

``kb sweep --summary`` and ``kb diff --markdown`` land in pull-request
comments and ``$GITHUB_STEP_SUMMARY``, rendered as GitHub-flavoured markdown.
Much of what they show was chosen by someone else: a model's reply, a
dataset's task class or case name, a spec's model name or report id, a
commit trailer's reason. Written raw, ``[x](http://e)`` is a link,
``<img src=…>`` a tracking image, ``@user`` a mention and ``a|b`` a new table
column. Every such string goes through :func:`code_span` (prose) or
:func:`table_code` (a table cell); kb's own words and numbers need neither.

Why a code span is enough (CommonMark's code spans, GFM's tables extension):
nothing inside a code span is parsed, so no link, image, HTML, emphasis or
autolink can start there, and GitHub links no mention inside ``<code>``.
What remains is to keep the span closed exactly where it was opened, and
the table row whole:

* the fence is one backtick longer than the longest run of backticks in the
  text, so no run inside closes it;
* a text that starts or ends with a backtick or a space gets one space on
  each side, which the parser strips again (a backtick beside the fence would
  lengthen it, and a lone leading and trailing space would be stripped from
  the text itself);
* line endings become spaces: a code span shows them as spaces anyway, and a
  line ending would end the table row, or the paragraph, in the middle;
* in a table, every ``|`` is written ``\|``: the row is split into cells at
  ``|`` *before* code spans are parsed, and a ``|`` after a backslash never
  splits; the splitter then drops that one backslash, so the cell shows the
  text as written (backslashes in the text included).
"""

from __future__ import annotations

import re

_BACKTICK_RUNS = re.compile(r"`+")
_LINE_ENDINGS = re.compile(r"\r\n|\r|\n")


def code_span(text: str) -> str:
    """``text`` as one inline code span that shows it literally (for prose, not table cells).

    The rendered span's content is ``text`` with each line ending replaced by one
    space; empty text is written as nothing.
    """
    flat = _LINE_ENDINGS.sub(" ", text)
    if not flat:
        return ""
    longest = max((len(run) for run in _BACKTICK_RUNS.findall(flat)), default=0)
    fence = "`" * (longest + 1)
    padded = flat.strip(" ") != "" and (flat[0] in "` " or flat[-1] in "` ")
    return f"{fence} {flat} {fence}" if padded else f"{fence}{flat}{fence}"


def table_code(text: str) -> str:
    """:func:`code_span` for a cell of a GFM table: it stays one cell, whatever ``text`` holds."""
    return code_span(text).replace("|", "\\|")
