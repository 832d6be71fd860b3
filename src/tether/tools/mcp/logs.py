"""MCP servers' log messages (`notifications/message`) on the Python logger `tether.mcp`, each
naming its server; and the level asked of servers, read from that logger.

Owns the mapping between MCP's syslog levels and Python's. Receiving messages is the SDK's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp import types as mcp_types
from mcp.client.session import LoggingFnT

server_log = logging.getLogger("tether.mcp")


@dataclass(frozen=True, slots=True)
class McpLogMessage:
    """One log message of a server (`level` is MCP's: debug ... emergency). Never stored."""

    server: str
    level: str
    logger: str | None
    data: Any


LogObserver = Callable[[McpLogMessage], None]

_PYTHON_LEVEL: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}


def wanted_level() -> mcp_types.LoggingLevel:
    """The least severe MCP level `tether.mcp` would show: asked of servers that take a level,
    so nothing is sent only to be dropped."""
    effective = server_log.getEffectiveLevel()
    if effective <= logging.DEBUG:
        return "debug"
    if effective <= logging.INFO:
        return "info"
    if effective <= logging.WARNING:
        return "warning"
    return "error" if effective <= logging.ERROR else "critical"


def log_to_python(server: str, observer: LogObserver | None = None) -> LoggingFnT:
    """A logging callback that passes a server's messages to `tether.mcp` under its name, and
    to `observer`. The record carries `mcp_server`, `mcp_logger` and `mcp_level`."""

    async def log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        data = params.data
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
        where = f"{server}/{params.logger}" if params.logger else server
        extra = {"mcp_server": server, "mcp_logger": params.logger, "mcp_level": params.level}
        level = _PYTHON_LEVEL.get(params.level, logging.INFO)
        server_log.log(level, "MCP server %s: %s", where, text, extra=extra)
        if observer is not None:
            try:
                observer(McpLogMessage(server, params.level, params.logger, data))
            except Exception:  # an observer's bug must not break the connection it watches
                server_log.exception("MCP log observer raised")

    return log
