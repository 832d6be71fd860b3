"""`tether run --mcp FILE`: MCP servers' tools beside the Python ones, checked before anything
is stored, and the servers stopped when the run ends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tether.cli import main
from tether.events import SessionCreated
from tether.store import open_store

try:
    from .mcp_servers.harness import TIME_SERVER, no_orphan_servers, server_children
except ImportError:
    from mcp_servers.harness import TIME_SERVER, no_orphan_servers, server_children

__all__ = ["no_orphan_servers"]


def config(tmp_path: Path, servers: dict[str, object]) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def test_run_with_mcp_offers_the_servers_tools_and_stops_the_servers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mcp = config(tmp_path, {"time": {"command": TIME_SERVER, "args": ["--local-timezone", "UTC"]}})
    db = tmp_path / "run.db"
    code = main(["run", "Plan a picnic", "--model", "scripted:demo", "--tools", "tether.demo:tools",
                 "--mcp", str(mcp), "--store", str(db), "--json"])  # fmt: skip
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    async def created() -> SessionCreated:
        store = open_store(str(db))
        try:
            payload = (await store.read(result["session_id"]))[0].payload
        finally:
            await store.close()
        assert isinstance(payload, SessionCreated)
        return payload

    tools = set(asyncio.run(created()).tools)
    assert {"get_current_time", "convert_time", "forecast", "save_plan"} <= tools
    assert not server_children()


def test_a_bad_mcp_file_is_one_clear_error_and_nothing_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mcp = config(tmp_path, {"broken": {"command": "x", "url": "http://127.0.0.1:1/mcp"}})
    db = tmp_path / "never.db"
    code = main(["run", "hi", "--model", "scripted:demo", "--mcp", str(mcp), "--store", str(db)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"tether: error: --mcp {mcp}: ") and "'broken'" in err
    assert not db.exists()


def test_a_server_that_cannot_start_stops_the_run_before_the_store_is_touched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mcp = config(tmp_path, {"ghost": {"command": str(tmp_path / "no-such-server")}})
    db = tmp_path / "never.db"
    code = main(["run", "hi", "--model", "scripted:demo", "--mcp", str(mcp), "--store", str(db)])
    err = capsys.readouterr().err
    assert code == 2 and "MCP server 'ghost'" in err and "could not be started" in err
    assert not db.exists()
