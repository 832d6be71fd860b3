"""An MCP tool call carries its fencing token to the server: `_meta` holds the call's
idempotency key and, under a lease, the lease's generation (issue 20's fencing tokens, passed
on as Kleppmann's are, so the server can refuse a write from a worker that lost the session)."""

from __future__ import annotations

import json
from pathlib import Path

from tether import Agent
from tether.events import ToolFinished
from tether.messages import ToolCall
from tether.store import SQLiteStore
from tether.testing import ScriptedModel, call
from tether.tools.mcp import McpToolSource
from tether.tools.mcp.source import META_FENCE, META_IDEMPOTENCY_KEY
from tether.tools.run import execute

try:
    from .mcp_servers.harness import no_orphan_servers, toy_stdio
except ImportError:
    from mcp_servers.harness import no_orphan_servers, toy_stdio

__all__ = ["no_orphan_servers"]


async def _meta_seen(store: SQLiteStore, **agent: object) -> dict[str, object]:
    async with McpToolSource([toy_stdio()]) as source:
        tools = await source.list_tools()
        result = await Agent(
            ScriptedModel([call("meta"), "seen"]), tools=tools, store=store, **agent
        ).run("show the meta")  # type: ignore[arg-type]
    finished = [e.payload for e in await store.read(result.session_id)]
    answer = next(p for p in finished if isinstance(p, ToolFinished))
    assert answer.outcome == "ok", answer
    # The SDK adds its own keys (io.modelcontextprotocol/...); these are tether's.
    return {k: v for k, v in json.loads(answer.content).items() if k.startswith("tether/")}


async def test_a_call_under_a_lease_sends_its_fence_and_idempotency_key(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "t.db"))
    try:
        seen = await _meta_seen(store)
        lease_generation = 1  # the session's first claim
        assert seen == {META_IDEMPOTENCY_KEY: "call_0_0", META_FENCE: lease_generation}
    finally:
        await store.close()


async def test_a_call_without_a_lease_sends_no_fence() -> None:
    async with McpToolSource([toy_stdio()]) as source:
        tool = next(t for t in await source.list_tools() if t.name == "meta")
        outcome = await execute(tool, ToolCall("call_7", "meta", {}), "ses_test")  # no lease
    seen = json.loads(outcome.content)
    assert seen[META_IDEMPOTENCY_KEY] == "call_7" and META_FENCE not in seen
