"""OAuth tokens and client registrations of remote MCP servers, kept in the store.

Owns the SDK's `TokenStorage` over `store.credentials`: one record of tokens (with the time
the access token expires, so a later process refreshes it rather than presenting it) and one
of the registered client, keyed by the server's URL (and the configured client id) among the
credentials' tenant's. And whose turn it is to refresh: a rotating refresh token works once,
so of the processes sharing a record one refreshes and the others take what it stored.
Running the flow is `oauth`'s.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time

from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from tether.store.credentials import Credentials, Kept

_PREFIX = "mcp-oauth"
# How long a process holds the turn to refresh (longer than a token request may take: a
# holder that died frees it after this); how often another one looks whether it ended.
REFRESH_TURN = 60.0
_TURN_POLL = 0.05


class StoredTokens:
    """The SDK's `TokenStorage` for one server. `fixed_client`: a pre-registered client from
    the config, which wins over any registration kept from before."""

    def __init__(
        self,
        credentials: Credentials,
        server_url: str,
        *,
        client_id: str | None = None,
        fixed_client: OAuthClientInformationFull | None = None,
    ) -> None:
        self._credentials = credentials
        key = f"{_PREFIX}:{server_url}" + (f"#client={client_id}" if client_id else "")
        self._tokens_key = f"{key}:tokens"
        self._client_key = f"{key}:client"
        self._fixed_client = fixed_client
        self._version: int | None = None  # of the tokens record this process last read or wrote
        self._holder = secrets.token_hex(8)  # this storage's name on a turn to refresh
        self._holds_turn = False

    async def get_tokens(self) -> OAuthToken | None:
        """The kept tokens, `expires_in` counted from now (0 once the access token expired,
        so the flow refreshes it before use)."""
        kept = await self._credentials.read(self._tokens_key)
        if kept is None:
            return None
        self._version = kept.version
        return _token_of(kept.text)

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires_at = None if tokens.expires_in is None else time.time() + tokens.expires_in
        record = {
            "token": tokens.model_dump(mode="json", exclude_none=True),
            "expires_at": expires_at,
        }
        self._version = await self._credentials.put(self._tokens_key, json.dumps(record))
        self._holds_turn = False  # a write ends the turn

    async def turn_to_refresh(self) -> OAuthToken | None:
        """Before refreshing: the tokens another process stored since this one read its own
        (it refreshed first: take them), else None once this process holds the turn to
        refresh (`release_turn` or the next `set_tokens` ends it). While another process
        holds the turn, waits for it to end (at most `REFRESH_TURN`)."""
        while True:
            kept = await self._credentials.read(self._tokens_key)
            if kept is None:
                return None  # forgotten: the flow signs in afresh
            if (newer := self._newer(kept)) is not None:
                return newer
            if not kept.claimed and await self._credentials.claim(
                self._tokens_key, kept.version, self._holder, REFRESH_TURN
            ):
                self._holds_turn = True
                return None
            await asyncio.sleep(_TURN_POLL)

    async def rotated_elsewhere(self) -> OAuthToken | None:
        """After a refresh was refused: the tokens another process stored meanwhile, if any
        (the refresh token this one sent was already used up by it)."""
        kept = await self._credentials.read(self._tokens_key)
        return None if kept is None else self._newer(kept)

    def _newer(self, kept: Kept) -> OAuthToken | None:
        """The record's tokens if another process wrote it since this one read or wrote it."""
        if kept.version == self._version:
            return None
        self._version = kept.version
        return _token_of(kept.text)

    async def release_turn(self) -> None:
        if self._holds_turn:
            self._holds_turn = False
            await self._credentials.release(self._tokens_key, self._holder)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        if self._fixed_client is not None:
            return self._fixed_client
        text = await self._credentials.get(self._client_key)
        return None if text is None else OAuthClientInformationFull.model_validate_json(text)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._credentials.put(
            self._client_key, client_info.model_dump_json(exclude_none=True)
        )

    async def forget(self) -> None:
        """Drop the kept tokens and registration (`tether mcp logout`)."""
        await self._credentials.delete(self._tokens_key)
        await self._credentials.delete(self._client_key)


def _token_of(text: str) -> OAuthToken:
    record = json.loads(text)
    token = OAuthToken.model_validate(record["token"])
    expires_at = record.get("expires_at")
    if expires_at is not None:
        token.expires_in = max(0, int(expires_at - time.time()))
    return token
