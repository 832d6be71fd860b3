"""OAuth 2.1 against a real protected MCP server on 127.0.0.1 (`mcp_servers/oauth_server.py`):
client credentials in a session, authorization code with PKCE through the loopback
listener (the test plays the browser by following the redirect), tokens kept in SQLite and
reused by a later source, refresh of an expired token, a wrong secret, and the legacy
HTTP+SSE transport."""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import httpx2
import pytest
from mcp.client.auth import OAuthFlowError

from tether import Agent
from tether.events import ToolFinished
from tether.store import MemoryStore
from tether.store.credentials import MemoryCredentials
from tether.testing import ScriptedModel, call
from tether.tools import Tool
from tether.tools.mcp import McpServerConfig, McpServerUnavailable, McpToolSource
from tether.tools.mcp.auth_config import McpOAuth
from tether.tools.mcp.oauth import LoopbackCallback

try:
    from .mcp_servers.oauth_server import MACHINE_ID, MACHINE_SECRET, OAuthServer
    from .test_mcp_http import run
except ImportError:
    from mcp_servers.oauth_server import MACHINE_ID, MACHINE_SECRET, OAuthServer
    from test_mcp_http import run


@pytest.fixture(autouse=True)
def secret_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """The key OAuth tokens kept in a store are sealed with (without one they are refused)."""
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    monkeypatch.setenv("TETHER_SECRET_KEY", key)
    return key


@pytest.fixture
def guarded() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


class Browser:
    """Plays the person who signs in: fetches the authorization URL and follows the
    authorization server's redirect to the loopback listener."""

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.landed: list[str] = []

    async def __call__(self, server: str, url: str) -> None:
        self.opened.append(url)
        async with httpx2.AsyncClient(follow_redirects=True, timeout=10) as http:
            page = await http.get(url)
        self.landed.append(f"{page.status_code} {page.url}")


async def nobody(server: str, url: str) -> None:
    raise AssertionError(f"no sign-in was expected, but {server} asked for {url}")


def machine(server: OAuthServer, secret: str = MACHINE_SECRET) -> McpServerConfig:
    auth = McpOAuth(grant="client_credentials", client_id=MACHINE_ID, client_secret=secret)
    return McpServerConfig("guarded", url=server.url, auth=auth, startup_timeout=20)


def person(server: OAuthServer) -> McpServerConfig:
    return McpServerConfig("guarded", url=server.url, auth=McpOAuth(), startup_timeout=20)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def tools_of(source: McpToolSource) -> dict[str, Tool]:
    return {t.name: t for t in await source.list_tools()}


async def test_a_session_calls_a_tool_on_a_server_guarded_by_client_credentials(
    guarded: OAuthServer,
) -> None:
    store = MemoryStore()
    async with McpToolSource([machine(guarded)], credentials=MemoryCredentials()) as source:
        agent = Agent(
            ScriptedModel([call("whoami"), "done"]), tools=await source.list_tools(), store=store
        )
        result = await agent.run("who am I?")
    events = await store.read(result.session_id)
    finished = [e.payload for e in events if isinstance(e.payload, ToolFinished)]
    assert [(f.outcome, f.content) for f in finished] == [("ok", MACHINE_ID)]
    assert guarded.state.counts["client_credentials"] == 1
    logged = repr(events)
    assert MACHINE_SECRET not in logged
    assert not any(token in logged for token in guarded.state.access)


async def test_authorization_code_with_pkce_comes_back_through_the_loopback_listener(
    guarded: OAuthServer,
) -> None:
    browser = Browser()
    source = McpToolSource([person(guarded)], credentials=MemoryCredentials(), on_authorize=browser)
    async with source:
        tools = await tools_of(source)
        who = await run(tools["whoami"])
    assert who.outcome == "ok" and who.content.startswith("dyn-")  # registered itself
    assert guarded.state.counts["registrations"] == 1
    assert guarded.state.counts["authorizations"] == 1
    assert "code_challenge_method=S256" in browser.opened[0]
    assert browser.landed[0].startswith("200 http://127.0.0.1:")
    assert "/callback?code=" in browser.landed[0]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tether.db'}"
    url = os.environ.get("TETHER_TEST_POSTGRES_URL")
    if not url:
        pytest.skip('TETHER_TEST_POSTGRES_URL is not set: eval "$(bash .ci/postgres.sh)"')
    return url


async def test_tokens_kept_in_the_store_serve_a_second_source_without_signing_in_again(
    guarded: OAuthServer, store_url: str
) -> None:
    async with McpToolSource(
        [person(guarded)], credentials=store_url, on_authorize=Browser()
    ) as first:
        assert (await run((await tools_of(first))["echo"], text="one")).content == "one"
    async with McpToolSource(
        [person(guarded)], credentials=store_url, on_authorize=nobody
    ) as second:
        assert (await run((await tools_of(second))["echo"], text="two")).content == "two"
    assert guarded.state.counts["authorizations"] == 1
    assert guarded.state.counts["registrations"] == 1
    assert guarded.state.counts["authorization_code"] == 1


