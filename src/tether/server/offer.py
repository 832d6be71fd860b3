"""What a tenant may start a session with on this server (`GET /v1/start-options`, the web
view's start form): the operator's `--allow-code` patterns, the tool specs they match, and
the names of its MCP servers (`--mcp`).

A pattern whose module part is a plain module name is imported (the operator allowed that
code to load; a start would import it too) and each public name of it that matches the
pattern and that a start would load as tools (`Published.tools`) is offered. Nothing is
called. Models are not enumerated: a model string may name any provider the endpoint policy
allows, which only a start can check.
"""

from __future__ import annotations

import fnmatch
import importlib
import re
from functools import lru_cache
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.errors import UsageError
from tether.published import Published
from tether.runtime.local import LocalRuntime

MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
MAX_OFFERED = 200  # tool specs in one answer


@lru_cache(maxsize=64)
def tool_specs(code: Published) -> tuple[dict[str, Any], ...]:
    """Each `MODULE:NAME` an allowed pattern names that a start would load as tools, with
    the tools' names and first description lines; a module that does not import offers
    nothing."""
    offered: dict[str, dict[str, Any]] = {}
    for pattern in code.code:
        module_name, colon, attr_pattern = pattern.partition(":")
        if not colon or MODULE.fullmatch(module_name) is None:
            continue  # a wildcard in the module part names modules no one can list
        try:
            module = importlib.import_module(module_name)
        except Exception:  # the operator's module is broken: a start would say so
            continue
        for attr in sorted(vars(module)):
            spec = f"{module_name}:{attr}"
            if spec in offered or not fnmatch.fnmatchcase(attr, attr_pattern):
                continue
            try:
                tools = code.tools(spec)
            except UsageError:  # not published as tools (or not a public name)
                continue
            if not tools:
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
    code = rt.code
    offered = tool_specs(code) if code is not None else ()
    return JSONResponse(
        {
            "allow_code": None if code is None else list(code.code),
            "tools": list(offered),
            "mcp": rt.mcp_names,  # the operator's MCP servers, by name only
        }
    )
