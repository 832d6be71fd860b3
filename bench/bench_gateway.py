"""The model gateway under load: 2,000 agents of three tenants (weights 1:1:2, two priorities)
share one backend that answers 429 past its capacity (concurrency, requests and tokens per
minute). Real `Agent`s, real tools, a simulated backend on a virtual clock; then the same
scenario scaled down against a real HTTP server on 127.0.0.1 through the real OpenAI Chat
codec. Prints every figure, with the bare-loop baseline (no gateway, each call retrying on
its own) beside them. Never fails on time: it reports.

    .venv/bin/python bench/bench_gateway.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tether import Agent, Limits, tool
from tether.errors import RateLimited
from tether.messages import JSONObject, JSONValue, user
from tether.providers.base import Model, ModelRequest, ModelResponse
from tether.providers.registry import model_from_string
from tether.scheduler.clock import run_virtual
from tether.scheduler.gateway import Gateway, GatewayConfig
from tether.scheduler.queue import Priority
from tether.store import MemoryStore
from tether.testing import Delay, ScriptedModel
from tether.testing.sim_server import LoopbackServer
from tether.testing.simulate import (
    Answer,
    BackendMeter,
    Capacity,
    Latency,
    MeterTotals,
    SimulatedBackend,
)

WEIGHTS = {"a": 1.0, "b": 1.0, "c": 2.0}


@dataclass(frozen=True)
class World:
    capacity: Capacity
    agents: dict[str, int]  # per tenant
    interactive_every: int  # one agent in this many is interactive
    task_chars: int
    result_chars: int
    steps: tuple[int, int]
    tool_seconds: tuple[float, float]
    interactive_pause: float  # a person reading between turns
    latency: Latency
    duration: float
    warmup: float
    max_output: int = 1024


SIM = World(
    capacity=Capacity(64, 600, 1_200_000),
    agents={"a": 1000, "b": 500, "c": 500},
    interactive_every=100,
    task_chars=6000,
    result_chars=2000,
    steps=(3, 8),
    tool_seconds=(1.0, 4.0),
    interactive_pause=120.0,
    latency=Latency(0.4, 0.01),
    duration=1800.0,
    warmup=120.0,
)
LOOPBACK = World(
    capacity=Capacity(32, 3000, 1_200_000),
    agents={"a": 100, "b": 50, "c": 50},
    interactive_every=50,
    task_chars=2000,
    result_chars=400,
    steps=(3, 6),
    tool_seconds=(0.1, 0.4),
    interactive_pause=10.0,
    latency=Latency(0.05, 0.0005),
    duration=40.0,
    warmup=10.0,
)


@dataclass(frozen=True)
class Scenario:
    name: str
    headers: bool  # the backend sends x-ratelimit-* headers
    told: str  # what the gateway is configured with: "limits", "concurrency", "nothing"


SCENARIOS = (
    Scenario("gateway, backend sends rate-limit headers (limits learned)", True, "concurrency"),
    Scenario("gateway, backend sends only 429 + retry-after (limits configured)", False, "limits"),
    Scenario("gateway, only 429s and limits unknown (AIMD alone)", False, "concurrency"),
    Scenario("baseline: no gateway, each call retries on its own", False, "nothing"),
)


def script(world: World) -> Callable[[str, int, random.Random], Answer]:
    def answer(task: str, turns: int, rng: random.Random) -> Answer:
        steps = int(task.split("steps=", 1)[1].split()[0])
        output = rng.randint(50, 300)
        if turns + 1 >= steps:
            return Answer(output, text="finished")
        seconds = round(rng.uniform(*world.tool_seconds), 3)
        return Answer(output, call=("work", {"seconds": seconds, "size": world.result_chars}))

    return answer


@tool(effect="read")
async def work(seconds: float, size: int) -> str:
    """Work for a while and report."""
    await asyncio.sleep(seconds)
    return "r" * size


@dataclass
class Ledger:
    """Tokens answered per (tenant, priority), with the time, as the agents saw them."""

    entries: list[tuple[float, str, str, int]] = field(default_factory=list)

    def between(self, start: float, end: float) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = defaultdict(int)
        for when, tenant, priority, tokens in self.entries:
            if start <= when <= end:
                out[tenant, priority] += tokens
        return out


class Counted:
    """The agent's model, noting the tokens of each answer in the ledger."""

    def __init__(self, inner: Model, tenant: str, priority: str, ledger: Ledger) -> None:
        self.inner, self.tenant, self.priority, self.ledger = inner, tenant, priority, ledger

    @property
    def name(self) -> str:
        return self.inner.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response = await self.inner.complete(request)
        now = asyncio.get_running_loop().time()
        self.ledger.entries.append((now, self.tenant, self.priority, response.usage.total_tokens))
        return response


