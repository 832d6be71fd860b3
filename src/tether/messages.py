"""The neutral content model: messages made of text, tool calls and tool results.

Owns the shapes every other piece speaks and their canonical JSON form. It knows no vendor:
provider codecs translate to and from these types at their own boundary.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from tether.errors import UsageError

JSONValue: TypeAlias = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]
JSONObject: TypeAlias = dict[str, JSONValue]

Role = Literal["user", "assistant", "tool"]


def canonical_json(value: object) -> str:
    """One value, one byte form: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# The string encoder `canonical_json` uses (ensure_ascii=False), in C where CPython has it.
_string: Callable[[str], str] = json.encoder.encode_basestring
_LITERALS = {True: "true", False: "false", None: "null"}


def _canonical_value(value: Any) -> str:
    """`canonical_json(value)` for the shapes tool arguments have, without the encoder's
    setup per call; anything else (a non-string key, a NaN) goes to `canonical_json`."""
    kind = type(value)
    if kind is str:
        return _string(value)
    if kind is dict:
        for k in value:  # a loop, not `all(...)`: no generator for the usual one or two keys
            if type(k) is not str:
                return canonical_json(value)
        body = ",".join([f"{_string(k)}:{_canonical_value(value[k])}" for k in sorted(value)])
        return f"{{{body}}}"
    if kind is list or kind is tuple:
        return f"[{','.join([_canonical_value(v) for v in value])}]"
    if kind is int or (kind is float and math.isfinite(value)):
        return repr(value)
    if kind is bool or value is None:
        return _LITERALS[value]
    return canonical_json(value)


@dataclass(frozen=True, slots=True)
class Text:
    text: str

    def to_json(self) -> JSONObject:
        return {"type": "text", "text": self.text}


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the model asked for. `raw_arguments` is set only when the model's arguments
    could not be read as a JSON object; such a call is answered `invalid_input`, never run."""

    id: str
    name: str
    arguments: JSONObject = field(default_factory=dict)
    raw_arguments: str | None = None

    def to_json(self) -> JSONObject:
        out: JSONObject = {
            "type": "tool_call",
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
        }
        if self.raw_arguments is not None:
            out["raw_arguments"] = self.raw_arguments
        return out


ImageType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
IMAGE_TYPES: tuple[ImageType, ...] = ("image/png", "image/jpeg", "image/gif", "image/webp")
# The largest image tether sends, in bytes before base64: Anthropic's own cap per image.
MAX_IMAGE_BYTES = 5 * 1024 * 1024
# What the context accounting counts an image as: about what the providers charge for a
# mid-sized image, and never its base64 length.
IMAGE_TOKENS = 1_600


def _sniff(data: bytes) -> ImageType | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(frozen=True, slots=True)
class Image:
    """An image in a user message: its bytes (`data`) or a `url`, never both. The media type
    of bytes is read from their first bytes when not given, and must agree with them; a URL's
    is optional. Canonical JSON holds bytes as base64, computed once here."""

    data: bytes | None = None
    url: str | None = None
    media_type: ImageType | None = None
    b64: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise UsageError("an Image takes exactly one of data (bytes) or url")
        if self.media_type is not None and self.media_type not in IMAGE_TYPES:
            raise UsageError(
                f"image media type {self.media_type!r} is not one of {', '.join(IMAGE_TYPES)}"
            )
        if self.url is not None:
            if not self.url.startswith(("https://", "http://")):
                raise UsageError(f"an image url must be http(s), not {self.url[:40]!r}")
            return
        data = self.data
        if not isinstance(data, bytes):
            raise UsageError(f"image data must be bytes, not {type(data).__name__}")
        if len(data) > MAX_IMAGE_BYTES:
            raise UsageError(
                f"an image of {len(data):,} bytes is over the cap of {MAX_IMAGE_BYTES:,}"
            )
        sniffed = _sniff(data)
        if sniffed is None:
            raise UsageError("image data is not a PNG, JPEG, GIF or WebP image")
        if self.media_type is not None and self.media_type != sniffed:
            raise UsageError(f"image data is {sniffed}, not {self.media_type}")
        object.__setattr__(self, "media_type", sniffed)
        object.__setattr__(self, "b64", base64.b64encode(data).decode("ascii"))

    @property
    def data_url(self) -> str:
        """The image as one URL: its own, or a `data:` URL of its bytes."""
        return self.url if self.url is not None else f"data:{self.media_type};base64,{self.b64}"

    def to_json(self) -> JSONObject:
        out: JSONObject = {"type": "image"}
        if self.data is not None:
            out["data"] = self.b64
        if self.media_type is not None:
            out["media_type"] = self.media_type
        if self.url is not None:
            out["url"] = self.url
        return out

    @staticmethod
    def from_json(data: Mapping[str, object]) -> Image:
        media = data.get("media_type")
        kind: Any = None if media is None else str(media)
        if "data" in data:
            try:
                raw = base64.b64decode(str(data["data"]), validate=True)
            except binascii.Error as exc:
                raise ValueError(f"image data is not base64: {exc}") from None
            try:
                return Image(raw, media_type=kind)
            except UsageError as exc:
                raise ValueError(str(exc)) from None
        try:
            return Image(url=str(data["url"]), media_type=kind)
        except UsageError as exc:
            raise ValueError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A call's result: its text in `content`, and any `images` it returned after it. The
    JSON form holds `images` only when there are some, so results without them keep the
    form they always had."""

    call_id: str
    content: str
    is_error: bool = False
    images: tuple[Image, ...] = ()

    def to_json(self) -> JSONObject:
        out: JSONObject = {
            "type": "tool_result",
            "call_id": self.call_id,
            "content": self.content,
            "is_error": self.is_error,
        }
        if self.images:
            out["images"] = [i.to_json() for i in self.images]
        return out


