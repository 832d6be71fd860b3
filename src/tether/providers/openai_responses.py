"""The OpenAI Responses codec (`/responses`, stateless: `store: false`). Calls and results are
input items (`function_call`, `function_call_output`) beside the messages; the system prompt
is `instructions`. A `reasoning` output item is kept whole as a `Thinking` part and sent back
as it came, before its turn's other items: with `store: false` only its `encrypted_content`
(asked for with `include` when `ModelSettings.reasoning` is set) carries it to the next step.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from tether.errors import ConnectionFailed
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
    sorted_copy,
)
from tether.providers.base import Delta, DeltaObserver, ModelRequest, ModelResponse
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
    text,
    tool_call,
    truncated,
)
from tether.providers.http import Endpoint, SSEDecoder
from tether.providers.settings_wire import cache_key, output_cap, tool_choice, unsupported
from tether.settings import ModelSettings, apply_extra

DEFAULT_BASE_URL = "https://api.openai.com/v1"
PROVIDER = "openai-responses"
# With `store: false` a reasoning item goes back only with its encrypted content, which the
# API returns only when asked.
ENCRYPTED_REASONING = "reasoning.encrypted_content"


class OpenAIResponsesModel(CodecModel):
    """A `Model` over the Responses API; `stream=True` reads its typed SSE events."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = DEFAULT_BASE_URL,
        http_client: httpx.AsyncClient | None = None,
        stream: bool = False,
    ) -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        url = base_url.rstrip("/") + "/responses"
        endpoint = Endpoint(url, headers, classify_openai, http_client)
        super().__init__(model, endpoint, stream=stream, provider=PROVIDER)

    def encode(self, request: ModelRequest) -> JSONObject:
        return encode_request(
            self.model, request, stream=self.streams(request), provider=self.provider
        )

    def decode(self, body: bytes, seed: str) -> ModelResponse:
        return decode_response(self.model, body, self.provider)

    def assembler(self, on_delta: DeltaObserver | None, seed: str) -> StreamAssembler:
        return StreamAssembler(self.model, on_delta, self.provider)


# --- request ------------------------------------------------------------------------------


def encode_request(
    model: str, request: ModelRequest, *, stream: bool = False, provider: str = PROVIDER
) -> JSONObject:
    body: JSONObject = {"model": model}
    if request.system:
        body["instructions"] = request.system
    extra = request.settings.extra if request.settings is not None else None
    stored = bool(extra and extra.get("store"))
    body["input"] = encode_input(request.messages, provider, stored=stored)
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                # strict mode demands every property be required; tether's schemas are not.
                "strict": False,
            }
            for t in request.tools
        ]
    if request.output is not None:  # not strict, as for the tools: the loop validates
        body["text"] = {
            "format": {
                "type": "json_schema",
                "name": request.output.name,
                "schema": request.output.schema,
                "strict": False,
            }
        }
    settings = request.settings
    cap = output_cap(request)
    if cap is not None:
        body["max_output_tokens"] = cap
    body["store"] = False
    key = cache_key(request)
    if key is not None:
        body["prompt_cache_key"] = key
    if stream:
        body["stream"] = True
    if settings is not None:
        _encode_settings(body, settings, request)
    return body


def _encode_settings(body: JSONObject, settings: ModelSettings, request: ModelRequest) -> None:
    if settings.stop:
        raise unsupported("OpenAI Responses", "stop", "use the openai: (Chat) codec for it")
    if settings.seed is not None:
        raise unsupported("OpenAI Responses", "seed", "use the openai: (Chat) codec for it")
    for field in ("temperature", "top_p"):
        value = getattr(settings, field)
        if value is not None:
            body[field] = value
    choice = tool_choice(settings, request)
    if choice is not None:
        name = settings.tool_name
        body["tool_choice"] = choice if name is None else {"type": "function", "name": name}
    if settings.parallel_tool_calls is not None and request.tools:
        body["parallel_tool_calls"] = settings.parallel_tool_calls
    if settings.reasoning is not None:
        # No `summary`: asking for one is refused for an unverified organization; it can
        # be asked with extra={"reasoning": {"summary": "auto"}}.
        body["reasoning"] = {"effort": settings.reasoning.effective_effort}
        body["include"] = [ENCRYPTED_REASONING]
    apply_extra(body, settings.extra)


