"""MCP servers as tool sources: configuration, connections, and the tools they yield.

`McpToolSource(load_mcp_config(path))` gives ordinary `Tool`s for an `Agent`. Needs the MCP
SDK: `pip install 'tether[mcp]'`.
"""

from tether.tools.mcp.config import McpServerConfig, load_mcp_config, parse_mcp_config

try:
    from tether.tools.mcp.connection import McpConnection
    from tether.tools.mcp.source import (
        McpProgress,
        McpToolSource,
        ToolFilter,
        effect_of,
        render_result,
    )
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        f"tether.tools.mcp needs the MCP SDK: pip install 'tether[mcp]' ({exc})"
    ) from exc
from tether.tools.mcp.errors import (
    McpEffectUnknown,
    McpError,
    McpProtocolError,
    McpServerUnavailable,
    McpToolFailed,
)

__all__ = [
    "McpConnection",
    "McpEffectUnknown",
    "McpError",
    "McpProgress",
    "McpProtocolError",
    "McpServerConfig",
    "McpServerUnavailable",
    "McpToolFailed",
    "McpToolSource",
    "ToolFilter",
    "effect_of",
    "load_mcp_config",
    "parse_mcp_config",
    "render_result",
]
