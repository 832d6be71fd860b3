"""The `auth` setting of a remote MCP server: which OAuth 2.1 grant, with what client.

Owns reading and checking it into `McpOAuth`. Running the flow is `oauth`'s; keeping its
tokens is `tokens`'. Needs no MCP SDK.

    "auth": {"type": "oauth", "grant": "authorization_code" | "client_credentials",
             "client_id": "...", "client_secret": "${SECRET}", "scopes": ["a", "b"],
             "redirect_port": 33418, "issuer": "https://auth.example.com",
             "client_metadata_url": "https://example.com/client.json",
             "token_endpoint_auth_method": "client_secret_basic" | "client_secret_post",
             "private_key": "${PEM}", "signing_algorithm": "RS256"}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.errors import ConfigError

Grant = Literal["authorization_code", "client_credentials"]
AuthMethod = Literal["client_secret_basic", "client_secret_post"]
_GRANTS: tuple[Grant, ...] = ("authorization_code", "client_credentials")
_METHODS: tuple[AuthMethod, ...] = ("client_secret_basic", "client_secret_post")
_ALIASES = {
    "clientId": "client_id",
    "clientSecret": "client_secret",
    "redirectPort": "redirect_port",
    "callbackPort": "redirect_port",
    "clientMetadataUrl": "client_metadata_url",
    "tokenEndpointAuthMethod": "token_endpoint_auth_method",
    "scope": "scopes",
    "privateKey": "private_key",
    "signingAlgorithm": "signing_algorithm",
}
_KNOWN = frozenset(
    {
        "type",
        "grant",
        "client_id",
        "client_secret",
        "scopes",
        "redirect_port",
        "issuer",
        "client_metadata_url",
        "token_endpoint_auth_method",
        "private_key",
        "signing_algorithm",
    }
)


@dataclass(frozen=True, slots=True)
class McpOAuth:
    """OAuth 2.1 for one remote server (the MCP authorization spec, through the SDK's client).

    `authorization_code` (the default): PKCE, with the browser sent back to a listener on
    `http://127.0.0.1:PORT/callback` (`redirect_port`; none: the port of an earlier
    registration, else a free one); with no `client_id` the client registers itself
    (dynamic client registration, or `client_metadata_url` where the server takes URL client
    ids). `client_credentials`: a machine's `client_id` and `client_secret` (or a
    `private_key`, PEM, that signs a JWT assertion: `private_key_jwt`), no person.
    `scopes`: none lets the server's challenge and metadata choose. `issuer`: the
    authorization server the client's credentials belong to (token requests go nowhere
    else). The secret is never shown (`repr`, errors) nor logged."""

    grant: Grant = "authorization_code"
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    scopes: tuple[str, ...] = ()
    redirect_port: int | None = None
    issuer: str | None = None
    client_metadata_url: str | None = None
    token_endpoint_auth_method: AuthMethod | None = None
    private_key: str | None = field(default=None, repr=False)
    signing_algorithm: str = "RS256"

    def __post_init__(self) -> None:
        if self.grant not in _GRANTS:
            raise ConfigError(f"'auth.grant' must be one of {', '.join(_GRANTS)}")
        if self.grant == "client_credentials" and not (
            self.client_id and (self.client_secret or self.private_key)
        ):
            raise ConfigError(
                "'auth' with grant client_credentials needs client_id and client_secret "
                "(or private_key)"
            )
        if self.private_key is not None and (
            self.grant != "client_credentials" or self.client_secret is not None
        ):
            raise ConfigError(
                "'auth.private_key' is for grant client_credentials, instead of client_secret"
            )
        if self.client_secret is not None and self.client_id is None:
            raise ConfigError("'auth.client_secret' is given without 'auth.client_id'")
        if self.redirect_port is not None and not 0 < self.redirect_port < 65536:
            raise ConfigError(f"'auth.redirect_port' must be a TCP port, not {self.redirect_port}")
        if self.token_endpoint_auth_method not in (None, *_METHODS):
            raise ConfigError(
                f"'auth.token_endpoint_auth_method' must be one of {', '.join(_METHODS)}"
            )

    @property
    def scope(self) -> str | None:
        """The scopes as OAuth writes them (space-separated), or None."""
        return " ".join(self.scopes) or None

    def secrets(self) -> tuple[str, ...]:
        """What must never appear in text anyone reads."""
        return tuple(s for s in (self.client_secret, self.private_key) if s)


def oauth_from_mapping(value: object, where: str, expand: Callable[[str, str], str]) -> McpOAuth:
    """`auth` as a file writes it; `expand` reads `${VAR}` from the environment (so the secret
    stays out of the file). Unknown keys are errors naming the server and the key."""
    if not isinstance(value, Mapping):
        raise ConfigError(f'{where}: \'auth\' must be an object such as {{"type": "oauth"}}')
    settings = {_ALIASES.get(str(k), str(k)): v for k, v in value.items()}
    unknown = sorted(set(settings) - _KNOWN)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key 'auth.{unknown[0]}' (known: {', '.join(sorted(_KNOWN))})"
        )
    if settings.get("type", "oauth") != "oauth":
        raise ConfigError(f"{where}: 'auth.type' must be \"oauth\", not {settings['type']!r}")
    fields: dict[str, Any] = {}
    for key in (
        "grant",
        "client_id",
        "client_secret",
        "issuer",
        "client_metadata_url",
        "private_key",
        "signing_algorithm",
    ):
        fields[key] = _string(settings, key, where, expand)
    fields["token_endpoint_auth_method"] = _string(
        settings, "token_endpoint_auth_method", where, expand
    )
    scopes = settings.get("scopes")
    if isinstance(scopes, str):
        scopes = expand(scopes, f"{where}: auth.scopes").split()
    if scopes is not None and (
        not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes)
    ):
        raise ConfigError(f"{where}: 'auth.scopes' must be a list of strings")
    fields["scopes"] = tuple(scopes or ())
    port = settings.get("redirect_port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
        raise ConfigError(f"{where}: 'auth.redirect_port' must be a port number")
    fields["redirect_port"] = port
    fields = {k: v for k, v in fields.items() if v is not None}
    try:
        return McpOAuth(**fields)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _string(
    settings: Mapping[str, Any], key: str, where: str, expand: Callable[[str, str], str]
) -> str | None:
    value = settings.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: 'auth.{key}' must be a string")
    return expand(value, f"{where}: auth.{key}")
