"""A simulated model backend with a capacity (concurrent requests, requests and tokens per
minute) that answers 429 past it, as a provider's API does. For tests and the gateway's
benchmarks, on the virtual loop or behind the loopback HTTP server; never chosen implicitly.

`BackendMeter` is the enforcement alone; `SimulatedBackend` is a `Model` around it.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from tether.errors import RateLimited
from tether.messages import JSONObject, Message, Text, ToolCall, Usage
from tether.providers.base import ModelRequest, ModelResponse
from tether.providers.rate_limits import parse_rate_limits
from tether.scheduler.estimate import estimate_request_tokens
from tether.scheduler.limits import TokenBucket


@dataclass(frozen=True, slots=True)
class Capacity:
    max_concurrency: int
    requests_per_minute: int
    tokens_per_minute: int


@dataclass(frozen=True, slots=True)
class Refusal:
    limit: Literal["concurrency", "requests", "tokens"]
    retry_after: float
    message: str


@dataclass(slots=True)
class MeterTotals:
    """What the backend served: requests, tokens (input plus output), refusals by limit,
    and `busy`, the integral of requests in flight over time. `admitted` and `spent` count
    what left the request and token budgets (reservations net of what was given back);
    `request_level` and `token_level` are the budgets left when the snapshot was taken."""

    requests: int = 0
    tokens: int = 0
    refused: dict[str, int] = field(
        default_factory=lambda: {"concurrency": 0, "requests": 0, "tokens": 0}
    )
    busy: float = 0.0
    peak_in_flight: int = 0
    admitted: int = 0
    spent: int = 0
    request_level: float = 0.0
    token_level: float = 0.0

    def copy(self) -> MeterTotals:
        return replace(self, refused=dict(self.refused))


class BackendMeter:
    """A provider's limits as it enforces them: a request is admitted when a concurrency slot
    is free, one request is left in the minute's budget, and its input plus its output cap
    is left in the token budget; the unused output is given back when it finishes."""

    def __init__(self, capacity: Capacity, now: float) -> None:
        self.capacity = capacity
        self.requests = TokenBucket.per_minute(capacity.requests_per_minute, now)
        self.tokens = TokenBucket.per_minute(capacity.tokens_per_minute, now)
        self.in_flight = 0
        self.totals = MeterTotals()
        self._busy_since = now

    def admit(self, input_tokens: int, max_output: int, now: float) -> Refusal | None:
        if self.in_flight >= self.capacity.max_concurrency:
            return self._refuse("concurrency", 1.0, "too many concurrent requests")
        wait = self.requests.wait_for(1, now)
        if wait > 0:
            return self._refuse("requests", wait, "rate limit reached for requests")
        wait = self.tokens.wait_for(input_tokens + max_output, now)
        if wait > 0:
            return self._refuse("tokens", wait, "rate limit reached for tokens")
        self.requests.take(1, now)
        self.tokens.take(input_tokens + max_output, now)
        self.totals.admitted += 1
        self.totals.spent += input_tokens + max_output
        self._set_in_flight(self.in_flight + 1, now)
        return None

    def finish(self, max_output: int, input_tokens: int, output_tokens: int, now: float) -> None:
        self.tokens.give(max_output - output_tokens, now)
        self.totals.spent -= max_output - output_tokens
        self._set_in_flight(self.in_flight - 1, now)
        self.totals.requests += 1
        self.totals.tokens += input_tokens + output_tokens

    def abandon(self, now: float) -> None:
        """The client went away mid-answer: the slot frees, the reservation stays spent."""
        self._set_in_flight(self.in_flight - 1, now)

    def headers(self, now: float) -> dict[str, str]:
        """OpenAI's `x-ratelimit-*` headers: limit, remaining, and time to a full budget."""
        out: dict[str, str] = {}
        for kind, bucket in (("requests", self.requests), ("tokens", self.tokens)):
            level = bucket.available(now)
            out[f"x-ratelimit-limit-{kind}"] = str(int(bucket.capacity))
            out[f"x-ratelimit-remaining-{kind}"] = str(max(0, math.floor(level)))
            out[f"x-ratelimit-reset-{kind}"] = format_duration(
                (bucket.capacity - level) / bucket.rate
            )
        return out

    def snapshot(self, now: float) -> MeterTotals:
        self._set_in_flight(self.in_flight, now)
        self.totals.request_level = self.requests.available(now)
        self.totals.token_level = self.tokens.available(now)
        return self.totals.copy()

    def utilisation(
        self, before: MeterTotals, after: MeterTotals, seconds: float
    ) -> dict[str, float]:
        """The share of each limit used between two snapshots: what left a budget over the
        most that could have (its level at the start plus its refill), and requests in
        flight over the concurrency limit, averaged over time."""
        cap = self.capacity
        most_tokens = before.token_level + cap.tokens_per_minute / 60 * seconds
        most_requests = before.request_level + cap.requests_per_minute / 60 * seconds
        return {
            "tokens": (after.spent - before.spent) / most_tokens,
            "requests": (after.admitted - before.admitted) / most_requests,
            "concurrency": (after.busy - before.busy) / (cap.max_concurrency * seconds),
        }

    def _refuse(
        self, limit: Literal["concurrency", "requests", "tokens"], wait: float, message: str
    ) -> Refusal:
        self.totals.refused[limit] += 1
        return Refusal(limit, math.ceil(wait * 1000) / 1000, message)

    def _set_in_flight(self, count: int, now: float) -> None:
        self.totals.busy += self.in_flight * max(0.0, now - self._busy_since)
        self._busy_since, self.in_flight = now, count
        self.totals.peak_in_flight = max(self.totals.peak_in_flight, count)


