"""HTTP failures named as HTTP: a remote MCP server behind a token check answers 401 and 403,
and the error says which, rather than the SDK's "Server returned an error response"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.tools.mcp import McpServerConfig, McpServerUnavailable, McpToolSource

try:
    from .test_mcp_reconnect import SupervisedServer
except ImportError:
    from test_mcp_reconnect import SupervisedServer


@pytest.fixture
def guarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SupervisedServer]:
    monkeypatch.setenv("SESSION_SERVER_TOKEN", "letmein")
    server = SupervisedServer(tmp_path / "ledger.txt")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, "HTTP 401 Unauthorized"), ({"Authorization": "Bearer guess"}, "HTTP 403 Forbidden")],
)
async def test_a_refused_token_is_named_by_its_http_status(
    guarded: SupervisedServer, headers: dict[str, str], status: str
) -> None:
    config = McpServerConfig("guarded", url=guarded.url, headers=headers, protocol="legacy")
    async with McpToolSource([config]) as source:
        with pytest.raises(McpServerUnavailable) as caught:
            await source.list_tools()
    assert "MCP server 'guarded'" in str(caught.value) and status in str(caught.value)


async def test_the_right_token_is_let_through(guarded: SupervisedServer) -> None:
    headers = {"Authorization": "Bearer letmein"}
    config = McpServerConfig("guarded", url=guarded.url, headers=headers, protocol="legacy")
    async with McpToolSource([config]) as source:
        assert "pid" in {t.name for t in await source.list_tools()}
