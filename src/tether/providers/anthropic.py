"""The Anthropic Messages codec: neutral request -> `/v1/messages` JSON, and the JSON answer or
SSE stream -> `ModelResponse`. `system` is top level; all tool results of a turn travel as one
user message of `tool_result` blocks. Thinking and redacted thinking blocks become `Thinking`
parts (the signature or the redacted data in `data`) and go back as they came, before the
turn's text and tool calls, as the API requires with extended thinking and tools.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import httpx

from tether.errors import ConnectionFailed, UsageError
from tether.messages import (
    Image,
    JSONObject,
    JSONValue,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Usage,
)
from tether.providers import catalog
from tether.providers.base import Delta, DeltaObserver, ModelRequest, ModelResponse
from tether.providers.classify import body_error, classify_anthropic, stream_error
from tether.providers.codec import CodecModel
from tether.providers.common import (
    count,
    finish,
    is_obj,
    items,
    load_json,
    obj,
    text,
    tool_call,
    truncated,
)
from tether.providers.http import Endpoint, SSEDecoder, SSEEvent
from tether.providers.settings_wire import output_cap, tool_choice, unsupported
from tether.settings import ModelSettings, apply_extra

PROVIDER = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_VERSION = "2023-06-01"
INTERLEAVED = "interleaved-thinking-2025-05-14"  # thinking between tool calls
# The API requires max_tokens. Without one in the request, the catalog's limit is used, capped
# where a non-streamed answer could outlast the API's ten-minute guidance.
DEFAULT_MAX_TOKENS = 16_384


class AnthropicModel(CodecModel):
    """A `Model` over the Anthropic Messages API. `stream=True` reads SSE and reports deltas.

    Structured output defaults to the final-answer tool: `output_config.format` is refused
    by models before the 4.5 generation and takes only a subset of JSON schema (no numeric
    or length bounds), so it is used only with `Agent(output_mode="native")`."""

    native_output = False

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        http_client: httpx.AsyncClient | None = None,
        stream: bool = False,
        version: str = DEFAULT_VERSION,
        bearer: bool = False,
        betas: Sequence[str] = (),
    ) -> None:
        # Newer API versions (and gateways) also take the key as `Authorization: Bearer`.
        auth = {"authorization": f"Bearer {api_key}"} if bearer else {"x-api-key": api_key}
        headers = {**auth, "anthropic-version": version}
        if betas:
            headers["anthropic-beta"] = ",".join(betas)
        url = base_url.rstrip("/") + "/v1/messages"
        endpoint = Endpoint(url, headers, classify_anthropic, http_client)
        super().__init__(model, endpoint, stream=stream, provider=PROVIDER)
        # `Reasoning(interleaved=True)`: the beta that lets the model think between calls.
        self._interleaved = {"anthropic-beta": ",".join(dict.fromkeys([*betas, INTERLEAVED]))}

    def request_headers(self, request: ModelRequest) -> Mapping[str, str] | None:
        settings = request.settings
        if settings is None or settings.reasoning is None or not settings.reasoning.interleaved:
            return None
        return self._interleaved

    def encode(self, request: ModelRequest) -> JSONObject:
        return encode_request(self.model, request, stream=self.streams(request))

    def decode(self, body: bytes, seed: str) -> ModelResponse:
        return decode_response(self.model, body)

    def assembler(self, on_delta: DeltaObserver | None, seed: str) -> StreamAssembler:
        return StreamAssembler(self.model, on_delta)


# --- request ------------------------------------------------------------------------------


def encode_request(model: str, request: ModelRequest, *, stream: bool = False) -> JSONObject:
    info = catalog.lookup(model)
    limit = info.max_output_tokens if info and info.max_output_tokens else None
    known = limit or DEFAULT_MAX_TOKENS
    settings = request.settings
    cap = output_cap(request)
    max_tokens = cap or min(known, DEFAULT_MAX_TOKENS)
    body: JSONObject = {"model": model, "max_tokens": max_tokens}
    cache = settings is None or settings.cache
    if request.system:
        body["system"] = (
            [{"type": "text", "text": request.system, "cache_control": EPHEMERAL}]
            if cache
            else request.system
        )
    if request.tools:
        tools: list[JSONValue] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
        if cache and not request.system:  # the system's breakpoint covers the tools too
            tools[-1] = {**tools[-1], "cache_control": EPHEMERAL}  # type: ignore[dict-item]
        body["tools"] = tools
    messages = encode_messages(request.messages)
    if cache:
        _mark_latest(messages)
    body["messages"] = messages
    if request.output is not None:
        body["output_config"] = {
            "format": {"type": "json_schema", "schema": closed(request.output.schema)}
        }
    if stream:
        body["stream"] = True
    if settings is not None:
        _encode_settings(body, settings, request, cap, limit)
    return body


# A cache breakpoint: the prefix up to here is written to the cache (five minutes, renewed
# by each hit) and read back by the next request that starts with it.
EPHEMERAL: JSONObject = {"type": "ephemeral"}


def _mark_latest(messages: list[JSONValue]) -> None:
    """The rolling breakpoint: on the last block of the last message, so the next step reads
    the whole conversation so far from the cache and pays full price only for what is new.
    (The API looks back about 20 blocks from a breakpoint for an earlier one that matches.)
    Thinking blocks cannot carry one; an empty text cannot either."""
    if not messages or not is_obj(messages[-1]):
        return
    last = messages[-1]
    blocks = _blocks(last["content"])
    for i in range(len(blocks) - 1, -1, -1):
        block = blocks[i]
        if is_obj(block) and block.get("type") not in ("thinking", "redacted_thinking"):
            blocks[i] = {**block, "cache_control": EPHEMERAL}
            last["content"] = blocks
            return


def _encode_settings(
    body: JSONObject,
    settings: ModelSettings,
    request: ModelRequest,
    cap: int | None,
    limit: int | None,
) -> None:
    if settings.seed is not None:
        raise unsupported("Anthropic Messages", "seed")
    if settings.temperature is not None:
        if settings.temperature > 1:
            raise UsageError(
                f"Anthropic takes a temperature from 0 to 1, not {settings.temperature:g}"
            )
        body["temperature"] = settings.temperature
    if settings.top_p is not None:
        body["top_p"] = settings.top_p
    if settings.stop:
        body["stop_sequences"] = list(settings.stop)
    choice = _tool_choice(settings, request)
    if choice is not None:
        body["tool_choice"] = choice
    if settings.reasoning is not None:
        _encode_thinking(body, settings, request, cap, limit)
    apply_extra(body, settings.extra)


_TOOL_CHOICE = {"auto": "auto", "required": "any", "none": "none"}


def _tool_choice(settings: ModelSettings, request: ModelRequest) -> JSONObject | None:
    """`{"type": "auto" | "any" | "none" | "tool"}`; parallel calls are turned off inside it
    (`disable_parallel_tool_use`), so with no choice set that is `auto`."""
    choice = tool_choice(settings, request)
    serial = settings.parallel_tool_calls is False and bool(request.tools)
    if choice is None and not serial:
        return None
    name = settings.tool_name
    wire: JSONObject = (
        {"type": "tool", "name": name}
        if name is not None
        else {"type": _TOOL_CHOICE[choice or "auto"]}
    )
    if serial and wire["type"] != "none":
        wire["disable_parallel_tool_use"] = True
    return wire


def _encode_thinking(
    body: JSONObject,
    settings: ModelSettings,
    request: ModelRequest,
    cap: int | None,
    limit: int | None,
) -> None:
    """Extended thinking from the reasoning budget. The API counts thinking in `max_tokens`
    and wants it above the budget: with no cap given, the budget is added to the usual cap,
    within the model's own limit where the catalog knows it."""
    assert settings.reasoning is not None
    budget = settings.reasoning.effective_budget
    if budget < 1024:
        raise UsageError(f"Anthropic's thinking budget is at least 1024 tokens, not {budget}")
    if request.tools and settings.tool_choice not in (None, "auto", "none"):
        raise UsageError(
            "Anthropic extended thinking takes tool_choice auto or none only, not "
            f"{settings.tool_choice!r}: leave it unset with reasoning"
        )
    if settings.temperature is not None or (settings.top_p is not None and settings.top_p < 0.95):
        raise UsageError(
            "Anthropic extended thinking takes no temperature, and top_p only from 0.95: "
            "leave them unset with reasoning"
        )
    if cap is None:
        cap = budget + min(limit or DEFAULT_MAX_TOKENS, DEFAULT_MAX_TOKENS)
        cap = cap if limit is None else min(cap, limit)
        body["max_tokens"] = cap
    if cap <= budget:
        raise UsageError(
            f"the output cap ({cap} tokens) must be above the thinking budget ({budget}): "
            "Anthropic counts thinking in max_tokens"
        )
    body["thinking"] = {"type": "enabled", "budget_tokens": budget}


