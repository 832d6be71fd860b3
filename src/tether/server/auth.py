"""Bearer tokens per tenant: loading them (a JSON or TOML file, or `TETHER_TOKENS`) and
finding a request's tenant. Tokens are kept only as sha256 digests.

File: `{"tenants": {"acme": ["TOKEN", ...], ...}}` (or the same in TOML, `[tenants]`).
Environment: `TETHER_TOKENS="acme=TOKEN,globex=TOKEN"`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path

from tether.errors import ConfigError

TENANT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MIN_TOKEN = 16  # characters: a short token is a guessable one


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Tokens:
    """Token digest -> tenant. Empty means nobody can call the API."""

    def __init__(self, tenants: Mapping[str, list[str]]) -> None:
        self._by_digest: dict[str, str] = {}
        for tenant, tokens in tenants.items():
            if not TENANT_NAME.match(tenant):
                raise ConfigError(f"tenant name {tenant!r} must be 1-64 of A-Z a-z 0-9 _ . -")
            for token in tokens:
                if not isinstance(token, str) or len(token) < MIN_TOKEN:
                    raise ConfigError(
                        f"a token of tenant {tenant} is shorter than {MIN_TOKEN} characters"
                    )
                if self._by_digest.setdefault(_digest(token), tenant) != tenant:
                    raise ConfigError(f"one token is given to two tenants ({tenant} and another)")

    def __len__(self) -> int:
        return len(self._by_digest)

    def tenant(self, authorization: str | None) -> str | None:
        """The tenant of an `Authorization: Bearer TOKEN` header, or None."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self._by_digest.get(_digest(token.strip()))

    @staticmethod
    def load(path: str | None = None, env: Mapping[str, str] | None = None) -> Tokens:
        """From the file at `path` if given, else from `TETHER_TOKENS`."""
        if path is not None:
            return Tokens(_from_file(Path(path)))
        spec = (env if env is not None else os.environ).get("TETHER_TOKENS", "")
        tenants: dict[str, list[str]] = {}
        for item in filter(None, (p.strip() for p in spec.split(","))):
            tenant, sep, token = item.partition("=")
            if not sep:
                raise ConfigError(f"TETHER_TOKENS: {item[:12]!r}… is not TENANT=TOKEN")
            tenants.setdefault(tenant.strip(), []).append(token.strip())
        return Tokens(tenants)


def _from_file(path: Path) -> dict[str, list[str]]:
    try:
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read tokens from {path}: {exc}") from exc
    tenants = data.get("tenants") if isinstance(data, dict) else None
    if not isinstance(tenants, dict) or not all(isinstance(v, list) for v in tenants.values()):
        raise ConfigError(f"{path} must hold tenants: a table of tenant name -> list of tokens")
    return tenants
