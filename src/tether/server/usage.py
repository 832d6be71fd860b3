"""`GET /v1/usage`: what the caller's tenant spent, tokens and dollars by model and day, read
from the store's catalog in one aggregate (`Store.catalog_usage`), never from a log.

A day is a UTC date, and a session's whole spending is counted on the day of its last event
(its catalog row keeps totals, not a history): a session that spent over several days is
counted on the last of them, and moves to a later day when it runs again. `from` and `to`
name UTC days, both included (by default the 30 days up to today); the answer holds at
most `MAX_GROUPS` (day, model) groups, the earliest first, and says when it was cut.
A server without tokens (`--no-auth`) answers for every tenant. Route: `app`."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.messages import JSONObject, JSONValue
from tether.runtime.local import LocalRuntime
from tether.server.errors import ApiError

DEFAULT_DAYS = 30
MAX_DAYS = 366  # days one answer may span: the aggregate reads every session of the window
MAX_GROUPS = 10_000  # (day, model) groups in one answer
QUERY = ("from", "to")
DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _day(request: Request, name: str, default: date) -> date:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        if not DAY.fullmatch(text):  # not ISO's other forms (`2026-W49-4`, `20261203`)
            raise ValueError(text)
        return date.fromisoformat(text)
    except ValueError:
        raise ApiError(
            "invalid_request",
            f"query parameter {name} must be a UTC day as YYYY-MM-DD, not {text[:40]!r}",
        ) from None


def window(request: Request, today: date) -> tuple[date, date]:
    """The first and last day asked for (both included), checked."""
    last = _day(request, "to", today)
    first = _day(request, "from", last - timedelta(days=DEFAULT_DAYS - 1))
    if first > last:
        raise ApiError("invalid_request", f"from {first} is after to {last}")
    if (last - first).days + 1 > MAX_DAYS:
        raise ApiError(
            "invalid_request",
            f"from {first} to {last} is {(last - first).days + 1} days; ask for at most "
            f"{MAX_DAYS} at once",
        )
    return first, last


def _start_of(day: date) -> str:
    """The event-time form of the day's first moment, which compares with a row's times."""
    return f"{day.isoformat()}T00:00:00.000000Z"


async def get_usage(request: Request, rt: LocalRuntime) -> Response:
    first, last = window(request, datetime.now(UTC).date())
    entries = await rt.store.catalog_usage(
        rt.tenant, _start_of(first), _start_of(last + timedelta(days=1)), MAX_GROUPS + 1
    )
    shown = entries[:MAX_GROUPS]
    bounds: JSONObject = {"limit": MAX_GROUPS, "complete": len(entries) <= MAX_GROUPS}
    body: JSONObject = {
        "tenant": rt.tenant,
        "from": first.isoformat(),
        "to": last.isoformat(),
        "usage": list[JSONValue](e.to_json() for e in shown),
        "bounds": bounds,
    }
    return JSONResponse(body)
