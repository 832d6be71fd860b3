"""Every model call of an `Agent` goes through one retry policy: retryable failures are tried
again after a visible wait (`model.failed` with `retrying_in`), the others never are, the wait
counts against `max_seconds`, and a gateway's model is retried by the gateway alone."""

from __future__ import annotations

import time

import pytest

from invariants import payloads, read_checked
from tether import Agent, Limits, fold
from tether.errors import (
    AuthenticationError,
    BadRequest,
    ConnectionFailed,
    ContextOverflow,
    Overloaded,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    ServerError,
)
from tether.events import ModelFailed, ModelRequested, ModelResponded
from tether.messages import Message, Text
from tether.providers.base import Delta, ModelRequest, ModelResponse
from tether.scheduler import Gateway, GatewayConfig, RetryPolicy
from tether.store import MemoryStore

NO_WAIT = RetryPolicy(max_attempts=3, base_delay=0.0)


class Flaky:
    """Raises each of `errors` in turn, then answers: one answer per call, counted. With
    `stream_first`, each failing call streams a piece of text before it fails."""

    def __init__(self, *errors: ProviderError, stream_first: bool = False) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.stream_first = stream_first

    @property
    def name(self) -> str:
        return "flaky"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.errors:
            if self.stream_first and request.on_delta is not None:
                request.on_delta(Delta("text", "The weather "))
            raise self.errors.pop(0)
        return ModelResponse(Message("assistant", (Text("fine"),)))


async def test_a_retryable_failure_is_retried_and_each_retry_is_in_the_log() -> None:
    model = Flaky(RateLimited("slow down", status=429), ServerError("boom", status=503))
    store = MemoryStore()

    result = await Agent(model, store=store, retry=NO_WAIT).run("hi")

    assert (result.stop_reason, result.output, model.calls) == ("end_turn", "fine", 3)
    events = await read_checked(store, result.session_id)
    failed = payloads(events, ModelFailed)
    assert [(f.error_class, f.attempt, f.retrying_in) for f in failed] == [
        ("rate_limited", 1, 0.0),
        ("server_error", 2, 0.0),
    ]
    assert len(payloads(events, ModelRequested)) == 1, "one request, sent three times"
    assert len(payloads(events, ModelResponded)) == 1


async def test_the_request_stays_open_while_a_retry_waits() -> None:
    model = Flaky(Overloaded("busy", status=529))
    store = MemoryStore()
    result = await Agent(model, store=store, retry=NO_WAIT).run("hi")
    events = await store.read(result.session_id)
    at_retry = next(i for i, e in enumerate(events) if isinstance(e.payload, ModelFailed))
    _, view = fold(events[: at_retry + 1])
    assert view.model_request_open and view.state == "waiting_model"


async def test_the_last_failure_ends_the_turn_with_the_attempts_it_took() -> None:
    model = Flaky(*(ConnectionFailed("no route") for _ in range(5)))
    store = MemoryStore()

    result = await Agent(model, store=store, retry=NO_WAIT).run("hi")

    assert (result.stop_reason, model.calls) == ("error", 3)
    failed = payloads(await read_checked(store, result.session_id), ModelFailed)
    assert [(f.attempt, f.retrying_in) for f in failed] == [(1, 0.0), (2, 0.0), (3, None)]
    _, view = fold(await store.read(result.session_id))
    assert not view.model_request_open


