"""``kind = "python"`` graders: a function of the answer and the case, found beside the spec.

``function = "checks:exact_total"`` names ``exact_total`` in ``checks.py``
in the directory of the file that declares the case (the spec, or the
included cases file); ``pkg.checks:f`` reads ``pkg/checks.py``. The
function is called as ``f(output, case)`` — ``output`` the model's answer
(a string), ``case`` a read-only mapping of the case (``name``,
``task_class``, ``prompt``, ``system``, ``schema``) — and returns:

* a bool (passed or not);
* a score in [0, 1] (passes at the grader's ``pass_threshold``, default 1.0);
* or a mapping ``{"passed": bool, "score": float?, "reason": str?}``.

Anything else, or an exception inside the function, is a defect of the
suite: the sweep fails loudly (exit 1) instead of scoring zero. The
function must be pure (no network, no clock, no state between calls): a
sweep may grade concurrently and a resumed night grades again. The module's
bytes are part of the suite fingerprint, so editing a grader is a new suite
(a changed test, not a changed model). Importing the module runs its code
when the spec loads — it is your repository's code, like a test suite's.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

GraderFunction = Callable[[str, Mapping[str, Any]], Any]

_LOADED: dict[tuple[Path, str], Any] = {}
"""Modules already imported, by (file, sha256): a dataset's thousand cases import once."""


def load_function(directory: Path, function: str) -> tuple[GraderFunction, str]:
    """The callable ``function`` names beside ``directory`` and its module's sha256.

    Raises ``ValueError`` with one line saying what is missing or broken.
    """
    module_name, _, attribute = function.partition(":")
    file = directory.joinpath(*module_name.split(".")).with_suffix(".py")
    if not file.is_file():
        raise ValueError(
            f"python grader {function!r}: no file {file.relative_to(directory)} in {directory}"
        )
    data = file.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    key = (file.resolve(), digest)
    module = _LOADED.get(key)
    if module is None:
        spec = importlib.util.spec_from_file_location(f"kb_grader_{digest[:16]}", file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - any failure of the user's module
            raise ValueError(
                f"python grader {function!r}: importing {file.name} raised "
                f"{type(exc).__name__}: {exc}"
            ) from None
        _LOADED[key] = module
    found = getattr(module, attribute, None)
    if found is None:
        raise ValueError(f"python grader {function!r}: {file.name} has no {attribute!r}")
    if not callable(found):
        raise ValueError(f"python grader {function!r}: {attribute!r} is not a function")
    return found, digest


def case_view(case: Any) -> Mapping[str, Any]:
    """What a grader function sees of a case (read-only)."""
    return MappingProxyType(
        {
            "name": case.name,
            "task_class": case.task_class,
            "prompt": case.prompt,
            "system": case.system,
            "schema": case.schema_,
        }
    )


def read_result(result: Any, threshold: float) -> tuple[bool, float, str]:
    """(passed, score, detail) from what a grader function returned; ``TypeError`` otherwise."""
    if isinstance(result, bool):
        return result, float(result), f"returned {result}"
    if isinstance(result, int | float):
        score = _score(result)
        return score >= threshold - 1e-12, score, f"score {score:.2f}"
    if isinstance(result, Mapping):
        passed = result.get("passed")
        if not isinstance(passed, bool):
            raise TypeError(f"returned a mapping whose 'passed' is {passed!r}, not a bool")
        score = _score(result["score"]) if result.get("score") is not None else float(passed)
        reason = result.get("reason", "")
        if not isinstance(reason, str):
            raise TypeError(f"returned a 'reason' that is {type(reason).__name__}, not a string")
        detail = reason[:200] or (f"score {score:.2f}" if "score" in result else str(passed))
        return passed, score, detail
    raise TypeError(
        f"returned {type(result).__name__}; expected a bool, a score in [0, 1] "
        "or {passed, score, reason}"
    )


def _score(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"returned a score {value!r} that is not a number")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise TypeError(f"returned a score {value!r} outside [0, 1]")
    return float(value)
