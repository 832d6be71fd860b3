"""Every model call of an agent under one retry policy, the model gateway's `RetryPolicy`:
a failed attempt the policy retries, and whose streamed output reached no observer yet, is
reported to the request's `on_retry` (the loop records it as `model.failed` with
`retrying_in`) and sent again after the wait. A model behind a `Gateway` is retried by that
gateway alone, which reports its retries the same way.

Owns the attempts and the waits between them; what is retried and how long to wait is
`tether.scheduler.retry`.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Awaitable, Callable

from tether.errors import ProviderError
from tether.providers.base import Model, ModelRequest, ModelResponse
from tether.scheduler.retry import OutputWatch, RetryPolicy

# What an `Agent` retries with unless told otherwise: the gateway's own default.
DEFAULT_RETRY = RetryPolicy()

_JITTER = random.Random()


def retried_by_gateway(model: object) -> bool:
    """A gateway, or a model bound to one (`Gateway.for_session`, a runtime's router): the
    gateway applies its own policy, and the agent's is not applied on top of it."""
    gateways = sys.modules.get("tether.scheduler.gateway")
    if gateways is None:  # no gateway was ever made in this process (nor imported)
        return False
    kind = gateways.Gateway
    return isinstance(model, kind) or isinstance(getattr(model, "gateway", None), kind)


async def complete(
    model: Model,
    request: ModelRequest,
    policy: RetryPolicy | None,
    *,
    rng: random.Random = _JITTER,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> ModelResponse:
    """The model's answer, or the last error with `attempts` set on it. `policy=None`: one
    attempt. The waits are plain sleeps inside the caller's task, so a deadline or a cancel
    of that task cuts them short."""
    if policy is None or retried_by_gateway(model):
        return await model.complete(request)
    watch = OutputWatch(request)
    attempt = 1
    while True:
        try:
            return await model.complete(watch.request)
        except ProviderError as exc:
            delay = None if watch.seen else policy.delay(exc, attempt, rng)
            if delay is None:
                exc.attempts = attempt
                raise
            if request.on_retry is not None:
                await request.on_retry(exc, attempt, delay)
            await sleep(delay)
            attempt += 1
