"""The Ollama `/api/chat` codec. Arguments are JSON objects, not strings; streaming is NDJSON;
calls from servers that send no id get a stable synthesized one (same request and answer, same
id), and each tool result is a `tool` message naming its call. A thinking model's
`message.thinking` is a `Thinking` part, sent back as the assistant message's `thinking`.
"""

from __future__ import annotations

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
    Usage,
)
from tether.providers.base import Delta, DeltaObserver, ModelRequest, ModelResponse
from tether.providers.classify import body_error, classify_ollama, stream_error
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
from tether.providers.http import Endpoint, NDJSONDecoder
from tether.providers.settings_wire import output_cap, tool_choice, unsupported
from tether.settings import ModelSettings, Reasoning, apply_extra

DEFAULT_HOST = "http://localhost:11434"
PROVIDER = "ollama"


class OllamaModel(CodecModel):
    """A `Model` over Ollama's native chat API. `options` (e.g. `num_ctx`) go to every call:
    Ollama silently cuts a prompt longer than its window at the front, so set it."""

    def __init__(
        self,
        model: str,
        *,
        host: str = DEFAULT_HOST,
        http_client: httpx.AsyncClient | None = None,
        stream: bool = False,
        options: Mapping[str, JSONValue] | None = None,
        api_key: str | None = None,
    ) -> None:
        self.options = dict(options or {})
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        url = host.rstrip("/") + "/api/chat"
        endpoint = Endpoint(url, headers, classify_ollama, http_client)
        super().__init__(model, endpoint, stream=stream, provider=PROVIDER)

    seeded = True  # older servers send calls without ids

    def encode(self, request: ModelRequest) -> JSONObject:
        return encode_request(
            self.model, request, stream=self.streams(request), options=self.options
        )

    def decode(self, body: bytes, seed: str) -> ModelResponse:
        return decode_response(self.model, body, seed)

    def assembler(self, on_delta: DeltaObserver | None, seed: str) -> StreamAssembler:
        return StreamAssembler(self.model, on_delta, seed)


# --- request ------------------------------------------------------------------------------


def encode_request(
    model: str,
    request: ModelRequest,
    *,
    stream: bool = False,
    options: Mapping[str, JSONValue] | None = None,
) -> JSONObject:
    messages: list[JSONValue] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend(encode_messages(request.messages))
    # Ollama streams unless told not to, so `stream` is always explicit.
    body: JSONObject = {"model": model, "messages": messages, "stream": stream}
    settings = request.settings
    offer = settings is None or _offers_tools(settings, request)
    if request.tools and offer:
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
        body["format"] = request.output.schema
    merged: JSONObject = dict(options or {})
    if settings is not None:
        _encode_options(merged, settings)
        if settings.reasoning is not None:
            body["think"] = _think(model, settings.reasoning)
    cap = output_cap(request)
    if cap is not None:
        merged["num_predict"] = cap
    if merged:
        body["options"] = merged
    if settings is not None:
        apply_extra(body, settings.extra)
    return body


def _offers_tools(settings: ModelSettings, request: ModelRequest) -> bool:
    """Ollama has no `tool_choice`: "auto" is what it does, "none" is honoured by offering
    no tools, and "required" or a tool's name is refused; so is `parallel_tool_calls=False`
    (it may always answer with several calls)."""
    choice = tool_choice(settings, request)
    if choice not in (None, "auto", "none"):
        raise unsupported("Ollama chat", f"tool_choice {choice!r}", "only 'auto' or 'none'")
    if settings.parallel_tool_calls is False and request.tools:
        raise unsupported("Ollama chat", "parallel_tool_calls=False")
    return choice != "none"


def _think(model: str, reasoning: Reasoning) -> JSONValue:
    """`think`: the effort for gpt-oss, the one family whose levels Ollama takes (any other
    model refuses a string: "think value … is not supported for this model"), and `true`
    for the rest. A model that cannot think refuses `true` too; extra={'think': …} wins."""
    if model.split("/")[-1].startswith("gpt-oss"):
        return reasoning.effective_effort
    return True


def _encode_options(options: JSONObject, settings: ModelSettings) -> None:
    """Sampling settings are `options`, over the model's own."""
    for name in ("temperature", "top_p", "seed"):
        value = getattr(settings, name)
        if value is not None:
            options[name] = value
    if settings.stop:
        options["stop"] = list(settings.stop)


def encode_messages(messages: Sequence[Message]) -> list[JSONValue]:
    names: dict[str, str] = {}
    out: list[JSONValue] = []
    for message in messages:
        if message.role == "user":
            out.append(_user_message(message))
        elif message.role == "assistant":
            wire: JSONObject = {"role": "assistant", "content": message.text}
            thought = "".join(
                str(t.data.get("thinking", "")) for t in message.thinking if t.provider == PROVIDER
            )
            if thought:
                wire["thinking"] = thought
            calls = message.tool_calls
            if calls:
                wire["tool_calls"] = [_encode_call(c) for c in calls]
            names.update((c.id, c.name) for c in calls)
            out.append(wire)
        else:
            for result in message.tool_results:
                wire = {"role": "tool", "content": error_text(result.content, result.is_error)}
                if result.call_id in names:
                    wire["tool_name"] = names[result.call_id]
                wire["tool_call_id"] = result.call_id
                out.append(wire)
            images = [i for r in message.tool_results for i in r.images]
            if images:  # after the turn's tool messages, as a user's: as Chat takes them
                out.append(_with_images({"role": "user", "content": _image_note(message)}, images))
            if any(isinstance(p, Text) and p.text for p in message.parts):
                out.append({"role": "user", "content": message.text})
    return out


