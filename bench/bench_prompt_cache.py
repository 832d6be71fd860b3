"""Prompt caching over a 50-step Anthropic session: input tokens billed at full price, read
from the cache and written to it, with tether's cache breakpoints and without, printed side
by side, with the cost the catalog prices them at.

    .venv/bin/python bench/bench_prompt_cache.py

The model is a loopback Anthropic (tests/providers/fake_servers.py) that bills each request
by the cache rules the API documents (tests/providers/anthropic_cache.py): each step asks
for one tool call whose result is about 1,000 tokens, under a system prompt of about 1,500.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

import tether
from providers.anthropic_cache import PromptCache
from providers.fake_servers import FakeServer, Received, Reply
from tether.providers.anthropic import AnthropicModel
from tether.settings import ModelSettings

STEPS = 50
MODEL = "claude-sonnet-4-5"


@tether.tool(effect="read")
def read_page(n: int) -> str:
    """Read one page of the manual."""
    return f"page {n}: " + "the quick brown fox jumps over the lazy dog " * 90


def _handler(cache: PromptCache):  # type: ignore[no-untyped-def]
    def handle(received: Received) -> Reply:
        body = received.json()
        done = sum(1 for m in body["messages"] if m["role"] == "user") - 1
        more = done < STEPS
        content = (
            [{"type": "tool_use", "id": f"toolu_{done}", "name": "read_page", "input": {"n": done}}]
            if more
            else [{"type": "text", "text": "done"}]
        )
        answer = {
            "id": f"msg_{done}",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": content,
            "stop_reason": "tool_use" if more else "end_turn",
            "usage": {**cache.usage(body), "output_tokens": 30},
        }
        return Reply(200, json.dumps(answer).encode(), {"content-type": "application/json"})

    return handle


async def session(cached: bool) -> tether.RunResult[str]:
    async with FakeServer(_handler(PromptCache())) as server:
        model = AnthropicModel(MODEL, api_key="sk-bench", base_url=server.url)
        agent = tether.Agent(
            model,
            tools=[read_page],
            system="You read manuals page by page and never skip one. " * 110,
            store="memory:",
            settings=ModelSettings(cache=cached),
            limits=tether.Limits(max_steps=STEPS + 5),
        )
        result = await agent.run(f"Read pages 0 to {STEPS - 1}.")
        await model.aclose()
    assert result.stop_reason == "end_turn", result.stop_detail
    return result


async def main() -> None:
    rows = [("with caching", await session(True)), ("without", await session(False))]
    print(f"{STEPS}-step Anthropic session ({MODEL}), input tokens over the session:")
    print(
        f"{'':14}{'full price':>12}{'cache read':>12}{'cache write':>13}{'total':>10}{'cost':>10}"
    )
    for name, result in rows:
        u = result.usage
        full = u.input_tokens - u.cache_read_tokens - u.cache_write_tokens
        cost = f"${result.cost_usd:.3f}" if result.cost_usd is not None else "?"
        print(
            f"{name:14}{full:>12,}{u.cache_read_tokens:>12,}{u.cache_write_tokens:>13,}"
            f"{u.input_tokens:>10,}{cost:>10}"
        )
    on, off = rows[0][1], rows[1][1]
    if on.cost_usd and off.cost_usd:
        print(f"caching bills {on.cost_usd / off.cost_usd:.0%} of the uncached cost")


if __name__ == "__main__":
    asyncio.run(main())
