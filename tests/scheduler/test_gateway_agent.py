"""The gateway under a real agent: the loop sees one `Model`; a call the gateway gives up on
ends the turn `error` with its cause, and a cancelled run leaves the queue at once."""

from __future__ import annotations

import asyncio

from tether import Agent, fold
from tether.errors import RateLimited
from tether.events import ModelFailed
from tether.scheduler.clock import run_virtual
from tether.scheduler.gateway import Gateway, GatewayConfig
from tether.scheduler.retry import RetryPolicy
from tether.store import MemoryStore
from tether.testing import Delay, Fail, ScriptedModel, call


def test_an_agent_runs_its_turn_through_the_gateway() -> None:
    async def main() -> None:
        gateway = Gateway(ScriptedModel([call("ping"), "pong received"]))

        def ping() -> str:
            """Answer pong."""
            return "pong"

        agent = Agent(
            gateway.for_session(tenant="t", session_id="s1"), tools=[ping], store=MemoryStore()
        )
        result = await agent.run("ping it")
        assert (result.stop_reason, result.output) == ("end_turn", "pong received")
        assert gateway.figures().succeeded == 2

    run_virtual(main())


def test_a_call_the_gateway_gives_up_on_ends_the_turn_error_after_its_retries_logged() -> None:
    async def main() -> None:
        refusal = RateLimited("HTTP 429: rate limit reached", status=429, retry_after=5.0)
        gateway = Gateway(
            ScriptedModel([Fail(refusal)]), GatewayConfig(retry=RetryPolicy(max_attempts=3))
        )
        store = MemoryStore()
        result = await Agent(gateway, store=store).run("hello")
        assert result.stop_reason == "error"
        assert result.stop_detail is not None and result.stop_detail.startswith("rate_limited")
        events = await store.read(result.session_id)
        failed = [e.payload for e in events if isinstance(e.payload, ModelFailed)]
        # The gateway's two retries are in the log, then the failure that ended the turn.
        assert [(f.attempt, f.retryable) for f in failed] == [(1, True), (2, True), (3, True)]
        assert [f.retrying_in is not None and f.retrying_in >= 5.0 for f in failed] == [
            True,
            True,
            False,
        ]
        assert asyncio.get_running_loop().time() >= 10.0  # two waits of at least 5 s
        assert gateway.figures().attempts == 3

    run_virtual(main())


def test_cancelling_a_run_that_waits_in_the_queue_ends_it_at_once() -> None:
    async def main() -> None:
        gateway = Gateway(
            ScriptedModel([Delay(1000.0, "slow")], repeat_last=True),
            GatewayConfig(max_concurrency=1),
        )
        store = MemoryStore()
        busy = asyncio.create_task(Agent(gateway, store=store).run("first"))
        await asyncio.sleep(1)
        waiting = asyncio.create_task(
            Agent(gateway.for_session(session_id="w"), store=store).run("second")
        )
        await asyncio.sleep(1)
        status = gateway.status("w")
        assert status is not None and status.kind == "queued"
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert asyncio.get_running_loop().time() == 2.0
        assert gateway.status("w") is None and gateway.figures().queue_depth == 0
        stops = []
        for info in await store.sessions():
            _, view = fold(await store.read(info.session_id))
            stops.append(view.stop_reason)
        assert "interrupted" in stops
        busy.cancel()
        await asyncio.gather(busy, return_exceptions=True)

    run_virtual(main())