def _user_message(message: Message) -> JSONObject:
    """A user's text, and its images as base64 in `images`."""
    return _with_images({"role": "user", "content": message.text}, message.images)


def _with_images(wire: JSONObject, images: Sequence[Image]) -> JSONObject:
    """`wire` with `images` as base64: Ollama takes no image URLs."""
    if images:
        if any(i.url is not None for i in images):
            raise UsageError(
                "Ollama takes images only as bytes, not URLs: fetch the image and pass "
                "Image(data=...)"
            )
        wire["images"] = [i.b64 for i in images]
    return wire


def _image_note(message: Message) -> str:
    calls = ", ".join(r.call_id for r in message.tool_results if r.images)
    return f"Images from tool call(s) {calls}:"


def _encode_call(call: ToolCall) -> JSONValue:
    return {"id": call.id, "function": {"name": call.name, "arguments": call.arguments}}


# --- response -----------------------------------------------------------------------------


def decode_usage(chunk: JSONObject) -> Usage:
    return Usage(
        input_tokens=count(chunk, "prompt_eval_count"), output_tokens=count(chunk, "eval_count")
    )


def _decode_calls(wire_calls: Sequence[JSONValue], seed: str, start: int) -> list[ToolCall]:
    calls: list[ToolCall] = []
    for offset, wire in enumerate(c for c in wire_calls if is_obj(c)):
        function = obj(wire, "function")
        name = text(function, "name") or ""
        arguments = function.get("arguments")
        call_id = text(wire, "id") or synthesize_call_id(seed, start + offset, name, arguments)
        calls.append(tool_call(call_id, name, arguments))
    return calls


def _thinking(thought: str) -> tuple[Thinking, ...]:
    return (Thinking(thought, PROVIDER, {"thinking": thought}),) if thought else ()


def _finish(
    model: str,
    texts: list[str],
    calls: list[ToolCall],
    last: JSONObject,
    body: bytes,
    thought: str = "",
) -> ModelResponse:
    stop = text(last, "done_reason")
    cut = stop == "length" and bool(calls)
    if cut:
        calls[-1] = truncated(calls[-1], dump_arguments(calls[-1]))
    return finish(
        model=model,
        text_parts=texts,
        calls=calls,
        raw_stop=stop,
        usage=decode_usage(last),
        body=body,
        incomplete=cut,
        thinking=_thinking(thought),
    )


def decode_response(model: str, body: bytes, seed: str = "") -> ModelResponse:
    data = load_json(body)
    if not is_obj(data):
        raise ConnectionFailed("the model host answered 200 with a body that is not JSON")
    if data.get("error") is not None:
        raise body_error(data, body.decode("utf-8", "replace"))
    message = obj(data, "message")
    calls = _decode_calls(items(message, "tool_calls"), seed, 0)
    thought = text(message, "thinking") or ""
    return _finish(model, [text(message, "content") or ""], calls, data, body, thought)


class StreamAssembler:
    """Folds NDJSON chunks into one message. Ollama sends each call whole, in one chunk."""

    def __init__(self, model: str, on_delta: DeltaObserver | None = None, seed: str = "") -> None:
        self.model = model
        self._on_delta = on_delta
        self._seed = seed
        self._ndjson = NDJSONDecoder()
        self._texts: list[str] = []
        self._thoughts: list[str] = []
        self._calls: list[ToolCall] = []
        self._last: JSONObject | None = None

    def feed(self, chunk: bytes) -> None:
        for line in self._ndjson.feed(chunk):
            self._handle(line)

    def finish(self, body: bytes) -> ModelResponse:
        for line in self._ndjson.close():
            self._handle(line)
        if self._last is None:
            raise ConnectionFailed("the stream ended before a chunk with done: true")
        thought = "".join(self._thoughts)
        return _finish(self.model, self._texts, self._calls, self._last, body, thought)

    def _handle(self, line: object) -> None:
        if not is_obj(line) or line.get("error") is not None:
            raise stream_error(line if is_obj(line) else None, str(line))
        message = obj(line, "message")
        thought = text(message, "thinking")
        if thought:
            self._thoughts.append(thought)
            if self._on_delta is not None:
                self._on_delta(Delta("reasoning", thought))
        piece = text(message, "content")
        if piece:
            self._texts.append(piece)
            if self._on_delta is not None:
                self._on_delta(Delta("text", piece))
        self._calls.extend(
            _decode_calls(items(message, "tool_calls"), self._seed, len(self._calls))
        )
        if line.get("done") is True:
            self._last = line
