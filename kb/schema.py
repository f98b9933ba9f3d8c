"""The shared vocabulary every layer speaks: model refs, subjects, closed value sets.

This is the bottom floor of kb. The store, the engine, the evals, sweeps,
the card, the checkpoint and the CLI import from here; this module imports
nothing of kb but the error tree (``tests/test_layers.py`` holds that line).

* **Model refs.** ``provider:model`` (rulvar style): :class:`ModelRef` is the
  one parser. Both parts must be non-empty, so ``":"``, ``"openai:"`` and
  ``":gpt"`` are refused everywhere — in a spec, a ladder, a claim.
* **Subjects.** Who a claim is about: a model ref and an optional effort.
  ``effort`` is part of identity; :func:`subject_key` is the one formula for
  ``model@effort``, used by claim ids, filters, pools and reports.
* **Closed value sets.** Each is a ``Literal`` and a tuple derived from it
  (``POLARITIES`` …); ops checks and CLI choices read the tuples, so a value
  is added in one place.
* **Strict shapes.** :class:`StrictModel` is the pydantic base of every
  hand-written or persisted shape (unknown keys refused, no ``"5"`` → ``5``
  coercion), and :func:`validation_issues` turns pydantic's errors into
  kb's one-line-per-problem form with key paths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from kb.errors import ModelRefError

Polarity = Literal["strength", "weakness"]
ClaimClass = Literal["eval-measured", "human-editorial"]
ClaimStatus = Literal["active", "stale", "superseded", "archived"]
Confidence = Literal["high", "medium", "low"]
ArchiveReason = Literal["deprecated", "stale", "rejected", "falsified"]
RuledOut = Literal["prompt", "tools", "difficulty", "transient-provider"]
AuthorKind = Literal["eval-pipeline", "human"]

POLARITIES: tuple[str, ...] = get_args(Polarity)
CLAIM_CLASSES: tuple[str, ...] = get_args(ClaimClass)
CLAIM_STATUSES: tuple[str, ...] = get_args(ClaimStatus)
CONFIDENCES: tuple[str, ...] = get_args(Confidence)
ARCHIVE_REASONS: tuple[str, ...] = get_args(ArchiveReason)
RULED_OUT_VALUES: tuple[str, ...] = get_args(RuledOut)

#: Statuses a claim can leave: a supersede or archive needs one of these.
LIVE_STATUSES: tuple[ClaimStatus, ...] = ("active", "stale")

#: The conventional task classes (the vocabulary is open to custom strings).
TASK_CLASS_VOCABULARY = (
    "code-edit",
    "investigation",
    "synthesis",
    "extraction",
    "planning",
    "judging",
)


@dataclass(frozen=True)
class ModelRef:
    """``provider:model``, parsed once."""

    provider: str
    name: str

    @classmethod
    def parse(cls, text: str) -> ModelRef:
        """Split at the first colon; both parts must be non-empty."""
        return cls(*_split_model_ref(text))

    def __str__(self) -> str:
        return f"{self.provider}:{self.name}"

    @property
    def litellm_route(self) -> str:
        """Litellm's ``provider/model`` form (``openai:gpt-4o-mini`` → ``openai/gpt-4o-mini``)."""
        return f"{self.provider}/{self.name}"


def _split_model_ref(text: str) -> tuple[str, str]:
    provider, sep, name = text.partition(":")
    if not sep or not provider or not name:
        raise ModelRefError(f"{text!r} must be 'provider:model' (e.g. openai:gpt-4o-mini)")
    return provider, name


def check_model_ref(text: str) -> str:
    """``text`` if it is a valid model ref (a pydantic ``AfterValidator``).

    Checks without building a :class:`ModelRef`: every claim of a store read
    passes through here.
    """
    _split_model_ref(text)
    return text


#: A string field holding ``provider:model``.
ModelRefText = Annotated[str, AfterValidator(check_model_ref)]


def subject_key(model: str, effort: str | None) -> str:
    """``model`` or ``model@effort``: a subject as one string (claim ids use it)."""
    return f"{model}@{effort}" if effort else model