async def test_an_expired_access_token_is_refreshed_not_signed_in_again(
    guarded: OAuthServer, tmp_path: Path
) -> None:
    guarded.state.lifetime = 1
    store_url = f"sqlite:///{tmp_path / 'tether.db'}"
    async with McpToolSource(
        [person(guarded)], credentials=store_url, on_authorize=Browser()
    ) as first:
        await tools_of(first)
    await asyncio.sleep(1.5)
    assert all(expiry < time.time() for _, expiry in guarded.state.access.values())
    guarded.state.lifetime = 3600
    async with McpToolSource(
        [person(guarded)], credentials=store_url, on_authorize=nobody
    ) as later:
        assert (await run((await tools_of(later))["echo"], text="fresh")).content == "fresh"
    assert guarded.state.counts["refresh_token"] == 1
    assert guarded.state.counts["authorizations"] == 1


async def test_a_token_expiring_during_a_session_is_refreshed_before_the_next_call(
    guarded: OAuthServer,
) -> None:
    guarded.state.lifetime = 1
    source = McpToolSource(
        [person(guarded)], credentials=MemoryCredentials(), on_authorize=Browser()
    )
    async with source:
        tools = await tools_of(source)
        assert (await run(tools["echo"], text="before")).content == "before"
        await asyncio.sleep(1.5)
        guarded.state.lifetime = 3600
        assert (await run(tools["echo"], text="after")).content == "after"
        assert source.connection("guarded").starts == 1  # the same session went on
    assert guarded.state.counts["refresh_token"] == 1
    assert guarded.state.counts["authorizations"] == 1


async def test_a_wrong_client_secret_is_a_clear_error_naming_the_server_without_the_secret(
    guarded: OAuthServer,
) -> None:
    wrong = "not-the-secret-at-all"
    source = McpToolSource([machine(guarded, wrong)], credentials=MemoryCredentials())
    with pytest.raises(McpServerUnavailable) as caught:
        await source.list_tools()
    await source.aclose()
    text = str(caught.value)
    assert text.startswith(f"MCP server 'guarded' ({guarded.url}) could not be started")
    assert "OAuth authorization failed" in text and "invalid_client" in text
    assert wrong not in text
    assert guarded.state.counts["refused"] >= 1


async def test_without_auth_a_guarded_server_answers_401_by_name(guarded: OAuthServer) -> None:
    source = McpToolSource([McpServerConfig("guarded", url=guarded.url, startup_timeout=10)])
    with pytest.raises(McpServerUnavailable, match=r"MCP server 'guarded' .*HTTP 401"):
        await source.list_tools()
    await source.aclose()


async def test_a_tool_is_called_over_the_legacy_sse_transport() -> None:
    with OAuthServer(sse=True, guard=False) as legacy:
        config = McpServerConfig("legacy", url=legacy.url, sse=True, startup_timeout=20)
        assert config.transport == "sse"
        async with McpToolSource([config]) as source:
            tools = await tools_of(source)
            echoed = await run(tools["echo"], text="over sse")
    assert (echoed.outcome, echoed.content) == ("ok", "over sse")


async def test_a_guarded_sse_server_is_reached_with_oauth_and_refuses_by_name_without() -> None:
    with OAuthServer(sse=True) as legacy:
        auth = McpOAuth(
            grant="client_credentials", client_id=MACHINE_ID, client_secret=MACHINE_SECRET
        )
        config = McpServerConfig("legacy", url=legacy.url, sse=True, auth=auth, startup_timeout=20)
        async with McpToolSource([config], credentials=MemoryCredentials()) as source:
            who = await run((await tools_of(source))["whoami"])
        bare = McpServerConfig("legacy", url=legacy.url, sse=True, startup_timeout=10)
        refused = McpToolSource([bare])
        with pytest.raises(McpServerUnavailable) as caught:
            await refused.list_tools()
        await refused.aclose()
    assert (who.outcome, who.content) == ("ok", MACHINE_ID)
    assert str(caught.value).startswith(f"MCP server 'legacy' ({legacy.url}) could not be started")
    assert "HTTP 401 Unauthorized" in str(caught.value)


async def test_a_sign_in_refused_in_the_browser_is_a_clear_error_naming_the_server(
    guarded: OAuthServer,
) -> None:
    async def refuse(server: str, url: str) -> None:
        redirect = dict(parse_qsl(urlsplit(url).query))["redirect_uri"]
        async with httpx2.AsyncClient(timeout=10) as http:
            stray = await http.get(redirect.replace("/callback", "/favicon.ico"))
            assert stray.status_code == 404  # not the redirect: still waiting for it
            await http.get(redirect, params={"error": "access_denied", "error_description": "no"})

    source = McpToolSource([person(guarded)], credentials=MemoryCredentials(), on_authorize=refuse)
    with pytest.raises(McpServerUnavailable) as caught:
        await source.list_tools()
    await source.aclose()
    assert str(caught.value).startswith(
        f"MCP server 'guarded' ({guarded.url}) could not be started"
    )
    assert "OAuth authorization failed: authorization refused: no" in str(caught.value)
    assert guarded.state.counts["authorization_code"] == 0


async def test_the_loopback_listener_gives_up_when_nobody_comes_back() -> None:
    callback = LoopbackCallback(free_port(), wait_for=0.2)
    await callback.start()
    with pytest.raises(OAuthFlowError, match=r"nobody signed in within 0\.2 s"):
        await callback.wait()
    with pytest.raises(httpx2.ConnectError):  # closed once the wait is over
        async with httpx2.AsyncClient() as http:
            await http.get(callback.redirect_uri)
