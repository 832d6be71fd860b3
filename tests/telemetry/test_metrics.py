"""Metrics fed by the events a process appends: nothing is counted until the process asks,
then model and tool latency, time to first token, tokens and cost by tenant and model, and
outcomes, rendered as Prometheus text that names models, tools and tenants only to the
operator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tether import Agent, tool
from tether.errors import RateLimited
from tether.scheduler.retry import RetryPolicy
from tether.store import MemoryStore
from tether.telemetry import metrics
from tether.telemetry.metrics import Registry
from tether.telemetry.prometheus import render
from tether.testing import Fail, ScriptedModel, call


@tool(effect="read")
def lookup(key: str) -> str:
    """Look a key up."""
    if key == "missing":
        raise KeyError(key)
    return f"value of {key}"


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    fresh = Registry(enabled=True)
    monkeypatch.setattr(metrics, "METRICS", fresh)
    yield fresh


async def _session() -> None:
    attempts: list[int] = []

    def first_call_refused(messages: object) -> object:
        attempts.append(1)
        if len(attempts) == 1:
            return Fail(RateLimited("slow down", status=429, retry_after=0.0))
        return [call("lookup", key="a"), call("lookup", key="missing")]

    model = ScriptedModel([first_call_refused, "done"], price_per_million=(1.0, 2.0))
    agent = Agent(model, tools=[lookup], store=MemoryStore(), retry=RetryPolicy(base_delay=0.01))
    result = await agent.run("look")
    assert result.stop_reason == "end_turn", result.stop_detail


async def test_nothing_is_counted_until_the_process_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    idle = Registry()
    monkeypatch.setattr(metrics, "METRICS", idle)
    await _session()
    assert metrics.observers() == ()
    assert not idle.model_seconds.counts and not idle.tool_calls and not idle.turns


async def test_a_session_feeds_latency_tokens_cost_and_outcomes(registry: Registry) -> None:
    await _session()
    assert sum(registry.model_seconds.counts[("scripted",)]) == 2
    assert sum(registry.tool_seconds.counts[("lookup",)]) == 2
    assert registry.tool_calls == {("lookup", "ok"): 1, ("lookup", "error"): 1}
    assert registry.model_failures == {("scripted", "rate_limited"): 1}
    assert registry.turns == {("end_turn",): 1}
    assert registry.tokens[("default", "scripted", "input")] > 0
    assert registry.cost_usd[("default", "scripted")] > 0


async def test_prometheus_text_names_models_and_tools_only_to_the_operator(
    registry: Registry,
) -> None:
    await _session()
    anyone = "\n".join(render(registry))
    operator = "\n".join(render(registry, names=True))
    assert "scripted" not in anyone and "lookup" not in anyone
    assert 'tether_tool_calls_total{outcome="error"} 1' in anyone
    assert "tether_model_call_seconds_count 2" in anyone
    assert 'tether_tool_calls_total{tool="lookup",outcome="ok"} 1' in operator
    assert 'tether_model_call_seconds_count{model="scripted"} 2' in operator
    # Buckets are cumulative and end at the count.
    buckets = [
        int(line.rsplit(" ", 1)[1])
        for line in anyone.splitlines()
        if line.startswith("tether_tool_call_seconds_bucket")
    ]
    assert buckets == sorted(buckets) and buckets[-1] == 2
    assert 'le="+Inf"} 2' in anyone


async def test_a_streamed_answer_times_its_first_token_and_an_unstreamed_one_is_skipped(
    registry: Registry,
) -> None:
    store = MemoryStore()
    streamed = Agent(ScriptedModel(["hi"], delay=0.02), store=store, on_delta=lambda d: None)
    await streamed.run("go")
    await Agent(ScriptedModel(["hi"], delay=0.02), store=store).run("go")
    assert sum(registry.model_seconds.counts[("scripted",)]) == 2  # both answers timed
    assert sum(registry.first_token_seconds.counts[("scripted",)]) == 1  # one first token
    first = registry.first_token_seconds.sums[("scripted",)]
    assert 0 < first <= registry.model_seconds.sums[("scripted",)]
    anyone = "\n".join(render(registry))
    assert "tether_model_first_token_seconds_count 1" in anyone
    operator = "\n".join(render(registry, names=True))
    assert 'tether_model_first_token_seconds_count{model="scripted"} 1' in operator


async def test_tokens_and_cost_name_their_tenant_only_to_the_operator(registry: Registry) -> None:
    for tenant in ("acme", "globex"):
        model = ScriptedModel(["hi"], price_per_million=(1.0, 2.0))
        await Agent(model, store=MemoryStore(), metadata={"tenant": tenant}).run("go")
    operator = "\n".join(render(registry, names=True))
    for tenant in ("acme", "globex"):
        assert f'tether_tokens_total{{tenant="{tenant}",model="scripted",kind="input"}}' in operator
        assert f'tether_cost_usd_total{{tenant="{tenant}",model="scripted"}}' in operator
    anyone = "\n".join(render(registry))
    assert "tenant" not in anyone and "acme" not in anyone and "globex" not in anyone
    inputs = sum(v for (_, _, kind), v in registry.tokens.items() if kind == "input")
    assert f'tether_tokens_total{{kind="input"}} {inputs}' in anyone


def test_the_grafana_dashboard_reads_only_series_tether_serves_and_each_of_them() -> None:
    """docs/grafana/tether-dashboard.json is built from these names: each it queries must be
    one that /metrics renders (a rename here would leave a panel empty), and each series the
    registry renders has a panel (a new one cannot be forgotten)."""
    import json
    import re
    from pathlib import Path

    from tether.scheduler.figures import _COUNTERS

    dashboard = json.loads(
        (Path(__file__).parents[2] / "docs/grafana/tether-dashboard.json").read_text()
    )
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"tether_[a-z_]+", target["expr"])
    }
    served = {
        line.split()[2] for line in render(Registry(), names=True) if line.startswith("# TYPE")
    }
    histograms = {f"{n}_bucket" for n in served} | {f"{n}_count" for n in served}
    gateway = {f"tether_gateways_{n}_total" for n, _ in _COUNTERS} | {
        "tether_gateways_queue_depth",
        "tether_gateways_in_flight",
        "tether_worker_running",
    }
    assert queried and queried <= served | histograms | gateway, (
        queried - served - histograms - gateway
    )
    unread = {n for n in served if not {n, f"{n}_bucket", f"{n}_count"} & queried}
    assert not unread, unread


async def test_a_log_resumed_from_a_fold_learns_what_its_history_would_teach(
    registry: Registry,
) -> None:
    """Tenant and open calls come from the fold (a snapshot's or one kept), not the events."""
    from tether.events import ModelResponded, SessionCreated, ToolFinished, ToolStarted
    from tether.messages import Message, ToolCall, Usage
    from tether.session.log import SessionLog

    store = MemoryStore()
    log = SessionLog(store, "ses_m")
    asked = Message("assistant", (ToolCall("c1", "lookup", {"key": "a"}),))
    await log.append(
        SessionCreated("scripted", metadata={"tenant": "acme"}),
        ModelResponded(asked, usage=Usage(0, 0)),
        ToolStarted("c1", "lookup"),
    )
    log.keep()  # the next load starts from this fold, reading no event before seq 4
    resumed = await SessionLog.load(store, "ses_m")
    await resumed.append(ToolFinished("c1", "ok", "value", 1500.0))
    await resumed.append(ModelResponded(Message("assistant", ()), usage=Usage(7, 1)))
    assert registry.tool_seconds.sums[("lookup",)] == 1.5  # its start was learned from the fold
    assert registry.tool_calls == {("lookup", "ok"): 1}
    assert registry.tokens[("acme", "scripted", "input")] == 7
