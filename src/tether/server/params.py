"""What a request brings to `tether serve`, read and bounded: its JSON body (declared as
such, at most `MAX_BODY`, validated by a `schemas` model), its query parameters and headers.
Each refusal is an `ApiError` that names the problem; what the request then does: `app`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from tether.errors import SessionNotFound
from tether.runtime.base import SessionRef
from tether.server.errors import ApiError
from tether.server.schemas import MAX_SEQ

B = TypeVar("B", bound=BaseModel)
MAX_BODY = 1 << 20
MAX_SESSION_ID = 200  # as `schemas.SESSION_ID` says
NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?", re.ASCII)


def session_ref(request: Request) -> SessionRef:
    """The path's session id; one no session can have (a control character, longer than
    the document allows) is not found, as an unknown one is, without asking the store."""
    session_id = str(request.path_params["session_id"])
    if len(session_id) > MAX_SESSION_ID or not session_id.isprintable():
        raise SessionNotFound(session_id[:MAX_SESSION_ID])
    return SessionRef(session_id)


def idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not key.strip() or len(key) > 200:
        raise ApiError("invalid_request", "Idempotency-Key must be 1-200 characters")
    return key


def digits(raw: str) -> bool:
    """ASCII digits, at most 15 (`MAX_SEQ`): what `int` takes and the document says."""
    return raw.isascii() and raw.isdigit() and len(raw) <= 15


def int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not digits(raw) or not low <= int(raw) <= (high or MAX_SEQ):
        bound = f"{low}..{high or MAX_SEQ}"
        raise ApiError(
            "invalid_request",
            f"query parameter {name} must be an integer {bound}, not {raw[:40]!r}",
        )
    return int(raw)


def float_param(request: Request, name: str, default: float | None, high: float) -> float | None:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    # A number as the document writes one: not ' 5', '1_0', 'nan' or 'inf', which float() takes.
    value = float(raw) if NUMBER.fullmatch(raw) else -1.0
    if not 0 < value <= high:
        raise ApiError(
            "invalid_request",
            f"query parameter {name} must be a number in (0, {high:g}], not {raw[:40]!r}",
        )
    return value


def bool_param(request: Request, name: str) -> bool:
    raw = request.query_params.get(name)
    if raw is None or raw in ("false", "0"):
        return False
    if raw in ("true", "1"):
        return True
    raise ApiError(
        "invalid_request", f"query parameter {name} must be true or false, not {raw[:40]!r}"
    )


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


async def parse(
    request: Request,
    model: type[B],
    *,
    required: bool = True,
    max_body: int = MAX_BODY,
    check: Callable[[object], None] | None = None,
) -> B:
    """The body as `model`, or a 4xx naming what is wrong; `check` refuses what the parsed
    JSON holds before it is validated (an `ApiError`)."""
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > max_body:
        raise ApiError(
            "payload_too_large", f"the body has {size} bytes; the limit is {max_body} (body_bytes)"
        )
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > max_body:
            raise ApiError(
                "payload_too_large", f"the body is over the limit of {max_body} bytes (body_bytes)"
            )
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if raw and kind != "application/json":  # a form or text/plain never passes for JSON
        given = repr(kind[:80]) if kind else "a body without Content-Type"
        raise ApiError("unsupported_media_type", f"the body must be application/json, not {given}")
    if not raw.strip():
        if required:
            raise ApiError("invalid_request", f"a JSON body ({model.__name__}) is required")
        return model()
    try:
        data = json.loads(raw, parse_constant=_no_constants)
        json.dumps(data, ensure_ascii=False).encode()  # refuses lone surrogates
    except (ValueError, RecursionError, UnicodeError) as exc:
        raise ApiError("invalid_json", f"the body is not valid JSON: {str(exc)[:200]}") from None
    if check is not None:
        check(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        ]
        raise ApiError("invalid_request", "; ".join(problems)) from None
