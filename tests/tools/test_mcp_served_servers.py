"""`McpServers`, the operator's MCP servers in a worker: one set of server processes per
tenant, shared by its runs and stopped when idle or when the worker stops; each tenant's
OAuth tokens used for its own sessions only; a spec's names checked against what is offered."""

from __future__ import annotations

import asyncio
import base64
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tether.errors import UsageError
from tether.runtime import LocalRuntime
from tether.runtime.base import SessionSpec
from tether.runtime.mcp_servers import McpServers
from tether.store import MemoryStore
from tether.store.credentials import open_credentials
from tether.store.sealing import SecretKeyMissing
from tether.testing.runtime_fixtures import MODEL
from tether.tools.mcp import McpServerConfig, McpServerUnavailable, McpToolSource
from tether.tools.mcp.auth_config import McpOAuth

try:
    from .mcp_servers.harness import gone, server_children, toy_stdio
    from .mcp_servers.oauth_server import OAuthServer
    from .test_mcp_http import run
    from .test_mcp_oauth import Browser
except ImportError:
    from mcp_servers.harness import gone, server_children, toy_stdio
    from mcp_servers.oauth_server import OAuthServer
    from test_mcp_http import run
    from test_mcp_oauth import Browser


@pytest.fixture(autouse=True)
def secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key OAuth tokens kept in a store are sealed with."""
    monkeypatch.setenv("TETHER_SECRET_KEY", base64.b64encode(secrets.token_bytes(32)).decode())


@pytest.fixture
def guarded() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


async def _until(predicate: Callable[[], bool], seconds: float = 15.0) -> bool:
    """Poll a process's exit without blocking the loop (the idle timers run on it)."""
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


async def test_a_tenants_runs_share_its_servers_which_stop_when_idle_and_at_close() -> None:
    servers = McpServers([toy_stdio(), toy_stdio("other")], idle=0.2)
    try:
        async with servers.tools("acme", ["toy"]) as first, servers.tools("acme", ["toy"]):
            assert "echo" in {t.name for t in first}
            assert len(server_children()) == 1  # one process for both runs; `other` not started
            async with servers.tools("globex", ["toy"]) as theirs:
                assert len(server_children()) == 2  # another tenant: a process of its own
                echoed = await run({t.name: t for t in theirs}["echo"], text="hi")
                assert echoed.content == "hi"
        pids = [p.pid for p in server_children()]
        assert len(pids) == 2
        assert await _until(lambda: all(gone(pid) for pid in pids))  # idle: stopped
        async with servers.tools("acme", ["toy", "other"]) as both:
            names = {t.name for t in both}
            assert {"toy__echo", "other__echo"} <= names  # as `tether run --mcp` names them
            running = [p.pid for p in server_children()]
            assert len(running) == 2
    finally:
        await servers.aclose()
    assert all(gone(pid) for pid in running)
    assert server_children() == []


async def test_an_idle_timer_does_not_stop_servers_a_new_run_took_up() -> None:
    servers = McpServers([toy_stdio()], idle=0.3)
    try:
        async with servers.tools(None, ["toy"]):
            pass
        async with servers.tools(None, ["toy"]) as tools:
            await asyncio.sleep(0.5)  # past the first run's idle time
            assert (await run({t.name: t for t in tools}["echo"], text="still")).content == "still"
    finally:
        await servers.aclose()
    assert server_children() == []


def test_an_unknown_name_lists_the_names_offered_to_the_tenant_and_nothing_else() -> None:
    remote = McpServerConfig("remote", url="https://x.example/mcp")
    private = toy_stdio("private", tenants=frozenset({"globex"}))
    servers = McpServers([toy_stdio(), remote, private])
    with pytest.raises(UsageError) as caught:
        servers.check(["toy", "files"], "acme")
    assert str(caught.value) == (
        "spec.mcp names 'files', which this server does not offer (it offers: toy, remote)"
    )
    with pytest.raises(UsageError) as hidden:  # another tenant's server is not said to exist
        servers.check(["private"], "acme")
    assert str(hidden.value) == (
        "spec.mcp names 'private', which this server does not offer (it offers: toy, remote)"
    )
    servers.check(["private", "toy"], "globex")
    assert servers.names(None) == ["toy", "remote"]  # no tenants: only the unrestricted


