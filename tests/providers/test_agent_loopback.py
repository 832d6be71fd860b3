"""The whole loop (`tether.Agent`) over each codec and a real loopback server: tools run from
parallel calls, answers come back, and failures end the turn with a named stop reason."""

from __future__ import annotations

import json

import pytest

import tether
from tether.providers.base import Delta

from .conftest import wire_bytes
from .fake_servers import FakeServer, Received, Reply
from .test_loopback import DIALECTS, PLAN, build
from .toy_dialects import HANDLERS, ToyModel

ran: list[tuple[int, int]] = []


@tether.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    ran.append((a, b))
    return a + b


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_an_agent_runs_parallel_calls_and_answers(dialect: str, stream: bool) -> None:
    deltas: list[Delta] = []
    async with FakeServer(HANDLERS[dialect](ToyModel(PLAN))) as server:
        model = build(dialect, server.url, stream)
        agent = tether.Agent(
            model, tools=[add], system="Use the tools.", store="memory:", on_delta=deltas.append
        )
        result = await agent.run("add 2+3 and 40+2")
    assert result.stop_reason == "end_turn", result.stop_detail
    assert result.output.strip() == "Results: 5, 42"
    assert sorted(ran) == [(2, 3), (40, 2)]
    assert len(server.requests) == 2
    assert result.usage.output_tokens == 40
    if dialect == "ollama":
        assert result.cost_usd is None
    else:
        assert result.cost_usd is not None and result.cost_usd > 0
    assert bool(deltas) is stream


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_429_ends_the_turn_with_a_named_error(dialect: str) -> None:
    body = json.dumps(
        {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}
    ).encode()
    async with FakeServer(lambda _: Reply(429, body, {"retry-after": "2"})) as server:
        model = build(dialect, server.url, False)
        agent = tether.Agent(model, tools=[add], store="memory:", retry=None)
        result = await agent.run("add")
    assert len(server.requests) == 1
    assert result.stop_reason == "error"
    assert "rate_limited" in (result.stop_detail or "")
    assert ran == []


async def test_a_call_cut_by_the_output_limit_never_runs() -> None:
    body = wire_bytes("anthropic-stream-max-tokens-incomplete-tool-use.sse")

    @tether.tool
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        ran.append((0, 0))
        return "written"

    async with FakeServer(lambda _: Reply(chunks=[body])) as server:
        agent = tether.Agent(
            build("anthropic", server.url, True), tools=[write_file], store="memory:"
        )
        result = await agent.run("write notes")
    assert result.stop_reason == "output_limit"
    assert ran == []


async def test_malformed_arguments_go_back_to_the_model_as_invalid_input() -> None:
    def handle(request: Received) -> Reply:
        body = request.json()
        if body["messages"][-1]["role"] == "tool":
            message = {
                "role": "assistant",
                "content": "Sorry: " + body["messages"][-1]["content"][:40],
            }
            finish = "stop"
        else:
            call = {
                "id": "call_bad",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 2, "b": '},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        reply = {
            "id": "x",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4.1",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        return Reply(body=json.dumps(reply).encode())

    async with FakeServer(handle) as server:
        agent = tether.Agent(build("openai", server.url, False), tools=[add], store="memory:")
        result = await agent.run("add")
    assert ran == []
    assert result.stop_reason == "end_turn"
    sent_back = server.requests[1].json()["messages"]
    assert sent_back[-2]["tool_calls"][0]["function"]["arguments"] == '{"a": 2, "b": '
    assert sent_back[-1]["role"] == "tool" and sent_back[-1]["tool_call_id"] == "call_bad"
