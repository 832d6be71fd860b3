"""Error classification: a failed answer (status, body, headers), an error body sent with 200,
or an error inside a 200 stream, becomes the right `tether.errors.ProviderError`, with its wait
hint. One entry point per dialect; all share the reading of the body shapes the wire examples
show.

Context overflow has no reliable code anywhere, so it is read from the message text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from tether import errors
from tether.messages import JSONValue
from tether.providers.common import is_obj, load_json, obj, text
from tether.providers.rate_limits import parse_duration, parse_rate_limits


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """The error as the body states it; `status` is a numeric code found in the body."""

    message: str
    type: str = ""
    code: str = ""
    status: int | None = None


def read_error(body: JSONValue, raw: bytes | str = b"") -> ErrorInfo:
    """Read every shape seen: Anthropic `{"type":"error","error":{…}}`, OpenAI and vLLM ≥0.10.1
    `{"error":{…}}`, vLLM legacy flat `{"object":"error",…}`, Ollama `{"error":"…"}`, the
    Responses stream's flat `{"type":"error","code",…}` and OpenRouter's `metadata.raw`."""
    if is_obj(body):
        inner = body.get("error")
        if isinstance(inner, str):
            return ErrorInfo(inner)
        if is_obj(inner):
            return _info(inner)
        if body.get("object") == "error" or "message" in body:
            return _info(body)
        detail = body.get("detail")
        if isinstance(detail, str):
            return ErrorInfo(detail)
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    return ErrorInfo(raw.strip()[:500] or "no error body")


def _info(data: Mapping[str, JSONValue]) -> ErrorInfo:
    message = text(data, "message") or ""
    upstream = text(obj(data, "metadata"), "raw")
    if upstream:
        message = f"{message}: {upstream}" if message else upstream
    code = data.get("code")
    status = code if isinstance(code, int) and not isinstance(code, bool) else None
    kind = text(data, "type") or ""
    return ErrorInfo(
        message or "no error message",
        # A flat error event (Responses) is typed `error` as an event, not as an error kind.
        "" if kind == "error" else kind,
        code if isinstance(code, str) else "",
        status,
    )


_OVERFLOW = (
    "prompt is too long",
    "maximum context length",
    "context_length_exceeded",
    "context length exceeded",
    "exceed context limit",
    "exceeds the context window",
    "context window exceeded",
    "model_context_window_exceeded",
    "available context size",
)
_QUOTA = ("insufficient_quota", "credit balance is too low", "exceeded your current quota")
_RATE = ("rate_limit_error", "rate_limit_exceeded", "rate_limited", "tokens", "requests")
_TRY_AGAIN = re.compile(r"try again in (\d+(?:\.\d+)?(?:ms|h|m|s)(?:\d+(?:\.\d+)?(?:ms|h|m|s))*)")


def classify(
    status: int | None,
    info: ErrorInfo,
    headers: Mapping[str, str] | None = None,
    *,
    where: str | None = None,
) -> errors.ProviderError:
    """`status` is None for an error stated in a 2xx answer (inside a stream, or as its body):
    then the body alone decides. `where` says where it was found, for the message."""
    headers = headers or {}
    effective = status if status is not None else info.status
    kind = info.type.lower()
    code = info.code.lower()
    lowered = info.message.lower()
    body = f"{kind} {code} {lowered}"
    message = _message(where or _where(status), info)
    cls: type[errors.ProviderError]
    if effective != 429 and any(m in body for m in _OVERFLOW):
        cls = errors.ContextOverflow
    elif any(m in body for m in _QUOTA) or effective == 402:
        cls = errors.QuotaExhausted
    elif effective == 429 or kind in _RATE or code in _RATE:
        cls = errors.RateLimited
    elif effective == 529 or "overloaded" in kind or "overloaded" in code:
        cls = errors.Overloaded
    elif effective in (401, 403) or kind in ("authentication_error", "permission_error"):
        cls = errors.AuthenticationError
    elif (
        effective is not None and 400 <= effective < 500 and effective not in (408, 409)
    ) or kind in ("invalid_request_error", "not_found_error", "request_too_large"):
        cls = errors.BadRequest
    else:
        # 5xx, 408/409 (the vendors' SDKs retry both) and unknown errors inside a stream.
        cls = errors.ServerError
    wait = _wait_hint(headers, info.message) if cls.retryable else None
    return cls(message, status=status, retry_after=wait)


# What a backend says in an error reaches the session's log and its tenant: bounded, so an
# endpoint cannot pour a page of its own (or of whatever it fronts) into it.
MAX_UPSTREAM_TEXT = 500


def _where(status: int | None) -> str:
    return f"HTTP {status}" if status is not None else "error inside the stream"


def _message(where: str, info: ErrorInfo) -> str:
    label = _label(info.type[:100], info.code[:100])
    said = info.message
    if len(said) > MAX_UPSTREAM_TEXT:
        said = f"{said[:MAX_UPSTREAM_TEXT]}… ({len(said) - MAX_UPSTREAM_TEXT} more characters cut)"
    return f"{where}: {label}: {said}" if label else f"{where}: {said}"


def _label(kind: str, code: str) -> str:
    """The error's type and its code: OpenAI's type is broad (`invalid_request_error`), its
    code says what happened (`context_length_exceeded`)."""
    if kind and code and code != kind:
        return f"{kind} ({code})"
    return kind or code


def _wait_hint(headers: Mapping[str, str], message: str) -> float | None:
    hint = parse_rate_limits(headers).wait_hint() if headers else None
    if hint is not None:
        return hint
    match = _TRY_AGAIN.search(message)
    return parse_duration(match.group(1)) if match else None


def _from_body(status: int, body: bytes, headers: Mapping[str, str]) -> errors.ProviderError:
    error = classify(status, read_error(load_json(body), body), headers)
    error.body = body.decode("utf-8", "replace")
    return error


def classify_anthropic(
    status: int, body: bytes, headers: Mapping[str, str]
) -> errors.ProviderError:
    """Anthropic Messages: 529 and `overloaded_error` are Overloaded; overflow is text-only."""
    return _from_body(status, body, headers)


def classify_openai(status: int, body: bytes, headers: Mapping[str, str]) -> errors.ProviderError:
    """OpenAI-compatible servers (OpenAI, OpenRouter, vLLM, llama.cpp): `insufficient_quota`
    is never retried; OpenRouter's 402 is out of credit."""
    return _from_body(status, body, headers)


def classify_ollama(status: int, body: bytes, headers: Mapping[str, str]) -> errors.ProviderError:
    """Ollama: `{"error": "…"}`; a missing model is a 404."""
    return _from_body(status, body, headers)


def stream_error(payload: JSONValue, raw: str = "") -> errors.ProviderError:
    """An error event inside a 200 stream, any dialect."""
    error = classify(None, read_error(payload, raw))
    error.body = raw or None
    return error


def body_error(payload: JSONValue, raw: str = "") -> errors.ProviderError:
    """An error that is the whole body of a 2xx answer, any dialect: the body decides its
    class, and its `status` is the one the body states (OpenRouter's `code`), if any."""
    info = read_error(payload, raw)
    error = classify(None, info, where="HTTP 2xx with an error body")
    error.status = info.status
    error.body = raw or None
    return error
