"""JSON as JavaScript reads it: ``JSON.parse``'s numbers, and whether data prints as in JS.

JavaScript has one number type, so ``3.0`` is the integer 3 and an integer
beyond 2**53 is a rounded double. :func:`parse_json` reads numbers that way
and also says whether the data is *JS-plain*: it prints the same through
Python's C encoder as through JavaScript (and its keys sort the same), so a
hash over it may take the C encoder's fast path (:func:`jcs_of`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from kb.store.canonical import canonical_json, fast_canonical_json

MAX_SAFE_INTEGER = 2**53
_NOT_PLAIN_TEXT = re.compile(r"\\u[dD][89a-fA-F]")
# A character beyond the BMP: Python sorts keys by code point, JCS by UTF-16 units, and
# the two orders differ only around such characters, so their claims take the slow path.
_ASTRAL = re.compile(rb"[\xf0-\xf4]")
_NOT_PLAIN_CHAR = re.compile("[\ud800-\udfff\U00010000-\U0010ffff]")


# -- numbers as JavaScript reads them ---------------------------------------------------------


class _NumberWatch:
    """``json.loads`` hooks that read numbers the way ``JSON.parse`` does.

    JavaScript has one number type, so ``3.0`` is the integer 3 and an
    integer beyond 2**53 is a rounded double. While parsing we also learn
    whether every number prints the same in Python and JavaScript, which
    lets the hash take the C encoder's fast path.
    """

    def __init__(self) -> None:
        self.js_plain = True

    def parse_float(self, text: str) -> float | int:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"number {text} is out of range")
        if value.is_integer():
            if abs(value) <= MAX_SAFE_INTEGER:
                return int(value)
            self.js_plain = False
            return value
        if "e" in repr(value):
            self.js_plain = False
        return value

    def parse_int(self, text: str) -> float | int:
        value = int(text)
        if abs(value) > MAX_SAFE_INTEGER:
            self.js_plain = False
            return float(value)  # the double JSON.parse makes of it
        return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str | bytes) -> tuple[Any, bool]:
    """Parse like ``JSON.parse``; also say whether the data is JS-plain (see canonical).

    JS-plain data prints the same through Python's C encoder as through
    JavaScript (and its keys sort the same), so the hash may use the former.
    The number hooks cost one call per number; a regular expression over the
    text to skip them was measured slower (14 s against 0.2 s at 100,000 claims).
    """
    if isinstance(text, bytes):
        raw = text
        # As Node reads a file: bytes that are not UTF-8 become U+FFFD (json.loads
        # would make lone surrogates of some).
        text = raw.decode("utf-8", "replace")
    else:
        raw = text.encode("utf-8", "surrogatepass")
    watch = _NumberWatch()
    data = json.loads(
        text,
        parse_float=watch.parse_float,
        parse_int=watch.parse_int,
        parse_constant=_refuse_constant,
    )
    return data, watch.js_plain and _plain_text(raw)


def _plain_text(raw: bytes) -> bool:
    """No surrogate escape and no character beyond the BMP (the common case: ASCII)."""
    if b"\\u" in raw and _NOT_PLAIN_TEXT.search(raw.decode("utf-8", "surrogatepass")):
        return False
    return raw.isascii() or _ASTRAL.search(raw) is None


def jcs_of(value: Any, plain: bool) -> str:
    return fast_canonical_json(value) if plain else canonical_json(value)


def js_plain_value(value: Any) -> bool:
    """Whether kb-built data prints the same through the C encoder as in JavaScript."""
    if isinstance(value, str):
        return value.isascii() or _NOT_PLAIN_CHAR.search(value) is None
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return abs(value) <= MAX_SAFE_INTEGER
    if isinstance(value, float):
        return math.isfinite(value) and not value.is_integer() and "e" not in repr(value)
    if isinstance(value, Mapping):
        return all(js_plain_value(k) and js_plain_value(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(js_plain_value(v) for v in value)
    return False


def js_integer(digits: bytes) -> int:
    """An integer as ``JSON.parse`` reads it (beyond 2**53: the nearest double)."""
    value = int(digits)
    return value if value <= MAX_SAFE_INTEGER else int(float(value))
