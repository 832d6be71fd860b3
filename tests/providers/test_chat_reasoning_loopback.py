"""Reasoning through `tether.Agent` over the Chat and Ollama codecs, against loopback servers
that want it back: DeepSeek's rule (an assistant turn with tool calls must carry its
`reasoning_content`, or the request is a 400) and Ollama's `thinking`. A 3-step tool session
completes, streamed or not, and a fresh agent on the reopened SQLite file re-sends the same
bytes."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.providers.base import Delta, Model
from tether.providers.http import encode_body
from tether.providers.ollama import OllamaModel
from tether.providers.openai_chat import OpenAIChatModel
from tether.store import SQLiteStore

from .fake_servers import FakeServer, Received, Reply

STEPS = 3


class Thinker:
    """Plays a thinking model in the Chat (`field="reasoning_content"`) or Ollama
    (`field="thinking"`) dialect: `STEPS` calls of `add`, then a text, each answer with its
    reasoning; every earlier answer's reasoning must come back on its message."""

    def __init__(self, dialect: str, stream: bool) -> None:
        self.dialect = dialect
        self.field = "thinking" if dialect == "ollama" else "reasoning_content"
        self.stream = stream
        self.given: list[str] = []

    def __call__(self, request: Received) -> Reply:
        body = request.json()
        sent = [m for m in body["messages"] if m["role"] == "assistant"]
        if [m.get(self.field) for m in sent] != self.given[: len(sent)] or len(sent) != len(
            self.given
        ):
            message = f"The {self.field} in the thinking mode must be passed back to the API."
            return Reply(400, json.dumps({"error": {"message": message}}).encode())
        n = len(self.given)
        thought = f"Step {n}: one more."
        self.given.append(thought)
        messages = body["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        done = sum(1 for m in messages[last_user:] if m["role"] == "tool")
        if done < STEPS:
            calls = [{"id": f"call_{n}", "name": "add", "arguments": {"a": done, "b": 1}}]
            content = ""
        else:
            calls, content = [], f"Done after {done} steps."
        if self.dialect == "ollama":
            return self._ollama(thought, content, calls)
        return self._chat(thought, content, calls)

    def _chat(self, thought: str, content: str, calls: list[Any]) -> Reply:
        wire_calls = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
            }
            for c in calls
        ]
        finish = "tool_calls" if calls else "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if not self.stream:
            message = {"role": "assistant", "content": content or None, self.field: thought}
            if wire_calls:
                message["tool_calls"] = wire_calls
            choice = {"index": 0, "message": message, "finish_reason": finish}
            body = {"id": "x", "object": "chat.completion", "choices": [choice], "usage": usage}
            return Reply(body=json.dumps(body).encode())
        deltas: list[Any] = [{self.field: thought[:5]}, {self.field: thought[5:]}]
        if content:
            deltas.append({"content": content})
        if wire_calls:
            deltas.append({"tool_calls": [{"index": 0, **wire_calls[0]}]})
        chunks = [
            {"id": "x", "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
            for d in deltas
        ]
        chunks.append({"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        chunks.append({"id": "x", "choices": [], "usage": usage})
        lines = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]
        return Reply(chunks=[*lines, b"data: [DONE]\n\n"])

    def _ollama(self, thought: str, content: str, calls: list[Any]) -> Reply:
        wire_calls = [
            {"id": c["id"], "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]
        end = {"done": True, "done_reason": "stop", "prompt_eval_count": 10, "eval_count": 5}
        message: dict[str, Any] = {"role": "assistant", "content": content, "thinking": thought}
        if calls:
            message["tool_calls"] = wire_calls
        if not self.stream:
            return Reply(body=json.dumps({"model": "qwen3", "message": message, **end}).encode())
        lines = [
            {"message": {"role": "assistant", "content": "", "thinking": thought[:5]}},
            {"message": {**message, "thinking": thought[5:]}, "done": False},
            {"message": {"role": "assistant", "content": ""}, **end},
        ]
        return Reply(chunks=[json.dumps(line).encode() + b"\n" for line in lines])


@tether.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _model(dialect: str, url: str, stream: bool) -> Model:
    if dialect == "ollama":
        return OllamaModel("qwen3", host=url, stream=stream)
    return OpenAIChatModel("deepseek-chat", base_url=url, stream=stream, provider=dialect)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("dialect", ["openai-compatible", "ollama"])
async def test_a_thinking_tool_session_completes_and_resumes_with_the_same_bytes(
    dialect: str, stream: bool, tmp_path: Path
) -> None:
    path = str(tmp_path / "s.db")
    deltas: list[Delta] = []
    async with FakeServer(Thinker(dialect, stream)) as fake:
        agent = tether.Agent(
            _model(dialect, fake.url, stream),
            tools=[add],
            store=SQLiteStore(path),
            on_delta=deltas.append,
        )
        first = await agent.run("add one, three times")
        assert first.stop_reason == "end_turn", first.stop_detail
        fresh = tether.Agent(
            _model(dialect, fake.url, stream), tools=[add], store=SQLiteStore(path)
        )
        again = await fresh.run("once more", session_id=first.session_id)
        assert again.stop_reason == "end_turn", again.stop_detail
    assert first.output == again.output == f"Done after {STEPS} steps."
    assert len(fake.requests) == 2 * (STEPS + 1)  # no 400 on the way
    bodies = [json.loads(r.body) for r in fake.requests]
    for before, after in itertools.pairwise(bodies):
        sent = encode_body(before["messages"])[:-1]
        assert encode_body(after["messages"]).startswith(sent)
    if stream:
        assert Delta("reasoning", "Step ") in deltas
