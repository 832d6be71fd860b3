"""Prompt caching on Anthropic: a breakpoint on the stable prefix (the system prompt, or the
last tool when there is none) and a rolling one on the latest message, so each step reads
the conversation so far from the cache. Billed by a fake that keeps the cache as the API
documents it (anthropic_cache.py). OpenAI caches prefixes on its own; tether names the
session as `prompt_cache_key` so one session's requests go where its prefix is."""

from __future__ import annotations

import json

import anthropic.types
import pydantic
import pytest

import tether
from tether.messages import Message, Text, Thinking, ToolCall, ToolResult, tool_results, user
from tether.providers.anthropic import AnthropicModel, encode_request
from tether.providers.base import Caller
from tether.providers.openai_chat import encode_request as chat_request
from tether.settings import ModelSettings

from .anthropic_cache import PromptCache
from .fake_servers import FakeServer, Received, Reply
from .test_agent_loopback import add
from .test_loopback import PLAN, build
from .toy_dialects import HANDLERS, ToyModel
from .transcripts import QUESTION, WEATHER, request

PARAMS = pydantic.TypeAdapter(anthropic.types.MessageCreateParams)
EPHEMERAL = {"type": "ephemeral"}


def test_the_system_prompt_and_the_latest_message_carry_the_breakpoints() -> None:
    body = encode_request(
        "claude-sonnet-4-5", request((user(QUESTION),), (WEATHER,), system="Be brief.")
    )
    PARAMS.validate_python(body)
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
    assert "cache_control" not in body["tools"][0]  # the system's breakpoint covers them
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": QUESTION, "cache_control": EPHEMERAL}],
        }
    ]


def test_without_a_system_prompt_the_last_tool_holds_the_prefix_breakpoint() -> None:
    body = encode_request("claude-sonnet-4-5", request((user(QUESTION),), (WEATHER,)))
    PARAMS.validate_python(body)
    assert body["tools"][-1]["cache_control"] == EPHEMERAL
    assert "system" not in body


def test_the_rolling_breakpoint_skips_what_cannot_carry_one() -> None:
    turn = Message(
        "assistant",
        (Thinking("hmm", "anthropic", {"signature": "s"}), ToolCall("t1", "get_weather", {})),
    )
    results = tool_results([ToolResult("t1", "sunny"), ToolResult("t2", "")])
    body = encode_request("claude-sonnet-4-5", request((user("hi"), turn, results)))
    PARAMS.validate_python(body)
    last = body["messages"][-1]["content"]
    assert "cache_control" not in last[0] and last[1]["cache_control"] == EPHEMERAL
    # A turn ending in thinking alone: the mark goes on the last block that can hold one.
    thinking_last = Message("assistant", (Text("so"), Thinking("", "anthropic", {"redacted": "R"})))
    body = encode_request("claude-sonnet-4-5", request((user("hi"), thinking_last)))
    assert body["messages"][-1]["content"][0] == {
        "type": "text",
        "text": "so",
        "cache_control": EPHEMERAL,
    }


def test_cache_false_sends_no_breakpoint() -> None:
    body = encode_request(
        "claude-sonnet-4-5",
        request(
            (user(QUESTION),),
            (WEATHER,),
            system="Be brief.",
            settings=ModelSettings(cache=False),
        ),
    )
    assert "cache_control" not in json.dumps(body)


@tether.tool(effect="read")
def read_page(n: int) -> str:
    """Read one page of the manual."""
    return f"page {n}: " + "lorem ipsum dolor sit amet " * 150


def _billing(cache: PromptCache, steps: int) -> object:
    def handle(received: Received) -> Reply:
        body = received.json()
        done = sum(1 for m in body["messages"] if m["role"] == "user") - 1
        content: list[object] = (
            [{"type": "tool_use", "id": f"toolu_{done}", "name": "read_page", "input": {"n": done}}]
            if done < steps
            else [{"type": "text", "text": "read them all"}]
        )
        answer = {
            "id": f"msg_{done}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": "tool_use" if done < steps else "end_turn",
            "usage": {**cache.usage(body), "output_tokens": 20},
        }
        return Reply(200, json.dumps(answer).encode(), {"content-type": "application/json"})

    return handle


@pytest.mark.parametrize("cached", [True, False], ids=["cache", "no-cache"])
async def test_a_long_session_pays_full_price_only_for_what_is_new(cached: bool) -> None:
    async with FakeServer(_billing(PromptCache(), steps=12)) as server:
        model = AnthropicModel("claude-sonnet-4-5", api_key="sk-loopback", base_url=server.url)
        agent = tether.Agent(
            model,
            tools=[read_page],
            system="You read manuals. " * 300,
            store="memory:",
            settings=ModelSettings(cache=cached),
        )
        result = await agent.run("Read pages 0 to 11.")
    assert result.stop_reason == "end_turn", result.stop_detail
    usage = result.usage
    full_price = usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens
    if cached:
        # Every step after the first reads the conversation before it from the cache.
        assert usage.cache_read_tokens > 0.8 * usage.input_tokens
        assert full_price < 0.05 * usage.input_tokens
    else:
        assert usage.cache_read_tokens == usage.cache_write_tokens == 0
        assert full_price == usage.input_tokens


@pytest.mark.parametrize("dialect", ["openai", "openai-responses"])
async def test_openai_requests_carry_their_session_as_the_prompt_cache_key(dialect: str) -> None:
    async with FakeServer(HANDLERS[dialect](ToyModel(PLAN))) as server:
        model = build(dialect, server.url, False)
        result = await tether.Agent(model, tools=[add], store="memory:").run("add them")
        uncached = tether.Agent(
            model, tools=[add], store="memory:", settings=ModelSettings(cache=False)
        )
        await uncached.run("add them")
    keys = [r.json().get("prompt_cache_key") for r in server.requests]
    assert keys == [result.session_id] * 2 + [None] * 2


def test_chat_servers_other_than_openai_get_no_prompt_cache_key() -> None:
    caller = Caller("ses_1")
    for provider in ("openrouter", "vllm", "openai-compatible"):
        body = chat_request("m", request((user("hi"),), caller=caller), provider=provider)
        assert "prompt_cache_key" not in body
    assert chat_request("m", request((user("hi"),), caller=caller))["prompt_cache_key"] == "ses_1"
