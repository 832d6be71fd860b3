"""The `resource_link`s of a tool result, read from the server that returned them (its
`resources/read`, through the same connection), bounded in number, size and time.

Owns reading only: what the model sees of a read is `content`'s. A link is never followed
anywhere but its own server (no other server, no fetch of an http or file URI), and a link
that cannot be read is a reason, never an exception: the call it came with still succeeds.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from mcp import types as mcp_types

from tether.messages import MAX_IMAGE_BYTES
from tether.tools.mcp import catalog
from tether.tools.mcp.connection import McpConnection
from tether.tools.mcp.errors import McpError, McpUnsupported
from tether.tools.mcp.http import REPLY_CAP, ReplyCap

# More links than this in one result are named, not read: each is a round trip to the server.
MAX_LINKS_READ = 8
# All the reads of one result together, and never past the call's own timeout less this
# margin: a call whose effect happened must not be answered `timeout` for reading its links.
LINKS_READ_TIMEOUT = 10.0
TIMEOUT_MARGIN = 0.5
# A link whose server declares a larger `size` is not read; an image is capped by the same.
MAX_LINK_BYTES = MAX_IMAGE_BYTES
# The most of a `resources/read` reply read over HTTP: enough for `MAX_LINK_BYTES` of
# contents as base64 in JSON, with room for the envelope; reading stops past it.
MAX_LINK_REPLY_BYTES = MAX_LINK_BYTES * 4 // 3 + 64 * 1024

Contents = mcp_types.TextResourceContents | mcp_types.BlobResourceContents


@dataclass(frozen=True, slots=True)
class LinkRead:
    """What became of one link: the contents its server gave, or why there are none."""

    contents: tuple[Contents, ...] = ()
    problem: str | None = None


async def read_links(
    connection: McpConnection,
    result: mcp_types.CallToolResult,
    *,
    call_ends: float | None = None,
) -> dict[str, LinkRead]:
    """Each distinct link URI of `result`'s content, read in order until `MAX_LINKS_READ`
    links or `LINKS_READ_TIMEOUT` seconds are spent; the rest carry the reason they were not.
    `call_ends`: when the call's timeout strikes (`time.monotonic()`; None: never), which
    the reads stop `TIMEOUT_MARGIN` short of."""
    sizes = _declared_sizes(result)
    reads: dict[str, LinkRead] = {}
    deadline = time.monotonic() + LINKS_READ_TIMEOUT
    if call_ends is not None:
        deadline = min(deadline, call_ends - TIMEOUT_MARGIN)
    seconds = max(0.0, deadline - time.monotonic())
    for index, uri in enumerate(sizes):
        if index >= MAX_LINKS_READ:
            reads[uri] = LinkRead(problem=f"not read: only {MAX_LINKS_READ} links are read")
        elif (size := sizes[uri]) is not None and size > MAX_LINK_BYTES:
            reads[uri] = LinkRead(
                problem=f"not read: {size:,} bytes, over the cap of {MAX_LINK_BYTES:,}"
            )
        else:
            reads[uri] = await _read(connection, uri, deadline, seconds)
    return reads


async def _read(connection: McpConnection, uri: str, deadline: float, seconds: float) -> LinkRead:
    if deadline <= time.monotonic():
        return LinkRead(problem=f"not read: the {seconds:.3g} s for links ran out")
    cap = ReplyCap(MAX_LINK_REPLY_BYTES)
    capping = REPLY_CAP.set(cap)  # the SDK sends the request in this context
    try:
        async with asyncio.timeout(deadline - time.monotonic()):
            read = await catalog.read_resource(connection, uri)
    except TimeoutError:
        return LinkRead(problem=f"not read within the {seconds:.3g} s for links")
    except McpUnsupported:
        return LinkRead(problem="not read: its server offers no resources")
    except McpError as exc:  # the server's own words; the call itself went well
        if cap.passed:
            return LinkRead(
                problem=f"not read: its reply ran over {cap.limit:,} bytes, past the cap of "
                f"{MAX_LINK_BYTES:,}; the rest stays on the server"
            )
        return LinkRead(problem=f"not read: {exc}")
    finally:
        REPLY_CAP.reset(capping)
    return LinkRead(contents=read.contents)


def _declared_sizes(result: mcp_types.CallToolResult) -> dict[str, int | None]:
    sizes: dict[str, int | None] = {}
    for block in result.content:
        if isinstance(block, mcp_types.ResourceLink):
            sizes.setdefault(str(block.uri), block.size)
    return sizes
