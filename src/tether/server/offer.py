"""What a tenant may start a session with on this server (`GET /v1/start-options`, the web
view's start form): the operator's `--allow-code` patterns, the tool specs they match, and
the names of its MCP servers (`--mcp`).

A pattern whose module part is a plain module name is imported (the operator allowed that
code to load; a start would import it too) and each public name of it that matches the
pattern and that a start would load as tools (`Published.tools`) is offered. Nothing is
called. Models are offered by provider (`model_groups`): the `python:` models an allowed
module publishes, `scripted:demo`, and each provider this server has a key for whose
endpoint the policy allows, with the catalog's models of it (a start checks again).
"""

from __future__ import annotations

import fnmatch
import importlib
import re
from functools import lru_cache
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.errors import TetherError, UsageError
from tether.providers.endpoints import EndpointPolicy
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
    for spec in _names(code):
        try:
            tools = code.tools(spec)
        except UsageError:  # not published as tools (or not a public name)
            continue
        if tools:
            offered[spec] = {
                "spec": spec,
                "tools": [
                    {"name": t.name, "description": t.description.split("\n")[0][:200]}
                    for t in tools
                ],
            }
    return tuple(list(offered.values())[:MAX_OFFERED])


def _names(code: Published) -> list[str]:
    """Each `MODULE:NAME` of a plain module an allowed pattern matches (the module imported,
    as a start would; nothing called), once, in order."""
    names: dict[str, None] = {}
    for pattern in code.code:
        module_name, colon, attr_pattern = pattern.partition(":")
        if not colon or MODULE.fullmatch(module_name) is None:
            continue  # a wildcard in the module part names modules no one can list
        try:
            module = importlib.import_module(module_name)
        except Exception:  # the operator's module is broken: a start would say so
            continue
        for attr in sorted(vars(module)):
            if fnmatch.fnmatchcase(attr, attr_pattern):
                names[f"{module_name}:{attr}"] = None
    return list(names)


def _published_models(code: Published) -> list[str]:
    """The `python:` models an allowed module publishes (checked, never made)."""
    found = []
    for spec in _names(code):
        try:
            code.model_source(f"python:{spec}")
        except UsageError:
            continue
        found.append(f"python:{spec}")
    return found[:MAX_OFFERED]


# Which catalog names a provider serves (its own hosted models).
FAMILIES = {"anthropic": ("claude",), "openai": ("gpt", "o3", "o4"), "openai-responses": ("gpt", "o3", "o4")}  # fmt: skip


@lru_cache(maxsize=16)
def model_groups(
    code: Published | None, endpoints: EndpointPolicy | None
) -> tuple[dict[str, Any], ...]:
    """The model strings a start may name here, by provider: `models` (complete model
    strings) and `template` (how to write one of that provider's other models). A provider
    is offered when this process has its key and the endpoint policy names its URL."""
    from tether.providers import catalog
    from tether.providers.registry import BUILDERS, model_from_string

    groups: list[dict[str, Any]] = []
    if code is not None:
        published = _published_models(code)
        if published:
            groups.append({"provider": "python", "models": published, "template": None})
    groups.append({"provider": "scripted", "models": ["scripted:demo"], "template": None})
    for prefix in BUILDERS:
        if prefix == "openai-compatible":
            urls = [] if endpoints is None else [p for p in endpoints.allowed if "*" not in p]
            for url in urls:
                groups.append({"provider": prefix, "models": [],
                               "template": f"{prefix}:MODEL@{url}"})  # fmt: skip
            continue
        try:
            probe = model_from_string(f"{prefix}:probe")
        except TetherError:  # no key here: a start would be refused
            continue
        called = getattr(probe, "endpoint_url", None)
        if endpoints is not None and isinstance(called, str) and not endpoints.names(called):
            continue
        names = [n for n in catalog.names() if n.startswith(FAMILIES.get(prefix, ("\0",)))]
        groups.append({"provider": prefix, "models": [f"{prefix}:{n}" for n in names],
                       "template": f"{prefix}:MODEL"})  # fmt: skip
    return tuple(groups)


async def start_options(request: Request, rt: LocalRuntime) -> Response:
    """`allow_code`: the patterns, or null when this runtime loads any code (a library's own
    server; `tether serve` always has a list, empty without `--allow-code`); `tools`;
    `models` by provider (`model_groups`)."""
    code = rt.code
    offered = tool_specs(code) if code is not None else ()
    return JSONResponse(
        {
            "allow_code": None if code is None else list(code.code),
            "tools": list(offered),
            "mcp": rt.mcp_names,  # the operator's MCP servers, by name only
            "models": list(model_groups(code, rt.endpoints)),
        }
    )
