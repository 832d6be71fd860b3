"""OAuth tokens and client registrations of remote MCP servers, kept in the store.

Owns the SDK's `TokenStorage` over `store.credentials`: one record of tokens (with the time
the access token expires, so a later process refreshes it rather than presenting it) and one
of the registered client, keyed by the server's URL (and the configured client id). Running
the flow is `oauth`'s.
"""

from __future__ import annotations

import json
import time

from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from tether.store.credentials import Credentials

_PREFIX = "mcp-oauth"


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

    async def get_tokens(self) -> OAuthToken | None:
        """The kept tokens, `expires_in` counted from now (0 once the access token expired,
        so the flow refreshes it before use)."""
        text = await self._credentials.get(self._tokens_key)
        if text is None:
            return None
        record = json.loads(text)
        token = OAuthToken.model_validate(record["token"])
        expires_at = record.get("expires_at")
        if expires_at is not None:
            token.expires_in = max(0, int(expires_at - time.time()))
        return token

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires_at = None if tokens.expires_in is None else time.time() + tokens.expires_in
        record = {
            "token": tokens.model_dump(mode="json", exclude_none=True),
            "expires_at": expires_at,
        }
        await self._credentials.put(self._tokens_key, json.dumps(record))

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