@pytest.mark.parametrize(
    "error",
    [
        AuthenticationError("bad key", status=401),
        QuotaExhausted("no credit", status=429, retryable=True),
        BadRequest("bad", status=400),
        ContextOverflow("too long", status=400),
        ProviderError("plain"),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_what_cannot_succeed_by_waiting_is_never_retried(error: ProviderError) -> None:
    model = Flaky(error)
    store = MemoryStore()
    result = await Agent(model, store=store, retry=NO_WAIT, context=False).run("hi")
    assert (result.stop_reason, model.calls) == ("error", 1)
    (failed,) = payloads(await store.read(result.session_id), ModelFailed)
    assert failed.retrying_in is None and failed.attempt == 1


async def test_retry_none_makes_one_attempt() -> None:
    model = Flaky(RateLimited("slow down", status=429))
    result = await Agent(model, store="memory:", retry=None).run("hi")
    assert (result.stop_reason, model.calls) == ("error", 1)


async def test_a_plain_agent_retries_by_default() -> None:
    model = Flaky(ServerError("boom", status=500))
    agent = Agent(model, store="memory:")
    assert agent.engine.retry == RetryPolicy()
    result = await agent.run("hi")
    assert (result.stop_reason, model.calls) == ("end_turn", 2)


async def test_retry_after_raises_the_wait() -> None:
    model = Flaky(RateLimited("slow down", status=429, retry_after=0.3))
    store = MemoryStore()
    started = time.monotonic()
    result = await Agent(model, store=store, retry=NO_WAIT).run("hi")
    assert result.stop_reason == "end_turn"
    assert time.monotonic() - started >= 0.3
    (failed,) = payloads(await store.read(result.session_id), ModelFailed)
    assert failed.retrying_in == 0.3


async def test_the_wait_counts_against_max_seconds() -> None:
    model = Flaky(RateLimited("slow down", status=429, retry_after=30.0))
    store = MemoryStore()
    started = time.monotonic()

    result = await Agent(model, store=store, limits=Limits(max_seconds=0.5)).run("hi")

    assert time.monotonic() - started < 10
    assert (result.stop_reason, model.calls) == ("time_limit", 1)
    (failed,) = payloads(await read_checked(store, result.session_id), ModelFailed)
    assert failed.retrying_in == 30.0


async def test_a_gateway_model_is_retried_by_the_gateway_alone_and_visibly() -> None:
    model = Flaky(*(ServerError("boom", status=503) for _ in range(5)))
    gateway = Gateway(model, GatewayConfig(retry=RetryPolicy(max_attempts=2, base_delay=0.0)))
    store = MemoryStore()

    # The agent's own policy would make 6 attempts: the gateway's (2) is the only one applied.
    agent = Agent(gateway.for_session(session_id="s1"), store=store)
    result = await agent.run("hi")

    assert (result.stop_reason, model.calls) == ("error", 2)
    failed = payloads(await read_checked(store, result.session_id), ModelFailed)
    assert [(f.attempt, f.retrying_in) for f in failed] == [(1, 0.0), (2, None)]


def test_every_kind_of_gateway_model_counts_as_retried_by_its_gateway() -> None:
    from tether.retrying import retried_by_gateway
    from tether.runtime.gateways import SessionRouted

    gateway = Gateway(Flaky())
    assert retried_by_gateway(gateway)
    assert retried_by_gateway(gateway.for_session(session_id="s1"))
    assert retried_by_gateway(SessionRouted(gateway))  # a worker's model, routed per session
    assert not retried_by_gateway(Flaky())


async def test_an_error_after_streamed_output_was_shown_is_not_retried() -> None:
    shown: list[Delta] = []
    model = Flaky(Overloaded("overloaded_error", status=200), stream_first=True)
    agent = Agent(model, store="memory:", retry=NO_WAIT, on_delta=shown.append)
    result = await agent.run("hi")
    assert (result.stop_reason, model.calls, len(shown)) == ("error", 1, 1)

    # The same error before any output, or with nobody watching the stream, is retried.
    before_output = Flaky(Overloaded("busy", status=529))
    result = await Agent(before_output, store="memory:", retry=NO_WAIT, on_delta=shown.append).run(
        "hi"
    )
    assert (result.stop_reason, before_output.calls) == ("end_turn", 2)
    unwatched = Flaky(Overloaded("overloaded_error", status=200), stream_first=True)
    result = await Agent(unwatched, store="memory:", retry=NO_WAIT).run("hi")
    assert (result.stop_reason, unwatched.calls) == ("end_turn", 2)


async def test_the_gateway_does_not_retry_after_streamed_output_was_shown_either() -> None:
    shown: list[Delta] = []
    model = Flaky(Overloaded("overloaded_error", status=200), stream_first=True)
    gateway = Gateway(model, GatewayConfig(retry=NO_WAIT))
    result = await Agent(gateway, store="memory:", on_delta=shown.append).run("hi")
    assert (result.stop_reason, model.calls, len(shown)) == ("error", 1, 1)