def format_duration(seconds: float) -> str:
    """OpenAI's reset format: `84ms`, `1.5s`, `6m0s`."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3f}s" if minutes else f"{rest:.3f}s"


@dataclass(frozen=True, slots=True)
class Answer:
    """What the simulated model says: text, or one tool call; and how many tokens it is."""

    output_tokens: int
    text: str = ""
    call: tuple[str, JSONObject] | None = None


# (first user message, assistant turns so far, random source) -> the answer.
Script = Callable[[str, int, random.Random], Answer]


def default_script(task: str, turns: int, rng: random.Random) -> Answer:
    return Answer(output_tokens=rng.randint(50, 400), text="done")


@dataclass(frozen=True, slots=True)
class Latency:
    """Seconds to answer: `base` plus `per_output_token` for each token written."""

    base: float = 0.4
    per_output_token: float = 0.01

    def of(self, output_tokens: int) -> float:
        return self.base + self.per_output_token * output_tokens


class SimulatedBackend:
    """A `Model` that enforces `capacity` on the running loop's clock. Its tokenizer counts
    `token_ratio` (drawn per request from the range) times the chars/4 estimate, as a real
    tokenizer disagrees with any estimate. `headers=False` answers 429s with `retry-after`
    only and successes with no rate-limit headers."""

    def __init__(
        self,
        capacity: Capacity,
        *,
        name: str = "simulated:backend",
        headers: bool = True,
        token_ratio: tuple[float, float] = (1.05, 1.25),
        latency: Latency | None = None,
        script: Script = default_script,
        seed: int = 0,
    ) -> None:
        self.capacity = capacity
        self._name = name
        self.headers = headers
        self.token_ratio = token_ratio
        self.latency = latency or Latency()
        self.script = script
        self._rng = random.Random(seed)
        self._meter: BackendMeter | None = None

    @property
    def name(self) -> str:
        return self._name

    def meter(self) -> BackendMeter:
        if self._meter is None:
            self._meter = BackendMeter(self.capacity, asyncio.get_running_loop().time())
        return self._meter

    async def complete(self, request: ModelRequest) -> ModelResponse:
        loop = asyncio.get_running_loop()
        meter = self.meter()
        input_tokens = math.ceil(estimate_request_tokens(request) * self._ratio())
        max_output = request.max_output_tokens or 4096
        refusal = meter.admit(input_tokens, max_output, loop.time())
        if refusal is not None:
            raise RateLimited(
                f"HTTP 429: {refusal.message}", status=429, retry_after=refusal.retry_after
            )
        answer = self.script(first_user_text(request.messages), _turns(request), self._rng)
        output = min(answer.output_tokens, max_output)
        try:
            await asyncio.sleep(self.latency.of(output))
        except BaseException:
            meter.abandon(loop.time())
            raise
        meter.finish(max_output, input_tokens, output, loop.time())
        limits = parse_rate_limits(meter.headers(loop.time())) if self.headers else None
        return ModelResponse(
            message=answer_message(answer, _turns(request)),
            stop="tool_calls" if answer.call else "end_turn",
            usage=Usage(input_tokens=input_tokens, output_tokens=output),
            rate_limits=limits,
        )

    def _ratio(self) -> float:
        low, high = self.token_ratio
        return self._rng.uniform(low, high)


def first_user_text(messages: Sequence[Message]) -> str:
    return next((m.text for m in messages if m.role == "user"), "")


def _turns(request: ModelRequest) -> int:
    return sum(1 for m in request.messages if m.role == "assistant")


def answer_message(answer: Answer, turn: int) -> Message:
    if answer.call is None:
        return Message("assistant", (Text(answer.text or "done"),))
    name, arguments = answer.call
    return Message("assistant", (ToolCall(f"call_{turn}", name, dict(arguments)),))