def test_a_config_file_says_which_tenants_a_server_is_offered_to(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(
        '{"mcpServers": {"files": {"command": "mcp-files", "tenants": ["acme", "globex"]},'
        ' "time": {"command": "mcp-time"}}}'
    )
    servers = McpServers.load(str(path))
    assert servers.names("acme") == ["files", "time"]
    assert servers.names("initech") == ["time"]
    path.write_text('{"mcpServers": {"files": {"command": "mcp-files", "tenants": "acme"}}}')
    with pytest.raises(
        UsageError,
        match=r"^--mcp: /.*/mcp.json: MCP server 'files': 'tenants' must be a list of strings$",
    ):
        McpServers.load(str(path))


@pytest.mark.parametrize(
    ("mcp", "said"),
    [
        (("npx -y server",), "spec.mcp[0] 'npx -y server' is not an MCP server's name"),
        (("http://10.0.0.1/mcp",), "spec.mcp[0] 'http://10.0.0.1/mcp' is not"),
        (("toy", "toy"), "spec.mcp names one MCP server twice"),
        (("files",), "spec.mcp names 'files', which this server does not offer (it offers: toy)"),
    ],
)
async def test_a_library_runtime_refuses_what_a_spec_may_not_name(
    mcp: tuple[str, ...], said: str
) -> None:
    async with LocalRuntime("memory:", workers=0, mcp=McpServers([toy_stdio()])) as rt:
        with pytest.raises(UsageError) as caught:
            await rt.start(SessionSpec(MODEL, "hello", mcp=mcp))
        assert str(caught.value).startswith(said)
        assert not (await rt.sessions()).sessions


def test_a_spec_without_mcp_keeps_the_body_and_fingerprint_it_had() -> None:
    assert "mcp" not in SessionSpec(MODEL, "hello").to_json()
    assert SessionSpec(MODEL, "hello", mcp=("toy",)).to_json()["mcp"] == ["toy"]
    assert SessionSpec.from_json(SessionSpec(MODEL, "x", mcp=("toy",)).to_json()).mcp == ("toy",)


async def test_a_tenants_oauth_tokens_serve_its_sessions_only(
    guarded: OAuthServer, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'tether.db'}"
    config = McpServerConfig("guarded", url=guarded.url, auth=McpOAuth(), startup_timeout=20)
    # acme signs in once, as `tether mcp tools FILE --tenant acme --store URL` has it do.
    acme = open_credentials(url, tenant="acme")
    async with McpToolSource([config], credentials=acme, on_authorize=Browser()) as signing_in:
        await signing_in.list_tools()
    assert guarded.state.counts["authorization_code"] == 1
    servers = McpServers([config], open_credentials(url))
    try:
        async with servers.tools("acme", ["guarded"]) as tools:  # no sign-in: acme's tokens
            who = await run({t.name: t for t in tools}["whoami"])
            assert who.outcome == "ok" and who.content.startswith("dyn-")
        with pytest.raises(McpServerUnavailable) as caught:
            async with servers.tools("globex", ["guarded"]):
                pass
    finally:
        await servers.aclose()
    assert "MCP server 'guarded' needs tenant 'globex' to sign in" in str(caught.value)
    assert "--tenant globex" in str(caught.value)
    assert guarded.state.counts["authorization_code"] == 1  # acme's tokens never went to globex
    assert guarded.state.counts["authorizations"] == 1


def test_a_server_with_oauth_and_no_key_to_seal_its_tokens_stops_the_command_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"files": {"url": "https://x.example/mcp", "auth": {}}}}')
    monkeypatch.delenv("TETHER_SECRET_KEY")
    credentials = open_credentials(f"sqlite:///{tmp_path / 'tether.db'}")
    with pytest.raises(SecretKeyMissing):
        McpServers.load(str(path), credentials)
    McpServers.load(str(path))  # tokens in memory: nothing to seal


async def test_a_worker_without_the_servers_a_session_names_fails_it_saying_so() -> None:
    store = MemoryStore()
    spec = SessionSpec(MODEL, 'call echo {"text": "x"}', mcp=("toy",), end_after_turn=True)
    async with LocalRuntime(store, workers=0, mcp=McpServers([toy_stdio()])) as server:
        ref = await server.start(spec)
        async with LocalRuntime(store, workers=1) as elsewhere, asyncio.timeout(15):
            while (status := await elsewhere.poll(ref)).state != "failed":
                assert status.state not in ("completed", "canceled"), status
                await asyncio.sleep(0.05)
    detail = status.view.stop_detail or ""
    assert "it names the MCP servers toy, and this worker has none" in detail, status
    assert server_children() == []
