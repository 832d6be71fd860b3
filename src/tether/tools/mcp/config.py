"""MCP server configuration: the `mcpServers` mapping of JSON and TOML files, and Python.

Owns reading and checking configuration into `McpServerConfig` values, with errors that name
the server and the key. It starts nothing and needs no MCP SDK.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tether import documents
from tether.errors import ConfigError
from tether.tools.base import DEFAULT_TIMEOUT
from tether.tools.mcp.auth_config import McpOAuth, oauth_from_mapping

Transport = Literal["stdio", "http", "sse"]
DEFAULT_STARTUP_TIMEOUT = 30.0
# "auto" probes 2026-07-28 `server/discover` and falls back to the 2025-11-25 handshake.
PROTOCOLS = ("auto", "legacy", "2026-07-28")

_TRANSPORT_TYPES: dict[str, Transport] = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamableHttp": "http",
    "sse": "sse",  # the legacy HTTP+SSE transport (protocol 2024-11-05)
}
# Keys other clients write into the same files; they mean nothing here and are not errors.
_FOREIGN_KEYS = frozenset(
    {
        "autoApprove",
        "alwaysAllow",
        "description",
        "transportType",
    }
)
_KEY_ALIASES = {
    "needs_approval": "needsApproval",
    "startup_timeout": "startupTimeout",
    "startup_timeout_sec": "startupTimeout",
    "tool_timeout_sec": "timeout",
    "http_headers": "headers",
    "enabledTools": "enabled_tools",
    "disabledTools": "disabled_tools",
    "useInstructions": "use_instructions",
}
_KNOWN_KEYS = frozenset(
    {
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "type",
        "needsApproval",
        "timeout",
        "startupTimeout",
        "protocol",
        "disabled",
        "enabled",
        "enabled_tools",
        "disabled_tools",
        "use_instructions",
        "elicitation",
        "sampling",
        "roots",
        "auth",
        "transport",
        "tenants",
    }
)
# `${VAR}`, or `${VAR:-default}` (the default when VAR is unset or empty, as in a shell);
# `$${` is a literal `${`, and any other `${` an error (a typo, never passed on silently).
_ENV_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{")


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One MCP server: a `command` run over stdio, or a streamable HTTP `url` (the legacy
    HTTP+SSE transport when `sse`).

    `needs_approval` is True (every tool of the server), False, or the set of tool names
    (as the server names them) that need an approval. `timeout` bounds each call;
    `startup_timeout` bounds starting the server and the MCP handshake. `enabled_tools`
    (None: all) and `disabled_tools` name the server's tools that are offered and hidden;
    a name the server does not have is an error when its tools are listed. `use_instructions`:
    the server's `instructions` are added to the system prompt (`McpToolSource.system_prompt`).
    `elicitation` and `sampling` (on by default) declare those capabilities: the server may ask
    the user for input during a call (the session waits in `waiting_input`), and have the
    session's own model answer a prompt (within the session's budget). `roots`: the
    directories (paths or `file://` URIs) the server is told it may work in; none: the
    capability is not declared. `auth`: OAuth 2.1 for a remote server (`McpOAuth`); its
    tokens are kept in the store, never in the event log. `tenants`: the tenants of `tether
    serve --mcp` whose sessions may name the server (None: every tenant; `tether run` and
    `tether chat` do not read it)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    needs_approval: bool | frozenset[str] = False
    timeout: float | None = DEFAULT_TIMEOUT
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    protocol: str = "auto"
    enabled_tools: frozenset[str] | None = None
    disabled_tools: frozenset[str] = frozenset()
    use_instructions: bool = False
    elicitation: bool = True
    sampling: bool = True
    roots: tuple[str, ...] = ()
    sse: bool = False
    auth: McpOAuth | None = None
    tenants: frozenset[str] | None = None

    def __post_init__(self) -> None:
        where = f"MCP server {self.name!r}"
        if not self.name:
            raise ConfigError("an MCP server needs a non-empty name")
        if (self.command is None) == (self.url is None):
            raise ConfigError(
                f"{where}: give exactly one of 'command' (stdio) or 'url' (streamable HTTP)"
            )
        if self.command is not None and not self.command.strip():
            raise ConfigError(f"{where}: 'command' is empty")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ConfigError(
                f"{where}: 'url' must start with http:// or https://, not {self.url!r}"
            )
        if self.timeout is not None and not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise ConfigError(
                f"{where}: 'timeout' must be a positive number of seconds, not {self.timeout}"
            )
        if not (self.startup_timeout > 0 and math.isfinite(self.startup_timeout)):
            raise ConfigError(
                f"{where}: 'startupTimeout' must be a positive number of seconds, not {self.startup_timeout}"
            )
        if self.url is None and (self.sse or self.auth is not None):
            raise ConfigError(f"{where}: 'auth' and the sse transport need a 'url'")
        if self.protocol not in PROTOCOLS:
            raise ConfigError(
                f"{where}: 'protocol' must be one of {', '.join(PROTOCOLS)}, not {self.protocol!r}"
            )

    @property
    def transport(self) -> Transport:
        if self.command is not None:
            return "stdio"
        return "sse" if self.sse else "http"

    def offers(self, tool_name: str) -> bool:
        """Is the tool offered, by `enabled_tools` and `disabled_tools`?"""
        if tool_name in self.disabled_tools:
            return False
        return self.enabled_tools is None or tool_name in self.enabled_tools

    def approval_for(self, tool_name: str) -> bool:
        if isinstance(self.needs_approval, bool):
            return self.needs_approval
        return tool_name in self.needs_approval

    def describe(self) -> str:
        """Where the server is, for error messages (never the env or headers: they hold secrets)."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return str(self.url)