class OwnRetries:
    """The baseline: every call on its own, exponential backoff with full jitter, honouring
    retry-after, up to 8 attempts; nothing shared between calls."""

    def __init__(self, inner: Model, seed: int) -> None:
        self.inner, self.rng, self.refused = inner, random.Random(seed), 0

    @property
    def name(self) -> str:
        return self.inner.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        for attempt in range(8):
            try:
                return await self.inner.complete(request)
            except RateLimited as exc:
                if attempt == 7:
                    raise
                wait = self.rng.uniform(0, min(60.0, 2.0**attempt))
                await asyncio.sleep(max(wait, exc.retry_after or 0.0))
        raise AssertionError("unreachable")


@dataclass
class Result:
    scenario: str
    sent: int
    refused: int
    refused_by: dict[str, int]
    utilisation: dict[str, float]
    shares: dict[str, float]
    batch_shares: dict[str, float]
    jain: float
    waits: dict[str, tuple[JSONValue, JSONValue]]
    sessions: int
    errors: int
    cancel_seconds: float
    figures: JSONObject | None


async def run_world(
    world: World, scenario: Scenario, backend: Model, meter: Callable[[], BackendMeter]
) -> Result:
    loop = asyncio.get_running_loop()
    cap = world.capacity
    config = GatewayConfig(
        max_concurrency=cap.max_concurrency,
        weights=WEIGHTS,
        default_output_tokens=world.max_output,
        max_queue=100_000,
    )
    if scenario.told == "limits":
        config = replace(
            config,
            requests_per_minute=cap.requests_per_minute,
            tokens_per_minute=cap.tokens_per_minute,
        )
    gateway = Gateway(backend, config) if scenario.told != "nothing" else None
    ledger, store, rng = Ledger(), MemoryStore(), random.Random(1)
    sessions = errors = 0
    limits = Limits(max_output_tokens=world.max_output, max_steps=20)

    # One `Agent` per tenant and priority runs all their sessions concurrently, as a service
    # would: each Agent keeps one watcher for its store, not one per session.
    runners: dict[tuple[str, Priority], Agent] = {}
    for tenant in world.agents:
        for priority in ("interactive", "batch"):
            name = f"{tenant}/{priority}"
            inner: Model = (
                gateway.for_session(tenant=tenant, session_id=name, priority=priority)
                if gateway is not None
                else OwnRetries(backend, seed=len(runners))
            )
            counted = Counted(inner, tenant, priority, ledger)
            runners[tenant, priority] = Agent(counted, tools=[work], store=store, limits=limits)

    async def agent(tenant: str, n: int, priority: Priority) -> None:
        nonlocal sessions, errors
        name = f"{tenant}-{n}"
        runner = runners[tenant, priority]
        await asyncio.sleep(rng.uniform(0, 5.0))
        while True:
            steps = rng.randint(*world.steps)
            task = f"task {name} steps={steps} " + "t" * world.task_chars
            result = await runner.run(task)
            sessions += 1
            errors += result.stop_reason == "error"
            if priority == "interactive":
                await asyncio.sleep(world.interactive_pause)

    tasks = [
        asyncio.create_task(
            agent(tenant, n, "interactive" if n % world.interactive_every == 0 else "batch")
        )
        for tenant, count in world.agents.items()
        for n in range(count)
    ]
    await asyncio.sleep(world.warmup)
    before, t0 = meter().snapshot(loop.time()), loop.time()
    await asyncio.sleep(world.duration - world.warmup)
    after, t1 = meter().snapshot(loop.time()), loop.time()
    # Every agent is cancelled wherever it is: queued, backing off, in a tool, mid-answer.
    cancel_from = loop.time()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    cancel_seconds = loop.time() - cancel_from
    figures = gateway.figures().to_json() if gateway is not None else None
    for runner in runners.values():
        await runner.close()
    result = summarise(
        world,
        scenario,
        before,
        after,
        t1 - t0,
        ledger.between(t0, t1),
        figures,
        meter().snapshot(loop.time()),
    )
    result.sessions, result.errors, result.cancel_seconds = sessions, errors, cancel_seconds
    return result


