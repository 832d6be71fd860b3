"""Running tool calls inside a turn: parallel calls, result order, calls off the event loop,
and every kind of bad call turned into a result the model sees instead of a crash."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from invariants import kinds, payloads, read_checked
from tether import Agent, Event, Message, ToolCall, ToolContext, fold, tool
from tether.events import ModelResponded, ToolFinished, ToolStarted
from tether.providers.base import ModelRequest, ModelResponse
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call
from tether.testing.scripted import Reply
from tether.tools import Tool


def only_tool_results(events: Sequence[Event]) -> list[Message]:
    transcript, _ = fold(events)
    return [m for m in transcript.messages if m.role == "tool"]


async def run_one_turn(tools: Sequence[Tool], first: Reply) -> tuple[MemoryStore, str]:
    """A turn whose first answer is `first`, then a closing text answer."""
    store = MemoryStore()
    agent = Agent(ScriptedModel([first, "done"]), tools=tools, store=store)
    result = await agent.run("go")
    assert result.stop_reason == "end_turn", result.stop_detail
    return store, result.session_id


# -- parallel calls ------------------------------------------------------------------------


@tool(effect="read")
async def nap(n: int) -> str:
    """Sleep 50 ms without blocking."""
    await asyncio.sleep(0.05)
    return f"nap {n}"


@tool(effect="read")
def blocking_nap(n: int) -> str:
    """Sleep 50 ms, blocking its thread."""
    time.sleep(0.05)
    return f"blocking nap {n}"


async def assert_eight_calls_overlap(name: str) -> None:
    tools = [nap, blocking_nap]
    started = time.perf_counter()
    store, sid = await run_one_turn(tools, [call(name, n=i) for i in range(8)])
    elapsed = time.perf_counter() - started

    assert elapsed < 0.3, f"eight 50 ms calls took {elapsed * 1000:.0f} ms: they did not overlap"
    events = await read_checked(store, sid)
    types = [t for t in kinds(events) if t.startswith("tool.")]
    assert types[:8] == ["tool.started"] * 8, f"a call finished before all started: {types}"
    (results,) = only_tool_results(events)
    assert [r.content for r in results.tool_results] == [
        f"{name.replace('_', ' ')} {i}" for i in range(8)
    ]


async def test_eight_async_calls_of_50_ms_run_at_once() -> None:
    await assert_eight_calls_overlap("nap")


async def test_eight_blocking_calls_of_50_ms_run_at_once_off_the_event_loop() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    try:
        await assert_eight_calls_overlap("blocking_nap")
    finally:
        ticking.cancel()
    # Had the sleeps blocked the loop, the ticker could not have run during them at all.
    assert ticks >= 3, f"the event loop ticked only {ticks} times while sync tools slept"


async def test_results_go_back_as_one_message_in_call_order_though_they_finish_reversed() -> None:
    @tool
    async def countdown(n: int) -> str:
        await asyncio.sleep(0.02 * n)  # the first call finishes last
        return f"result {n}"

    store, sid = await run_one_turn([countdown], [call("countdown", n=n) for n in (4, 3, 2, 1)])

    events = await read_checked(store, sid)
    finish_order = [f.content for f in payloads(events, ToolFinished)]
    assert finish_order == ["result 1", "result 2", "result 3", "result 4"]
    (message,) = only_tool_results(events)
    assert [r.content for r in message.tool_results] == [
        "result 4",
        "result 3",
        "result 2",
        "result 1",
    ]
    assert [r.call_id for r in message.tool_results] == [f"call_0_{i}" for i in range(4)]


async def test_a_tool_gets_its_context_with_the_call_id_and_it_is_not_in_the_schema() -> None:
    seen: list[tuple[str, str]] = []

    @tool(effect="idempotent")
    def charge(amount: int, ctx: ToolContext) -> str:
        seen.append((ctx.session_id, ctx.idempotency_key))
        return f"charged {amount}"

    assert list(charge.parameters["properties"]) == ["amount"]
    store, sid = await run_one_turn([charge], [call("charge", amount=5), call("charge", amount=7)])
    assert seen == [(sid, "call_0_0"), (sid, "call_0_1")]
    await read_checked(store, sid)


# -- bad calls become results --------------------------------------------------------------


@tool
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


class RawArgumentsModel:
    """A model whose first answer holds a call with arguments that are not JSON."""

    name = "raw-arguments"

    def __init__(self) -> None:
        self.seen: list[Message] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if len(request.messages) == 1:
            bad = ToolCall("call_bad", "add", {}, raw_arguments='{"a": 1, "b":')
            return ModelResponse(Message("assistant", (bad,)), stop="tool_calls")
        self.seen = list(request.messages)
        return ModelResponse(Message("assistant", ()), stop="end_turn")


async def only_result(tools: Sequence[Tool], reply: Reply) -> ToolFinished:
    store, sid = await run_one_turn(tools, reply)
    events = await read_checked(store, sid)
    (finished,) = payloads(events, ToolFinished)
    (message,) = only_tool_results(events)
    assert message.tool_results[0].is_error == (finished.outcome != "ok")
    assert message.tool_results[0].content == finished.content
    if finished.outcome in ("invalid_input", "unknown_tool"):
        assert not payloads(events, ToolStarted), "a call that cannot run must not be started"
    return finished


async def test_arguments_that_are_not_json_are_answered_invalid_input_and_never_run() -> None:
    store = MemoryStore()
    model = RawArgumentsModel()
    result = await Agent(model, tools=[add], store=store).run("add things")

    assert result.stop_reason == "end_turn"
    events = await read_checked(store, result.session_id)
    assert not payloads(events, ToolStarted)
    (finished,) = payloads(events, ToolFinished)
    assert finished.outcome == "invalid_input"
    assert "not a JSON object" in finished.content and '{"a": 1, "b":' in finished.content
    result_seen = model.seen[-1].tool_results[0]
    assert result_seen.is_error and result_seen.call_id == "call_bad"


async def test_a_wrong_type_is_answered_invalid_input_naming_the_field() -> None:
    finished = await only_result([add], call("add", a="one", b=2))
    assert finished.outcome == "invalid_input"
    assert "a:" in finished.content and "integer" in finished.content


async def test_a_missing_required_argument_is_answered_invalid_input_naming_the_field() -> None:
    finished = await only_result([add], call("add", b=2))
    assert finished.outcome == "invalid_input"
    assert "a: Field required" in finished.content


async def test_an_extra_argument_is_answered_invalid_input_naming_the_field() -> None:
    finished = await only_result([add], call("add", a=1, c=3))
    assert finished.outcome == "invalid_input"
    assert "c: Extra inputs are not permitted" in finished.content


async def test_an_unknown_tool_is_answered_with_the_tools_there_are() -> None:
    @tool
    def multiply(a: int, b: int) -> int:
        return a * b

    finished = await only_result([add, multiply], call("subtract", a=1, b=2))
    assert finished.outcome == "unknown_tool"
    assert "'subtract'" in finished.content and "add, multiply" in finished.content


async def test_a_tool_that_raises_is_answered_error_with_the_exception_text() -> None:
    @tool
    def explode() -> str:
        raise PermissionError("the vault is locked")

    finished = await only_result([explode], call("explode"))
    assert finished.outcome == "error"
    assert "PermissionError: the vault is locked" in finished.content


async def test_a_tool_that_hangs_past_its_timeout_is_answered_timeout() -> None:
    @tool(timeout=0.2)
    async def hang() -> str:
        await asyncio.Event().wait()
        return "never"

    started = time.perf_counter()
    finished = await only_result([hang], call("hang"))
    elapsed = time.perf_counter() - started
    assert finished.outcome == "timeout"
    assert "0.2 s" in finished.content
    assert 0.2 <= elapsed < 5


async def test_a_tool_raising_timeout_error_itself_is_an_error_not_a_timeout() -> None:
    @tool(timeout=10)
    def upstream() -> str:
        raise TimeoutError("the upstream API timed out")

    finished = await only_result([upstream], call("upstream"))
    assert finished.outcome == "error"
    assert "TimeoutError" in finished.content


async def test_an_oversized_output_is_capped_with_a_marker_naming_its_size() -> None:
    @tool(output_cap=1000)
    def dump() -> str:
        return "x" * 5_000_000

    finished = await only_result([dump], call("dump"))
    assert finished.outcome == "ok"
    assert finished.content.startswith("x" * 1000 + "\n")
    assert len(finished.content) < 1200  # the marker names the size and the blob's sha256
    assert "5,000,000 characters" in finished.content and "first 1,000 shown" in finished.content


async def test_one_bad_call_does_not_spoil_its_neighbours() -> None:
    finished = await run_one_turn(
        [add], [call("add", a=1, b=2), call("nope"), call("add", a="x"), call("add", a=40, b=2)]
    )
    events = await read_checked(*finished)
    (message,) = only_tool_results(events)
    assert [r.is_error for r in message.tool_results] == [False, True, True, False]
    assert (message.tool_results[0].content, message.tool_results[3].content) == ("3", "42")
    assert [e.payload.message.role for e in events if isinstance(e.payload, ModelResponded)] == [
        "assistant",
        "assistant",
    ]