@dataclass(frozen=True)
class Subject:
    """Who a claim is about: a model ref and, as part of its identity, an effort."""

    model: str
    effort: str | None = None

    def __post_init__(self) -> None:
        check_model_ref(self.model)

    @property
    def key(self) -> str:
        """``model`` or ``model@effort``."""
        return subject_key(self.model, self.effort)

    @property
    def ref(self) -> ModelRef:
        """The parsed model ref."""
        return ModelRef.parse(self.model)

    def to_wire(self) -> dict[str, str]:
        """The claim's ``subject`` object: ``{model, effort?}`` (effort omitted when absent)."""
        return {"model": self.model, **({"effort": self.effort} if self.effort else {})}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Subject:
        """From a claim's ``subject`` object."""
        return cls(str(data["model"]), data.get("effort"))


def utf16_length(text: str) -> int:
    """Length as JavaScript's ``String.prototype.length`` counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


#: Unknown keys refused (a typo fails loudly) and values strict: TOML's ``true`` is
#: not a $1 budget and ``"4"`` is not a concurrency. For models and TypedDicts alike.
STRICT = ConfigDict(extra="forbid", strict=True)


class StrictModel(BaseModel):
    """Base of every shape a person writes or kb persists (see :data:`STRICT`); frozen."""

    # A field's docstring (the string under it) is its description: the documentation
    # site's spec reference reads them from the source (docs/hooks.py), not at import time
    # (pydantic's use_attribute_docstrings costs every kb process ~0.1 s of start-up).
    model_config = ConfigDict(**STRICT, frozen=True)


M = TypeVar("M", bound=BaseModel)

#: Tags pydantic inserts into error locations for discriminated unions.
_UNION_TAGS = frozenset({"eval", "journal", "golden", "rubric", "judge", "python"})


def error_path(prefix: str, loc: Sequence[int | str]) -> str:
    """Render a pydantic location as ``claims[3].evidence[0].reportId``."""
    path = prefix
    previous: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif isinstance(previous, int) and part in _UNION_TAGS:
            pass  # the discriminated-union tag pydantic inserts; the index already names it
        else:
            path += f".{part}" if path else part
        previous = part
    return path


def _as_written(value: Any) -> str:
    """A value as the TOML or JSON that held it spells it (``true``, ``"x"``, ``[1, 2]``)."""
    import json

    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


HIDDEN = "_value_hidden"
"""The end of an error type whose input is never echoed (a value that may hold a password:
the message quotes it with the password cut)."""


def validation_issues(prefix: str, error: ValidationError) -> list[str]:
    """One line per pydantic error, each with its key path and the offending value."""
    issues = []
    for item in error.errors(include_url=False):
        msg = item["msg"].removeprefix("Value error, ")
        where = error_path(prefix, item["loc"])
        if item["type"] == "missing":
            msg = "missing"
        elif item["type"] == "extra_forbidden":
            msg = "unknown key"
        elif (
            item["type"] != "model_type"
            and not item["type"].endswith(HIDDEN)
            and "input" in item
            and not isinstance(item["input"], dict)
        ):  # a whole object echoed back is noise: the message names what is wrong in it
            shown = _as_written(item["input"])
            if len(shown) > 60:
                shown = shown[:57] + "..."
            msg = f"{msg} (got {shown})"
        issues.append(f"{where}: {msg}" if where else msg)
    return issues


def validate_into(model: type[M], data: Any, prefix: str, issues: list[str]) -> M | None:
    """``model`` validated from ``data``, or ``None`` with its problems added to ``issues``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        issues.extend(validation_issues(prefix, exc))
        return None


STORE_NAME = "rulvar.models.json"
"""The store's file name (in the current directory, or the nearest parent in the work tree)."""
DEFAULT_ATTEMPTS = 3
"""Compare-and-swap attempts of the rebase loop (``--attempts``)."""

DEFAULT_MARGIN = 0.03
"""How much worse a model may be and still read non-inferior (SPEC 13.3: ``--margin``)."""
