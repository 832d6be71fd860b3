"""Responses reasoning with `store: false`, against a loopback server that enforces the API's
rule: after an answer with a reasoning item, a request whose input lacks that item (its
encrypted content intact, right before the item it preceded) is a 400. A 5-step tool session
with reasoning completes through `tether.Agent` on SQLite, and a fresh process resumes it
with requests that repeat the live ones byte for byte."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import tether
from tether import errors
from tether.events import ModelRequested
from tether.messages import Message, Thinking
from tether.providers.base import Delta, ModelRequest
from tether.providers.http import encode_body
from tether.providers.openai_responses import OpenAIResponsesModel
from tether.settings import ModelSettings, Reasoning
from tether.store import SQLiteStore

from .fake_servers import FakeServer, Received, Reply

STEPS = 5
REASONING = ModelSettings(reasoning=Reasoning(effort="low"))


class ReasoningServer:
    """Plays a reasoning model: each answer opens with a reasoning item whose encrypted
    content only this server can make, then `STEPS` calls of `add` one after another, then
    a text. Every item it gave must come back whole, before the item that followed it."""

    def __init__(self, stream: bool) -> None:
        self.stream = stream
        # Each reasoning item given, and the item that came right after it.
        self.given: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def __call__(self, request: Received) -> Reply:
        body = request.json()
        refusal = self._refusal(body)
        if refusal is not None:
            error = {"message": refusal, "type": "invalid_request_error", "code": None}
            return Reply(400, json.dumps({"error": error}).encode())
        n = len(self.given)
        reasoning = {  # keys in the API's order, not sorted
            "id": f"rs_{n}",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": f"Step {n}: add one more."}],
            "encrypted_content": hashlib.sha256(f"secret:{n}".encode()).hexdigest(),
        }
        input_items = body["input"]
        last_user = max(i for i, item in enumerate(input_items) if item.get("role") == "user")
        done = sum(1 for i in input_items[last_user:] if i.get("type") == "function_call_output")
        follower: dict[str, Any]
        if done < STEPS:
            follower = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": "add",
                "arguments": json.dumps({"a": done, "b": 1}),
                "status": "completed",
            }
        else:
            text = {"type": "output_text", "text": f"Done after {done} steps.", "annotations": []}
            follower = {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [text],
            }
        self.given.append((reasoning, follower))
        response = {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": 1,
            "status": "completed",
            "model": body["model"],
            "output": [reasoning, follower],
            "usage": {
                "input_tokens": 100,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 20,
                "output_tokens_details": {"reasoning_tokens": 12},
                "total_tokens": 120,
            },
        }
        if not self.stream:
            return Reply(body=json.dumps(response).encode())
        return Reply(chunks=_events(reasoning, follower, response))

    def _refusal(self, body: dict[str, Any]) -> str | None:
        if body.get("store") is not False:
            return "this server keeps nothing: send store false"
        if body.get("include") != ["reasoning.encrypted_content"]:
            return "reasoning needs include: ['reasoning.encrypted_content'] with store false"
        items = body["input"]
        for reasoning, follower in self.given:
            at = next((i for i, x in enumerate(items) if x.get("id") == reasoning["id"]), None)
            if at is None:
                return (
                    f"Item '{reasoning['id']}' not found. Items are not persisted with store false."
                )
            if items[at].get("encrypted_content") != reasoning["encrypted_content"]:
                return f"The encrypted content of '{reasoning['id']}' could not be verified."
            after = items[at + 1] if at + 1 < len(items) else {}
            if not _follows(after, follower):
                return (
                    f"Item '{reasoning['id']}' of type 'reasoning' was provided without its "
                    "required following item."
                )
        return None


def _follows(sent: dict[str, Any], given: dict[str, Any]) -> bool:
    if given["type"] == "function_call":
        return sent.get("type") == "function_call" and sent.get("call_id") == given["call_id"]
    return sent.get("role") == "assistant"


def _events(reasoning: Any, follower: Any, response: Any) -> list[bytes]:
    partial = {**reasoning, "encrypted_content": reasoning["encrypted_content"][:8]}
    summary = reasoning["summary"][0]["text"]
    events: list[dict[str, Any]] = [
        {"type": "response.output_item.added", "output_index": 0, "item": partial},
        *(
            {
                "type": "response.reasoning_summary_text.delta",
                "item_id": reasoning["id"],
                "output_index": 0,
                "summary_index": 0,
                "delta": piece,
            }
            for piece in (summary[:7], summary[7:])
        ),
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        {"type": "response.output_item.done", "output_index": 1, "item": follower},
        {"type": "response.completed", "response": {**response, "output": []}},
    ]
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


@tether.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _model(url: str, stream: bool) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("o4-mini", api_key="sk-x", base_url=url + "/v1", stream=stream)


# The resumed turn, run by a fresh interpreter: the transcript comes only from the file.
RESUME = """
import asyncio, json, sys
import tether
from tether.providers.openai_responses import OpenAIResponsesModel
from tether.settings import ModelSettings, Reasoning
from tether.store import SQLiteStore

