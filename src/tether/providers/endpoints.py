"""Which model endpoints a server may call: the operator's choice, never a tenant's.

A spec names its model as a string, and some strings carry a URL (`openai-compatible:M@URL`)
or point at a host from the environment (`vllm:`, `ollama:`). `EndpointPolicy` decides, before
anything is created, whether the URL a model would call is one the operator allowed: a prefix
given with `--allow-endpoint`, or the base URL of a provider configured on the server. A host
name that resolves to a loopback, link-local, private or otherwise non-public address is
refused unless the matching prefix names that address itself (`http://127.0.0.1:8000/v1`,
`http://localhost:11434`) or is a provider base URL the operator set in the environment.
It owns no connection and sends nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from tether.errors import ConfigError, UsageError

# host, port -> the addresses it resolves to (a stub in tests: they never leave loopback)
Resolver = Callable[[str, int], Sequence[str]]

DEFAULT_PORTS = {"http": 80, "https": 443}


class EndpointRefused(UsageError):
    """A model would call a URL the operator did not allow."""


def system_resolver(host: str, port: int) -> Sequence[str]:
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise EndpointRefused(f"cannot resolve {host!r}: {exc}") from None
    return [str(info[4][0]) for info in infos]


@dataclass(frozen=True, slots=True)
class _Url:
    scheme: str
    host: str  # lower case, without IPv6 brackets
    port: int
    path: str  # without a trailing slash ("" for the root)

    @staticmethod
    def parse(url: str, *, what: str) -> _Url:
        if any(c.isspace() or ord(c) < 32 or c == "\\" for c in url):
            raise EndpointRefused(f"{what} {url[:200]!r} holds whitespace or a backslash")
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise EndpointRefused(f"{what} {url[:200]!r} must start with http:// or https://")
        if "@" in parts.netloc:
            raise EndpointRefused(f"{what} {url[:200]!r} must not carry a user name or password")
        if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
            raise EndpointRefused(f"{what} {url[:200]!r} must not carry a query or a fragment")
        try:
            port = parts.port
        except ValueError:
            raise EndpointRefused(f"{what} {url[:200]!r} has a bad port") from None
        host = (parts.hostname or "").rstrip(".")
        if not host:
            raise EndpointRefused(f"{what} {url[:200]!r} names no host")
        segments = unquote(parts.path).split("/")
        if any(s in (".", "..") for s in segments):
            raise EndpointRefused(f"{what} {url[:200]!r} holds a . or .. path segment")
        return _Url(scheme, host, port or DEFAULT_PORTS[scheme], parts.path.rstrip("/"))

    def under(self, prefix: _Url) -> bool:
        """Same origin (a prefix host `*` stands for any host), and the path is the prefix's
        or below it, at a segment boundary."""
        if (self.scheme, self.port) != (prefix.scheme, prefix.port):
            return False
        if prefix.host not in ("*", self.host):
            return False
        return self.path == prefix.path or self.path.startswith(prefix.path + "/")

    def names_address(self) -> bool:
        """The host is an address itself (or localhost), not a name DNS could repoint."""
        if self.host == "localhost":
            return True
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True

    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def _not_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])  # an IPv6 zone id is not part of it
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    # is_global is False for loopback, link-local (the cloud metadata address among them),
    # private, shared (100.64/10), reserved, unspecified and documentation ranges.
    return not ip.is_global or ip.is_multicast


@dataclass(frozen=True, slots=True)
class EndpointPolicy:
    """`allowed`: the operator's URL prefixes (`--allow-endpoint`; host `*` for any host);
    `configured`: the base URLs of the providers set up on this server
    (`configured_endpoints`), trusted as they are. `resolve` looks host names up."""

    allowed: tuple[str, ...] = ()
    configured: tuple[str, ...] = ()
    resolve: Resolver = field(default=system_resolver, compare=False)
    # (prefix, trusted): a trusted prefix's addresses are the operator's own choice
    _prefixes: tuple[tuple[_Url, bool], ...] = field(
        default=(), init=False, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        prefixes: list[tuple[_Url, bool]] = []
        for p in self.allowed:
            try:
                url = _Url.parse(p, what="--allow-endpoint")
            except EndpointRefused as exc:
                raise ConfigError(str(exc)) from None
            prefixes.append((url, url.names_address()))
        for p in self.configured:
            try:
                prefixes.append((_Url.parse(p, what="configured endpoint"), True))
            except EndpointRefused as exc:
                raise ConfigError(str(exc)) from None
        object.__setattr__(self, "_prefixes", tuple(prefixes))

    def check(self, url: str) -> None:
        """Return if a model may call `url`; raise `EndpointRefused` naming why not."""
        target = _Url.parse(url, what="endpoint")
        matched = [trusted for prefix, trusted in self._prefixes if target.under(prefix)]
        if not matched:
            raise EndpointRefused(
                f"{target.origin()}{target.path} is not an endpoint this server allows "
                "(the operator allows endpoints with --allow-endpoint)"
            )
        if any(matched):
            return
        for address in self.resolve(target.host, target.port):
            if _not_public(address):
                raise EndpointRefused(
                    f"{target.host} resolves to {address}, which is not a public address; "
                    "an operator who means it allows that address itself with --allow-endpoint"
                )

    def names(self, url: str) -> bool:
        """Whether some allowed prefix covers `url`, looked at without resolving its host: a
        start still `check`s (an untrusted prefix's host must resolve to public addresses)."""
        try:
            target = _Url.parse(url, what="endpoint")
        except EndpointRefused:
            return False
        return any(target.under(prefix) for prefix, _ in self._prefixes)

    def check_model(self, model: object) -> None:
        """`check` the URL a provider model calls (`CodecModel.endpoint_url`); a model of
        another kind (a `python:` model is the operator's own code) calls none of ours."""
        url = getattr(model, "endpoint_url", None)
        if isinstance(url, str):
            self.check(url)

    def addresses(self, host: str, port: int) -> list[str]:
        """Where a connection to `host:port` may go, looked up now: the host as named when
        the operator named it (a trusted prefix of that host and port), else its addresses,
        every one public. Raises `EndpointRefused`."""
        host = host.strip("[]").rstrip(".").lower()
        for prefix, trusted in self._prefixes:
            if trusted and (prefix.host, prefix.port) == (host, port):
                return [host]
        found = list(self.resolve(host, port))
        for address in found:
            if _not_public(address):
                raise EndpointRefused(
                    f"{host} resolves to {address} now, which is not a public address"
                )
        if not found:
            raise EndpointRefused(f"{host} resolves to no address")
        return found


def configured_endpoints(env: Mapping[str, str], defaults: Iterable[str]) -> tuple[str, ...]:
    """The base URLs the server's own provider set-up points at: the public defaults of the
    hosted providers, and any base URL or host set in the environment."""
    urls = list(defaults)
    for variable in (
        "ANTHROPIC_BASE_URL",
        "OPENAI_BASE_URL",
        "OPENROUTER_BASE_URL",
        "VLLM_BASE_URL",
        "OLLAMA_HOST",
    ):
        value = env.get(variable, "").strip()
        if value:
            urls.append(value if "://" in value else "http://" + value)
    return tuple(urls)
