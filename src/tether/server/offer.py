"""What a tenant may start a session with on this server (`GET /v1/start-options`, the web
view's start form): the operator's `--allow-code` patterns, and the tool specs they match.

A pattern whose module part is a plain module name is imported (the operator allowed that
code to load; a start would import it too) and its public attributes that are tools, or lists
of tools, and match the pattern are offered. Nothing is called. Models are not enumerated: a
model string may name any provider the endpoint policy allows, which only a start can check.
"""

from __future__ import annotations

import fnmatch
import importlib
import re
from functools import lru_cache
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.runtime.local import LocalRuntime
from tether.tools.base import Tool

MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
MAX_OFFERED = 200  # tool specs in one answer


def _tools_of(value: object) -> list[Tool] | None:
    items = value if isinstance(value, list | tuple) else [value]
    if items and all(isinstance(item, Tool) for item in items):
        return [item for item in items if isinstance(item, Tool)]
    return None


@lru_cache(maxsize=64)
def tool_specs(patterns: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """Each `MODULE:ATTR` an allowed pattern names that holds tools, with the tools' names and
    first description lines; a module that does not import offers nothing."""
    offered: dict[str, dict[str, Any]] = {}
    for pattern in patterns:
        module_name, colon, attr_pattern = pattern.partition(":")
        if not colon or MODULE.fullmatch(module_name) is None:
            continue  # a wildcard in the module part names modules no one can list
        try:
            module = importlib.import_module(module_name)
        except Exception:  # the operator's module is broken: a start would say so
            continue
        for attr in sorted(vars(module)):
            spec = f"{module_name}:{attr}"
            if attr.startswith("_") or spec in offered:
                continue
            if not fnmatch.fnmatchcase(attr, attr_pattern):
                continue
            tools = _tools_of(getattr(module, attr))
            if tools is None:
                continue
            offered[spec] = {
                "spec": spec,
                "tools": [
                    {"name": t.name, "description": t.description.split("\n")[0][:200]}
                    for t in tools
                ],
            }
    return tuple(list(offered.values())[:MAX_OFFERED])


async def start_options(request: Request, rt: LocalRuntime) -> Response:
    """`allow_code`: the patterns, or null when this runtime loads any code (a library's own
    server; `tether serve` always has a list, empty without `--allow-code`)."""
    patterns = rt._core.allow_code  # the runtime keeps them for `_check_code`
    offered = tool_specs(patterns) if patterns is not None else ()
    return JSONResponse(
        {"allow_code": None if patterns is None else list(patterns), "tools": list(offered)}
    )
