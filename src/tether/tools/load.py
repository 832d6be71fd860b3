"""Tools named by spec: `MODULE:ATTR` (a tool, a function, or a list of them) or `MODULE`
(its `tools`). What the command line's `--tools` and a library runtime's specs load, for
the operator; what a tenant's spec may load is `tether.published`'s to decide."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from tether.errors import UsageError
from tether.tools.base import Tool, make_tool


def load_tools(specs: Sequence[str], *, label: str = "tool") -> list[Tool]:
    """The tools of each spec, in order. A spec that does not load is a `UsageError` that
    starts with `label` and the spec (the command line says `--tools`)."""
    loaded: list[Tool] = []
    for spec in specs:
        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise UsageError(
                f"{label} {spec}: cannot import {module_name}: {type(exc).__name__}: {exc}"
            ) from exc
        attr = attr or "tools"
        if not hasattr(module, attr):
            raise UsageError(f"{label} {spec}: module {module_name} has no attribute {attr!r}")
        value: Any = getattr(module, attr)
        for item in value if isinstance(value, list | tuple) else [value]:
            if isinstance(item, Tool):
                loaded.append(item)
            elif callable(item):
                try:
                    loaded.append(make_tool(item))
                except UsageError as exc:
                    raise UsageError(f"{label} {spec}: {exc}") from exc
            else:
                raise UsageError(f"{label} {spec}: {item!r} is not a tool or a function")
    return loaded
