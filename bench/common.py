"""Shared pieces of the benchmarks: the bare-loop baseline and a tiny tool."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any


async def bare_loop(steps: int, model_delay: float = 0.0) -> None:
    """The same work as a tether run with no runtime around it: a list of messages, a fake
    model that asks for one tool call per step, a tool, and the result appended."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]

    async def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        if model_delay:
            await asyncio.sleep(model_delay)
        turn = len(history) // 2
        if turn >= steps:
            return {"role": "assistant", "content": "done"}
        return {
            "role": "assistant",
            "calls": [{"id": f"c{turn}", "name": "echo", "arguments": {"text": "hi"}}],
        }

    async def echo(text: str) -> str:
        return text

    tools: dict[str, Callable[..., Awaitable[str]]] = {"echo": echo}
    while True:
        reply = await model(messages)
        messages.append(reply)
        calls = reply.get("calls")
        if not calls:
            return
        for c in calls:
            result = await tools[c["name"]](**json.loads(json.dumps(c["arguments"])))
            messages.append({"role": "tool", "call_id": c["id"], "content": result})
