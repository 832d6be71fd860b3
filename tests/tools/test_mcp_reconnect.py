"""Streamable HTTP sessions that end under a running source: a stateful SDK server on
127.0.0.1 killed and brought back on the same port (by a supervisor, as systemd or Kubernetes
would) between calls and during them. A lost session is replaced; a call is sent again only
when that is safe."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether import Agent
from tether.events import ToolFinished
from tether.messages import ToolCall
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call
from tether.tools import Tool, tool
from tether.tools.mcp import McpServerConfig, McpToolSource
from tether.tools.run import CallOutcome, execute

try:
    from .mcp_servers.harness import PYTHON
except ImportError:
    from mcp_servers.harness import PYTHON

SESSION_SERVER = Path(__file__).parent / "mcp_servers" / "session_server.py"


class SupervisedServer:
    """`session_server.py` kept running: whenever its process exits, a watcher starts it
    again on the same port. `restart()` kills it and waits for the next one to listen."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger
        self.port = 0
        self.generation = 0
        self.process: subprocess.Popen[str] | None = None
        self._changed = threading.Condition()
        self._stopping = False
        self._watcher = threading.Thread(target=self._watch, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self._spawn()
        self._watcher.start()

    def _spawn(self) -> None:
        process = subprocess.Popen(
            [PYTHON, str(SESSION_SERVER), str(self.port), str(self.ledger)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once it listens
        if not line.startswith("PORT "):
            process.kill()
            process.wait(timeout=10)
            raise RuntimeError(f"the session server did not start: {line!r}")
        with self._changed:
            self.port = int(line.split()[1])
            self.process = process
            self.generation += 1
            self._changed.notify_all()

    def _watch(self) -> None:
        while True:
            process = self.process
            assert process is not None
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
            if self._stopping:
                return
            self._spawn()

    def restart(self) -> int:
        """Kill the server; return the pid of the one that replaced it."""
        with self._changed:
            generation = self.generation
            assert self.process is not None
            self.process.kill()
            assert self._changed.wait_for(lambda: self.generation > generation, timeout=30)
            assert self.process is not None
            return self.process.pid

    def stop(self) -> None:
        self._stopping = True
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                process.kill()
        self._watcher.join(timeout=30)


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[SupervisedServer]:
    server = SupervisedServer(tmp_path / "ledger.txt")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def stateful(server: SupervisedServer) -> McpServerConfig:
    # The 2025-11-25 handshake keeps a session (Mcp-Session-Id), as server-everything does;
    # a 2026-07-28 exchange has none to lose.
    return McpServerConfig("sessions", url=server.url, protocol="legacy")


def ledger(server: SupervisedServer) -> list[str]:
    if not server.ledger.exists():
        return []
    return server.ledger.read_text(encoding="utf-8").splitlines()


async def run(t: Tool, **arguments: Any) -> CallOutcome:
    return await execute(t, ToolCall("call_1", t.name, arguments), "ses_reconnect")


async def test_a_server_restarted_between_two_calls_of_a_run_gets_a_new_session_and_the_run_completes(
    supervised: SupervisedServer,
) -> None:
    @tool
    def restart_server() -> str:
        """Kill the MCP server; a new one comes up on the same port."""
        return f"restarted as {supervised.restart()}"

    store = MemoryStore()
    async with McpToolSource([stateful(supervised)]) as source:
        tools = [*await source.list_tools(), restart_server]
        model = ScriptedModel([call("pid"), call("restart_server"), call("pid"), "done"])
        result = await Agent(model, tools=tools, store=store).run("restart it")
        starts = source.connection("sessions").starts
    finished = [
        e.payload
        for e in await store.read(result.session_id)
        if isinstance(e.payload, ToolFinished)
    ]
    assert [f.outcome for f in finished] == ["ok", "ok", "ok"]
    first, restarted, second = (f.content for f in finished)
    assert restarted == f"restarted as {second}" and second != first
    assert (result.stop_reason, result.output) == ("end_turn", "done")
    assert starts == 2


async def test_a_404_for_the_session_starts_a_new_one_and_sends_even_a_write_again(
    supervised: SupervisedServer,
) -> None:
    async with McpToolSource([stateful(supervised)]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        assert (await run(tools["record"], note="one")).outcome == "ok"
        await asyncio.to_thread(supervised.restart)
        # The new server answers the old session id 404: it ran nothing, so the write is
        # safe to send on a new session.
        again = await run(tools["record"], note="two")
        assert (again.outcome, again.content) == ("ok", "recorded two")
        assert source.connection("sessions").starts == 2
    assert ledger(supervised) == ["one", "two"]


async def test_a_write_whose_session_was_lost_mid_call_is_not_repeated(
    supervised: SupervisedServer,
) -> None:
    async with McpToolSource([stateful(supervised)]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        assert tools["record_then_die"].effect == "write"
        lost = await run(tools["record_then_die"], note="pay the invoice")
        # Answered as the recovery rules answer a started write: its effect is unknown.
        assert lost.outcome == "unknown_effect"
        assert "may or may not have happened. It was not repeated" in lost.content
        after = await run(tools["record"], note="checked")
        assert after.outcome == "ok"
    assert ledger(supervised) == ["pay the invoice", "checked"]


async def test_a_read_whose_connection_was_lost_mid_call_is_sent_once_more_once_the_server_is_back(
    supervised: SupervisedServer, tmp_path: Path
) -> None:
    marker = tmp_path / "looked-once"
    async with McpToolSource([stateful(supervised)]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        looked = await run(tools["look_then_die"], marker=str(marker))
        assert (looked.outcome, looked.content) == ("ok", "looked")
        assert marker.exists() and source.connection("sessions").starts == 2


async def test_a_server_that_is_down_when_a_call_starts_is_waited_for_with_backoff(
    supervised: SupervisedServer,
) -> None:
    async with McpToolSource([stateful(supervised)]) as source:
        tools = {t.name: t for t in await source.list_tools()}
        first = await run(tools["pid"])
        with supervised._changed:
            assert supervised.process is not None
            supervised.process.kill()  # the watcher brings it back, whenever it can
        second = await run(tools["pid"])
        assert second.outcome == "ok" and second.content != first.content