def load_mcp_config(path: str | os.PathLike[str]) -> list[McpServerConfig]:
    """Read the `mcpServers` (or `mcp_servers`) mapping of a JSON or TOML file."""
    file = Path(path)
    try:
        data = documents.read(file, "toml" if file.suffix.lower() == ".toml" else "json")
    except OSError as exc:
        raise ConfigError(f"cannot read MCP config {file}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"MCP config {file}: {exc}") from exc
    return parse_mcp_config(data, source=str(file))


def parse_mcp_config(data: object, *, source: str = "MCP config") -> list[McpServerConfig]:
    """Servers from a mapping holding `mcpServers` (the JSON convention) or `mcp_servers`
    (the TOML one). Servers marked `disabled: true` (or `enabled: false`) are left out."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the top level must be an object holding 'mcpServers'")
    servers = data.get("mcpServers", data.get("mcp_servers"))
    if servers is None:
        raise ConfigError(f"{source}: no 'mcpServers' (or 'mcp_servers') mapping")
    if not isinstance(servers, Mapping):
        raise ConfigError(f"{source}: 'mcpServers' must map server names to settings")
    configs = []
    for name, entry in servers.items():
        config = server_from_mapping(str(name), entry, source=source)
        if config is not None:
            configs.append(config)
    return configs


def server_from_mapping(
    name: str, entry: object, *, source: str = "MCP config"
) -> McpServerConfig | None:
    """One server's settings (`command`/`args`/`env`/`cwd` or `url`/`headers`, plus
    `needsApproval`, `timeout`, `startupTimeout`, `protocol`, `enabled_tools`,
    `disabled_tools`, `use_instructions`, `elicitation`, `sampling`, `roots`, `auth`, `tenants`; `type` or
    `transport` stdio, http or sse); None when it is disabled. `${VAR}` and `${VAR:-default}` in
    any string of `command`, `args`, `env`, `cwd`, `url`, `headers` and `auth` are read from
    the environment."""
    where = f"{source}: MCP server {name!r}"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: settings must be an object")
    settings = {_KEY_ALIASES.get(str(k), str(k)): v for k, v in entry.items()}
    unknown = sorted(set(settings) - _KNOWN_KEYS - _FOREIGN_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KNOWN_KEYS))})"
        )
    if settings.get("disabled") is True or settings.get("enabled") is False:
        return None
    kind = settings.get("type", settings.get("transport"))
    if kind is not None and kind not in _TRANSPORT_TYPES:
        raise ConfigError(f"{where}: type {kind!r} is not supported (stdio, http or sse)")
    startup = _seconds(
        settings.get("startupTimeout", DEFAULT_STARTUP_TIMEOUT), "startupTimeout", where
    )
    fields: dict[str, Any] = {
        "command": _optional_str(settings, "command", where),
        "args": tuple(
            _expand(arg, f"{where}: args[{i}]")
            for i, arg in enumerate(_str_list(settings.get("args", []), "args", where))
        ),
        "env": _str_map(settings.get("env", {}), "env", where),
        "cwd": _optional_str(settings, "cwd", where),
        "url": _optional_str(settings, "url", where),
        "headers": _str_map(settings.get("headers", {}), "headers", where),
        "enabled_tools": _tool_names(settings, "enabled_tools", where),
        "disabled_tools": _tool_names(settings, "disabled_tools", where) or frozenset(),
        "tenants": _tool_names(settings, "tenants", where),
        "needs_approval": _approval(settings.get("needsApproval", False), where),
        "timeout": _seconds(
            settings.get("timeout", DEFAULT_TIMEOUT), "timeout", where, allow_none=True
        ),
        "startup_timeout": startup or DEFAULT_STARTUP_TIMEOUT,
        "protocol": str(settings.get("protocol", "auto")),
        "use_instructions": _flag(settings, "use_instructions", where),
        "elicitation": _flag(settings, "elicitation", where, default=True),
        "sampling": _flag(settings, "sampling", where, default=True),
        "roots": tuple(
            _expand(root, f"{where}: roots[{i}]")
            for i, root in enumerate(_str_list(settings.get("roots", []), "roots", where))
        ),
        "sse": kind is not None and _TRANSPORT_TYPES[kind] == "sse",
        "auth": None
        if settings.get("auth") is None
        else oauth_from_mapping(settings["auth"], where, _expand),
    }
    try:
        return McpServerConfig(name=name, **fields)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _optional_str(settings: Mapping[str, Any], key: str, where: str) -> str | None:
    value = settings.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key!r} must be a string")
    return _expand(value, f"{where}: {key}")


def _tool_names(settings: Mapping[str, Any], key: str, where: str) -> frozenset[str] | None:
    value = settings.get(key)
    if value is None:
        return None
    return frozenset(_str_list(value, key, where))


def _str_list(value: object, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {key!r} must be a list of strings")
    return list(value)


def _str_map(value: object, key: str, where: str) -> dict[str, str]:
    """A string mapping; `${VAR}` in a value is read from the environment, so secrets stay
    out of the file."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: {key!r} must map names to strings")
    result = {}
    for k, v in value.items():
        if not isinstance(v, str | int | float) or isinstance(v, bool):
            raise ConfigError(f"{where}: {key}.{k} must be a string")
        result[str(k)] = _expand(str(v), f"{where}: {key}.{k}")
    return result


