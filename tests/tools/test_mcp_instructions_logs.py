"""A server's `instructions` and log messages, against the real catalog server over stdio:
instructions reach the system prompt only when the config opts in, and log messages reach the
`tether.mcp` logger with the server's name on both protocol generations."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from tether.cli import main
from tether.events import SessionCreated
from tether.messages import ToolCall
from tether.store import open_store
from tether.tools.mcp import McpLogMessage, McpToolSource, parse_mcp_config
from tether.tools.mcp.logs import wanted_level
from tether.tools.run import execute

try:
    from .mcp_servers.harness import CATALOG, PYTHON, catalog_stdio, no_orphan_servers, toy_stdio
except ImportError:
    from mcp_servers.harness import CATALOG, PYTHON, catalog_stdio, no_orphan_servers, toy_stdio

__all__ = ["no_orphan_servers"]

INSTRUCTIONS = "Always call lookup before answering questions about the catalog."


async def test_instructions_are_read_and_added_only_for_servers_that_opt_in() -> None:
    servers = [catalog_stdio("shy"), catalog_stdio("open", use_instructions=True), toy_stdio()]
    async with McpToolSource(servers) as source:
        assert await source.instructions() == {"shy": INSTRUCTIONS, "open": INSTRUCTIONS}
        prompt = await source.system_prompt("You keep a catalog.")
    assert prompt == (
        f"You keep a catalog.\n\nInstructions from the MCP server 'open':\n{INSTRUCTIONS}"
    )


async def test_without_an_opt_in_the_system_prompt_is_unchanged() -> None:
    async with McpToolSource([catalog_stdio()]) as source:
        assert await source.system_prompt("Be brief.") == "Be brief."
        assert await source.system_prompt(None) is None


def test_the_config_key_is_checked() -> None:
    entry: dict[str, Any] = {"command": "x", "useInstructions": True}
    (config,) = parse_mcp_config({"mcpServers": {"a": entry}})
    assert config.use_instructions is True
    with pytest.raises(Exception, match=r"'use_instructions' must be true or false, not 'yes'"):
        parse_mcp_config({"mcpServers": {"a": {"command": "x", "use_instructions": "yes"}}})


def test_tether_run_records_the_opted_in_instructions_in_the_system_prompt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mcp = tmp_path / "mcp.json"
    server = {"command": PYTHON, "args": [str(CATALOG)], "use_instructions": True}
    mcp.write_text(json.dumps({"mcpServers": {"catalog": server}}), encoding="utf-8")
    db = tmp_path / "run.db"
    code = main(["run", "hi", "--model", "scripted:demo", "--mcp", str(mcp), "--store", str(db),
                 "--system", "Base.", "--json"])  # fmt: skip
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

    system = asyncio.run(created()).system
    assert system == f"Base.\n\nInstructions from the MCP server 'catalog':\n{INSTRUCTIONS}"


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_server_log_messages_reach_the_tether_mcp_logger_with_the_server_name(
    protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether.mcp")
    async with McpToolSource([catalog_stdio("shop", protocol=protocol)]) as source:
        (lookup,) = [t for t in await source.list_tools() if t.name == "lookup"]
        outcome = await execute(lookup, ToolCall("c1", "lookup", {"item": "tea"}), "ses_1")
        assert outcome.content == "tea: 3 left"
        records = [r for r in caplog.records if r.name == "tether.mcp"]
        for _ in range(100):  # notifications may land just after the answer
            if len(records) >= 2:
                break
            await asyncio.sleep(0.05)
            records = [r for r in caplog.records if r.name == "tether.mcp"]
    messages = [(r.levelno, r.getMessage()) for r in records]
    assert (logging.INFO, "MCP server shop/catalog.lookup: looking up tea") in messages
    assert (logging.WARNING, "MCP server shop: tea is out of stock") in messages
    assert all(getattr(r, "mcp_server", None) == "shop" for r in records)


def test_servers_are_asked_for_the_least_severe_level_the_logger_shows() -> None:
    logger = logging.getLogger("tether.mcp")
    before = logger.level
    try:
        for level, wanted in ((logging.DEBUG, "debug"), (logging.INFO, "info"),
                              (logging.WARNING, "warning"), (logging.ERROR, "error")):  # fmt: skip
            logger.setLevel(level)
            assert wanted_level() == wanted
    finally:
        logger.setLevel(before)


async def test_an_observer_sees_each_log_message_and_its_bug_breaks_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tether.mcp")
    seen: list[McpLogMessage] = []

    def observe(message: McpLogMessage) -> None:
        seen.append(message)
        raise RuntimeError("observer bug")

    async with McpToolSource([catalog_stdio("shop", protocol="legacy")], on_log=observe) as source:
        (lookup,) = [t for t in await source.list_tools() if t.name == "lookup"]
        first = await execute(lookup, ToolCall("c1", "lookup", {"item": "tea"}), "ses_1")
        second = await execute(lookup, ToolCall("c2", "lookup", {"item": "jam"}), "ses_1")
        for _ in range(100):
            if len(seen) >= 4:
                break
            await asyncio.sleep(0.05)
    assert (first.content, second.content) == ("tea: 3 left", "jam: 3 left")
    assert seen[:2] == [
        McpLogMessage("shop", "info", "catalog.lookup", "looking up tea"),
        McpLogMessage("shop", "warning", None, "tea is out of stock"),
    ]
    assert len(seen) == 4