def encode_input(
    messages: Sequence[Message], provider: str = PROVIDER, *, stored: bool = False
) -> list[JSONValue]:
    out: list[JSONValue] = []
    for message in messages:
        if message.role == "user":
            out.append({"role": "user", "content": _user_content(message)})
        elif message.role == "assistant":
            out.extend(_reasoning_items(message, provider, stored))
            if message.text:
                out.append({"role": "assistant", "content": message.text})
            out.extend(_encode_call(c) for c in message.tool_calls)
        else:
            for result in message.tool_results:
                out.append(
                    {
                        "type": "function_call_output",
                        "call_id": result.call_id,
                        "output": _output(result),
                    }
                )
            if any(isinstance(p, Text) and p.text for p in message.parts):
                out.append({"role": "user", "content": message.text})
    return out


def _reasoning_items(message: Message, provider: str, stored: bool) -> list[JSONValue]:
    """The turn's reasoning items as they came. Another provider's thinking is left out (the
    loop counts it); so is an item without its encrypted content when nothing is stored,
    since the API could only look it up by id, and refuses (the answer came without
    `include`). A turn with neither text nor calls (cut by the output limit) sends none:
    the API refuses a reasoning item without the item that followed it."""
    if not message.text and not message.tool_calls:
        return []
    return [
        t.data
        for t in message.thinking
        if t.provider == provider and (stored or t.data.get("encrypted_content"))
    ]


def _output(result: ToolResult) -> JSONValue:
    """A result's text, or with images its `input_text` and `input_image` items."""
    text = error_text(result.content, result.is_error)
    if not result.images:
        return text
    items: list[JSONValue] = [{"type": "input_text", "text": text}] if text else []
    return items + [_user_part(i) for i in result.images]


def _user_content(message: Message) -> JSONValue:
    """A user's text as a string; with images, `input_text` and `input_image` parts in
    order (`image_url` takes a URL or a `data:` URL of the bytes)."""
    if all(isinstance(p, Text) for p in message.parts):
        return message.text
    return [_user_part(p) for p in message.parts if isinstance(p, Text | Image)]


def _user_part(part: Text | Image) -> JSONValue:
    if isinstance(part, Text):
        return {"type": "input_text", "text": part.text}
    return {"type": "input_image", "image_url": part.data_url, "detail": "auto"}


def _encode_call(call: ToolCall) -> JSONValue:
    return {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": dump_arguments(call),
    }


# --- response -----------------------------------------------------------------------------


def decode_usage(usage: JSONObject) -> Usage:
    details = obj(usage, "input_tokens_details")
    return Usage(
        input_tokens=count(usage, "input_tokens"),
        output_tokens=count(usage, "output_tokens"),
        cache_read_tokens=count(details, "cached_tokens"),
        cache_write_tokens=count(details, "cache_write_tokens"),
        reasoning_tokens=count(obj(usage, "output_tokens_details"), "reasoning_tokens"),
    )


def decode_response(model: str, body: bytes, provider: str = PROVIDER) -> ModelResponse:
    data = load_json(body)
    if not is_obj(data):
        raise ConnectionFailed("the model host answered 200 with a body that is not JSON")
    failure = _failure(data)
    if failure is not None:
        raise body_error(failure, body.decode("utf-8", "replace"))
    return _decode(model, data, items(data, "output"), body, provider)


def _failure(response: JSONObject) -> JSONValue | None:
    """What a failed response (or a bare error body) says of its error; None when it did not
    fail."""
    error = response.get("error")
    if response.get("status") == "failed" or is_obj(error):
        return {"error": error} if is_obj(error) else response
    return None


