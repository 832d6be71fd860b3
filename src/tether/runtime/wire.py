"""The JSON form of the runtime's wire shapes, derived from their dataclasses by pydantic.

A dataclass in `runtime.base` is the one definition of its shape: `to_json` and `from_json`
here read and write it through a pydantic `TypeAdapter` of that dataclass, and the server's
OpenAPI document takes its JSON Schema from the same adapter (`adapter`). An adapter is built
on first use and kept: building one takes milliseconds, and importing tether should not.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, TypeVar, cast

import pydantic

from tether.messages import JSONObject

T = TypeVar("T")


def adapter(shape: type[T]) -> pydantic.TypeAdapter[T]:
    """The pydantic adapter of a dataclass, built once."""
    return _adapter(cast(type, shape))  # a class is hashable; mypy cannot tell of type[T]


@functools.cache
def _adapter(shape: type) -> pydantic.TypeAdapter[Any]:
    # `tether.messages.JSONValue` names itself inside its own definition, which pydantic
    # cannot follow (it recurses without end). Pydantic reads a name in the locals of the
    # function that builds the adapter before the module's, so this one answers for it with
    # the JSON value type pydantic knows: the same values, checked the same way.
    JSONValue = pydantic.JsonValue  # noqa: F841
    return pydantic.TypeAdapter(shape)


def to_json(value: object) -> JSONObject:
    """`value` as JSON-ready data: each field under its name, nested shapes the same way."""
    data: JSONObject = adapter(type(value)).dump_python(value, mode="json")
    return data


def from_json(shape: type[T], data: Mapping[str, Any]) -> T:
    """The inverse of `to_json`; keys it does not know are ignored, so an older client reads
    a newer server's answer. Raises `pydantic.ValidationError` naming each bad field."""
    return adapter(shape).validate_python(data)
