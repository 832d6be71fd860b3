"""Resources in MCP tool results, against a real SDK server over stdio: a `resource_link` is
read from the server that returned it (its text inlined, an image shown as an image), an
embedded image resource is an image, and what cannot be read is named in the text without
failing the call. Over streamable HTTP, a link's reply is bounded while it is read."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether import Agent
from tether.events import ToolFinished
from tether.messages import ToolCall
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call
from tether.tools import Tool
from tether.tools.base import DEFAULT_OUTPUT_CAP
from tether.tools.mcp import McpServerConfig, McpToolSource, links
from tether.tools.run import MAX_RESULT_IMAGES, CallOutcome, execute

try:
    from .mcp_servers.harness import PYTHON, HttpServer, no_orphan_servers
    from .mcp_servers.links_server import FLOOD, GUIDE, PNG
except ImportError:
    from mcp_servers.harness import PYTHON, HttpServer, no_orphan_servers
    from mcp_servers.links_server import FLOOD, GUIDE, PNG

__all__ = ["no_orphan_servers"]

LINKS = Path(__file__).parent / "mcp_servers" / "links_server.py"


def links_stdio(*args: str, timeout: float | None = 60.0) -> McpServerConfig:
    return McpServerConfig("links", command=PYTHON, args=(str(LINKS), *args), timeout=timeout)


async def run(tool: Tool, **arguments: Any) -> CallOutcome:
    outcome = await execute(tool, ToolCall("call_1", tool.name, arguments), "ses_links")
    assert outcome.outcome == "ok", outcome.content
    return outcome


async def outcomes(*names: str, server: McpServerConfig | None = None) -> list[CallOutcome]:
    async with McpToolSource([server or links_stdio()]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        return [await run(tools[name]) for name in names]


async def test_a_link_to_a_text_resource_is_read_and_inlined_under_its_uri() -> None:
    (linked,) = await outcomes("link_text")
    assert linked.content == f"see the guide\n[resource memo://guide (guide)]\n{GUIDE}"
    assert linked.images == ()


async def test_a_link_to_an_image_resource_and_an_embedded_image_become_images() -> None:
    linked, embedded = await outcomes("link_image", "embedded_image")
    assert [i.data for i in linked.images] == [PNG]
    assert [i.media_type for i in linked.images] == ["image/png"]
    assert linked.content == (
        "[resource memo://chart (chart)]\n[image/png resource memo://chart: shown as an image]"
    )
    # the embedded PNG is an image like an image block; the embedded PDF stays named
    assert [i.data for i in embedded.images] == [PNG]
    assert embedded.content == "a chart\n[resource memo://report, application/pdf]"


async def test_links_that_cannot_be_read_are_named_with_why_and_the_call_succeeds() -> None:
    (unreadable,) = await outcomes("link_unreadable")
    unknown = "answered resources/read of {0!r} with error -32602: Unknown resource: {0}"
    assert unreadable.content.split("\n") == [
        "[resource memo://missing (missing): not read: MCP server 'links' "
        + unknown.format("memo://missing")
        + "]",
        # another server's scheme is asked of this server only (which has no such resource)
        "[resource https://example.com/elsewhere (elsewhere): not read: MCP server 'links' "
        + unknown.format("https://example.com/elsewhere")
        + "]",
        # read, but a binary that is no image: named with its type and size
        "[resource memo://report (report)]",
        "[application/pdf resource memo://report, 19 bytes, not shown: "
        "not an image type a model takes]",
        # read, but an image too big to show
        "[resource memo://poster (poster)]",
        "[image/png resource memo://poster, 6,291,488 bytes, not shown: "
        "over the image cap of 5,242,880 bytes]",
        # its declared size is over the cap: not even asked for
        "[resource memo://huge (huge): not read: 1,000,000,000 bytes, over the cap of 5,242,880]",
    ]
    assert unreadable.images == ()


async def test_a_long_linked_text_is_cut_at_the_output_cap_then_capped_like_any_output() -> None:
    (big,) = await outcomes("link_big")
    cap = DEFAULT_OUTPUT_CAP
    # the read keeps the cap's worth of the resource and says where the rest is
    assert big.full_output is not None
    head, _, rest = big.full_output.partition("\n")
    assert head == "[resource memo://big (big)]"
    assert rest == "x" * cap + (
        "\n[resource memo://big cut: 150,000 characters, first 100,000 shown; "
        "the rest stays on the server]"
    )
    # then the whole result is capped as any tool's output is, its full text kept in a blob
    assert big.content.startswith("[resource memo://big (big)]\nxxx")
    assert (
        f"[output truncated: {len(big.full_output):,} characters, first {cap:,} shown"
        in big.content
    )


async def test_a_link_read_is_bounded_in_time_and_the_links_after_it_are_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(links, "LINKS_READ_TIMEOUT", 0.5)
    (slow,) = await outcomes("link_slow")
    assert slow.content == (
        "[resource memo://slow (slow): not read within the 0.5 s for links]\n"
        "[resource memo://guide (guide): not read: the 0.5 s for links ran out]"
    )
    assert slow.duration_ms < 10_000


async def test_link_reads_stop_short_of_the_calls_timeout_so_the_call_is_answered() -> None:
    (slow,) = await outcomes("link_slow", server=links_stdio(timeout=2.0))
    first, second = slow.content.split("\n")
    assert re.fullmatch(
        r"\[resource memo://slow \(slow\): not read within the 1\.\d+ s for links\]", first
    )
    assert second.startswith("[resource memo://guide (guide): not read: the 1.")
    assert slow.duration_ms < 2_000  # answered `ok`, within the call's 2 s


async def test_past_the_links_read_per_result_the_rest_are_named() -> None:
    async with McpToolSource([links_stdio()]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        many = await run(tools["many_links"], count=links.MAX_LINKS_READ + 2)
    read = [f"[resource memo://notes/{n} (note {n})]\nnote {n}" for n in range(1, 9)]
    named = [
        f"[resource memo://notes/{n} (note {n}): not read: only 8 links are read]" for n in (9, 10)
    ]
    assert many.content == "\n".join([*read, *named])


async def test_embedded_and_linked_images_share_the_cap_on_images_per_result() -> None:
    async with McpToolSource([links_stdio()]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        full = await run(tools["many_images"], count=MAX_RESULT_IMAGES)
    assert len(full.images) == MAX_RESULT_IMAGES
    # the linked image came past the cap: read, but named instead of shown
    assert full.content == (
        "[resource memo://chart (chart)]\n"
        "[image/png resource memo://chart, 32 bytes, not shown: past the 8 images a result shows]"
    )


async def test_a_server_without_resources_leaves_its_link_a_placeholder() -> None:
    (bare,) = await outcomes("link_text", server=links_stdio("bare"))
    assert (
        bare.content == "[resource memo://guide (guide): not read: its server offers no resources]"
    )


async def test_an_agent_sees_the_linked_text_and_records_the_linked_image() -> None:
    store = MemoryStore()
    async with McpToolSource([links_stdio()]) as source:
        agent = Agent(
            ScriptedModel([call("link_text"), call("link_image"), "done"]),
            tools=await source.list_tools(),
            store=store,
        )
        result = await agent.run("look")
    finished = [
        e.payload
        for e in await store.read(result.session_id)
        if isinstance(e.payload, ToolFinished)
    ]
    assert [f.content.splitlines()[-1] for f in finished] == [
        GUIDE.splitlines()[-1],
        "[image/png resource memo://chart: shown as an image]",
    ]
    assert [[i.data for i in f.images] for f in finished] == [[], [PNG]]


@pytest.fixture
def links_http() -> Iterator[McpServerConfig]:
    server = HttpServer(LINKS)
    server.start()
    try:
        yield McpServerConfig("links", url=server.url)
    finally:
        server.stop()


OVER_THE_CAP = (
    f"[resource memo://flood (flood): not read: its reply ran over "
    f"{links.MAX_LINK_REPLY_BYTES:,} bytes, past the cap of {links.MAX_LINK_BYTES:,}; "
    "the rest stays on the server]"
)


async def test_over_http_a_links_reply_past_the_cap_is_named_and_the_next_link_read(
    links_http: McpServerConfig,
) -> None:
    (flooded,) = await outcomes("link_flood", server=links_http)
    assert flooded.content.split("\n") == [
        OVER_THE_CAP,
        # the same connection, still sound: the next link is read
        "[resource memo://guide (guide)]",
        *GUIDE.split("\n"),
    ]
    # a reply within the cap is read as before
    (linked,) = await outcomes("link_text", server=links_http)
    assert linked.content == f"see the guide\n[resource memo://guide (guide)]\n{GUIDE}"


# In a process of its own, whose peak resident memory says what the read held at most.
MEASURE = """
import asyncio, resource, sys
from tether.messages import ToolCall
from tether.tools.mcp import McpServerConfig, McpToolSource
from tether.tools.run import execute

async def main():
    async with McpToolSource([McpServerConfig("links", url=sys.argv[1])]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        await execute(tools["link_text"], ToolCall("warm", "link_text", {}), "ses_m")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        outcome = await execute(tools["link_flood"], ToolCall("c", "link_flood", {}), "ses_m")
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((after - before) * 1024)
    print(outcome.content.split("\\n")[0])

asyncio.run(main())
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is KiB on Linux only")
def test_over_http_a_links_reply_is_not_held_whole_while_it_is_read(
    links_http: McpServerConfig,
) -> None:
    assert links_http.url is not None
    out = subprocess.run(
        [PYTHON, "-c", MEASURE, str(links_http.url)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    grown, first = out.stdout.splitlines()
    assert first == OVER_THE_CAP
    # The reply is 50 MiB; what the read held is about the cap (7 MiB), once or twice over.
    assert int(grown) < 3 * links.MAX_LINK_REPLY_BYTES < FLOOD / 2, out.stdout
