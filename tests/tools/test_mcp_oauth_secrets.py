"""OAuth tokens kept per tenant and sealed, against the real protected MCP server on
127.0.0.1 (`mcp_servers/oauth_server.py`, which rotates refresh tokens and refuses a used
one): two tenants signed in to one server URL use their own tokens only; the SQLite file and
its WAL hold none of them in plain text; `tether mcp` refuses to store tokens without a key
and names a wrong key in one line; and two processes whose access token expired together
refresh it once, the second taking what the first stored."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.client.auth import OAuthFlowError

from tether.cli import main
from tether.store import open_store
from tether.store.credentials import open_credentials
from tether.store.sealing import Keyring
from tether.tools.mcp import McpServerConfig, McpServerUnavailable, McpToolSource
from tether.tools.mcp.auth_config import McpOAuth
from tether.tools.mcp.tokens import StoredTokens

try:
    from .mcp_servers.oauth_server import MACHINE_ID, MACHINE_SECRET, OAuthServer
    from .test_mcp_http import run
    from .test_mcp_oauth import Browser, tools_of
except ImportError:
    from mcp_servers.oauth_server import MACHINE_ID, MACHINE_SECRET, OAuthServer
    from test_mcp_http import run
    from test_mcp_oauth import Browser, tools_of

REFRESH_CLIENT = Path(__file__).parent / "mcp_servers" / "refresh_client.py"


def new_key() -> str:
    return base64.b64encode(secrets.token_bytes(32)).decode()


@pytest.fixture
def guarded() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


class NoSignIn:
    """A process where nobody can sign in: records that it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, server: str, url: str) -> None:
        self.asked.append(server)
        raise OAuthFlowError("nobody is here to sign in")


def person(server: OAuthServer) -> McpServerConfig:
    return McpServerConfig("guarded", url=server.url, auth=McpOAuth(), startup_timeout=20)


async def whoami(config: McpServerConfig, credentials: object, on_authorize: object) -> str:
    async with McpToolSource(
        [config],
        credentials=credentials,  # type: ignore[arg-type]
        on_authorize=on_authorize,  # type: ignore[arg-type]
    ) as source:
        who = await run((await tools_of(source))["whoami"])
    assert who.outcome == "ok", who.content
    return who.content


async def test_two_tenants_signed_in_to_one_server_use_only_their_own_tokens(
    guarded: OAuthServer, tmp_path: Path
) -> None:
    creds = open_credentials(
        f"sqlite:///{tmp_path / 'tether.db'}", Keyring(secrets.token_bytes(32))
    )
    acme, globex = creds.for_tenant("acme"), creds.for_tenant("globex")
    acme_client = await whoami(person(guarded), acme, Browser())
    nobody = NoSignIn()
    with pytest.raises(McpServerUnavailable, match="OAuth authorization failed"):
        await whoami(person(guarded), globex, nobody)  # acme's tokens are not globex's
    assert nobody.asked == ["guarded"]
    globex_client = await whoami(person(guarded), globex, Browser())
    assert acme_client.startswith("dyn-") and globex_client.startswith("dyn-")
    assert acme_client != globex_client  # each registered and signed in for itself
    assert await whoami(person(guarded), acme, NoSignIn()) == acme_client
    assert await whoami(person(guarded), globex, NoSignIn()) == globex_client
    assert guarded.state.counts["authorizations"] == 2
    with pytest.raises(McpServerUnavailable):  # nor the CLI's own (the default tenant)
        await whoami(person(guarded), creds, NoSignIn())


async def test_the_tokens_in_the_sqlite_file_and_its_wal_are_ciphertext(
    guarded: OAuthServer, tmp_path: Path
) -> None:
    db = tmp_path / "tether.db"
    store = open_store(f"sqlite:///{db}")  # held open, as a server holds it: the WAL stays
    try:
        creds = open_credentials(f"sqlite:///{db}", Keyring(secrets.token_bytes(32)), tenant="acme")
        await whoami(person(guarded), creds, Browser())
        issued = [*guarded.state.access, *guarded.state.refresh]
        assert len(issued) == 2  # an access token and a refresh token
        stored = db.read_bytes() + (tmp_path / "tether.db-wal").read_bytes()
        assert b"tether-sealed:v1:" in stored
        assert not [t for t in issued if t.encode() in stored]
    finally:
        await store.close()
    assert not [t for t in issued if t.encode() in db.read_bytes()]


