"""Tools a server adds while an agent runs reach that agent at its next step, when the source
keeps the agent's toolbox current (`source.keep_current(agent.toolbox)`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tether import Agent
from tether.cli import main
from tether.events import ToolFinished
from tether.providers.base import ModelRequest, ModelResponse
from tether.store import MemoryStore, open_store
from tether.testing import ScriptedModel, call
from tether.tools import tool
from tether.tools.mcp import McpToolSource
from tether.tools.mcp.connection import McpConnection

try:
    from .mcp_servers.harness import CATALOG, PYTHON, catalog_stdio, no_orphan_servers
except ImportError:
    from mcp_servers.harness import CATALOG, PYTHON, catalog_stdio, no_orphan_servers

__all__ = ["no_orphan_servers"]


class Offered(ScriptedModel):
    """A scripted model that notes the tool names each request offered."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.offered: list[set[str]] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.offered.append({spec.name for spec in request.tools})
        return await super().complete(request)


@tool(effect="read")
def local() -> str:
    """A Python tool beside the server's."""
    return "local"


async def run_growing(*, keep_current: bool, protocol: str) -> tuple[Offered, list[ToolFinished]]:
    model = Offered([call("grow", name="shiny"), call("shiny"), call("local"), "done"])
    store = MemoryStore()
    async with McpToolSource([catalog_stdio(protocol=protocol)]) as source:
        agent = Agent(model, tools=[local, *await source.list_tools(taken=["local"])], store=store)
        if keep_current:
            source.keep_current(agent.toolbox)
        result = await agent.run("grow a tool and use it")
    finished = [
        e.payload
        for e in await store.read(result.session_id)
        if isinstance(e.payload, ToolFinished)
    ]
    return model, finished


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_a_tool_added_mid_run_is_offered_and_called_at_the_next_step(protocol: str) -> None:
    model, finished = await run_growing(keep_current=True, protocol=protocol)
    assert "shiny" not in model.offered[0]
    assert {"shiny", "local", "grow", "lookup"} <= model.offered[1]
    assert [(f.outcome, f.content) for f in finished] == [
        ("ok", "added shiny"),
        ("ok", "I am shiny"),
        ("ok", "local"),
    ]


async def test_without_keep_current_the_agent_keeps_the_tools_it_was_given() -> None:
    model, finished = await run_growing(keep_current=False, protocol="legacy")
    assert all("shiny" not in offered for offered in model.offered)
    assert finished[1].outcome != "ok"


GROWING_MODEL = """
from tether.testing import ScriptedModel, call


def model():
    return ScriptedModel([call("grow", name="shiny"), call("shiny"), "done"])
"""


def test_tether_run_keeps_the_mcp_tools_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "growing_model.py").write_text(GROWING_MODEL, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    mcp = tmp_path / "mcp.json"
    server = {"command": PYTHON, "args": [str(CATALOG)], "protocol": "legacy"}
    mcp.write_text(json.dumps({"mcpServers": {"catalog": server}}), encoding="utf-8")
    db = tmp_path / "run.db"
    code = main(["run", "grow", "--model", "python:growing_model:model", "--mcp", str(mcp),
                 "--store", str(db), "--json"])  # fmt: skip
    assert code == 0
    session_id = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["session_id"]

    async def finished() -> list[ToolFinished]:
        store = open_store(str(db))
        try:
            events = await store.read(session_id)
        finally:
            await store.close()
        return [e.payload for e in events if isinstance(e.payload, ToolFinished)]

    assert [(f.outcome, f.content) for f in asyncio.run(finished())] == [
        ("ok", "added shiny"),
        ("ok", "I am shiny"),
    ]


async def test_a_server_is_handed_out_only_once_its_listen_stream_is_acknowledged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A `subscriptions/listen` stream set up late (a loaded machine) must not lose a change
    the server announces at the run's first step: the connection waits for its ack."""
    real = McpConnection._listen

    async def late(self: McpConnection, client: object, listening: asyncio.Event) -> None:
        await asyncio.sleep(0.3)  # the stream's request leaves late, as under load
        await real(self, client, listening)  # type: ignore[arg-type]

    monkeypatch.setattr(McpConnection, "_listen", late)
    model, finished = await run_growing(keep_current=True, protocol="auto")
    assert "shiny" in model.offered[1]
    assert [f.outcome for f in finished] == ["ok", "ok", "ok"]
