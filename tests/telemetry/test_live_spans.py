"""Spans emitted live through the global tracer provider, as the log is appended."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tether import Agent, tool
from tether.errors import HandedOver
from tether.events import Event, ModelRequested, SessionCreated, UserMessage
from tether.store import MemoryStore, SQLiteStore
from tether.telemetry import build_spans, metrics
from tether.telemetry.conventions import CONTENT_VARIABLE
from tether.telemetry.ids import time_ns
from tether.telemetry.live import observers
from tether.testing import Hang, ScriptedModel, call

from . import scenario


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


async def test_a_session_gives_the_span_tree_with_genai_attributes(
    exporter: InMemorySpanExporter,
) -> None:
    store = MemoryStore()
    result = await scenario.agent(store).run("go")
    assert result.stop_reason == "end_turn"
    spans = exporter.get_finished_spans()
    events = await store.read(result.session_id)
    created = events[0].payload
    assert isinstance(created, SessionCreated)
    trace_id = int(str(created.metadata["trace_id"]), 16)
    assert {s.context.trace_id for s in spans} == {trace_id}
    assert len({s.context.span_id for s in spans}) == len(spans)

    [turn] = by_name(spans, "invoke_agent")
    assert turn.parent is None
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.conversation.id"] == result.session_id
    assert turn.attributes["tether.stop_reason"] == "end_turn"

    chats = by_name(spans, "chat scripted")
    assert len(chats) == 6  # four on the main thread, two on the researcher's
    for chat in chats:
        assert chat.kind is SpanKind.CLIENT
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "scripted"
        assert chat.attributes["gen_ai.system"] == "scripted"
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert chat.attributes["gen_ai.response.finish_reasons"][0] in ("tool_calls", "end_turn")
    main_chats = [c for c in chats if parent_of(c) == turn.context.span_id]
    assert len(main_chats) == 4
    assert turn.attributes["gen_ai.usage.output_tokens"] == sum(
        c.attributes["gen_ai.usage.output_tokens"] for c in chats
    )

    [retry] = by_name(spans, "retry scripted")
    [retried] = [c for c in chats if c.attributes.get("tether.retries") == 1]
    assert parent_of(retry) == retried.context.span_id
    assert retry.attributes["tether.retry.attempt"] == 1
    assert retry.attributes["error.type"] == "provider_error"
    assert retry.attributes["http.response.status_code"] == 529
    assert retry.status.status_code is StatusCode.ERROR
    assert retried.status.status_code is StatusCode.UNSET  # the call itself succeeded

    tools = {s.name: s for s in spans if s.name.startswith("execute_tool")}
    assert set(tools) == {"execute_tool lookup", "execute_tool researcher", "execute_tool save"}
    lookups = by_name(spans, "execute_tool lookup")
    assert len(lookups) == 2  # the main thread's and the researcher's
    save = tools["execute_tool save"]
    assert parent_of(save) == turn.context.span_id
    assert save.attributes["gen_ai.operation.name"] == "execute_tool"
    assert save.attributes["gen_ai.tool.name"] == "save"
    assert save.attributes["gen_ai.tool.call.id"] == "call_2_0"
    assert save.attributes["tether.tool.effect"] == "write"
    assert save.attributes["tether.tool.outcome"] == "ok"

    [thread] = by_name(spans, "invoke_agent researcher")
    assert parent_of(thread) == tools["execute_tool researcher"].context.span_id
    assert thread.attributes["gen_ai.agent.name"] == "researcher"
    assert thread.attributes["tether.thread"] == "researcher-1"
    inside = [s for s in spans if parent_of(s) == thread.context.span_id]
    assert sorted(s.name for s in inside) == [
        "chat scripted",
        "chat scripted",
        "execute_tool lookup",
    ]

    for span in spans:  # content is left out unless opted in
        assert not {
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        } & set(span.attributes or {})
        assert span.start_time is not None and span.end_time is not None
        assert span.start_time <= span.end_time

    # After the fact, from the log alone: the same spans, the same ids.
    rebuilt = build_spans(events)
    assert sorted(
        (r.name, r.span_id, r.parent_id, r.start_ns, r.end_ns) for r in rebuilt
    ) == sorted((s.name, s.context.span_id, parent_of(s), s.start_time, s.end_time) for s in spans)


async def test_content_is_recorded_when_opted_in(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONTENT_VARIABLE, "true")
    await scenario.agent(MemoryStore()).run("go")
    spans = exporter.get_finished_spans()
    [save] = by_name(spans, "execute_tool save")
    assert json.loads(str(save.attributes["gen_ai.tool.call.arguments"])) == {"text": "t"}
    assert save.attributes["gen_ai.tool.call.result"] == "saved"
    [turn] = by_name(spans, "invoke_agent")
    assert "go" in str(turn.attributes["gen_ai.input.messages"])


async def test_a_crashed_and_resumed_session_gives_one_trace(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    path = str(tmp_path / "tether.db")
    asked = asyncio.Event()

    def watch(event: Event) -> None:
        if isinstance(event.payload, ModelRequested) and event.seq > 3:
            asked.set()

    first_store = SQLiteStore(path)
    first = Agent(
        ScriptedModel([call("lookup", q="a"), Hang()]),
        tools=[scenario.lookup],
        store=first_store,
        on_event=watch,
    )
    running = asyncio.create_task(first.run("go"))
    await asked.wait()
    session_id = next(iter(first.runs))
    assert await first.hand_over(session_id)  # the process stops mid-call, as in a crash
    with pytest.raises(HandedOver):
        await running
    await first.close()
    before = exporter.get_finished_spans()
    assert [s.name for s in before] == ["chat scripted", "execute_tool lookup"]

    second = Agent(
        ScriptedModel([call("lookup", q="a"), "done"]),
        tools=[scenario.lookup],
        store=SQLiteStore(path),
    )
    result = await second.resume(session_id)
    await second.close()
    assert result.stop_reason == "end_turn"
    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    assert len({s.context.span_id for s in spans}) == len(spans)
    [turn] = by_name(spans, "invoke_agent")  # one turn, begun by the first process
    reader = SQLiteStore(path)
    events = await reader.read(session_id)
    await reader.close()
    [asked_first] = [e for e in events if isinstance(e.payload, UserMessage)]
    assert turn.start_time == time_ns(asked_first)
    assert turn.end_time == time_ns(events[-1])
    assert {parent_of(s) for s in spans if s is not turn} == {turn.context.span_id}
    assert [s.attributes.get("error.type") for s in by_name(spans, "chat scripted")] == [
        None,
        "tether.abandoned",  # the call the first process was making when it stopped
        None,
    ]


async def test_an_approval_wait_is_a_span_from_request_to_decision(
    exporter: InMemorySpanExporter,
) -> None:
    @tool(needs_approval=True)
    async def deploy(target: str) -> str:
        """Deploy."""
        return "deployed"

    agent = Agent(
        ScriptedModel([call("deploy", target="prod"), "deployed it"]),
        tools=[deploy],
        store=MemoryStore(),
    )
    first = await agent.run("ship it")
    assert first.stop_reason == "awaiting_approval"
    assert [s.name for s in exporter.get_finished_spans()] == ["chat scripted", "invoke_agent"]
    await agent.decide(first.session_id, "call_0_0", allow=True)
    assert (await agent.resume(first.session_id)).stop_reason == "end_turn"
    spans = exporter.get_finished_spans()
    [wait] = by_name(spans, "approval deploy")
    turns = by_name(spans, "invoke_agent")
    assert len(turns) == 2  # the turn that asked, and the one the decision began
    assert parent_of(wait) == turns[0].context.span_id
    assert wait.attributes["tether.approval.allowed"] is True
    assert wait.attributes["gen_ai.tool.call.id"] == "call_0_0"
    [deployed] = by_name(spans, "execute_tool deploy")
    assert parent_of(deployed) == turns[1].context.span_id
    assert wait.end_time is not None and deployed.start_time is not None
    assert wait.end_time <= deployed.start_time


async def test_with_no_tracer_provider_set_a_log_gets_no_span_emitter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Metrics are process-wide (a server test may have enabled them): counted apart here.
    monkeypatch.setattr(metrics, "METRICS", metrics.Registry())
    assert observers() == ()  # OpenTelemetry is imported here, but no provider is set


def test_an_agent_run_imports_no_opentelemetry() -> None:
    code = (
        "import asyncio, sys\n"
        "from tether import Agent\n"
        "from tether.testing import ScriptedModel\n"
        "r = asyncio.run(Agent(ScriptedModel(['hi']), store='memory:').run('go'))\n"
        "assert r.output == 'hi', r\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