def _decode(
    model: str, response: JSONObject, output: list[JSONValue], body: bytes, provider: str
) -> ModelResponse:
    failure = _failure(response)
    if failure is not None:
        raise stream_error(failure)
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: list[Thinking] = []
    wire_items = [i for i in output if is_obj(i)]
    for item in wire_items:
        if item.get("type") == "reasoning":
            thinking.append(_thinking(item, provider))
        elif item.get("type") == "message":
            for part in items(item, "content"):
                texts.append(text(part, "text") or text(part, "refusal") or "")
        elif item.get("type") == "function_call":
            call_id = text(item, "call_id") or text(item, "id") or ""
            calls.append(tool_call(call_id, text(item, "name") or "", item.get("arguments")))
    status = text(response, "status")
    reason = text(obj(response, "incomplete_details"), "reason")
    raw_stop = reason if status == "incomplete" and reason else status
    cut = (
        reason == "max_output_tokens"
        and bool(wire_items)
        and wire_items[-1].get("type") == "function_call"
    )
    if cut:
        calls[-1] = truncated(calls[-1], text(wire_items[-1], "arguments") or "")
    return finish(
        model=model,
        text_parts=texts,
        calls=calls,
        raw_stop=raw_stop,
        usage=decode_usage(obj(response, "usage")),
        body=body,
        incomplete=cut,
        thinking=thinking,
    )


def _thinking(item: JSONObject, provider: str) -> Thinking:
    """A reasoning item whole (id, summary, encrypted content), keys sorted as the log keeps
    them; its text is the summary's, or the raw reasoning text some servers send."""
    parts = items(item, "summary") or items(item, "content")
    said = "\n\n".join(t for p in parts if (t := text(p, "text")))
    return Thinking(said, provider, {k: sorted_copy(item[k]) for k in sorted(item)})


# The summary as it streams; the raw reasoning text (`reasoning_text`) from servers that
# send it (gpt-oss on vLLM). The item itself comes whole in `response.output_item.done`.
REASONING_DELTAS = frozenset(
    {"response.reasoning_summary_text.delta", "response.reasoning_text.delta"}
)


class StreamAssembler:
    """Folds Responses SSE events into one message. Items are keyed by `output_index`; the
    final `response.completed` (or `.incomplete`) carries usage and, usually, the whole
    output, which wins over what the deltas assembled."""

    def __init__(
        self, model: str, on_delta: DeltaObserver | None = None, provider: str = PROVIDER
    ) -> None:
        self.model = model
        self._provider = provider
        self._on_delta = on_delta
        self._sse = SSEDecoder()
        self._items: dict[int, JSONObject] = {}
        self._final: JSONObject | None = None

    def feed(self, chunk: bytes) -> None:
        for event in self._sse.feed(chunk):
            self._handle(event.data)

    def finish(self, body: bytes) -> ModelResponse:
        for event in self._sse.close():
            self._handle(event.data)
        if self._final is None:
            raise ConnectionFailed("the stream ended before response.completed")
        output = items(self._final, "output")
        if not output:
            output = [self._items[i] for i in sorted(self._items)]
        return _decode(self.model, self._final, output, body, self._provider)

    def _handle(self, data: str) -> None:
        payload = load_json(data)
        kind = text(payload, "type") or ""
        if kind in ("response.completed", "response.incomplete"):
            self._final = obj(payload, "response")
        elif kind == "response.output_text.delta":
            self._text_delta(count(payload, "output_index"), text(payload, "delta") or "")
        elif kind == "response.function_call_arguments.delta":
            self._arguments_delta(count(payload, "output_index"), text(payload, "delta") or "")
        elif kind in REASONING_DELTAS:
            piece = text(payload, "delta")
            if self._on_delta is not None and piece:
                self._on_delta(Delta("reasoning", piece))
        elif kind in ("response.output_item.added", "response.output_item.done"):
            # `.done` comes last and wins: only its encrypted content is whole.
            self._items[count(payload, "output_index")] = dict(obj(payload, "item"))
        elif kind == "response.failed":
            raise stream_error({"error": obj(obj(payload, "response"), "error")}, data)
        elif kind == "error" or not is_obj(payload):
            raise stream_error(payload, data)

    def _text_delta(self, index: int, piece: str) -> None:
        item = self._items.setdefault(index, {"type": "message", "content": []})
        content = item.setdefault("content", [])
        if isinstance(content, list):
            content.append({"type": "output_text", "text": piece})
        if self._on_delta is not None and piece:
            self._on_delta(Delta("text", piece))

    def _arguments_delta(self, index: int, piece: str) -> None:
        item = self._items.setdefault(index, {"type": "function_call", "arguments": ""})
        item["arguments"] = (text(item, "arguments") or "") + piece
        if self._on_delta is not None and piece:
            self._on_delta(Delta("tool_input", piece, text(item, "call_id")))