def tether_mcp(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str, **env: str
) -> tuple[int, str, str]:
    """`tether mcp ARGS` with only the secret settings in `env`: (exit code, out, err)."""
    for name in ("TETHER_SECRET_KEY", "TETHER_SECRET_KEY_FILE", "TETHER_SECRET_KEY_OLD",
                 "TETHER_INSECURE_PLAINTEXT_SECRETS"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = main(["mcp", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_tether_mcp_refuses_to_store_tokens_without_a_key_and_names_a_wrong_one(
    guarded: OAuthServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TETHER_TEST_MACHINE_SECRET", MACHINE_SECRET)
    auth = {"type": "oauth", "grant": "client_credentials", "clientId": MACHINE_ID,
            "clientSecret": "${TETHER_TEST_MACHINE_SECRET}"}  # fmt: skip
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"guarded": {"url": guarded.url, "auth": auth}}}))
    db = tmp_path / "tether.db"
    tools = ["tools", str(config), "--store", f"sqlite:///{db}"]

    code, _, err = tether_mcp(monkeypatch, capsys, *tools)
    assert code == 2
    assert err.startswith(
        f"tether: error: {config}: refusing to store OAuth tokens unsealed in sqlite:///{db}: "
        "set TETHER_SECRET_KEY"
    )
    assert len(err.splitlines()) == 1
    assert guarded.state.counts["client_credentials"] == 0  # refused before any token request

    key_file = tmp_path / "secret.key"
    key_file.write_text(new_key())
    code, out, err = tether_mcp(monkeypatch, capsys, *tools, "--secret-key-file", str(key_file))
    assert code == 0, err
    assert "whoami  [write]" in out

    code, _, err = tether_mcp(monkeypatch, capsys, *tools, TETHER_SECRET_KEY=new_key())
    assert code == 2
    assert "the secret key does not match: secrets in sqlite:///" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert guarded.state.counts["client_credentials"] == 1  # nothing was asked with it

    code, _, err = tether_mcp(monkeypatch, capsys, *tools, TETHER_SECRET_KEY_FILE=str(key_file))
    assert code == 0, err
    assert guarded.state.counts["client_credentials"] == 1  # the sealed token served again

    plain = ["tools", str(config), "--store", f"sqlite:///{tmp_path / 'plain.db'}"]
    code, _, err = tether_mcp(monkeypatch, capsys, *plain, "--insecure-plaintext-secrets")
    assert code == 0, err


async def expire_kept_tokens(creds: object, url: str) -> None:
    """Mark the kept access token expired (as if its hour had passed) without waiting."""
    kept = StoredTokens(creds, url)  # type: ignore[arg-type]
    tokens = await kept.get_tokens()
    assert tokens is not None and tokens.refresh_token is not None
    tokens.expires_in = 0
    await kept.set_tokens(tokens)


def test_two_processes_refreshing_one_rotating_token_at_once_both_go_on(
    guarded: OAuthServer, tmp_path: Path
) -> None:
    key = new_key()
    url = f"sqlite:///{tmp_path / 'tether.db'}"
    creds = open_credentials(url, Keyring.from_env({"TETHER_SECRET_KEY": key}))

    async def sign_in() -> None:
        await whoami(person(guarded), creds, Browser())
        await expire_kept_tokens(creds, guarded.url)

    asyncio.run(sign_in())
    # A refresh is held until the next one arrives (for at most 2 s): had both processes
    # sent the one refresh token, the second would be refused as used.
    guarded.state.hold_refresh = 2.0
    env = {**os.environ, "TETHER_SECRET_KEY": key}
    clients = [
        subprocess.Popen(
            [sys.executable, str(REFRESH_CLIENT), guarded.url, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    try:
        for client in clients:
            assert client.stdout is not None and client.stdout.readline() == "ready\n"
        for client in clients:  # both go at once, from the same expired record
            assert client.stdin is not None
            client.stdin.write("go\n")
            client.stdin.flush()
        outputs = [client.communicate(timeout=90) for client in clients]
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
    for client, (out, err) in zip(clients, outputs, strict=True):
        assert client.returncode == 0, f"{out}{err}"
        assert out.strip() == "answer: ok after the refresh"
    assert guarded.state.counts["refresh_token"] == 1  # one refreshed, the other took it
    assert guarded.state.counts["invalid_grant"] == 0
    assert guarded.state.counts["authorizations"] == 1