def summarise(
    world: World,
    scenario: Scenario,
    before: MeterTotals,
    after: MeterTotals,
    window: float,
    tokens: dict[tuple[str, str], int],
    figures: JSONObject | None,
    total: MeterTotals,
) -> Result:
    utilisation = BackendMeter(world.capacity, 0.0).utilisation(before, after, window)
    refused = sum(total.refused.values())
    by_tenant = {t: sum(v for (tt, _), v in tokens.items() if tt == t) for t in WEIGHTS}
    batch = {t: tokens.get((t, "batch"), 0) for t in WEIGHTS}
    a, b = batch["a"], batch["b"]
    jain = (a + b) ** 2 / (2 * (a * a + b * b)) if a or b else 0.0
    waits: dict[str, tuple[JSONValue, JSONValue]] = {}
    wait_figures = figures.get("wait") if figures is not None else None
    if isinstance(wait_figures, dict):
        for priority, wait in wait_figures.items():
            if isinstance(wait, dict):
                waits[priority] = (wait.get("p50"), wait.get("p99"))
    return Result(
        scenario=scenario.name,
        sent=total.requests + refused,
        refused=refused,
        refused_by=dict(total.refused),
        utilisation=utilisation,
        shares={t: v / max(1, sum(by_tenant.values())) for t, v in by_tenant.items()},
        batch_shares={t: v / max(1, sum(batch.values())) for t, v in batch.items()},
        jain=jain,
        waits=waits,
        sessions=0,
        errors=0,
        cancel_seconds=0.0,
        figures=figures,
    )


def report(title: str, world: World, results: list[Result], wall: list[float], clock: str) -> None:
    cap = world.capacity
    print(f"\n== {title}")
    print(
        f"backend: {cap.max_concurrency} concurrent, {cap.requests_per_minute} RPM, "
        f"{cap.tokens_per_minute:,} TPM; agents {world.agents} weights {WEIGHTS}; "
        f"1 in {world.interactive_every} interactive; measured over "
        f"[{world.warmup:g} s, {world.duration:g} s]"
    )
    for result, seconds in zip(results, wall, strict=True):
        u = result.utilisation
        binding = max(u.values())
        print(f"\n-- {result.scenario}   ({seconds:.1f} s of wall time)")
        print(
            f"  utilisation of the binding limit {binding:6.1%}   "
            f"(tokens {u['tokens']:.1%}, requests {u['requests']:.1%}, "
            f"concurrency {u['concurrency']:.1%})"
        )
        rate = result.refused / max(1, result.sent)
        print(
            f"  429s caused: {result.refused} of {result.sent} requests sent ({rate:.2%}); "
            f"by limit {result.refused_by}"
        )
        print(
            "  token shares, batch (backlogged): "
            + "  ".join(f"{t} {s:.1%}" for t, s in result.batch_shares.items())
            + "   target a 25% b 25% c 50%"
        )
        print("  token shares, all: " + "  ".join(f"{t} {s:.1%}" for t, s in result.shares.items()))
        print(f"  Jain's index, equal-weight tenants a and b (batch): {result.jain:.4f}")
        for priority, (p50, p99) in result.waits.items():
            print(f"  queue wait {priority:11s}: p50 {fmt(p50)}  p99 {fmt(p99)}")
        print(
            f"  agent turns ended: {result.sessions}, {result.errors} of them `error` "
            f"(the model call gave up); cancelling every agent at the end "
            f"took {result.cancel_seconds:.3f} s of {clock} time"
        )
        if result.figures is not None:
            print("  figures: " + json.dumps(result.figures, sort_keys=True))


def fmt(seconds: JSONValue) -> str:
    return f"{seconds:7.2f}s" if isinstance(seconds, float | int) else "   n/a  "


