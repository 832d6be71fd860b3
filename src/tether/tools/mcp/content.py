"""What the model sees of an MCP result or content block: text, never the same thing twice,
and its images as neutral `Image`s.

Owns rendering only; calling tools is `connection`'s and `source`'s.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any

from mcp import types as mcp_types

from tether.errors import UsageError
from tether.messages import Image
from tether.tools.run import MAX_RESULT_IMAGES


def result_parts(
    result: mcp_types.CallToolResult, *, output_schema: bool = False
) -> tuple[str, tuple[Image, ...]]:
    """`render_result`'s text, with image blocks the model can be shown (PNG, JPEG, GIF,
    WebP, within the size cap, at most `MAX_RESULT_IMAGES`) taken out as `Image`s; any other
    image or audio block stays a placeholder in the text."""
    images: list[Image] = []

    def show(block: mcp_types.ContentBlock) -> str:
        if isinstance(block, mcp_types.ImageContent) and len(images) < MAX_RESULT_IMAGES:
            image = _image(block)
            if image is not None:
                images.append(image)
                return ""
        return render_block(block)

    return _render(result, output_schema, show), tuple(images)


def render_result(result: mcp_types.CallToolResult, *, output_schema: bool = False) -> str:
    """The text the model sees, never the same thing twice. A tool that declares an output
    schema (`output_schema`) and answers structured content is shown that (with any media
    blocks beside it, but not its text blocks, which servers fill with a copy); any other
    result is shown its content blocks, in order, or its structured content when it has no
    blocks at all."""
    return _render(result, output_schema, render_block)


def _render(
    result: mcp_types.CallToolResult,
    output_schema: bool,
    show: Callable[[mcp_types.ContentBlock], str],
) -> str:
    structured = result.structured_content
    blocks = list(result.content)
    if structured is not None and (output_schema or not blocks):
        media = [show(b) for b in blocks if not isinstance(b, mcp_types.TextContent)]
        parts = [_render_structured(structured), *media]
    else:
        parts = [show(block) for block in blocks]
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


def _image(block: mcp_types.ImageContent) -> Image | None:
    try:
        return Image(base64.b64decode(block.data, validate=True))
    except (binascii.Error, ValueError, UsageError):  # not base64, or not an image we can send
        return None
