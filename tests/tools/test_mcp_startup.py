"""A stdio MCP server that exits as it starts: the error names the server and carries its exit
code and the last lines it wrote to stderr, which is where servers say what is missing."""

from __future__ import annotations

import pytest

from tether.tools.mcp import McpServerConfig, McpServerUnavailable, McpToolSource

try:
    from .mcp_servers.harness import PYTHON
except ImportError:
    from mcp_servers.harness import PYTHON

QUITTER = "import sys; print('starting', file=sys.stderr); print('FS_ROOT is not set', file=sys.stderr); sys.exit(4)"


async def test_a_server_that_exits_at_start_is_reported_with_the_tail_of_its_stderr() -> None:
    config = McpServerConfig("quitter", command=PYTHON, args=("-c", QUITTER), startup_timeout=30)
    async with McpToolSource([config]) as source:
        with pytest.raises(McpServerUnavailable) as caught:
            await source.list_tools()
    message = str(caught.value)
    assert "MCP server 'quitter'" in message and "could not be started" in message
    assert message.endswith(
        "; it exited with code 4; its stderr ended: starting | FS_ROOT is not set"
    )


async def test_a_silent_server_that_exits_at_start_is_reported_with_its_exit_code() -> None:
    config = McpServerConfig("mute", command=PYTHON, args=("-c", "raise SystemExit(7)"))
    async with McpToolSource([config]) as source:
        with pytest.raises(
            McpServerUnavailable, match=r"could not be started: .*; it exited with code 7$"
        ):
            await source.list_tools()


async def test_a_server_that_starts_keeps_working_with_its_stderr_passed_on() -> None:
    config = McpServerConfig(
        "time", command=PYTHON, args=("-m", "mcp_server_time", "--local-timezone", "UTC")
    )
    async with McpToolSource([config]) as source:
        assert "get_current_time" in {t.name for t in await source.list_tools()}
