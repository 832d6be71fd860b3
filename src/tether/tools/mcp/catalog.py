"""What an MCP server offers besides tools: its resources, resource templates and prompts, as
plain values that name their server, and the text a run can use of a read or a prompt.

Owns listing (every page) and shaping what comes back. The connection, its errors and its
restarts are `connection`'s; which servers there are is `source`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from mcp import Client
from mcp import types as mcp_types

from tether.tools.mcp.connection import MAX_LIST_PAGES, Capability, McpConnection
from tether.tools.mcp.content import render_block
from tether.tools.mcp.errors import McpProtocolError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class McpResource:
    """A resource a server lists: read it with `source.read_resource(server, uri)`."""

    server: str
    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None


@dataclass(frozen=True, slots=True)
class McpResourceTemplate:
    """A family of resources (`uri_template` is an RFC 6570 template, e.g. `file:///{path}`)."""

    server: str
    uri_template: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None


@dataclass(frozen=True, slots=True)
class McpResourceContent:
    """What a read returned: `text` for a run's context, `contents` as the server sent them."""

    server: str
    uri: str
    contents: tuple[mcp_types.TextResourceContents | mcp_types.BlobResourceContents, ...]

    @property
    def text(self) -> str:
        """The text parts in order; a binary part is named, not decoded."""
        return "\n".join(_content_text(c) for c in self.contents)


@dataclass(frozen=True, slots=True)
class McpPromptArgument:
    name: str
    description: str | None = None
    required: bool = False


@dataclass(frozen=True, slots=True)
class McpPrompt:
    """A prompt template a server lists: fill it with `source.get_prompt(server, name, args)`."""

    server: str
    name: str
    title: str | None = None
    description: str | None = None
    arguments: tuple[McpPromptArgument, ...] = ()


@dataclass(frozen=True, slots=True)
class McpPromptMessage:
    role: str  # "user" or "assistant"
    text: str


@dataclass(frozen=True, slots=True)
class McpPromptResult:
    """A filled prompt: its messages, and `text` (them joined) to open a run with."""

    server: str
    name: str
    description: str | None
    messages: tuple[McpPromptMessage, ...]

    @property
    def text(self) -> str:
        return "\n\n".join(m.text for m in self.messages)


async def list_resources(connection: McpConnection) -> list[McpResource]:
    async def page(client: Client, cursor: str | None) -> tuple[list[McpResource], str | None]:
        result = await client.list_resources(cursor=cursor, cache_mode="bypass")
        items = [
            McpResource(connection.name, str(r.uri), r.name, r.title, r.description, r.mime_type)
            for r in result.resources
        ]
        return items, result.next_cursor

    return await _every_page(connection, "resources/list", page, "resources")


async def list_resource_templates(connection: McpConnection) -> list[McpResourceTemplate]:
    async def page(
        client: Client, cursor: str | None
    ) -> tuple[list[McpResourceTemplate], str | None]:
        result = await client.list_resource_templates(cursor=cursor, cache_mode="bypass")
        items = [
            McpResourceTemplate(
                connection.name, t.uri_template, t.name, t.title, t.description, t.mime_type
            )
            for t in result.resource_templates
        ]
        return items, result.next_cursor

    return await _every_page(connection, "resources/templates/list", page, "resources")


async def read_resource(connection: McpConnection, uri: str) -> McpResourceContent:
    async def send(client: Client) -> mcp_types.ReadResourceResult:
        return await client.read_resource(uri, cache_mode="bypass")

    result = await connection.request(f"resources/read of {uri!r}", send, needs="resources")
    return McpResourceContent(connection.name, uri, tuple(result.contents))


async def list_prompts(connection: McpConnection) -> list[McpPrompt]:
    async def page(client: Client, cursor: str | None) -> tuple[list[McpPrompt], str | None]:
        result = await client.list_prompts(cursor=cursor, cache_mode="bypass")
        items = [
            McpPrompt(
                connection.name,
                p.name,
                p.title,
                p.description,
                tuple(
                    McpPromptArgument(a.name, a.description, bool(a.required))
                    for a in p.arguments or ()
                ),
            )
            for p in result.prompts
        ]
        return items, result.next_cursor

    return await _every_page(connection, "prompts/list", page, "prompts")


async def get_prompt(
    connection: McpConnection, name: str, arguments: dict[str, str] | None = None
) -> McpPromptResult:
    async def send(client: Client) -> mcp_types.GetPromptResult:
        return await client.get_prompt(name, arguments or None)

    result = await connection.request(f"prompts/get of {name!r}", send, needs="prompts")
    messages = tuple(McpPromptMessage(m.role, render_block(m.content)) for m in result.messages)
    return McpPromptResult(connection.name, name, result.description, messages)


async def _every_page(
    connection: McpConnection,
    what: str,
    page: Callable[[Client, str | None], Awaitable[tuple[list[T], str | None]]],
    needs: Capability,
) -> list[T]:
    async def send(client: Client) -> list[T]:
        items: list[T] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            found, cursor = await page(client, cursor)
            items.extend(found)
            if cursor is None:
                return items
        raise McpProtocolError(
            connection.name,
            f"MCP server {connection.name!r} answers {what} with more than {MAX_LIST_PAGES} pages",
        )

    return await connection.request(what, send, needs=needs)


def _content_text(
    content: mcp_types.TextResourceContents | mcp_types.BlobResourceContents,
) -> str:
    if isinstance(content, mcp_types.TextResourceContents):
        return content.text
    size = len(content.blob) * 3 // 4 - content.blob[-2:].count("=")  # base64's padding
    return f"[{content.mime_type or 'binary'} resource {content.uri}, {size:,} bytes]"
