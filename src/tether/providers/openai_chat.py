"""The OpenAI Chat Completions codec, which also serves OpenRouter, vLLM, llama.cpp and any
OpenAI-compatible base URL. Arguments travel as JSON strings; each tool result is its own
`tool` message, in call order; streamed call fragments are keyed by `index` and interleave.
Reasoning comes in message fields (`reasoning_content`: DeepSeek, vLLM; `reasoning` and
`reasoning_details`: OpenRouter), kept as received in one `Thinking` part and set again on
the assistant message for the same provider (`chat_reasoning.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import httpx

from tether.errors import ConnectionFailed
from tether.messages import Image, JSONObject, JSONValue, Message, Text, ToolCall, Usage
from tether.providers.base import Delta, DeltaObserver, ModelRequest, ModelResponse
from tether.providers.chat_reasoning import ReasoningAssembler, decode_thinking, encode_thinking
from tether.providers.classify import body_error, classify_openai, stream_error
from tether.providers.codec import CodecModel
from tether.providers.common import (
    count,
    dump_arguments,
    error_text,
    finish,
    is_obj,
    items,
    load_json,
    obj,
    synthesize_call_id,
    text,
    tool_call,
    truncated,
)
from tether.providers.http import Endpoint, SSEDecoder
from tether.providers.settings_wire import cache_key, output_cap, tool_choice
from tether.settings import ModelSettings, apply_extra

DEFAULT_BASE_URL = "https://api.openai.com/v1"
MaxTokensField = Literal["max_completion_tokens", "max_tokens"]
# How `ModelSettings.reasoning` is sent: OpenAI's `reasoning_effort`, or OpenRouter's
# `reasoning` object (`{"effort": …}`, or `{"max_tokens": …}` for a budget alone).
ReasoningStyle = Literal["effort", "openrouter"]


class OpenAIChatModel(CodecModel):
    """A `Model` over `/chat/completions`. `provider` only names it (`openrouter:…`); servers
    that predate `max_completion_tokens` get `max_tokens_field="max_tokens"`; OpenRouter
    gets `reasoning_style="openrouter"`."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = DEFAULT_BASE_URL,
        http_client: httpx.AsyncClient | None = None,
        stream: bool = False,
        provider: str = "openai",
        max_tokens_field: MaxTokensField = "max_completion_tokens",
        extra_headers: Mapping[str, str] | None = None,
        reasoning_style: ReasoningStyle = "effort",
    ) -> None:
        self.max_tokens_field: MaxTokensField = max_tokens_field
        self.reasoning_style: ReasoningStyle = reasoning_style
        headers = dict(extra_headers or {})
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        url = base_url.rstrip("/") + "/chat/completions"
        endpoint = Endpoint(url, headers, classify_openai, http_client)
        super().__init__(model, endpoint, stream=stream, provider=provider)

    seeded = True  # compatible servers may send calls without ids

    def encode(self, request: ModelRequest) -> JSONObject:
        return encode_request(
            self.model,
            request,
            stream=self.streams(request),
            max_tokens_field=self.max_tokens_field,
            reasoning_style=self.reasoning_style,
            provider=self.provider,
        )

    def decode(self, body: bytes, seed: str) -> ModelResponse:
        return decode_response(self.model, body, seed, self.provider)

    def assembler(self, on_delta: DeltaObserver | None, seed: str) -> StreamAssembler:
        return StreamAssembler(self.model, on_delta, seed, self.provider)


# --- request ------------------------------------------------------------------------------


def encode_request(
    model: str,
    request: ModelRequest,
    *,
    stream: bool = False,
    max_tokens_field: MaxTokensField = "max_completion_tokens",
    reasoning_style: ReasoningStyle = "effort",
    provider: str = "openai",
) -> JSONObject:
    messages: list[JSONValue] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend(encode_messages(request.messages, provider))
    body: JSONObject = {"model": model, "messages": messages}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in request.tools
        ]
    if request.output is not None:
        # strict mode would need every property required and no open objects; tether
        # sends the type's own schema, so strict is off and the loop validates the answer.
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": request.output.name,
                "schema": request.output.schema,
                "strict": False,
            },
        }
    settings = request.settings
    cap = output_cap(request)
    if cap is not None:
        body[max_tokens_field] = cap
    if stream:
        body["stream"] = True
        # Without this the usage chunk never comes.
        body["stream_options"] = {"include_usage": True}
    key = cache_key(request) if provider == "openai" else None  # OpenAI's own parameter
    if key is not None:
        body["prompt_cache_key"] = key
    if settings is not None:
        _encode_settings(body, settings, request, reasoning_style)
    return body


