"""Anthropic extended thinking with tools, through the whole loop, against a loopback server
that enforces the API's rule (thinking_fake.py): each tool-use turn goes back with its
thinking blocks, signatures and redacted data intact, or the answer is a 400. A session that
crashes mid-way resumes in another process and sends the very bytes an uncrashed one does."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tether.events import ModelResponded
from tether.providers.base import Delta
from tether.store import SQLiteStore

from . import thinking_worker
from .fake_servers import FakeServer, Received, Reply
from .thinking_fake import STEPS, handle

WORKER = Path(thinking_worker.__file__)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_thinking_session_with_tools_runs_to_its_answer(
    stream: bool, tmp_path: Path
) -> None:
    deltas: list[Delta] = []
    async with FakeServer(handle) as server:
        agent = thinking_worker.agent_for(
            server.url, SQLiteStore(str(tmp_path / "t.db")), stream=stream
        )
        agent.on_delta = deltas.append
        result = await agent.run(thinking_worker.TASK)
        events = await agent.store.read(result.session_id)
    assert result.stop_reason == "end_turn", result.stop_detail
    assert result.output == f"Done after {STEPS} additions."
    assert len(server.requests) == STEPS + 1
    # Every answer's reasoning is in the log, the redacted block of step 2 too.
    answers = [e.payload for e in events if isinstance(e.payload, ModelResponded)]
    assert [len(a.message.thinking) for a in answers] == [1, 2, 1, 1, 1, 1]
    assert answers[1].message.thinking[1].data["redacted"].startswith("RED")
    if stream:
        reasoning = "".join(d.text for d in deltas if d.kind == "reasoning")
        assert reasoning.startswith("Step 1: I will add 1 and 1.Step 2:")


async def test_the_fake_refuses_a_turn_that_lost_its_thinking(tmp_path: Path) -> None:
    """The check the other tests rely on: without the blocks, the API's 400 ends the turn."""

    def forgetful(received: Received) -> Reply:
        body = received.json()
        for message in body["messages"]:
            if message["role"] == "assistant" and isinstance(message["content"], list):
                message["content"] = [b for b in message["content"] if b["type"] != "thinking"]
        received.body = json.dumps(body).encode()
        return handle(received)

    async with FakeServer(forgetful) as server:
        agent = thinking_worker.agent_for(server.url, SQLiteStore(str(tmp_path / "t.db")))
        result = await agent.run(thinking_worker.TASK)
    assert result.stop_reason == "error"
    assert "Expected `thinking` or `redacted_thinking`" in (result.stop_detail or "")


async def test_a_crashed_thinking_session_resumes_elsewhere_with_the_same_bytes(
    tmp_path: Path,
) -> None:
    async with FakeServer(handle) as server:
        reference = thinking_worker.agent_for(server.url, SQLiteStore(str(tmp_path / "ref.db")))
        assert (await reference.run(thinking_worker.TASK)).stop_reason == "end_turn"
        expected = [r.body for r in server.requests]
        server.requests.clear()

        db = tmp_path / "crash.db"
        worker = await asyncio.create_subprocess_exec(
            sys.executable, str(WORKER), server.url, str(db), "3"
        )
        assert await asyncio.wait_for(worker.wait(), 60) == 9  # died inside add(3, 1)
        store = SQLiteStore(str(db))
        (session,) = await store.sessions()
        agent = thinking_worker.agent_for(server.url, store)
        result = await agent.run(None, session_id=session.session_id, lease_wait=10)
    assert result.stop_reason == "end_turn", result.stop_detail
    assert result.output == f"Done after {STEPS} additions."
    sent = [r.body for r in server.requests]
    assert len(sent) == len(expected) == STEPS + 1
    assert sent == expected