@tether.tool
def add(a: int, b: int) -> int:
    "Add two integers."
    return a + b

async def main(path, url, stream, session_id):
    model = OpenAIResponsesModel("o4-mini", api_key="sk-x", base_url=url + "/v1", stream=stream)
    agent = tether.Agent(model, tools=[add], store=SQLiteStore(path),
                         settings=ModelSettings(reasoning=Reasoning(effort="low")))
    result = await agent.run("and once more", session_id=session_id)
    print(json.dumps([result.stop_reason, result.output]))

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]))
"""


async def _resume_elsewhere(path: Path, url: str, stream: bool, session_id: str) -> Any:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        RESUME,
        str(path),
        url,
        "1" if stream else "0",
        session_id,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return json.loads(out)


def _input_prefix(raw: bytes) -> bytes:
    """The bytes of a request's `input` array up to its closing bracket."""
    body = json.loads(raw)
    assert encode_body(body) == raw  # what we compare is what went on the wire
    return encode_body(body["input"])[:-1]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_reasoning_tool_session_completes_and_resumes_with_the_same_bytes(
    stream: bool, tmp_path: Path
) -> None:
    path = tmp_path / "s.db"
    deltas: list[Delta] = []
    server = ReasoningServer(stream)
    async with FakeServer(server) as fake:
        agent = tether.Agent(
            _model(fake.url, stream),
            tools=[add],
            store=SQLiteStore(str(path)),
            settings=REASONING,
            on_delta=deltas.append,
        )
        first = await agent.run("add one, five times")
        assert first.stop_reason == "end_turn", first.stop_detail
        assert first.output == f"Done after {STEPS} steps."
        again = await _resume_elsewhere(path, fake.url, stream, first.session_id)
        assert again == ["end_turn", f"Done after {STEPS} steps."]

    raws = [r.body for r in fake.requests]
    assert len(raws) == 2 * (STEPS + 1)  # every request was accepted: no 400, no retry
    for before, after in itertools.pairwise(raws):
        # each step re-sends the last one's input, byte for byte, and adds to it
        assert _input_prefix(after).startswith(_input_prefix(before))
    resumed = json.loads(raws[STEPS + 1])["input"]
    assert sum(1 for i in resumed if i.get("type") == "reasoning") == STEPS + 1
    if stream:
        assert Delta("reasoning", "Step 0:") in deltas

    events = await SQLiteStore(str(path)).read(first.session_id)
    requested = [e.payload for e in events if isinstance(e.payload, ModelRequested)]
    assert len(requested) == 2 * (STEPS + 1)
    assert all(r.dropped_reasoning == 0 for r in requested)


async def test_the_server_refuses_a_request_without_the_reasoning_item(tmp_path: Path) -> None:
    """The rule the session above keeps is enforced: the same transcript without its
    reasoning, or with its encrypted content changed, is a 400."""
    server = ReasoningServer(stream=False)
    async with FakeServer(server) as fake:
        model = _model(fake.url, False)
        agent = tether.Agent(model, tools=[add], store=SQLiteStore(str(tmp_path / "s.db")))
        result = await agent.run("add", settings=REASONING)
        assert result.stop_reason == "end_turn", result.stop_detail
        events = await agent.store.read(result.session_id)
        transcript, _ = tether.fold(events)

        def without(keep: bool, content: str) -> tuple[Message, ...]:
            def edit(m: Message) -> Message:
                parts = tuple(
                    Thinking(p.text, p.provider, {**p.data, "encrypted_content": content})
                    if isinstance(p, Thinking)
                    else p
                    for p in m.parts
                    if keep or not isinstance(p, Thinking)
                )
                return Message(m.role, parts)

            return tuple(map(edit, transcript.messages))

        for keep, content, said in ((False, "", "not found"), (True, "forged", "verified")):
            with pytest.raises(errors.BadRequest, match=said):
                await model.complete(
                    ModelRequest(model.name, None, without(keep, content), settings=REASONING)
                )
