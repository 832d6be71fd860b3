"""The errors of MCP tool sources. Each names the server; a tool's `fn` raises them and the
tool runner turns them into `error` results the model reads.

    TetherError
    └── McpError                 an MCP server could not do what was asked
        ├── McpServerUnavailable it would not start, or its connection was lost (restarted next call)
        │   └── McpEffectUnknown a `write` call was running when its connection was lost (not repeated)
        ├── McpProtocolError     a JSON-RPC error or a malformed answer
        ├── McpUnsupported       the server does not offer what was asked (resources, prompts)
        └── McpToolFailed        the tool reported an error itself (`isError: true`)
"""

from __future__ import annotations

from tether.errors import EffectUnknown, TetherError


class McpError(TetherError):
    """An MCP server could not do what was asked."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(message)
        self.server = server


class McpServerUnavailable(McpError):
    """The server would not start, or its connection was lost."""


class McpEffectUnknown(McpServerUnavailable, EffectUnknown):
    """A `write` call was running when its connection or session was lost: it may or may not
    have happened, so it was not sent again."""


class McpProtocolError(McpError):
    """The server answered with a JSON-RPC error, or with something that is not MCP."""


class McpUnsupported(McpError):
    """The server did not declare the capability a request needs (`resources`, `prompts`)."""


class McpToolFailed(McpError):
    """The tool ran and reported an error (`isError: true`); the message is the server's."""