def simulate(world: World) -> None:
    results, wall = [], []
    for scenario in SCENARIOS:
        backend = SimulatedBackend(
            world.capacity, headers=scenario.headers, latency=world.latency, script=script(world)
        )
        started = time.perf_counter()
        results.append(run_virtual(run_world(world, scenario, backend, backend.meter)))
        wall.append(time.perf_counter() - started)
    report("simulation on a virtual clock", world, results, wall, "virtual")


async def on_loopback(world: World, scenario: Scenario) -> Result:
    async with LoopbackServer(
        world.capacity, headers=scenario.headers, latency=world.latency, script=script(world)
    ) as server:
        model = model_from_string(f"openai-compatible:sim@{server.base_url}")

        def meter() -> BackendMeter:
            assert server.meter is not None
            return server.meter

        try:
            return await run_world(world, scenario, model, meter)
        finally:
            await model.aclose()  # type: ignore[attr-defined]


def loopback(world: World) -> None:
    results, wall = [], []
    for scenario in SCENARIOS[:2]:
        started = time.perf_counter()
        results.append(asyncio.run(on_loopback(world, scenario)))
        wall.append(time.perf_counter() - started)
    title = "real HTTP server on 127.0.0.1, OpenAI Chat codec, real time"
    report(title, world, results, wall, "real")


async def starve(
    batch_aging: float | None, duration: float
) -> tuple[list[float], list[float], int]:
    """Interactive sessions that ask again as soon as they are answered keep an 8-wide
    backend (1 s a call) saturated; a batch call arrives every 5 s. The waits of both kinds
    (a batch call never served counts its time in the queue at the end)."""
    model = ScriptedModel([lambda messages: Delay(1.0, "ok")])
    config = GatewayConfig(max_concurrency=8, batch_aging=batch_aging)
    gateway = Gateway(model, config)
    loop = asyncio.get_running_loop()
    interactive: list[float] = []
    batch: list[float] = []
    waiting: dict[int, float] = {}
    request = ModelRequest("m", None, [user("hi")], max_output_tokens=16)

    async def person(n: int) -> None:
        session = gateway.for_session(session_id=f"i{n}")
        while loop.time() < duration:
            asked = loop.time()
            await session.complete(request)
            interactive.append(loop.time() - asked - 1.0)

    async def job(n: int) -> None:
        waiting[n] = loop.time()
        await gateway.for_session(session_id=f"b{n}", priority="batch").complete(request)
        batch.append(loop.time() - waiting.pop(n) - 1.0)

    people = [asyncio.create_task(person(n)) for n in range(12)]
    jobs = []
    while loop.time() < duration:
        jobs.append(asyncio.create_task(job(len(jobs))))
        await asyncio.sleep(5.0)
    await asyncio.gather(*people)
    served = len(batch)
    batch.extend(loop.time() - since for since in waiting.values())
    for task in jobs:
        task.cancel()
    await asyncio.gather(*jobs, return_exceptions=True)
    return interactive, batch, served


def aging(duration: float) -> None:
    print("\n== priority aging: interactive load that alone saturates the backend")
    print(
        "backend: 8 concurrent, 1 s a call; 12 interactive sessions asking back to back, "
        f"a batch call every 5 s, for {duration:g} s of virtual time; queue waits"
    )
    for label, batch_aging in (("strict priority (baseline)", None), ("aging 30 s", 30.0),
                               ("aging 60 s (default)", 60.0)):  # fmt: skip
        interactive, batch, served = run_virtual(starve(batch_aging, duration))
        waits = statistics.quantiles(interactive, n=100)
        print(
            f"  {label:28s} interactive p50 {waits[49]:5.2f}s p99 {waits[98]:5.2f}s   "
            f"batch p50 {statistics.median(batch):7.1f}s max {max(batch):7.1f}s, "
            f"served {served} of {len(batch)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs, for a smoke test")
    args = parser.parse_args()
    sim, real = SIM, LOOPBACK
    if args.quick:
        sim = replace(sim, duration=600.0)
        real = replace(real, duration=20.0, warmup=5.0)
    aging(600.0 if args.quick else 3600.0)
    simulate(sim)
    loopback(real)


if __name__ == "__main__":
    main()