def _encode_settings(
    body: JSONObject, settings: ModelSettings, request: ModelRequest, style: ReasoningStyle
) -> None:
    for field in ("temperature", "top_p", "seed"):
        value = getattr(settings, field)
        if value is not None:
            body[field] = value
    if settings.stop:
        body["stop"] = list(settings.stop)
    choice = tool_choice(settings, request)
    if choice is not None:
        name = settings.tool_name
        body["tool_choice"] = (
            choice if name is None else {"type": "function", "function": {"name": name}}
        )
    if settings.parallel_tool_calls is not None and request.tools:
        body["parallel_tool_calls"] = settings.parallel_tool_calls
    reasoning = settings.reasoning
    if reasoning is not None:
        if style == "openrouter":  # its own object: an effort, or else a token budget
            body["reasoning"] = (
                {"effort": reasoning.effort}
                if reasoning.effort is not None
                else {"max_tokens": reasoning.effective_budget}
            )
        else:
            body["reasoning_effort"] = reasoning.effective_effort
    apply_extra(body, settings.extra)


def encode_messages(messages: Sequence[Message], provider: str = "openai") -> list[JSONValue]:
    out: list[JSONValue] = []
    for message in messages:
        if message.role == "user":
            out.append({"role": "user", "content": _user_content(message)})
        elif message.role == "assistant":
            calls = message.tool_calls
            said = message.text
            if not calls and not said:
                continue  # content null with no calls is refused
            wire: JSONObject = {"role": "assistant", "content": said or None}
            wire.update(encode_thinking(message, provider))
            if calls:
                wire["tool_calls"] = [_encode_call(c) for c in calls]
            out.append(wire)
        else:
            for result in message.tool_results:
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": result.call_id,
                        "content": error_text(result.content, result.is_error),
                    }
                )
            out.extend(_result_images(message))
            if any(isinstance(p, Text) and p.text for p in message.parts):
                out.append({"role": "user", "content": message.text})
    return out


def _result_images(message: Message) -> list[JSONValue]:
    """Chat's tool messages take only text: a result's images go in one user message right
    after the turn's tool messages, each set named by its call."""
    parts: list[JSONValue] = []
    for result in message.tool_results:
        if result.images:
            parts.append({"type": "text", "text": f"Images from tool call {result.call_id}:"})
            parts.extend(_user_part(i) for i in result.images)
    return [{"role": "user", "content": parts}] if parts else []


def _user_content(message: Message) -> JSONValue:
    """A user's text as a string; with images, the parts in order (`image_url` takes a URL
    or a `data:` URL of the bytes)."""
    if all(isinstance(p, Text) for p in message.parts):
        return message.text
    return [_user_part(p) for p in message.parts if isinstance(p, Text | Image)]


def _user_part(part: Text | Image) -> JSONValue:
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    return {"type": "image_url", "image_url": {"url": part.data_url}}


def _encode_call(call: ToolCall) -> JSONValue:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": dump_arguments(call)},
    }


# --- response -----------------------------------------------------------------------------


def decode_usage(usage: JSONObject) -> Usage:
    """`prompt_tokens` already includes cached tokens. `cache_write_tokens` is OpenRouter's."""
    prompt = obj(usage, "prompt_tokens_details")
    return Usage(
        input_tokens=count(usage, "prompt_tokens"),
        output_tokens=count(usage, "completion_tokens"),
        cache_read_tokens=count(prompt, "cached_tokens"),
        cache_write_tokens=count(prompt, "cache_write_tokens"),
        reasoning_tokens=count(obj(usage, "completion_tokens_details"), "reasoning_tokens"),
    )


def provider_cost(usage: JSONObject) -> float | None:
    """OpenRouter states what it charged; that beats any catalog price."""
    cost = usage.get("cost")
    return float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None


def _content_text(content: JSONValue) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some compatible servers send content parts
        return "".join(text(p, "text") or "" for p in content)
    return ""


def _is_error(payload: JSONObject) -> bool:
    """Nested `{"error": …}` (OpenAI, OpenRouter, vLLM ≥0.10.1) or vLLM's legacy flat shape."""
    return payload.get("error") is not None or payload.get("object") == "error"


