"""Bearer tokens and quotas per tenant: loading them (a JSON or TOML file, or
`TETHER_TOKENS`) and finding a request's tenant. Tokens are kept only as sha256 digests.

File: `{"tenants": {"acme": ["TOKEN", ...], ...}}`, or with quotas
`{"tenants": {"acme": {"tokens": ["TOKEN"], "max_running": 50, "starts_per_minute": 600,
"max_output_tokens": 32000, ...}}}` (every field of `Quota`; the same in TOML,
`[tenants.acme]`).
Environment: `TETHER_TOKENS="acme=TOKEN,globex=TOKEN"` (no quotas).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from tether import documents
from tether.errors import ConfigError, UsageError
from tether.runtime.base import check_tenant
from tether.runtime.quotas import Quota

MIN_TOKEN = 16  # characters: a short token is a guessable one
QUOTA_KEYS = tuple(f.name for f in dataclasses.fields(Quota))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Tokens:
    """Token digest -> tenant, and each tenant's quota. Empty means nobody can call the
    API."""

    def __init__(
        self, tenants: Mapping[str, list[str]], quotas: Mapping[str, Quota] | None = None
    ) -> None:
        self._by_digest: dict[str, str] = {}
        self.quotas: dict[str, Quota] = dict(quotas or {})
        for tenant, tokens in tenants.items():
            try:
                check_tenant(tenant)
            except UsageError as exc:
                raise ConfigError(str(exc)) from None
            for token in tokens:
                if not isinstance(token, str) or len(token) < MIN_TOKEN:
                    raise ConfigError(
                        f"a token of tenant {tenant} is shorter than {MIN_TOKEN} characters"
                    )
                if self._by_digest.setdefault(_digest(token), tenant) != tenant:
                    raise ConfigError(f"one token is given to two tenants ({tenant} and another)")

    def __len__(self) -> int:
        return len(self._by_digest)

    def quota(self, tenant: str) -> Quota:
        return self.quotas.get(tenant) or Quota()

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
            return _from_file(Path(path))
        spec = (env if env is not None else os.environ).get("TETHER_TOKENS", "")
        tenants: dict[str, list[str]] = {}
        for item in filter(None, (p.strip() for p in spec.split(","))):
            tenant, sep, token = item.partition("=")
            if not sep:
                raise ConfigError(f"TETHER_TOKENS: {item[:12]!r}… is not TENANT=TOKEN")
            tenants.setdefault(tenant.strip(), []).append(token.strip())
        return Tokens(tenants)


def _from_file(path: Path) -> Tokens:
    try:
        data = documents.read(path, "toml" if path.suffix == ".toml" else "json")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read tokens from {path}: {exc}") from exc
    tenants = data.get("tenants") if isinstance(data, dict) else None
    if not isinstance(tenants, dict):
        raise ConfigError(
            f"{path} must hold tenants: a table of tenant name -> a list of tokens, or "
            '{"tokens": [...], "max_running": N, "starts_per_minute": N, "max_output_tokens": N}'
        )
    tokens: dict[str, list[str]] = {}
    quotas: dict[str, Quota] = {}
    for tenant, entry in tenants.items():
        tokens[tenant], quotas[tenant] = _tenant(path, str(tenant), entry)
    return Tokens(tokens, quotas)


def _tenant(path: Path, tenant: str, entry: object) -> tuple[list[str], Quota]:
    """One tenant's entry: a list of tokens, or a table of tokens and quotas."""
    if isinstance(entry, list):
        return entry, Quota()
    if not isinstance(entry, dict) or not isinstance(entry.get("tokens"), list):
        raise ConfigError(f"{path}: tenant {tenant[:64]!r} needs a list of tokens")
    unknown = sorted(set(entry) - {"tokens", *QUOTA_KEYS})
    if unknown:
        raise ConfigError(
            f"{path}: tenant {tenant[:64]!r} has an unknown key {unknown[0][:40]!r} "
            f"(known: tokens, {', '.join(QUOTA_KEYS)})"
        )
    try:
        quota = Quota(**{key: entry[key] for key in QUOTA_KEYS if key in entry})
    except UsageError as exc:
        raise ConfigError(f"{path}: tenant {tenant[:64]!r}: {exc}") from None
    return entry["tokens"], quota
