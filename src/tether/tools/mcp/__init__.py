"""MCP servers as tool sources: configuration, connections, and the tools they yield.

`McpToolSource(load_mcp_config(path))` gives ordinary `Tool`s for an `Agent`. Needs the MCP
SDK: `pip install 'tether[mcp]'`.
"""

from tether.tools.mcp.config import McpServerConfig, load_mcp_config, parse_mcp_config

try:
    from tether.tools.mcp.catalog import (
        McpPrompt,
        McpPromptArgument,
        McpPromptMessage,
        McpPromptResult,
        McpResource,
        McpResourceContent,
        McpResourceTemplate,
    )
    from tether.tools.mcp.connection import McpConnection
    from tether.tools.mcp.content import render_result
    from tether.tools.mcp.logs import McpLogMessage
    from tether.tools.mcp.source import (
        McpProgress,
        McpToolSource,
        ToolFilter,
        effect_of,
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
    McpUnsupported,
)

__all__ = [
    "McpConnection",
    "McpEffectUnknown",
    "McpError",
    "McpLogMessage",
    "McpProgress",
    "McpPrompt",
    "McpPromptArgument",
    "McpPromptMessage",
    "McpPromptResult",
    "McpProtocolError",
    "McpResource",
    "McpResourceContent",
    "McpResourceTemplate",
    "McpServerConfig",
    "McpServerUnavailable",
    "McpToolFailed",
    "McpToolSource",
    "McpUnsupported",
    "ToolFilter",
    "effect_of",
    "load_mcp_config",
    "parse_mcp_config",
    "render_result",
]
