"""Resources, resource templates and prompts of real MCP servers over stdio, from Python: the
catalog test server offers all three, the paged server (the SDK's low-level `Server` with
tools only) none."""

from __future__ import annotations

import pytest

from tether.errors import ConfigError
from tether.tools.mcp import (
    McpPrompt,
    McpPromptArgument,
    McpPromptMessage,
    McpProtocolError,
    McpResource,
    McpServerConfig,
    McpToolSource,
    McpUnsupported,
)

try:
    from .mcp_servers.harness import PAGED, PYTHON, catalog_stdio, no_orphan_servers, time_stdio
except ImportError:
    from mcp_servers.harness import PAGED, PYTHON, catalog_stdio, no_orphan_servers, time_stdio

__all__ = ["no_orphan_servers"]


def paged(name: str = "paged") -> McpServerConfig:
    return McpServerConfig(name, command=PYTHON, args=(str(PAGED),))


async def test_resources_and_templates_are_listed_with_their_server() -> None:
    async with McpToolSource([catalog_stdio(), time_stdio()]) as source:
        resources = await source.list_resources()
        templates = await source.list_resource_templates()
    readme = McpResource(
        "catalog", "memo://readme", "readme", None, "What this server is", "text/plain"
    )
    assert readme in resources
    assert {r.uri for r in resources} == {"memo://readme", "memo://logo"}
    assert [(t.server, t.uri_template, t.name) for t in templates] == [
        ("catalog", "memo://notes/{topic}", "note")
    ]


async def test_a_resource_is_read_as_text_and_a_binary_one_is_named_not_decoded() -> None:
    async with McpToolSource([catalog_stdio()]) as source:
        readme = await source.read_resource("catalog", "memo://readme")
        note = await source.read_resource("catalog", "memo://notes/tea")
        logo = await source.read_resource("catalog", "memo://logo")
    assert readme.text == "The catalog server keeps memos."
    assert (readme.server, readme.uri) == ("catalog", "memo://readme")
    assert note.text == "Notes on tea."
    assert logo.text == "[image/png resource memo://logo, 16 bytes]"


async def test_prompts_are_listed_with_their_arguments_and_filled() -> None:
    async with McpToolSource([catalog_stdio()]) as source:
        prompts = {p.name: p for p in await source.list_prompts()}
        review = await source.get_prompt("catalog", "review", {"code": "x = 1"})
        greet = await source.get_prompt("catalog", "greet")
    assert prompts["review"] == McpPrompt(
        "catalog",
        "review",
        None,
        "Ask for a review of some code",
        (McpPromptArgument("code", None, True), McpPromptArgument("style", None, False)),
    )
    assert review.messages == (McpPromptMessage("user", "Review this code (terse):\nx = 1"),)
    assert review.text == "Review this code (terse):\nx = 1"
    assert greet.messages == (
        McpPromptMessage("user", "Say hello."),
        McpPromptMessage("assistant", "Hello!"),
    )


async def test_a_server_without_resources_or_prompts_says_so_by_name() -> None:
    async with McpToolSource([paged(), catalog_stdio()]) as source:
        # listing across servers skips it
        assert {r.server for r in await source.list_resources()} == {"catalog"}
        assert {p.server for p in await source.list_prompts()} == {"catalog"}
        with pytest.raises(McpUnsupported, match=r"MCP server 'paged' does not offer resources"):
            await source.read_resource("paged", "memo://readme")
        with pytest.raises(McpUnsupported, match=r"MCP server 'paged' does not offer prompts"):
            await source.get_prompt("paged", "review")


async def test_unknown_servers_resources_and_prompts_are_clear_errors() -> None:
    async with McpToolSource([catalog_stdio()]) as source:
        with pytest.raises(
            ConfigError, match=r"no MCP server is named 'nope' \(configured: 'catalog'\)"
        ):
            await source.read_resource("nope", "memo://readme")
        with pytest.raises(McpProtocolError, match=r"MCP server 'catalog' answered resources/read"):
            await source.read_resource("catalog", "memo://missing")
        with pytest.raises(McpProtocolError, match=r"MCP server 'catalog' answered prompts/get"):
            await source.get_prompt("catalog", "missing")
        # the server is still usable after errors it answered
        assert (await source.read_resource("catalog", "memo://readme")).text