def _expand(text: str, where: str) -> str:
    def value(match: re.Match[str]) -> str:
        var, default = match.group(1), match.group(2)
        if match.group() == "$${":
            return "${"
        if var is None:
            raise ConfigError(
                f"{where}: the ${{ at character {match.start() + 1} starts no ${{VAR}} or "
                f"${{VAR:-default}} (write $${{ for a literal ${{)"
            )
        if default is not None:
            return os.environ.get(var) or default
        if var not in os.environ:
            raise ConfigError(
                f"{where} refers to ${{{var}}}, which is not set in the environment "
                f"(write ${{{var}:-default}} to give a default)"
            )
        return os.environ[var]

    return _ENV_REF.sub(value, text)


def _flag(settings: Mapping[str, Any], key: str, where: str, *, default: bool = False) -> bool:
    value = settings.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: {key!r} must be true or false, not {value!r}")
    return value


def _approval(value: object, where: str) -> bool | frozenset[str]:
    if isinstance(value, bool):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise ConfigError(f"{where}: 'needsApproval' must be true, false or a list of tool names")


def _seconds(value: object, key: str, where: str, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{where}: {key!r} must be a positive number of seconds, not {value!r}")
    return float(value)


def servers_by_name(configs: Iterable[McpServerConfig]) -> dict[str, McpServerConfig]:
    by_name: dict[str, McpServerConfig] = {}
    for config in configs:
        if config.name in by_name:
            raise ConfigError(f"two MCP servers are named {config.name!r}")
        by_name[config.name] = config
    return by_name
