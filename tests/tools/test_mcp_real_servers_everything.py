"""`@modelcontextprotocol/server-everything` (a reference server nobody here wrote, pinned by
`.ci/mcp-conformance/package-lock.json`): its tools over stdio, and a run whose streamable
HTTP server is killed and restarted between two calls."""

from __future__ import annotations

import re

import pytest

from tether import Agent
from tether.events import ToolFinished
from tether.messages import ToolCall
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call
from tether.tools import tool
from tether.tools.mcp import McpServerConfig, McpToolSource, parse_mcp_config
from tether.tools.run import execute

try:
    from .mcp_servers.harness import no_orphan_servers
    from .mcp_servers.reference import (
        EverythingHttp,
        everything_http,
        everything_stdio,
        no_reference_servers_left,
    )
except ImportError:
    from mcp_servers.harness import no_orphan_servers
    from mcp_servers.reference import (
        EverythingHttp,
        everything_http,
        everything_stdio,
        no_reference_servers_left,
    )

__all__ = ["everything_http", "no_orphan_servers", "no_reference_servers_left"]


async def finished_calls(store: MemoryStore, session_id: str) -> list[ToolFinished]:
    return [e.payload for e in await store.read(session_id) if isinstance(e.payload, ToolFinished)]


async def test_server_everything_over_stdio_lists_its_tools_and_answers_echo_and_get_sum() -> None:
    async with McpToolSource([everything_stdio()]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        # The pinned version's names: `get-sum` (older ones called it `add`).
        assert {"echo", "get-sum", "get-structured-content"} <= set(tools)
        assert tools["echo"].effect == "read"  # readOnlyHint
        echoed = await execute(tools["echo"], ToolCall("c1", "echo", {"message": "hello"}))
        summed = await execute(tools["get-sum"], ToolCall("c2", "get-sum", {"a": 2, "b": 40}))
    assert (echoed.outcome, echoed.content) == ("ok", "Echo: hello")
    assert (summed.outcome, summed.content) == ("ok", "The sum of 2 and 40 is 42.")


async def test_an_agent_run_drives_server_everything_over_stdio() -> None:
    store = MemoryStore()
    async with McpToolSource([everything_stdio()]) as source:
        model = ScriptedModel([call("echo", message="ping"), call("get-sum", a=1, b=2), "done"])
        result = await Agent(model, tools=await source.list_tools(), store=store).run("go")
    finished = await finished_calls(store, result.session_id)
    assert [(f.outcome, f.content) for f in finished] == [
        ("ok", "Echo: ping"),
        ("ok", "The sum of 1 and 2 is 3."),
    ]
    assert (result.stop_reason, result.output) == ("end_turn", "done")


async def test_server_everything_over_http_killed_and_restarted_between_two_calls_of_a_run(
    everything_http: EverythingHttp,
) -> None:
    first_pid = everything_http.pids[0]

    @tool
    def restart_server() -> str:
        """Kill the MCP server; a new one comes up on the same port."""
        return f"restarted as {everything_http.restart()}"

    store = MemoryStore()
    config = McpServerConfig("everything", url=everything_http.url)
    async with McpToolSource([config]) as source:
        tools = [*await source.list_tools(), restart_server]
        model = ScriptedModel(
            [
                call("echo", message="before"),
                call("restart_server"),
                call("echo", message="after"),
                "done",
            ]
        )
        result = await Agent(model, tools=tools, store=store).run("restart it")
        starts = source.connection("everything").starts
    finished = await finished_calls(store, result.session_id)
    assert [(f.outcome, f.content) for f in finished] == [
        ("ok", "Echo: before"),
        ("ok", f"restarted as {everything_http.pids[1]}"),
        ("ok", "Echo: after"),
    ]
    assert everything_http.pids[1] != first_pid
    assert (result.stop_reason, result.output) == ("end_turn", "done")
    assert starts == 2  # the lost session was replaced by one new one


async def test_a_write_whose_session_the_restarted_server_refuses_with_400_is_sent_on_a_new_one(
    everything_http: EverythingHttp,
) -> None:
    # server-everything answers an unknown session id 400 "No valid session ID provided",
    # not the spec's 404: it ran nothing, so even a write is safe to send again.
    config = McpServerConfig("everything", url=everything_http.url)
    async with McpToolSource([config]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        toggle = tools["toggle-simulated-logging"]
        assert toggle.effect == "write"
        first = await execute(toggle, ToolCall("c1", toggle.name, {}))
        everything_http.restart()
        second = await execute(toggle, ToolCall("c2", toggle.name, {}))
        starts = source.connection("everything").starts
    # The new server's session starts with logging off, so the toggle starts it again, for
    # another session id.
    sessions = [session_of(first.content), session_of(second.content)]
    assert (first.outcome, second.outcome) == ("ok", "ok")
    assert None not in sessions and sessions[0] != sessions[1]
    assert starts == 2


def session_of(toggled: str) -> str | None:
    found = re.match(r"Started simulated, random-leveled logging for session (\S+) ", toggled)
    return found[1] if found else None


async def test_env_references_with_defaults_in_the_url_reach_the_server(
    everything_http: EverythingHttp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHER_TEST_EVERYTHING_HOST", raising=False)
    monkeypatch.setenv("TETHER_TEST_EVERYTHING_PORT", str(everything_http.port))
    # Host unset: its default; port set: the default (9, where nobody listens) is not used.
    url = "http://${TETHER_TEST_EVERYTHING_HOST:-127.0.0.1}:${TETHER_TEST_EVERYTHING_PORT:-9}/mcp"
    (config,) = parse_mcp_config({"mcpServers": {"everything": {"url": url}}})
    assert config.url == everything_http.url
    async with McpToolSource([config]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        echoed = await execute(tools["echo"], ToolCall("c1", "echo", {"message": "over http"}))
    assert (echoed.outcome, echoed.content) == ("ok", "Echo: over http")
