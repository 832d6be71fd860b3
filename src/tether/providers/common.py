"""What every codec does the same way once the dialect is read: reading untrusted wire JSON,
turning argument text into a `ToolCall`, normalising the stop reason, pricing and hashing the
response, and synthesizing stable call ids. No I/O and no vendor names beyond stop words.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TypeGuard

from tether.messages import (
    JSONObject,
    JSONValue,
    Message,
    Part,
    Text,
    Thinking,
    ToolCall,
    Usage,
    canonical_json,
)
from tether.providers import catalog
from tether.providers.base import ModelResponse, StopKind
from tether.providers.rate_limits import RateLimits, parse_rate_limits


def is_obj(value: object) -> TypeGuard[dict[str, JSONValue]]:
    return isinstance(value, dict)


def obj(value: object, key: str) -> JSONObject:
    """`value[key]` when both are objects, else an empty object: wire JSON is untrusted."""
    if is_obj(value):
        inner = value.get(key)
        if is_obj(inner):
            return inner
    return {}


def items(value: object, key: str) -> list[JSONValue]:
    if is_obj(value):
        inner = value.get(key)
        if isinstance(inner, list):
            return inner
    return []


def text(value: object, key: str) -> str | None:
    if is_obj(value):
        inner = value.get(key)
        if isinstance(inner, str):
            return inner
    return None


def count(value: object, key: str) -> int:
    if is_obj(value):
        inner = value.get(key)
        if isinstance(inner, int) and not isinstance(inner, bool):
            return inner
    return 0


def load_json(body: bytes | str) -> JSONValue:
    """Parse a body; anything that is not JSON becomes None rather than an exception."""
    try:
        parsed: JSONValue = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return parsed


# One encoder for every call: json.dumps with options builds a new encoder each time.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dump_arguments(call: ToolCall) -> str:
    """Arguments as the JSON text a string-argument dialect sends back. A call whose arguments
    were unreadable is echoed as the model wrote it, so the model sees its own mistake."""
    if call.raw_arguments is not None:
        return call.raw_arguments
    return _COMPACT.encode(call.arguments)


def tool_call(call_id: str, name: str, arguments: object) -> ToolCall:
    """Arguments as a JSON string or object. Unreadable or non-object arguments give a call
    with `arguments={}` and `raw_arguments` set, which the tool runner answers invalid_input."""
    if isinstance(arguments, str):
        if not arguments.strip():
            return ToolCall(call_id, name, {})
        parsed = load_json(arguments)
        if is_obj(parsed):
            return ToolCall(call_id, name, parsed)
        return ToolCall(call_id, name, {}, arguments)
    if is_obj(arguments):
        return ToolCall(call_id, name, arguments)
    if arguments is None:
        return ToolCall(call_id, name, {})
    return ToolCall(call_id, name, {}, json.dumps(arguments))


def truncated(call: ToolCall, partial: str) -> ToolCall:
    """The call the output limit cut: never executable, whatever its text happens to parse to."""
    return ToolCall(call.id, call.name, {}, partial)


def error_text(content: str, is_error: bool) -> str:
    """Dialects without an error flag on tool results still let the model see the failure."""
    if is_error and not content.lower().startswith("error"):
        return f"Error: {content}"
    return content


# How an answer travels, not what is asked: left out of a request's seed, so a streamed
# answer's synthesized call ids are the whole answer's, and its fold the same.
_TRANSPORT = ("stream", "stream_options")


def request_seed(body: JSONObject) -> str:
    """A digest of the request a response answers, for `synthesize_call_id`; the same for
    the request streamed or not."""
    asked = {k: v for k, v in body.items() if k not in _TRANSPORT}
    return hashlib.sha256(canonical_json(asked).encode()).hexdigest()


def synthesize_call_id(seed: str, index: int, name: str, arguments: object) -> str:
    """A stable id for a call the server sent without one: the same request and answer give
    the same id, so a replayed session matches its log. `seed` ties it to the request."""
    material = json.dumps([seed, index, name, arguments], sort_keys=True, ensure_ascii=False)
    return "call_" + hashlib.sha256(material.encode()).hexdigest()[:24]


_END = {"end_turn", "stop", "stop_sequence", "completed", "tool_use", "tool_calls"}
_MAX = {"max_tokens", "length", "max_output_tokens"}


def normalise_stop(raw: str | None, has_calls: bool, incomplete: bool) -> StopKind:
    """Calls decide `tool_calls`, not the stop word: forcing a named tool gives `stop`."""
    if incomplete or raw in _MAX:
        return "max_tokens"
    if has_calls:
        return "tool_calls"
    if raw is None or raw in _END:
        return "end_turn"
    return "other"


def assistant_message(
    text_parts: Iterable[str], calls: Iterable[ToolCall], thinking: Iterable[Thinking] = ()
) -> Message:
    """Reasoning first, then the text, then the calls: the order the APIs answer in."""
    parts: list[Part] = list(thinking)
    body = "".join(text_parts)
    if body:
        parts.append(Text(body))
    parts.extend(calls)
    return Message("assistant", tuple(parts))


def finish(
    *,
    model: str,
    text_parts: Iterable[str],
    calls: list[ToolCall],
    raw_stop: str | None,
    usage: Usage,
    body: bytes,
    incomplete: bool = False,
    cost_usd: float | None = None,
    thinking: Iterable[Thinking] = (),
) -> ModelResponse:
    """Assemble the neutral response. `cost_usd` given by the provider wins over the catalog."""
    # A call with unreadable arguments still needs its answer (invalid_input): it counts.
    return ModelResponse(
        message=assistant_message(text_parts, calls, thinking),
        stop=normalise_stop(raw_stop, bool(calls), incomplete),
        raw_stop_reason=raw_stop,
        usage=usage,
        cost_usd=cost_usd if cost_usd is not None else catalog.cost(model, usage),
        incomplete=incomplete,
        response_hash=hashlib.sha256(body).hexdigest(),
    )


def with_rate_limits(response: ModelResponse, headers: Mapping[str, str]) -> ModelResponse:
    """Attach what the answer's headers said of the budgets left, for the model gateway."""
    limits = parse_rate_limits(headers)
    return response if limits == RateLimits() else replace(response, rate_limits=limits)
