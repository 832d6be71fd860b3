"""`GET /v1/sessions/{id}/transcript` on a real `tether serve`: a thread's transcript from the
fold a page at a time, each tool call naming the sub-agent thread it started (whose
transcript is the same route with `?thread=`), long texts cut with their length and given
whole on request, and no tenant reading another's session or thread."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.support import ACME, GLOBEX, check_documented, serve, settled
from tether.events import SessionCreated, UserMessage
from tether.messages import Message, ToolCall, ToolResult, user
from tether.runtime.base import SessionRef
from tether.runtime.local import LocalRuntime
from tether.server import transcript as transcript_module
from tether.server.transcript import started_threads
from tether.session.log import SessionLog, new_session_id
from tether.state import ThreadNode
from tether.store import SQLiteStore
from tether.testing.runtime_fixtures import MODEL, TOOLS

TESTS = str(Path(__file__).resolve().parents[1])  # where `runtime.subagent_models` lives
PARENT = "python:runtime.subagent_models:parent"
AS_ACME = {"authorization": f"Bearer {ACME}"}
AS_GLOBEX = {"authorization": f"Bearer {GLOBEX}"}
TREE = {
    "researcher": {"model": PARENT, "agents": ["helper"]},
    "helper": {"model": MODEL, "tools": list(TOOLS), "description": "Notes things."},
}


async def started(client: httpx.AsyncClient, body: dict[str, Any]) -> str:
    response = await client.post("/v1/sessions", headers=AS_ACME, json=body)
    assert response.status_code == 201, response.text
    sid = str(response.json()["session_id"])
    status = await settled(client, sid)
    assert status["state"] == "completed", status
    return sid


async def transcript(client: httpx.AsyncClient, sid: str, **query: object) -> dict[str, Any]:
    response = await client.get(f"/v1/sessions/{sid}/transcript", headers=AS_ACME, params=query)
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    check_documented(page, "TranscriptPage")
    return page


async def opened(client: httpx.AsyncClient, sid: str, thread: str) -> None:
    """Wait (at most 30 s) until the session's tree holds `thread`."""
    async with asyncio.timeout(30):
        while True:
            status = (await client.get(f"/v1/sessions/{sid}", headers=AS_ACME)).json()
            if any(t["thread"] == thread for t in status["threads"]):
                return
            await asyncio.sleep(0.02)


