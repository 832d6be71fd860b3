"""Many agents, one backend: twelve sessions of two tenants share one `Gateway`, which holds
the model calls in flight to three and serves interactive work before batch work.

    python examples/gateway.py
    TETHER_EXAMPLE_MODEL=openai:gpt-4o-mini python examples/gateway.py

In a real process there is one gateway per backend, and every agent that calls that backend
goes through it: it also keeps the backend's request and token budgets, learns its limits
from the rate-limit headers, retries, and opens a circuit under a storm of overloads.
"""

from __future__ import annotations

import asyncio
import os
import sys

from tether import Agent, tool
from tether.agent import resolve_model
from tether.providers.base import Model, ModelRequest, ModelResponse
from tether.scheduler import Gateway, GatewayConfig, Priority
from tether.testing import ScriptedModel, call


@tool(effect="read")
def forecast(city: str) -> str:
    """Saturday's forecast for a city."""
    return {"Lisbon": "sunny, 22 °C", "Oslo": "snow, -3 °C"}.get(city, "unknown")


class Watched:
    """The backend, watched: how many calls it is answering at once, at most."""

    def __init__(self, model: Model) -> None:
        self.model, self.now, self.peak = model, 0, 0

    @property
    def name(self) -> str:
        return self.model.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            return await self.model.complete(request)
        finally:
            self.now -= 1


async def main() -> int:
    # One script for every session: it answers from the transcript it is sent. The delay
    # stands in for a network round trip.
    script = ScriptedModel([call("forecast", city="Lisbon"), "Lisbon: sunny, 22 °C."], delay=0.05)
    backend = Watched(resolve_model(os.environ.get("TETHER_EXAMPLE_MODEL") or script))
    gateway = Gateway(backend, GatewayConfig(max_concurrency=3))
    finished: list[str] = []

    async def session(tenant: str, n: int, priority: Priority) -> str:
        name = f"{tenant}-{n}"
        model = gateway.for_session(tenant=tenant, session_id=name, priority=priority)
        agent = Agent(model, tools=[forecast], store="memory:")
        try:
            result = await agent.run("Saturday's weather in Lisbon?")
        finally:
            await agent.close()
        finished.append(f"{name}({priority})")
        return result.stop_reason

    runs = [session("acme", n, "batch") for n in range(8)]
    runs += [session("globex", n, "interactive") for n in range(4)]
    reasons = await asyncio.gather(*runs)
    figures = gateway.figures()
    await gateway.aclose()

    print(f"sessions: {len(reasons)}, stop reasons: {sorted(set(reasons))}")
    print(f"finished in order: {' '.join(finished)}")
    print(
        f"model calls: {figures.requests}, succeeded {figures.succeeded}, retries {figures.retries}"
    )
    print(f"most calls in flight at once: {backend.peak} (limit {figures.max_concurrency})")
    print(f"requests by tenant: {figures.requests_by_tenant}")
    for priority, wait in figures.wait.items():
        if wait.count:
            print(f"queue wait, {priority}: p50 {wait.p50:.3f} s, max {wait.max:.3f} s")
    ok = set(reasons) == {"end_turn"} and backend.peak <= 3
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
