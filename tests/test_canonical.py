"""JS-exact JSON and JCS: spec vectors, Node-made vectors, and properties."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from kb.store.canonical import (
    Verbatim,
    canonical_json,
    claims_hash,
    fast_canonical_json,
    js_number,
    js_string,
    js_stringify,
    sha256_hex,
)
from kb.store.jsjson import parse_json

VECTORS = json.loads((Path(__file__).parent / "data" / "js_vectors.json").read_text())


def test_spec_vectors() -> None:
    assert canonical_json([]) == "[]"
    assert claims_hash([]) == "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
    value = [{"b": 1.0, "a": 0.9333333333333333, "z": 1e21, "y": 1e-7}]
    assert canonical_json(value) == '[{"a":0.9333333333333333,"b":1,"y":1e-7,"z":1e+21}]'


def test_pass_rate_one_hashes_as_integer_one() -> None:
    assert canonical_json({"passRate": 1.0}) == '{"passRate":1}'
    assert claims_hash([{"passRate": 1.0}]) == claims_hash([{"passRate": 1}])


@pytest.mark.parametrize("vector", VECTORS["numbers"], ids=lambda v: v["bits"])
def test_numbers_match_javascript(vector: dict[str, str]) -> None:
    (value,) = struct.unpack(">d", bytes.fromhex(vector["bits"]))
    assert js_number(value) == vector["text"]


@pytest.mark.parametrize("vector", VECTORS["strings"], ids=lambda v: v["json"][:30])
def test_strings_match_json_stringify(vector: dict[str, Any]) -> None:
    units = vector["units"]
    text = struct.pack(f"<{len(units)}H", *units).decode("utf-16-le", "surrogatepass")
    assert js_string(text) == vector["json"]


@pytest.mark.parametrize("vector", VECTORS["jcs"], ids=lambda v: v["json"][:30])
def test_jcs_and_hash_match_javascript(vector: dict[str, Any]) -> None:
    value, _ = parse_json(vector["json"])
    assert canonical_json(value) == vector["jcs"]
    assert sha256_hex(canonical_json(value)) == vector["sha256"]
    if vector["canonicalize"] is not None:
        assert canonical_json(value) == vector["canonicalize"]


def test_pretty_output_matches_json_stringify_indent_2() -> None:
    text = (Path(__file__).parent / "data" / "rulvar_store.json").read_text()
    value, _ = parse_json(text)
    assert js_stringify(value, indent=2) + "\n" == text


# -- properties -------------------------------------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | finite
    | st.text(st.characters(exclude_categories=["Cs"]))
)


def json_trees(scalars: st.SearchStrategy[Any], keys: st.SearchStrategy[str]) -> Any:
    """Nested JSON arrays and objects over ``scalars``, with object keys from ``keys``."""
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=5),
        max_leaves=25,
    )


ASCII_KEYS = st.text(st.characters(max_codepoint=127), max_size=6)
json_values = json_trees(
    json_scalars, st.text(st.characters(exclude_categories=["Cs"]), max_size=6)
)


@given(json_values)
@settings(max_examples=400)
def test_canonical_equals_rfc8785_package(value: Any) -> None:
    assert canonical_json(value).encode("utf-8") == rfc8785.dumps(value)


@given(finite)
@settings(max_examples=2000)
def test_js_number_round_trips_and_follows_the_layout_rules(value: float) -> None:
    text = js_number(value)
    assert float(text) == value or (value == 0 and float(text) == 0)
    assert "e-0" not in text and "e+0" not in text and ".0e" not in text
    if "e" in text:
        exponent = int(text.split("e")[1])
        assert exponent >= 21 or exponent <= -7
    if value == int(value) and abs(value) < 1e21:
        assert "." not in text and "e" not in text


@given(st.lists(st.text(max_size=3), max_size=8, unique=True))
def test_keys_sort_by_utf16_code_units(keys: list[str]) -> None:
    document = json.loads(canonical_json({key: 0 for key in keys}))
    ordered = list(document)
    assert ordered == sorted(ordered, key=lambda k: k.encode("utf-16-be", "surrogatepass"))


plain_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | finite.filter(lambda x: not x.is_integer() and "e" not in repr(x))
    # Astral characters take the slow path anywhere: stores keep unknown keys of any
    # character, and Python and JCS sort keys differently only around them.
    | st.text(st.characters(exclude_categories=["Cs"], max_codepoint=0xFFFF))
)
plain_values = json_trees(plain_scalars, ASCII_KEYS)


@given(plain_values)
@settings(max_examples=400)
def test_fast_path_equals_general_path_on_js_plain_data(value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False)
    parsed, plain = parse_json(text)
    assert plain
    assert fast_canonical_json(parsed) == canonical_json(parsed)


ascii_keyed_values = json_trees(json_scalars, ASCII_KEYS)


@given(ascii_keyed_values)
@settings(max_examples=300)
def test_parse_json_flags_every_value_the_fast_path_would_misprint(value: Any) -> None:
    parsed, plain = parse_json(js_stringify(value))
    if plain:
        assert fast_canonical_json(parsed) == canonical_json(parsed)


def test_lone_surrogates_are_escaped_and_hashed_as_node_does() -> None:
    assert js_string("a\ud800b") == '"a\\ud800b"'
    # Node's crypto encodes a lone surrogate as U+FFFD before hashing.
    assert sha256_hex("\ud800") == sha256_hex("\ufffd")


def test_non_finite_numbers_are_refused() -> None:
    for value in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError):
            js_number(value)


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=5))
@settings(max_examples=300)
def test_a_member_serialized_once_and_reused_is_the_same_canonical_text(
    members: dict[str, Any],
) -> None:
    """A request's large param is serialized once and reused (kb.engine.requests)."""
    reused = {name: Verbatim(canonical_json(value)) for name, value in members.items()}
    assert canonical_json({"params": reused}) == canonical_json({"params": members})