def parts(page: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [p for m in page["messages"] for p in m["parts"] if p["type"] == kind]


async def test_a_transcript_pages_threads_and_long_texts_for_its_tenant_only(
    tmp_path: Path,
) -> None:
    allow = ("--allow-code", "runtime.subagent_models:*", "--workers", "2")
    with serve(tmp_path, *allow, env={"PYTHONPATH": TESTS}) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            task = "ask researcher ask helper note 1"
            sid = await started(
                client, {"model": PARENT, "task": task, "agents": TREE, "end_after_turn": True}
            )

            # The main thread: the task, the call that started the researcher, its result
            # and the answer; the call names the thread it started.
            main = await transcript(client, sid)
            assert [m["role"] for m in main["messages"]] == [
                "user",
                "assistant",
                "tool",
                "assistant",
            ]
            assert main["total"] == 4 and main["next"] is None and main["thread"] == ""
            assert [m["index"] for m in main["messages"]] == [0, 1, 2, 3]
            (call,) = parts(main, "tool_call")
            assert call["name"] == "researcher" and call["thread"] == "researcher-1"
            assert '"task": "ask helper note 1"' in call["text"]
            (result,) = parts(main, "tool_result")
            assert result["call_id"] == call["id"] and result["text"] == "helper said: noted 1"
            assert parts(main, "text")[-1]["text"] == "researcher said: helper said: noted 1"
            assert [(t["thread"], t["parent_call_id"]) for t in main["threads"]] == [
                ("researcher-1", call["id"])
            ]

            # A sub-agent's thread, and its own sub-agent's: the tool call with its
            # arguments and result.
            researcher = await transcript(client, sid, thread="researcher-1")
            assert researcher["agent"] == "researcher"
            assert parts(researcher, "tool_call")[0]["thread"] == "researcher-1/helper-1"
            helper = await transcript(client, sid, thread="researcher-1/helper-1")
            (note,) = parts(helper, "tool_call")
            assert note["name"] == "note" and '"text": "step 1"' in note["text"]
            assert parts(helper, "tool_result")[0]["text"] == "noted: step 1"
            assert helper["threads"] == []

            # A running sub-agent's transcript, read again once it has finished: the second
            # read takes in what the thread did since (its fold is kept between reads).
            slow = "ask researcher ask helper note 3 0.3"
            body = {"model": PARENT, "task": slow, "agents": TREE, "end_after_turn": True}
            response = await client.post("/v1/sessions", headers=AS_ACME, json=body)
            running = response.json()["session_id"]
            deep = "researcher-1/helper-1"
            await opened(client, running, deep)
            early = await transcript(client, running, thread=deep)
            assert (await settled(client, running))["state"] == "completed"
            late = await transcript(client, running, thread=deep)
            assert late["messages"][: len(early["messages"])] == early["messages"]
            assert [m["role"] for m in late["messages"]] == ["user"] + ["assistant", "tool"] * 3 + [
                "assistant"
            ]
            assert parts(late, "text")[-1]["text"] == "noted 3"

            # Pages: at most `limit` messages from `after`, and where the next begins.
            first = await transcript(client, sid, limit=3)
            assert len(first["messages"]) == 3 and first["next"] == 3
            rest = await transcript(client, sid, after=3)
            assert [m["index"] for m in rest["messages"]] == [3] and rest["next"] is None

            # Long texts are cut at `clip` (2,000 by default) with their length; clip=0
            # gives them whole.
            long = "echo " + " ".join(f"word{i}" for i in range(900))
            echoed = await started(client, {"model": MODEL, "task": long, "end_after_turn": True})
            cut = await transcript(client, echoed)
            answer = parts(cut, "text")[-1]
            assert answer["cut"] and len(answer["text"]) == 2_000
            assert answer["chars"] == len(long) + 1  # "echo: " for "echo "
            whole = await transcript(client, echoed, after=1, limit=1, clip=0)
            assert parts(whole, "text")[0]["text"] == "echo: " + long.removeprefix("echo ")

            # A long session is read a page at a time.
            many = await started(
                client,
                {"model": MODEL, "task": "note 30", "tools": list(TOOLS), "end_after_turn": True},
            )
            page = await transcript(client, many)
            assert page["total"] == 62 and len(page["messages"]) == 50 and page["next"] == 50

            # Another tenant: not found, like a missing session; a missing thread likewise.
            path = f"/v1/sessions/{sid}/transcript"
            for params in ({}, {"thread": "researcher-1"}):
                theirs = await client.get(path, headers=AS_GLOBEX, params=params)
                assert theirs.status_code == 404, theirs.text
                assert theirs.json()["error"]["code"] == "session_not_found"
            missing = await client.get(path, headers=AS_ACME, params={"thread": "critic-1"})
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "thread_not_found"
            for bad in ({"limit": "0"}, {"limit": "201"}, {"clip": "-1"}, {"page": "2"}):
                refused = await client.get(path, headers=AS_ACME, params=bad)
                assert refused.status_code == 422, (bad, refused.text)
            anonymous = await client.get(path)
            assert anonymous.status_code == 401


def test_a_repeated_call_id_names_the_thread_its_own_call_started() -> None:
    """Some models give the same call id in two answers: each call names its own thread."""
    asked = Message("assistant", (ToolCall("c1", "researcher", {"task": "x"}),))
    answered = Message("tool", (ToolResult("c1", "done"),))
    children = [ThreadNode(f"researcher-{n}", "researcher", "c1") for n in (1, 2)]
    messages = [asked, answered, asked]
    assert started_threads(messages, 0, 3, children) == [
        {"c1": "researcher-1"},
        {},
        {"c1": "researcher-2"},
    ]
    assert started_threads(messages, 2, 3, children) == [{"c1": "researcher-2"}]
    assert started_threads(messages, 0, 3, []) == [{}, {}, {}]


async def test_a_page_stops_past_its_byte_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However many messages a page may hold, it stops after the one that passes
    `PAGE_BYTES`, and says where the next page starts."""
    store = SQLiteStore(str(tmp_path / "t.db"))
    log = SessionLog(store, new_session_id())
    await log.append(SessionCreated(model="scripted"))
    for i in range(10):
        await log.append(UserMessage(user(f"{i} " + "x" * 3_000)))
    rt = LocalRuntime(store, workers=0)
    try:
        folder = await rt.folded(SessionRef(log.session_id))
        assert folder is not None
        monkeypatch.setattr(transcript_module, "PAGE_BYTES", 5_000)
        first = transcript_module.page(folder, 0, 50, 2_000)
        assert [m["index"] for m in first["messages"]] == [0, 1, 2]  # three of about 2 KB pass 5 KB
        assert first["next"] == 3 and first["total"] == 10
        whole = transcript_module.page(folder, 9, 50, 0)
        assert whole["messages"][0]["parts"][0]["chars"] == 3_002 and whole["next"] is None
    finally:
        await rt.close()
        await store.close()
