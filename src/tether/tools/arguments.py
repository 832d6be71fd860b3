"""Binding a call's arguments to its tool: the validated keyword arguments, or why the call
cannot run (`invalid_input`).

Its own module so that `recovery` (which decides whether a call can run) and `tools.run`
(which runs calls, and binds for callers that hand it a bare call) share the one function
without importing each other. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tether.messages import ToolCall
from tether.tools.base import Tool


def describe_validation_error(tool_name: str, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        where = ".".join(str(x) for x in err["loc"]) or "arguments"
        problems.append(f"{where}: {err['msg']}")
    return f"invalid arguments for tool {tool_name}: " + "; ".join(problems)


def bind_arguments(tool: Tool, call: ToolCall) -> dict[str, Any] | str:
    """The validated keyword arguments of a call, or why it cannot run (`invalid_input`).
    `recovery.decide_calls` asks this before the loop commits `tool.started`: a call that
    cannot run never starts."""
    if call.raw_arguments is not None:
        return f"the arguments for tool {tool.name} are not a JSON object: {call.raw_arguments[:200]!r}"
    if tool.validator is None:
        return dict(call.arguments)
    try:
        # The model's core validator, without `model_validate`'s Python-level wrapper.
        validated = tool.validator.__pydantic_validator__.validate_python(call.arguments)
    except ValidationError as exc:
        return describe_validation_error(tool.name, exc)
    # A model's field values are its __dict__ (extras and private attributes live apart).
    return dict(validated.__dict__)
