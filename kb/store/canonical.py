r"""JavaScript-exact JSON: ``JSON.stringify`` output, RFC 8785 (JCS) and the store hash.

rulvar is TypeScript, so every byte kb hashes or writes must be the byte
JavaScript would produce for the same value. Python's ``json`` differs in
three places that matter here, and this module owns all three:

* numbers: ECMAScript ``Number::toString`` (``1.0`` → ``1``, ``1e-7`` →
  ``1e-7``, ``1e21`` → ``1e+21``, ``1e16`` → ``10000000000000000``);
  integers beyond 2**53 are first rounded to a double, as ``JSON.parse`` does;
* strings: ``JSON.stringify`` escapes only ``"``, ``\\``, the C0 controls
  (``\\b \\t \\n \\f \\r`` short, the rest ``\\u00xx`` lowercase) and lone
  surrogates (``\\udxxx``, the "well-formed JSON.stringify" rule of ES2019);
* key order: JCS sorts keys by UTF-16 code units, not code points.

We keep our own JCS rather than only the ``rfc8785`` package because that
package refuses lone surrogates, which ``JSON.parse`` accepts and rulvar
hashes; the tests hold the two implementations to the same output everywhere
``rfc8785`` has an answer, and both to vectors made by Node.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

_MAX_SAFE = 2**53
_NEEDS_ESCAPE = re.compile('[\\x00-\\x1f"\\\\\ud800-\udfff]')
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def js_number(value: float | int) -> str:
    """Render a number exactly as ECMAScript ``Number.prototype.toString()`` does."""
    if isinstance(value, bool):
        raise TypeError("booleans are not numbers here")
    if isinstance(value, int):
        if -_MAX_SAFE <= value <= _MAX_SAFE:
            return str(value)
        value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{value!r} has no JSON form")
    if value == 0:
        return "0"
    if value < 0:
        return "-" + js_number(-value)
    digits, n = _shortest_digits(value)
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    exponent = n - 1
    sign = "+" if exponent >= 0 else "-"
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{mantissa}e{sign}{abs(exponent)}"


def _shortest_digits(value: float) -> tuple[str, int]:
    """Shortest round-trip digits ``s`` and ``n`` with ``value = 0.s × 10**n``.

    Python's ``repr`` already yields the shortest round-trip digit string (the
    same one ECMAScript requires); only its layout differs, so we re-lay it.
    """
    text = repr(value)
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text) if exp_text else 0
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    n = len(whole) + exponent
    stripped = digits.lstrip("0")
    n -= len(digits) - len(stripped)
    stripped = stripped.rstrip("0")
    return stripped, n


def _escape_char(match: re.Match[str]) -> str:
    char = match.group(0)
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    return f"\\u{ord(char):04x}"


def js_string(value: str) -> str:
    """Quote a string exactly as JavaScript ``JSON.stringify`` does."""
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, value) + '"'


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def js_stringify(value: Any, indent: int | None = None, *, sort_keys: bool = False) -> str:
    """Serialize like ``JSON.stringify(value, null, indent)``.

    With ``sort_keys`` the keys of every object are ordered by UTF-16 code
    units, which (with no indent) is RFC 8785. Objects otherwise keep their
    insertion order. ``None`` is ``null``; tuples are arrays.
    """
    parts: list[str] = []
    _emit(value, parts, indent, sort_keys, "")
    return "".join(parts)


@dataclass(frozen=True)
class Verbatim:
    """JSON text already serialized (compact, canonical): emitted as it is.

    Lets a caller serialize a large member once and reuse it (RFC 8785 writes
    an object's members independently, so a member's text does not depend on
    where it sits); only for output without ``indent``.
    """

    text: str


def _emit(value: Any, out: list[str], indent: int | None, sort_keys: bool, pad: str) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(js_string(value))
    elif isinstance(value, int | float):
        out.append(js_number(value))
    elif isinstance(value, Mapping):
        keys = list(value.keys())
        for key in keys:
            if not isinstance(key, str):
                raise TypeError(f"object key {key!r} is not a string")
        if sort_keys:
            keys.sort(key=_utf16_key)
        if not keys:
            out.append("{}")
            return
        inner = pad + " " * indent if indent else pad
        out.append("{")
        for i, key in enumerate(keys):
            if i:
                out.append(",")
            if indent:
                out.append("\n" + inner)
            out.append(js_string(key))
            out.append(": " if indent else ":")
            _emit(value[key], out, indent, sort_keys, inner)
        if indent:
            out.append("\n" + pad)
        out.append("}")
    elif isinstance(value, Sequence):
        if not value:
            out.append("[]")
            return
        inner = pad + " " * indent if indent else pad
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            if indent:
                out.append("\n" + inner)
            _emit(item, out, indent, sort_keys, inner)
        if indent:
            out.append("\n" + pad)
        out.append("]")
    elif isinstance(value, Verbatim) and not indent:
        out.append(value.text)
    else:
        raise TypeError(f"{type(value).__name__} is not JSON-serializable")


def to_fixed_2(value: float) -> str:
    """JavaScript ``value.toFixed(2)``: the exact binary value rounded, ties away from zero.

    Every pass rate kb prints (claims, cell lines, ``kb list``, HTML) goes
    through this, so ``1/8`` reads ``0.13`` everywhere, as rulvar writes it.
    """
    return str(Decimal(value).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def canonical_json(value: Any) -> str:
    """RFC 8785 canonical form of ``value`` (JCS), as text."""
    return js_stringify(value, sort_keys=True)


LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_as_js(text: str) -> bytes:
    """The UTF-8 Node's crypto (like TextEncoder) hashes: a lone surrogate as U+FFFD."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return LONE_SURROGATE.sub("\ufffd", text).encode("utf-8")


def sha256_hex(text: str) -> str:
    """Lowercase sha256 hex of the UTF-8 of ``text`` (lone surrogates as JS would encode)."""
    return hashlib.sha256(utf8_as_js(text)).hexdigest()


def claims_hash(claims: Sequence[Mapping[str, Any]]) -> str:
    """The store hash: sha256 hex of JCS(claims)."""
    return sha256_hex(canonical_json(claims))


def fast_canonical_json(value: Any) -> str:
    """JCS through the C encoder; valid only for *JS-plain* data.

    JS-plain means: every float is non-integral with a ``repr`` free of an
    exponent (those print identically in Python and JavaScript), integers
    are within ±2**53, no string holds a lone surrogate, and every key is
    ASCII (so code-point order is UTF-16 order). The store reader proves
    these facts while parsing (see ``kb.store.snapshot``) and only then takes
    this path; everything else goes through :func:`canonical_json`.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


#: JavaScript's ``\s`` (WhiteSpace + LineTerminator), which ``String.prototype.trim`` also uses.
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_JS_SPACE_RUN = re.compile(f"[{re.escape(JS_WHITESPACE)}]+")


def normalize_output(text: str) -> str:
    """NFC, trim, collapse whitespace runs — with JavaScript's whitespace set."""
    text = unicodedata.normalize("NFC", text).strip(JS_WHITESPACE)
    return _JS_SPACE_RUN.sub(" ", text)
