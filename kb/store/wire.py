"""The base of every persisted shape kb writes, and the one pass that cuts secrets from it.

:class:`WireModel` is strict (unknown keys refused), camelCase on the wire and
omits absent optional keys; :func:`cut_texts` applies a cut to every string of
one, at any depth (a report passes through it once, whoever derived what).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, model_serializer


class WireModel(BaseModel):
    """A persisted shape: strict keys, camelCase on the wire, absent optional keys omitted."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)
    KEEP_NULL: ClassVar[frozenset[str]] = frozenset()
    """Wire keys whose ``null`` is printed (it means something there)."""

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None or k in self.KEEP_NULL}
        return data

    def to_wire(self) -> dict[str, Any]:
        """The JSON object as written."""
        dumped: dict[str, Any] = self.model_dump(by_alias=True, mode="json")
        return dumped


W = TypeVar("W", bound=WireModel)


def cut_texts(model: W, cut: Callable[[str], str]) -> W:
    """``model`` with ``cut`` applied to every string in it, at any depth (keys too).

    What kb shows of a night (a suspect cell's reason quoting its replies, a
    cell's first provider error) is derived from texts a provider wrote; a
    report passes through this once, whoever derived what, so no view has to
    remember to cut (SPEC 14.1).
    """

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return cut(value)
        if isinstance(value, BaseModel):
            fields = type(value).model_fields
            return value.model_copy(update={name: walk(getattr(value, name)) for name in fields})
        if isinstance(value, tuple):
            return tuple(walk(item) for item in value)
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, dict):
            return {walk(key): walk(item) for key, item in value.items()}
        return value

    cleaned: W = walk(model)
    return cleaned
