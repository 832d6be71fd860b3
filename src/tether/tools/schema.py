"""JSON schemas and argument validation derived from a typed Python signature.

Owns the translation of a function's parameters and docstring into a pydantic model (the
validator) and the JSON schema the model is shown. It runs nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import threading
import typing
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, PydanticUserError, TypeAdapter, create_model

from tether.errors import UsageError
from tether.messages import JSONObject


class LeaseHolder(Protocol):
    """The lease a call runs under, as its tool sees it (`tether.session.fence.LeaseFence`):
    the lease's generation, a flag set once the run no longer holds it, and a check of the
    store's current lease."""

    @property
    def generation(self) -> int: ...

    @property
    def lost(self) -> threading.Event: ...

    async def ensure_held(self) -> None: ...


class ToolContext:
    """Passed to a tool that declares a parameter of this type: who is calling, the key that
    makes a repeated `idempotent` call recognisable (the call id), and the lease the call
    runs under: `fence` (its generation, a fencing token that grows with every claim) and
    `ensure_held()`, which raises `LeaseLost` once this worker no longer holds the session.
    A call run without a lease (a bare `run_turn`, `tools.run.execute`) has no fence, and
    its `ensure_held()` always passes: nothing else can run the session."""

    __slots__ = ("_holder", "_loop", "_never", "call_id", "session_id")

    def __init__(self, session_id: str, call_id: str, holder: LeaseHolder | None = None) -> None:
        self.session_id = session_id
        self.call_id = call_id
        self._holder = holder
        self._loop = asyncio.get_running_loop() if holder is not None else None
        self._never: threading.Event | None = None

    @property
    def idempotency_key(self) -> str:
        return self.call_id

    @property
    def fence(self) -> int | None:
        """The lease's generation: pass it with an external write (a header, a column) so
        the other system can refuse a write fenced lower than one it has seen."""
        return None if self._holder is None else self._holder.generation

    async def ensure_held(self) -> None:
        """Raise `LeaseLost` unless this worker still holds the session's lease (one read of
        the store's lease): call it just before an effect on the outside world."""
        if self._holder is not None:
            await self._holder.ensure_held()

    def ensure_held_sync(self, timeout: float = 10.0) -> None:
        """`ensure_held` for a sync tool, from its thread: the check runs on the event loop,
        waited for up to `timeout` seconds."""
        if self._holder is None or self._loop is None:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # a thread: the way it is meant to be called
            running = None
        if running is self._loop:  # waiting here would block the loop that must answer
            raise UsageError("ensure_held_sync() is for a sync tool's thread: await ensure_held()")
        asyncio.run_coroutine_threadsafe(self._holder.ensure_held(), self._loop).result(timeout)

    @property
    def lease_lost(self) -> threading.Event:
        """Set once the run no longer holds the lease (taken over, handed over, or its run
        ended while this call was left running on its thread): a sync tool polls it, or
        waits on it, and stops before doing anything more."""
        if self._holder is not None:
            return self._holder.lost
        if self._never is None:
            self._never = threading.Event()
        return self._never

    def cancelled(self) -> bool:
        """Whether `lease_lost` is set."""
        return self._holder is not None and self._holder.lost.is_set()


_ARGS_HEADER = re.compile(r"^\s*(args|arguments|parameters|params)\s*:\s*$", re.IGNORECASE)
_SECTION_HEADER = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^\s*:param\s+(?:\w+\s+)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (text before any section) and each parameter's description, from a
    Google-style `Args:` section or Sphinx `:param x:` lines."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    current: str | None = None
    in_args = False
    for line in lines:
        sphinx = _SPHINX_PARAM.match(line)
        if sphinx:
            current, in_args = sphinx.group(1), False
            params[current] = sphinx.group(2).strip()
            continue
        if _ARGS_HEADER.match(line):
            in_args, current = True, None
            continue
        if _SECTION_HEADER.match(line) or line.strip().startswith(":"):
            in_args, current = False, None
            continue
        if in_args:
            arg = _ARG_LINE.match(line)
            if arg and (len(line) - len(line.lstrip())) <= 4:
                current = arg.group(1).lstrip("*")
                params[current] = arg.group(3).strip()
            elif current and line.strip():
                params[current] = f"{params[current]} {line.strip()}".strip()
            continue
        if current is None and not params:
            summary.append(line)
    return "\n".join(summary).strip(), params


def build_validator(
    fn: Callable[..., Any], name: str, param_docs: dict[str, str]
) -> tuple[type[BaseModel], str | None]:
    """A pydantic model of the parameters, and the name of a `ToolContext` parameter if any."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise UsageError(f"tool {name}: cannot read its type hints: {exc}") from exc
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UsageError(f"tool {name}: *args and **kwargs cannot be described to a model")
        annotation = hints.get(param.name)
        if annotation is None:
            raise UsageError(f"tool {name}: parameter {param.name!r} needs a type hint")
        if annotation is ToolContext:
            context_param = param.name
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, Field(default, description=param_docs.get(param.name)))
    try:
        model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        model.model_json_schema()  # a type that validates may still have no JSON schema
    except PydanticUserError as exc:
        raise UsageError(f"tool {name}: {_undescribable(fields)}: {exc}") from exc
    return model, context_param


def _undescribable(fields: dict[str, Any]) -> str:
    """Name the first parameter whose type pydantic cannot turn into a JSON schema."""
    for param, (annotation, _) in fields.items():
        try:
            TypeAdapter(annotation).json_schema()
        except PydanticUserError:
            return f"parameter {param!r} has a type with no JSON schema ({annotation!r})"
    return "its parameters have no JSON schema"


def json_schema(validator: type[BaseModel]) -> JSONObject:
    schema: JSONObject = validator.model_json_schema()
    schema.pop("title", None)
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for prop in properties.values():
            if isinstance(prop, dict):
                prop.pop("title", None)
    schema.setdefault("properties", {})
    return schema