def closed(schema: JSONValue) -> JSONValue:
    """The schema with `additionalProperties: false` on every object that does not say,
    as Anthropic's structured outputs require."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: JSONObject = {k: closed(v) for k, v in schema.items()}
    if out.get("type") == "object" and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def encode_messages(messages: Sequence[Message]) -> list[JSONValue]:
    out: list[JSONValue] = []
    for message in messages:
        role, content = _encode_message(message)
        if not content:
            continue  # the API refuses empty content; an empty turn carries nothing anyway
        last = out[-1] if out else None
        if is_obj(last) and last.get("role") == role:
            # Results followed by a user's words are one user turn: the API wants roles to
            # alternate and tool_result blocks first.
            last["content"] = _blocks(last["content"]) + _blocks(content)
        else:
            out.append({"role": role, "content": content})
    return out


def _encode_message(message: Message) -> tuple[str, JSONValue]:
    if message.role == "user" and all(isinstance(p, Text) for p in message.parts):
        return "user", message.text
    blocks: list[JSONValue] = []
    for part in message.parts:
        if isinstance(part, Text):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ToolCall):
            blocks.append(
                {"type": "tool_use", "id": part.id, "name": part.name, "input": part.arguments}
            )
        elif isinstance(part, ToolResult):
            block: JSONObject = {
                "type": "tool_result",
                "tool_use_id": part.call_id,
                "content": _result_content(part),
            }
            if part.is_error:
                block["is_error"] = True
            blocks.append(block)
        elif isinstance(part, Image):
            blocks.append(encode_image(part))
        elif isinstance(part, Thinking) and part.provider == PROVIDER:
            blocks.append(encode_thinking(part))
        # Another provider's reasoning is left out: only its author can read it.
    return ("assistant" if message.role == "assistant" else "user"), blocks


def encode_thinking(part: Thinking) -> JSONObject:
    """The block as the API sent it: thinking text with its signature, or redacted data."""
    if "redacted" in part.data:
        return {"type": "redacted_thinking", "data": part.data["redacted"]}
    return {"type": "thinking", "thinking": part.text, "signature": part.data.get("signature", "")}


def decode_thinking(block: JSONObject) -> Thinking | None:
    kind = block.get("type")
    if kind == "thinking":
        signature = text(block, "signature") or ""
        return Thinking(text(block, "thinking") or "", PROVIDER, {"signature": signature})
    if kind == "redacted_thinking":
        return Thinking("", PROVIDER, {"redacted": text(block, "data") or ""})
    return None


def _result_content(result: ToolResult) -> JSONValue:
    """A result's text, or with images its text block and image blocks."""
    if not result.images:
        return result.content
    text: list[JSONValue] = [{"type": "text", "text": result.content}] if result.content else []
    return text + [encode_image(i) for i in result.images]


