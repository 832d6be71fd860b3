"""What the model sees of an MCP result or content block: text, never the same thing twice.

Owns rendering only; calling tools is `connection`'s and `source`'s.
"""

from __future__ import annotations

import json
from typing import Any

from mcp import types as mcp_types


def render_result(result: mcp_types.CallToolResult, *, output_schema: bool = False) -> str:
    """The text the model sees, never the same thing twice. A tool that declares an output
    schema (`output_schema`) and answers structured content is shown that (with any media
    blocks beside it, but not its text blocks, which servers fill with a copy); any other
    result is shown its content blocks, in order, or its structured content when it has no
    blocks at all."""
    structured = result.structured_content
    blocks = list(result.content)
    if structured is not None and (output_schema or not blocks):
        media = [render_block(b) for b in blocks if not isinstance(b, mcp_types.TextContent)]
        parts = [_render_structured(structured), *media]
    else:
        parts = [render_block(block) for block in blocks]
    return "\n".join(p for p in parts if p)


def _render_structured(value: dict[str, Any]) -> str:
    # SDKs wrap a return value that is not an object as {"result": value}: show the value.
    if list(value) == ["result"]:
        inner = value["result"]
        return inner if isinstance(inner, str) else json.dumps(inner, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def render_block(block: mcp_types.ContentBlock) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
        return f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4:,} bytes]"
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource {block.uri}{f' ({block.name})' if block.name else ''}]"
    resource = block.resource
    if isinstance(resource, mcp_types.TextResourceContents):
        return resource.text
    return f"[resource {resource.uri}, {resource.mime_type or 'binary'}]"