def decode_response(
    model: str, body: bytes, seed: str = "", provider: str = "openai"
) -> ModelResponse:
    data = load_json(body)
    if not is_obj(data):
        raise ConnectionFailed("the model host answered 200 with a body that is not JSON")
    if _is_error(data) and not items(data, "choices"):
        raise body_error(data, body.decode("utf-8", "replace"))
    choice = next((c for c in items(data, "choices") if is_obj(c)), {})
    message = obj(choice, "message")
    answer = _content_text(message.get("content")) or text(message, "refusal") or ""
    calls = []
    for index, wire in enumerate(w for w in items(message, "tool_calls") if is_obj(w)):
        function = obj(wire, "function")
        name = text(function, "name") or ""
        arguments = function.get("arguments")
        call_id = text(wire, "id") or synthesize_call_id(seed, index, name, arguments)
        calls.append(tool_call(call_id, name, arguments))
    stop = text(choice, "finish_reason")
    cut = stop == "length" and bool(calls)
    if cut:
        raw = text(obj(items(message, "tool_calls")[-1], "function"), "arguments") or ""
        calls[-1] = truncated(calls[-1], raw)
    usage = obj(data, "usage")
    thinking = decode_thinking(message, provider)
    return finish(
        model=model,
        text_parts=[answer],
        calls=calls,
        raw_stop=stop,
        usage=decode_usage(usage),
        body=body,
        incomplete=cut,
        cost_usd=provider_cost(usage),
        thinking=() if thinking is None else (thinking,),
    )


class _Call:
    __slots__ = ("id", "name", "parts")

    def __init__(self, call_id: str, name: str) -> None:
        self.id = call_id
        self.name = name
        self.parts: list[str] = []


class StreamAssembler:
    """Folds `chat.completion.chunk` events into one assistant message. Call fragments are
    keyed by `index`; a fragment with a new id at a used index starts a new call (some
    compatible servers send every call at index 0)."""

    def __init__(
        self,
        model: str,
        on_delta: DeltaObserver | None = None,
        seed: str = "",
        provider: str = "openai",
    ) -> None:
        self.model = model
        self._on_delta = on_delta
        self._seed = seed
        self._reasoning = ReasoningAssembler(provider, on_delta)
        self._sse = SSEDecoder()
        self._texts: list[str] = []
        self._calls: list[_Call] = []
        self._slot: dict[int, _Call] = {}
        self._usage: JSONObject = {}
        self._stop: str | None = None
        self._done = False

    def feed(self, chunk: bytes) -> None:
        for event in self._sse.feed(chunk):
            self._handle(event.data)

    def finish(self, body: bytes) -> ModelResponse:
        for event in self._sse.close():
            self._handle(event.data)
        if not self._done and self._stop is None:
            raise ConnectionFailed("the stream ended before a finish_reason or [DONE]")
        calls = [
            tool_call(
                c.id or synthesize_call_id(self._seed, i, c.name, "".join(c.parts)),
                c.name,
                "".join(c.parts),
            )
            for i, c in enumerate(self._calls)
        ]
        cut = self._stop == "length" and bool(calls)
        if cut:
            calls[-1] = truncated(calls[-1], "".join(self._calls[-1].parts))
        return finish(
            model=self.model,
            text_parts=self._texts,
            calls=calls,
            raw_stop=self._stop,
            usage=decode_usage(self._usage),
            body=body,
            incomplete=cut,
            cost_usd=provider_cost(self._usage),
            thinking=self._reasoning.finish(),
        )

    def _handle(self, data: str) -> None:
        if data.strip() == "[DONE]":
            self._done = True
            return
        payload = load_json(data)
        if not is_obj(payload) or _is_error(payload):
            raise stream_error(payload, data)
        usage = payload.get("usage")
        if is_obj(usage):
            self._usage = usage
        for choice in items(payload, "choices"):
            if count(choice, "index") != 0:
                continue  # n > 1 is never requested
            delta = obj(choice, "delta")
            self._reasoning.feed(delta)
            piece = text(delta, "content")
            if piece:
                self._texts.append(piece)
                if self._on_delta is not None:
                    self._on_delta(Delta("text", piece))
            for fragment in items(delta, "tool_calls"):
                self._fragment(fragment)
            self._stop = text(choice, "finish_reason") or self._stop

    def _fragment(self, fragment: JSONValue) -> None:
        index = count(fragment, "index")
        call_id = text(fragment, "id") or ""
        function = obj(fragment, "function")
        call = self._slot.get(index)
        if call is None or (call_id and call.id and call_id != call.id):
            call = _Call(call_id, "")
            self._slot[index] = call
            self._calls.append(call)
        call.id = call.id or call_id
        call.name = call.name or text(function, "name") or ""
        piece = function.get("arguments")
        if isinstance(piece, dict):  # a few servers send the whole object at once
            piece = dump_arguments(ToolCall(call.id, call.name, piece))
        if isinstance(piece, str) and piece:
            call.parts.append(piece)
            if self._on_delta is not None:
                self._on_delta(Delta("tool_input", piece, call.id or None))
