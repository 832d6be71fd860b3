"""The HTTP error envelope: `{"error": {"code", "message", "status"}}`, with a stable `code`
per kind of failure, and the mapping from tether's errors to it. `HttpRuntime` maps the
codes back (`CODES`)."""

from __future__ import annotations

import logging
import math

from starlette.responses import JSONResponse

from tether.errors import (
    Conflict,
    CorruptLog,
    IdempotencyConflict,
    QuotaExceeded,
    SessionNotFound,
    StoreError,
    UsageError,
)
from tether.runtime.base import CapabilityRefused, InvalidForkPoint, StateConflict

log = logging.getLogger("tether.server")
# code -> (HTTP status, what it means)
CODES: dict[str, tuple[int, str]] = {
    "invalid_json": (400, "the body is not a JSON document"),
    "invalid_request": (422, "a field or parameter is missing, of the wrong type or out of range"),
    "invalid_spec": (422, "the session spec cannot be run (unknown model, tools that do not load)"),
    "capability_refused": (422, "the spec asks for more than this runtime declares"),
    "invalid_fork_point": (
        422,
        "the fork point is not a commit point, or the session has none such",
    ),
    "unauthorized": (401, "no bearer token, or one no tenant holds"),
    "host_not_allowed": (403, "without authentication, only a loopback Host is served"),
    "cross_origin": (403, "without authentication, changes come only from the server's own pages"),
    "not_found": (404, "no such route"),
    "session_not_found": (404, "no such session for this tenant"),
    "experiment_not_found": (404, "no experiment with a session of this tenant's"),
    "event_not_found": (404, "the tenant's session has no event of that seq"),
    "thread_not_found": (404, "the tenant's session has no sub-agent thread of that id"),
    "method_not_allowed": (405, "the route does not take this method"),
    "state_conflict": (409, "the session's state does not allow this now"),
    "idempotency_conflict": (409, "the idempotency key was used for a different request"),
    "conflict": (409, "other writers kept the session busy; try again"),
    "payload_too_large": (413, "the body is larger than the server accepts"),
    "quota_exceeded": (429, "the tenant's quota refuses this now; try after Retry-After"),
    "unsupported_media_type": (415, "the body must be application/json"),
    "internal": (500, "the server failed; nothing was changed by this request"),
    "session_unreadable": (500, "the session's stored log cannot be read (a damaged store file)"),
    "store_unavailable": (503, "the event store failed or is busy; try again"),
    "timeout": (504, "the operation passed its deadline"),
}


class ApiError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def envelope(code: str, message: str, retry_after: float | None = None) -> JSONResponse:
    status = CODES[code][0]
    headers = {"WWW-Authenticate": 'Bearer realm="tether"'} if status == 401 else {}
    if retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(retry_after)))  # whole seconds
    return JSONResponse(
        {"error": {"code": code, "message": message, "status": status}}, status, headers=headers
    )


def error_response(exc: BaseException) -> JSONResponse:
    """The envelope for an exception raised while serving a request."""
    code, message = classify(exc)
    retry_after = exc.retry_after if isinstance(exc, QuotaExceeded) else None
    return envelope(code, message, retry_after)


def classify(exc: BaseException) -> tuple[str, str]:
    """The code and message for an exception raised while serving a request."""
    if isinstance(exc, ApiError):
        return exc.code, exc.message
    if isinstance(exc, QuotaExceeded):
        return "quota_exceeded", str(exc)
    if isinstance(exc, SessionNotFound):
        return "session_not_found", f"no session {exc.session_id!r}"
    if isinstance(exc, InvalidForkPoint):
        return "invalid_fork_point", str(exc)
    if isinstance(exc, CapabilityRefused):
        return "capability_refused", str(exc)
    if isinstance(exc, IdempotencyConflict):
        return "idempotency_conflict", str(exc)
    if isinstance(exc, StateConflict):
        return "state_conflict", str(exc)
    if isinstance(exc, UsageError):
        return "invalid_spec", str(exc)
    if isinstance(exc, Conflict):
        return "conflict", str(exc)
    if isinstance(exc, CorruptLog):  # its text names the session and the damage, nothing stored
        return "session_unreadable", str(exc)
    if isinstance(exc, StoreError):
        # Its message may name the database (user, host, port, name): the operator's log
        # has it, a tenant is told what to do.
        log.warning("the store failed: %s", exc)
        return "store_unavailable", CODES["store_unavailable"][1]
    if isinstance(exc, TimeoutError):
        return "timeout", "the operation passed its deadline"
    return "internal", f"{type(exc).__name__}: the server failed while handling this request"