@dataclass(frozen=True, slots=True)
class Thinking:
    """The model's reasoning, in an assistant message before its text and calls: `text` (may
    be empty, or a summary) and `data`, the opaque payload of the `provider` (the codec's
    name: `anthropic`, `openai-responses`, `openrouter`, `ollama`...) that produced it: a
    signature, an encrypted item. Sent back as it came to that provider, and dropped for
    any other (the `model.requested` event counts the dropped). `data` is kept with sorted
    keys, as the log holds it, so a resumed session sends the very bytes a live one does."""

    text: str
    provider: str
    data: JSONObject = field(default_factory=dict)

    def to_json(self) -> JSONObject:
        return {"type": "thinking", "text": self.text, "provider": self.provider, "data": self.data}


def foreign_thinking(messages: Iterable[Message], provider: str) -> int:
    """How many thinking blocks in `messages` another provider than `provider` wrote."""
    return sum(
        1
        for m in messages
        if m.role == "assistant"
        for p in m.parts
        if isinstance(p, Thinking) and p.provider != provider
    )


def sorted_copy(value: JSONValue) -> JSONValue:
    """A JSON value with every object's keys in sorted order: the form the log gives back."""
    if isinstance(value, dict):
        return {k: sorted_copy(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_copy(v) for v in value]
    return value


Part: TypeAlias = Text | ToolCall | ToolResult | Image | Thinking


@dataclass(frozen=True, slots=True)
class Message:
    """One message. An assistant turn is ONE message holding its text and all its calls; all
    results of one turn go back as ONE `tool` message, in the model's call order."""

    role: Role
    parts: tuple[Part, ...]

    # List comprehensions, not generators: the loop and the fold read these a few times a
    # step, and a generator's frame cost more than the filter itself.
    @property
    def text(self) -> str:
        return "".join([p.text for p in self.parts if isinstance(p, Text)])

    @property
    def images(self) -> tuple[Image, ...]:
        return tuple([p for p in self.parts if isinstance(p, Image)])

    @property
    def thinking(self) -> tuple[Thinking, ...]:
        return tuple([p for p in self.parts if isinstance(p, Thinking)])

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple([p for p in self.parts if isinstance(p, ToolCall)])

    @property
    def tool_results(self) -> tuple[ToolResult, ...]:
        return tuple([p for p in self.parts if isinstance(p, ToolResult)])

    def to_json(self) -> JSONObject:
        return {"role": self.role, "parts": [p.to_json() for p in self.parts]}

    def canonical(self) -> str:
        """`canonical_json(self.to_json())`, written directly: the fold measures and hashes
        every message with it, and building the dicts to sort them cost more than the rest
        of a step's fold. Keys are written in sorted order; a test holds the two equal."""
        parts = ",".join([_canonical_part(p) for p in self.parts])
        return f'{{"parts":[{parts}],"role":"{self.role}"}}'

    @staticmethod
    def from_json(data: Mapping[str, object]) -> Message:
        if not isinstance(data, Mapping):
            raise ValueError(f"a message must be an object, not {type(data).__name__}")
        role = data.get("role")
        if role not in ("user", "assistant", "tool"):
            raise ValueError(f"message role must be user, assistant or tool, not {role!r}")
        raw_parts = data.get("parts")
        if not isinstance(raw_parts, list):
            raise ValueError("message parts must be a list")
        return Message(role, tuple(part_from_json(p) for p in raw_parts))


def _canonical_part(part: Part) -> str:
    if isinstance(part, ToolCall):
        raw = part.raw_arguments
        tail = "" if raw is None else f',"raw_arguments":{_string(raw)}'
        return (
            f'{{"arguments":{_canonical_value(part.arguments)},"id":{_string(part.id)},'
            f'"name":{_string(part.name)}{tail},"type":"tool_call"}}'
        )
    if isinstance(part, ToolResult) and not part.images:
        error = "true" if part.is_error else "false"
        return (
            f'{{"call_id":{_string(part.call_id)},"content":{_string(part.content)},'
            f'"is_error":{error},"type":"tool_result"}}'
        )
    if isinstance(part, Text):
        return f'{{"text":{_string(part.text)},"type":"text"}}'
    return canonical_json(part.to_json())  # images, thinking: the long way, the same bytes


def part_from_json(data: object) -> Part:
    if not isinstance(data, dict):
        raise ValueError(f"a message part must be an object, not {type(data).__name__}")
    kind = data.get("type")
    if kind == "text":
        return Text(str(data["text"]))
    if kind == "tool_call":
        arguments = data.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ValueError("tool call arguments must be an object")
        raw = data.get("raw_arguments")
        return ToolCall(
            str(data["id"]), str(data["name"]), arguments, None if raw is None else str(raw)
        )
    if kind == "tool_result":
        raw_images = data.get("images", [])
        if not isinstance(raw_images, list) or not all(isinstance(i, dict) for i in raw_images):
            raise ValueError("tool result images must be a list of objects")
        images = tuple(Image.from_json(i) for i in raw_images)
        return ToolResult(
            str(data["call_id"]),
            str(data["content"]),
            bool(data.get("is_error", False)),
            images,
        )
    if kind == "image":
        return Image.from_json(data)
    if kind == "thinking":
        payload = data.get("data", {})
        if not isinstance(payload, dict):
            raise ValueError("thinking data must be an object")
        return Thinking(str(data.get("text", "")), str(data["provider"]), payload)
    raise ValueError(f"unknown message part type {kind!r}")


def user(text: str, images: Iterable[Image] = ()) -> Message:
    """A user's message: its text, then its images (if any), in that order."""
    return Message("user", (Text(text), *images))


def user_parts(parts: Iterable[str | Image]) -> Message:
    """A user's message from text and images in the order given (`Agent.run`'s list form)."""
    out: list[Part] = []
    for part in parts:
        if isinstance(part, str):
            out.append(Text(part))
        elif isinstance(part, Image):
            out.append(part)
        else:
            raise UsageError(f"a task part must be a str or an Image, not {type(part).__name__}")
    return Message("user", tuple(out))


def assistant(text: str = "", calls: Iterable[ToolCall] = ()) -> Message:
    parts: list[Part] = [Text(text)] if text else []
    parts.extend(calls)
    return Message("assistant", tuple(parts))


def tool_results(results: Sequence[ToolResult]) -> Message:
    return Message("tool", tuple(results))


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts normalised across providers. Cache and reasoning counts are parts of
    input and output respectively, reported for cost and insight."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_json(self) -> JSONObject:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }

    @staticmethod
    def from_json(data: Mapping[str, object]) -> Usage:
        def count(key: str) -> int:
            value = data.get(key, 0)
            return value if isinstance(value, int) else 0

        return Usage(
            count("input_tokens"),
            count("output_tokens"),
            count("cache_read_tokens"),
            count("cache_write_tokens"),
            count("reasoning_tokens"),
        )
