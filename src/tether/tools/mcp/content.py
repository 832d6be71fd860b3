"""What the model sees of an MCP result or content block: text, never the same thing twice,
and its images (image blocks, embedded image resources, linked images) as neutral `Image`s.

Owns rendering only; calling tools is `connection`'s and `source`'s, reading the resources a
result links to is `links`'.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mcp import types as mcp_types

from tether.errors import UsageError
from tether.messages import IMAGE_TYPES, MAX_IMAGE_BYTES, Image
from tether.tools.base import DEFAULT_OUTPUT_CAP
from tether.tools.run import MAX_RESULT_IMAGES

if TYPE_CHECKING:  # `links` reads through `catalog`, which renders with this module
    from tether.tools.mcp.links import LinkRead


def result_parts(
    result: mcp_types.CallToolResult,
    *,
    output_schema: bool = False,
    links: Mapping[str, LinkRead] | None = None,
    cap: int = DEFAULT_OUTPUT_CAP,
) -> tuple[str, tuple[Image, ...]]:
    """`render_result`'s text, with the images the model can be shown (PNG, JPEG, GIF, WebP,
    within the size cap, at most `MAX_RESULT_IMAGES`) taken out as `Image`s: image blocks and
    embedded image resources. `links`: the reads of the result's resource links
    (`links.read_links`), inlined where each link stands, its text cut at `cap` characters
    and an image read taken out likewise; a link not among them, or not read, is named. Any
    other image, audio or binary resource stays a placeholder in the text."""
    images: list[Image] = []

    def take(data: str, mime_type: str | None) -> str | None:
        """None when the image was taken out, else why it was not."""
        if len(images) >= MAX_RESULT_IMAGES:
            return f"past the {MAX_RESULT_IMAGES} images a result shows"
        image = _image(data, mime_type)
        if isinstance(image, Image):
            images.append(image)
            return None
        return image

    def show(block: mcp_types.ContentBlock) -> str:
        if isinstance(block, mcp_types.ImageContent) and take(block.data, None) is None:
            return ""
        if isinstance(block, mcp_types.EmbeddedResource):
            embedded = block.resource
            if (
                isinstance(embedded, mcp_types.BlobResourceContents)
                and take(embedded.blob, embedded.mime_type) is None
            ):
                return ""
        if isinstance(block, mcp_types.ResourceLink) and links and str(block.uri) in links:
            return _render_link(block, links[str(block.uri)], take, cap)
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


def _render_link(
    link: mcp_types.ResourceLink,
    read: LinkRead,
    take: Callable[[str, str | None], str | None],
    cap: int,
) -> str:
    """A read link as the model sees it: a line naming it, then its text (cut at `cap`, the
    rest left on the server), an image taken out, or a binary part named with why."""
    head = f"[resource {link.uri}{f' ({link.name})' if link.name else ''}"
    if read.problem is not None:
        return f"{head}: {read.problem}]"
    parts: list[str] = []
    for content in read.contents:
        if isinstance(content, mcp_types.TextResourceContents):
            parts.append(content.text)
        elif (why := take(content.blob, content.mime_type)) is None:
            parts.append(f"[{content.mime_type} resource {content.uri}: shown as an image]")
        else:
            parts.append(f"[{_blob_text(content)}, not shown: {why}]")
    text = "\n".join(parts)
    if len(text) > cap:
        text = (
            f"{text[:cap]}\n[resource {link.uri} cut: {len(text):,} characters, first "
            f"{cap:,} shown; the rest stays on the server]"
        )
    return f"{head}]\n{text}"


def _blob_text(content: mcp_types.BlobResourceContents) -> str:
    size = len(content.blob) * 3 // 4 - content.blob[-2:].count("=")  # base64's padding
    return f"{content.mime_type or 'binary'} resource {content.uri}, {size:,} bytes"


def _image(data: str, mime_type: str | None) -> Image | str:
    """An `Image` of base64 `data`, or why it is not one the model can be shown.
    `mime_type`: a resource's declared type, which must be an image type (an image block's
    is checked against its bytes by `Image`)."""
    if mime_type is not None and mime_type not in IMAGE_TYPES:
        return "not an image type a model takes"
    if len(data) * 3 // 4 > MAX_IMAGE_BYTES + 2:  # too big: not worth decoding
        return f"over the image cap of {MAX_IMAGE_BYTES:,} bytes"
    try:
        return Image(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError, UsageError):  # not base64, or not an image we can send
        return "not a PNG, JPEG, GIF or WebP image"
