"""The `auth` and SSE settings of remote MCP servers as files write them, and where OAuth
tokens are kept: the credentials table (memory, SQLite, PostgreSQL) and the token records."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from tether.store.credentials import (
    MemoryCredentials,
    MemoryRows,
    PostgresRows,
    open_credentials,
)
from tether.store.sealing import Keyring
from tether.tools.mcp import parse_mcp_config
from tether.tools.mcp.auth_config import McpOAuth
from tether.tools.mcp.tokens import StoredTokens

KEYRING = Keyring(b"k" * 32)


def test_auth_and_sse_are_read_with_variables_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_TEST_OAUTH_SECRET", "hunter2")
    servers = parse_mcp_config(
        {
            "mcpServers": {
                "machine": {
                    "url": "https://api.example.test/mcp",
                    "auth": {
                        "type": "oauth",
                        "grant": "client_credentials",
                        "clientId": "svc",
                        "clientSecret": "${TETHER_TEST_OAUTH_SECRET}",
                        "scopes": "read write",
                    },
                },
                "person": {"url": "https://x.test/mcp", "auth": {"callbackPort": 33418}},
                "old": {"transport": "sse", "url": "https://old.test/sse"},
            }
        }
    )
    machine, person, old = servers
    assert machine.auth == McpOAuth(
        grant="client_credentials",
        client_id="svc",
        client_secret="hunter2",
        scopes=("read", "write"),
    )
    assert machine.auth is not None and machine.auth.scope == "read write"
    assert "hunter2" not in repr(machine) and "hunter2" not in machine.describe()
    assert person.auth == McpOAuth(redirect_port=33418)
    assert (old.transport, old.sse, old.auth) == ("sse", True, None)
    assert machine.transport == "http" and not machine.sse


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_credentials_are_kept_replaced_and_deleted(kind: str, tmp_path: Path) -> None:
    credentials = (
        MemoryCredentials()
        if kind == "memory"
        else open_credentials(f"sqlite:///{tmp_path / 't.db'}", KEYRING)
    )
    assert await credentials.get("k") is None
    await credentials.put("k", "one")
    await credentials.put("k", "two")
    assert await credentials.get("k") == "two"
    await credentials.delete("k")
    assert await credentials.get("k") is None


async def test_sqlite_credentials_outlive_the_object_and_share_the_store_file(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'tether.db'}"
    await open_credentials(url, KEYRING).put("k", "kept")
    assert await open_credentials(url, KEYRING).get("k") == "kept"
    assert isinstance(open_credentials("memory:", KEYRING).rows, MemoryRows)
    assert isinstance(open_credentials("postgresql://u:p@h/db", KEYRING).rows, PostgresRows)


async def test_postgres_credentials_round_trip() -> None:
    url = os.environ.get("TETHER_TEST_POSTGRES_URL")
    if not url:
        pytest.skip('TETHER_TEST_POSTGRES_URL is not set: eval "$(bash .ci/postgres.sh)"')
    credentials = open_credentials(url, KEYRING)
    key = f"test-{time.time_ns()}"
    await credentials.put(key, "one")
    await credentials.put(key, "two")
    assert await open_credentials(url, KEYRING).get(key) == "two"
    await credentials.delete(key)
    assert await credentials.get(key) is None


async def test_kept_tokens_count_their_expiry_from_when_they_were_kept() -> None:
    credentials = MemoryCredentials()
    kept = StoredTokens(credentials, "https://x.test/mcp")
    await kept.set_tokens(OAuthToken(access_token="a", expires_in=100, refresh_token="r"))
    later = StoredTokens(credentials, "https://x.test/mcp")
    token = await later.get_tokens()
    assert token is not None and token.refresh_token == "r"
    assert token.expires_in is not None and 95 <= token.expires_in <= 100
    await kept.set_tokens(OAuthToken(access_token="b", expires_in=-5))
    expired = await later.get_tokens()
    assert expired is not None and expired.expires_in == 0
    assert await StoredTokens(credentials, "https://other.test/mcp").get_tokens() is None


async def test_a_configured_client_wins_over_a_kept_registration() -> None:
    credentials = MemoryCredentials()
    registered = OAuthClientInformationFull(client_id="dyn-1", redirect_uris=None)
    await StoredTokens(credentials, "https://x.test/mcp").set_client_info(registered)
    fixed = OAuthClientInformationFull(client_id="mine", redirect_uris=None)
    assert (await StoredTokens(credentials, "https://x.test/mcp").get_client_info()) == registered
    pinned = StoredTokens(credentials, "https://x.test/mcp", client_id="mine", fixed_client=fixed)
    assert await pinned.get_client_info() == fixed
    await pinned.forget()
    assert await StoredTokens(credentials, "https://x.test/mcp").get_client_info() == registered


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_one_storage_refreshes_while_another_waits_then_takes_its_tokens(
    kind: str, tmp_path: Path
) -> None:
    """Two processes' storages of one record (one object each, as two processes have)."""
    url = "memory:" if kind == "memory" else f"sqlite:///{tmp_path / 't.db'}"
    credentials = MemoryCredentials() if kind == "memory" else open_credentials(url, KEYRING)
    first = StoredTokens(credentials, "https://x.test/mcp")
    await first.set_tokens(OAuthToken(access_token="a1", expires_in=0, refresh_token="r1"))
    second = StoredTokens(credentials, "https://x.test/mcp")
    assert await second.get_tokens() is not None and await first.get_tokens() is not None
    assert await first.turn_to_refresh() is None  # its turn
    waiting = asyncio.create_task(second.turn_to_refresh())
    await asyncio.sleep(0.2)  # a few of its polls: it must still be waiting
    assert not waiting.done()
    await first.set_tokens(OAuthToken(access_token="a2", expires_in=3600, refresh_token="r2"))
    taken = await asyncio.wait_for(waiting, 10)
    assert taken is not None and (taken.access_token, taken.refresh_token) == ("a2", "r2")
    assert await second.rotated_elsewhere() is None  # nothing newer than what it took
    await second.set_tokens(OAuthToken(access_token="a3", expires_in=3600, refresh_token="r3"))
    newer = await first.rotated_elsewhere()  # refused a refresh: the one stored meanwhile
    assert newer is not None and newer.refresh_token == "r3"


async def test_a_turn_released_or_expired_passes_to_the_next() -> None:
    credentials = MemoryCredentials()
    first = StoredTokens(credentials, "https://x.test/mcp")
    await first.set_tokens(OAuthToken(access_token="a1", expires_in=0, refresh_token="r1"))
    second = StoredTokens(credentials, "https://x.test/mcp")
    await second.get_tokens()
    assert await first.turn_to_refresh() is None
    await first.release_turn()  # its flow ended before it refreshed
    assert await asyncio.wait_for(second.turn_to_refresh(), 5) is None  # second's turn now
