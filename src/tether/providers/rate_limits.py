"""The rate-limit headers of Anthropic and OpenAI (and `retry-after`), read into budgets.

Kept apart from the HTTP client so the gateway, which schedules by these budgets, loads
without httpx."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> float | None:
    """`6m0s`, `1.5s`, `84ms`, `1h2m` or a bare number of seconds -> seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    return total if pos == len(text) and pos > 0 else None


def parse_reset_time(text: str, now: datetime) -> float | None:
    """An RFC 3339 time (Anthropic's `*-reset`) -> seconds from `now`, never negative."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """`retry-after-ms`, then `retry-after` as seconds or as an HTTP date."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass(frozen=True, slots=True)
class Bucket:
    """One rate-limit budget: `reset` is in seconds from when the headers were read."""

    limit: int | None = None
    remaining: int | None = None
    reset: float | None = None


@dataclass(frozen=True, slots=True)
class RateLimits:
    """What a response's headers say about the budgets left; names follow Anthropic's."""

    requests: Bucket = Bucket()
    tokens: Bucket = Bucket()
    input_tokens: Bucket = Bucket()
    output_tokens: Bucket = Bucket()
    retry_after: float | None = None

    def wait_hint(self) -> float | None:
        """How long to wait: `retry-after` if sent, else the latest reset of a spent budget."""
        if self.retry_after is not None:
            return self.retry_after
        resets = [
            b.reset
            for b in (self.requests, self.tokens, self.input_tokens, self.output_tokens)
            if b.remaining == 0 and b.reset is not None
        ]
        return max(resets) if resets else None


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def parse_rate_limits(headers: Mapping[str, str], now: datetime | None = None) -> RateLimits:
    """Both header families: Anthropic `anthropic-ratelimit-<kind>-<field>` (RFC 3339 reset)
    and OpenAI `x-ratelimit-<field>-<kind>` (duration reset like `6m0s`)."""
    now = now or datetime.now(UTC)
    h = {k.lower(): v for k, v in headers.items()}

    def bucket(kind: str) -> Bucket:
        a = f"anthropic-ratelimit-{kind}-"
        if a + "limit" in h or a + "remaining" in h or a + "reset" in h:
            reset = h.get(a + "reset")
            return Bucket(
                _int(h.get(a + "limit")),
                _int(h.get(a + "remaining")),
                None if reset is None else parse_reset_time(reset, now),
            )
        reset = h.get(f"x-ratelimit-reset-{kind}")
        return Bucket(
            _int(h.get(f"x-ratelimit-limit-{kind}")),
            _int(h.get(f"x-ratelimit-remaining-{kind}")),
            None if reset is None else parse_duration(reset),
        )

    return RateLimits(
        requests=bucket("requests"),
        tokens=bucket("tokens"),
        input_tokens=bucket("input-tokens"),
        output_tokens=bucket("output-tokens"),
        retry_after=parse_retry_after(h, now),
    )
