"""The same series through OpenTelemetry's metrics API: a global meter provider, once set,
enables counting and gets every series, named (tenants included, for the operator's
collector), read back here with the SDK's in-memory reader. With none set, nothing counts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics as otel_metrics
from opentelemetry.metrics import _internal as otel_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.util._once import Once

from tether import Agent, tool
from tether.runtime import LocalRuntime
from tether.store import MemoryStore
from tether.telemetry import metrics
from tether.telemetry.metrics import Registry
from tether.testing import ScriptedModel, call
from tether.testing.runtime_conformance import Observer, spec

Points = dict[str, list[tuple[dict[str, Any], Any]]]


@tool(effect="read")
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def _unset() -> None:
    # As for the tracer provider (conftest): the API has no public way to take one away.
    otel_internal._METER_PROVIDER_SET_ONCE = Once()
    otel_internal._METER_PROVIDER = None


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    """A registry nobody enabled: only the meter provider may turn counting on."""
    fresh = Registry()
    monkeypatch.setattr(metrics, "METRICS", fresh)
    yield fresh


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    memory = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[memory])
    _unset()
    otel_metrics.set_meter_provider(provider)
    yield memory
    provider.shutdown()
    _unset()


def _points(reader: InMemoryMetricReader) -> Points:
    data = reader.get_metrics_data()
    assert data is not None
    out: Points = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "tether"
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:  # a histogram point: its count and sum
                        value = (point.count, point.sum)  # type: ignore[union-attr]
                    out.setdefault(metric.name, []).append((dict(point.attributes or {}), value))
    return out


async def test_a_set_meter_provider_gets_every_series_named(
    registry: Registry, reader: InMemoryMetricReader
) -> None:
    model = ScriptedModel(
        [[call("lookup", key="a")], "done"], delay=0.01, price_per_million=(1.0, 2.0)
    )
    agent = Agent(
        model, tools=[lookup], store=MemoryStore(), metadata={"tenant": "acme"},
        on_delta=lambda d: None,
    )  # fmt: skip
    await agent.run("look")
    assert registry.enabled  # the provider turned counting on
    points = _points(reader)

    [(attrs, calls)] = points["tether.model_call"]
    assert attrs == {"model": "scripted"} and calls[0] == 2
    [(attrs, first)] = points["tether.model_first_token"]
    assert attrs == {"model": "scripted"} and first[0] == 2 and first[1] <= calls[1]
    [(attrs, run)] = points["tether.tool_call"]
    assert attrs == {"tool": "lookup"} and run[0] == 1
    tokens = dict((tuple(sorted(a.items())), v) for a, v in points["tether.tokens"])
    key = (("kind", "input"), ("model", "scripted"), ("tenant", "acme"))
    assert tokens[key] == registry.tokens[("acme", "scripted", "input")] > 0
    [(attrs, cost)] = points["tether.cost_usd"]
    assert attrs == {"tenant": "acme", "model": "scripted"} and cost > 0
    assert points["tether.tool_calls"] == [({"tool": "lookup", "outcome": "ok"}, 1)]
    assert points["tether.turns"] == [({"stop_reason": "end_turn"}, 1)]

    # The GenAI conventions' client metrics, for the tools that read those.
    chat = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.system": "scripted",
        "gen_ai.request.model": "scripted",
    }
    assert [(a, v[0]) for a, v in points["gen_ai.client.operation.duration"]] == [(chat, 2)]
    usage = {a["gen_ai.token.type"]: v for a, v in points["gen_ai.client.token.usage"]}
    assert set(usage) == {"input", "output"}
    assert usage["input"] == (2, registry.tokens[("acme", "scripted", "input")])


async def test_worker_gauges_are_read_when_collected(
    registry: Registry, reader: InMemoryMetricReader
) -> None:
    async with LocalRuntime(MemoryStore(), workers=2, poll_interval=0.02) as rt:
        await Observer(rt, await rt.start(spec("echo hi", end_after_turn=True))).settled()
        # The session's end is visible just before its worker lets the slot and lease go.
        for _ in range(500):
            points = _points(reader)
            slots = dict((a["slot"], v) for a, v in points["tether.worker_slots"])
            if points["tether.worker_leases_held"] == [({}, 0)] and slots["used"] == 0:
                break
            await asyncio.sleep(0.01)
    assert sorted(points["tether.worker_slots"], key=str) == [
        ({"slot": "free"}, 2),
        ({"slot": "used"}, 0),
    ]
    assert points["tether.worker_leases_held"] == [({}, 0)]
    states = {a["state"]: v for a, v in points["tether.worker_sessions"]}
    assert states["waiting_tool"] == 0 and set(states) >= {"starting", "waiting_model"}
    assert points["tether.sessions_ended"] == [({"outcome": "completed"}, 1)]


async def test_with_no_meter_provider_set_nothing_is_counted(registry: Registry) -> None:
    _unset()
    assert metrics.observers() == ()  # OpenTelemetry's metrics API is imported, not set
    await Agent(ScriptedModel(["hi"]), store=MemoryStore()).run("go")
    assert not registry.enabled and not registry.model_seconds.counts
