"""`tether mcp` with OAuth servers: a config file whose secret comes from the environment,
tokens kept in the `--store` database, and `tether mcp logout` forgetting them."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from pathlib import Path

import pytest

from tether.cli import main
from tether.store.credentials import open_credentials

try:
    from .mcp_servers.oauth_server import MACHINE_ID, MACHINE_SECRET, OAuthServer
except ImportError:
    from mcp_servers.oauth_server import MACHINE_ID, MACHINE_SECRET, OAuthServer


@pytest.fixture(autouse=True)
def secret_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """The key OAuth tokens kept in a store are sealed with (without one they are refused)."""
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    monkeypatch.setenv("TETHER_SECRET_KEY", key)
    return key


def test_tools_signs_in_with_client_credentials_and_logout_forgets_the_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_TEST_MACHINE_SECRET", MACHINE_SECRET)
    db = tmp_path / "tether.db"
    with OAuthServer() as server:
        auth = {"type": "oauth", "grant": "client_credentials", "clientId": MACHINE_ID,
                "clientSecret": "${TETHER_TEST_MACHINE_SECRET}"}  # fmt: skip
        path = tmp_path / "mcp.json"
        path.write_text(json.dumps({"mcpServers": {"guarded": {"url": server.url, "auth": auth}}}))
        store = ["--store", f"sqlite:///{db}"]
        assert main(["mcp", "tools", str(path), *store]) == 0
        assert "whoami  [write]" in capsys.readouterr().out
        assert main(["mcp", "tools", str(path), *store]) == 0
        assert server.state.counts["client_credentials"] == 1  # the kept token served again
        capsys.readouterr()
        assert main(["mcp", "logout", str(path), *store]) == 0
        assert capsys.readouterr().out == "guarded: OAuth tokens forgotten\n"
        assert main(["mcp", "tools", str(path), *store]) == 0
        assert server.state.counts["client_credentials"] == 2
    kept = asyncio.run(
        open_credentials(f"sqlite:///{db}").get(
            f"mcp-oauth:{server.url}#client={MACHINE_ID}:tokens"
        )
    )
    assert kept is not None and MACHINE_SECRET not in kept
