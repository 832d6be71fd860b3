"""What a tool is, and the `@tool` decorator that makes one from a typed function.

Owns `Tool` and `Toolbox` (tools by name). Running a call belongs to `tools.run`.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from pydantic import BaseModel

from tether.errors import UsageError
from tether.events import Effect, offered_digest
from tether.messages import canonical_json
from tether.providers.base import ToolSpec
from tether.tools.schema import build_validator, json_schema, parse_docstring

if TYPE_CHECKING:
    from tether.session.threads import SubAgent

EFFECTS: tuple[str, ...] = ("read", "idempotent", "write")
DEFAULT_TIMEOUT = 60.0
DEFAULT_OUTPUT_CAP = 100_000  # characters the model sees of one result


@dataclass(frozen=True, slots=True)
class Tool:
    """A named capability the model may call. `effect` says what repeating it would do and
    drives crash recovery: `write` (the default) is never blindly repeated."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    validator: type[BaseModel] | None = None
    effect: Effect = "write"
    timeout: float | None = DEFAULT_TIMEOUT
    needs_approval: bool = False
    output_cap: int = DEFAULT_OUTPUT_CAP
    context_param: str | None = None
    is_async: bool = field(default=False)
    # A sub-agent offered as a tool (or a handoff): its calls run as threads of the session
    # (`tether.session.threads`), never through `fn`.
    subagent: SubAgent | None = None

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)

    @property
    def schema_hash(self) -> str:
        body = canonical_json({"d": self.description, "p": self.parameters})
        return hashlib.sha256(body.encode()).hexdigest()[:16]


def make_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    effect: Effect = "write",
    timeout: float | None = DEFAULT_TIMEOUT,
    needs_approval: bool = False,
    output_cap: int = DEFAULT_OUTPUT_CAP,
) -> Tool:
    tool_name: str = name or str(getattr(fn, "__name__", ""))
    if not tool_name.isidentifier() and not all(c.isalnum() or c in "_-" for c in tool_name):
        raise UsageError(f"tool name {tool_name!r} must be letters, digits, '_' or '-'")
    if effect not in EFFECTS:
        raise UsageError(
            f"tool {tool_name}: effect must be one of {', '.join(EFFECTS)}, not {effect!r}"
        )
    if timeout is not None and timeout <= 0:
        raise UsageError(f"tool {tool_name}: timeout must be positive, not {timeout}")
    summary, param_docs = parse_docstring(inspect.getdoc(fn))
    validator, context_param = build_validator(fn, tool_name, param_docs)
    return Tool(
        name=tool_name,
        description=description if description is not None else summary,
        parameters=json_schema(validator),
        fn=fn,
        validator=validator,
        effect=effect,
        timeout=timeout,
        needs_approval=needs_approval,
        output_cap=output_cap,
        context_param=context_param,
        is_async=inspect.iscoroutinefunction(fn),
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    effect: Effect = "write",
    timeout: float | None = DEFAULT_TIMEOUT,
    needs_approval: bool = False,
    output_cap: int = DEFAULT_OUTPUT_CAP,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    effect: Effect = "write",
    timeout: float | None = DEFAULT_TIMEOUT,
    needs_approval: bool = False,
    output_cap: int = DEFAULT_OUTPUT_CAP,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a tool from a typed function: `@tool` or `@tool(effect="read", timeout=5)`.

    The JSON schema comes from the type hints, the descriptions from the docstring (a
    Google-style `Args:` section or `:param x:` lines)."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return make_tool(
            f,
            name=name,
            description=description,
            effect=effect,
            timeout=timeout,
            needs_approval=needs_approval,
            output_cap=output_cap,
        )

    return wrap(fn) if fn is not None else wrap


class Toolbox:
    """Tools by name, in the order given. Plain functions are made into tools.

    A source whose tools can change while an agent runs (an MCP server's) `follow`s the
    toolbox: before each model request the loop calls `refresh`, and the source may
    `replace` the tools then."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self.followers: list[Callable[[Toolbox], Awaitable[None]]] = []
        self.version = -1  # counts `replace`s: a loop that checked this version needs no more
        self.replace(tools)

    def replace(self, tools: Iterable[Tool | Callable[..., Any]]) -> None:
        by_name: dict[str, Tool] = {}
        for item in tools:
            t = item if isinstance(item, Tool) else make_tool(item)
            if t.name in by_name:
                raise UsageError(f"two tools are named {t.name!r}")
            by_name[t.name] = t
        self._tools = by_name
        self.specs: tuple[ToolSpec, ...] = tuple(t.spec for t in self._tools.values())
        self.schema_chars = len(canonical_json([s.parameters for s in self.specs]))
        self._offered: tuple[tuple[str, ...], str] | None = None
        self.version += 1

    @property
    def offered(self) -> tuple[tuple[str, ...], str]:
        """The tools' names, sorted, and their `offered_digest`: what a `model.requested`
        records when the set differs from the one the log last named. Worked out once per
        `replace`, when first asked."""
        if self._offered is None:
            hashes = {t.name: t.schema_hash for t in self._tools.values()}
            self._offered = (tuple(sorted(hashes)), offered_digest(hashes))
        return self._offered

    def follow(self, refresh: Callable[[Toolbox], Awaitable[None]]) -> None:
        """Have `refresh(toolbox)` called before each model request."""
        self.followers.append(refresh)

    async def refresh(self) -> None:
        for refresh in self.followers:
            await refresh(self)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)