def encode_image(image: Image) -> JSONObject:
    if image.url is not None:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    source: JSONObject = {"type": "base64", "media_type": image.media_type, "data": image.b64}
    return {"type": "image", "source": source}


def _blocks(content: JSONValue) -> list[JSONValue]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content) if isinstance(content, list) else []


# --- response -----------------------------------------------------------------------------


def decode_usage(usage: JSONObject) -> Usage:
    """Anthropic's `input_tokens` excludes cached tokens; tether's includes them."""
    cache_read = count(usage, "cache_read_input_tokens")
    cache_write = count(usage, "cache_creation_input_tokens")
    return Usage(
        input_tokens=count(usage, "input_tokens") + cache_read + cache_write,
        output_tokens=count(usage, "output_tokens"),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


def decode_response(model: str, body: bytes) -> ModelResponse:
    data = load_json(body)
    if not is_obj(data):
        raise ConnectionFailed("the model host answered 200 with a body that is not JSON")
    if data.get("type") == "error":
        raise body_error(data, body.decode("utf-8", "replace"))
    stop = text(data, "stop_reason")
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: list[Thinking] = []
    blocks = [b for b in items(data, "content") if is_obj(b)]
    for block in blocks:
        thought = decode_thinking(block)
        if thought is not None:
            thinking.append(thought)
        elif block.get("type") == "text":
            texts.append(text(block, "text") or "")
        elif block.get("type") == "tool_use":
            calls.append(
                tool_call(text(block, "id") or "", text(block, "name") or "", block.get("input"))
            )
    cut = stop == "max_tokens" and bool(blocks) and blocks[-1].get("type") == "tool_use"
    if cut:
        calls[-1] = truncated(calls[-1], json.dumps(blocks[-1].get("input")))
    return finish(
        model=model,
        text_parts=texts,
        calls=calls,
        raw_stop=stop,
        usage=decode_usage(obj(data, "usage")),
        body=body,
        incomplete=cut,
        thinking=thinking,
    )


class _Block:
    __slots__ = ("id", "kind", "name", "parts", "signature", "start")

    def __init__(self, start: JSONObject) -> None:
        self.start = start  # the content_block_start's block: a redacted one is whole there
        self.kind = text(start, "type") or ""
        self.id = text(start, "id") or ""
        self.name = text(start, "name") or ""
        self.parts: list[str] = []
        self.signature: list[str] = []

    def thinking(self) -> Thinking | None:
        if self.kind == "thinking":
            whole = {"type": "thinking", "thinking": "".join(self.parts)}
            return decode_thinking({**whole, "signature": "".join(self.signature)})
        return decode_thinking(self.start)


# The events whose data the answer is built from (`message` is SSE's default name, which a
# proxy may write out); `error` raises.
_READ_EVENTS = frozenset(
    {
        "message",
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "error",
    }
)


class StreamAssembler:
    """Folds SSE events into one assistant message. Blocks are keyed by `index`, so fragments
    of different blocks may interleave. Deltas go to the observer as they arrive."""

    def __init__(self, model: str, on_delta: DeltaObserver | None = None) -> None:
        self.model = model
        self._on_delta = on_delta
        self._sse = SSEDecoder()
        self._blocks: dict[int, _Block] = {}
        self._usage: JSONObject = {}
        self._stop: str | None = None
        self._done = False

    def feed(self, chunk: bytes) -> None:
        for event in self._sse.feed(chunk):
            self._event(event)

    def finish(self, body: bytes) -> ModelResponse:
        for event in self._sse.close():
            self._event(event)
        if not self._done:
            raise ConnectionFailed("the stream ended before message_stop")
        ordered = [self._blocks[i] for i in sorted(self._blocks)]
        thinking = [t for t in (b.thinking() for b in ordered) if t is not None]
        texts = [("".join(b.parts)) for b in ordered if b.kind == "text"]
        calls = [tool_call(b.id, b.name, "".join(b.parts)) for b in ordered if b.kind == "tool_use"]
        cut = self._stop == "max_tokens" and bool(ordered) and ordered[-1].kind == "tool_use"
        if cut:
            calls[-1] = truncated(calls[-1], "".join(ordered[-1].parts))
        return finish(
            model=self.model,
            text_parts=texts,
            calls=calls,
            raw_stop=self._stop,
            usage=decode_usage(self._usage),
            body=body,
            incomplete=cut,
            thinking=thinking,
        )

    def _event(self, event: SSEEvent) -> None:
        # As the official SDK does, a named event the answer does not need (`ping`, or one
        # added later) is skipped by its name, its data unread: a cut keep-alive is harmless.
        if event.event is None or event.event in _READ_EVENTS:
            self._handle(event.data)

    def _handle(self, data: str) -> None:
        payload = load_json(data)
        kind = text(payload, "type")
        if kind == "content_block_delta":
            self._delta(count(payload, "index"), obj(payload, "delta"))
        elif kind == "content_block_start":
            self._blocks[count(payload, "index")] = _Block(obj(payload, "content_block"))
        elif kind == "message_start":
            self._usage.update(obj(obj(payload, "message"), "usage"))
        elif kind == "message_delta":
            self._stop = text(obj(payload, "delta"), "stop_reason") or self._stop
            self._usage.update(obj(payload, "usage"))
        elif kind == "message_stop":
            self._done = True
        elif kind == "error" or not is_obj(payload):
            raise stream_error(payload, data)

    def _delta(self, index: int, delta: JSONObject) -> None:
        block = self._blocks.get(index)
        if block is None:
            return
        kind = delta.get("type")
        if kind == "signature_delta":
            block.signature.append(text(delta, "signature") or "")
            return
        key = _DELTA_KEYS.get(kind)  # type: ignore[arg-type]
        piece = None if key is None else text(delta, key)
        if piece is None:
            return
        block.parts.append(piece)
        if self._on_delta is not None and piece:
            if kind == "text_delta":
                self._on_delta(Delta("text", piece))
            elif kind == "thinking_delta":
                self._on_delta(Delta("reasoning", piece))
            else:
                self._on_delta(Delta("tool_input", piece, block.id))


# Where each delta kind keeps its piece.
_DELTA_KEYS = {
    "text_delta": "text",
    "input_json_delta": "partial_json",
    "thinking_delta": "thinking",
}
