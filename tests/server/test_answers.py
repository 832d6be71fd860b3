"""`POST /v1/sessions/{id}/answers` and `tether sessions answer`: a real `tether serve` whose
worker runs a session whose MCP tool elicits; the answer goes through `HttpRuntime.answer`,
scoped to the tenant like a decision, checked against the requested schema; and the command
line answers a waiting call in a store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from server.support import ACME, GLOBEX, check_documented, serve
from tether.errors import SessionNotFound
from tether.events import (
    InputAnswered,
    InputRequested,
    ModelRequested,
    ModelResponded,
    SessionCreated,
    ToolStarted,
    UserMessage,
)
from tether.messages import Message, ToolCall, user
from tether.runtime import SessionSpec
from tether.runtime.base import StateConflict
from tether.runtime.http import HttpRuntime
from tether.session.log import SessionLog
from tether.store import SQLiteStore
from tether.testing.runtime_conformance import Observer

TESTS = Path(__file__).resolve().parent.parent
FIXTURES = "tools.mcp_servers.asking_fixtures"  # tests/ is on the server's path below
SPEC = SessionSpec(
    model=f"python:{FIXTURES}:model", task="greet me", tools=(f"{FIXTURES}:tools",),
    end_after_turn=True,
)  # fmt: skip
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


async def test_an_answer_over_http_reaches_the_waiting_call_of_its_tenant_only(
    tmp_path: Path,
) -> None:
    env = {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    with serve(tmp_path, "--allow-code", "tools.mcp_servers.*", env=env) as server:
        rt, other = HttpRuntime(server.url, ACME), HttpRuntime(server.url, GLOBEX)
        try:
            ref = await rt.start(SPEC)
            watch = Observer(rt, ref)
            waiting = await watch.until("an input", lambda s: s.state == "waiting_input")
            check_documented(waiting.to_json(), "SessionStatus")
            asked = waiting.view.pending_inputs["call_0_0"]
            assert (asked.server, asked.message) == ("asking", "What is your name?")
            with pytest.raises(SessionNotFound):
                await other.answer(ref, "call_0_0", {"name": "Mallory"})
            with pytest.raises(StateConflict, match="requested schema"):
                await rt.answer(ref, "call_0_0", {"name": 42})
            await rt.answer(ref, "call_0_0", {"name": "Ada"})
            done = await watch.until("the end", lambda s: s.terminal)
        finally:
            await rt.close()
            await other.close()
    assert (done.state, done.last_output) == ("completed", "greeted: hello Ada")


async def waiting_session(path: Path) -> str:
    """A session whose call `call_0_0` waits for a name, as a worker that died left it."""
    store = SQLiteStore(str(path))
    log = SessionLog(store, "ses_0123456789abcdef")
    await log.append(SessionCreated("scripted"), UserMessage(user("greet me")))
    await log.append(ModelRequested("scripted", "h", 1))
    call = ToolCall("call_0_0", "greet", {})
    await log.append(
        ModelResponded(Message("assistant", (call,))), ToolStarted("call_0_0", "greet", "read")
    )
    await log.append(InputRequested("call_0_0", "asking", "What is your name?", NAME_SCHEMA, "k1"))
    await store.close()
    return log.session_id


def tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_tether_sessions_answer_checks_and_records_the_answer(tmp_path: Path) -> None:
    session_id = await waiting_session(tmp_path / "t.db")
    url = f"sqlite:///{tmp_path / 't.db'}"
    shown = tether("sessions", "show", session_id, "--store", url, cwd=tmp_path)
    assert "waiting  input for call_0_0 from asking: What is your name?" in shown.stdout
    bad = tether(
        "sessions", "answer", session_id, "call_0_0", '{"name": 1}', "--store", url, cwd=tmp_path
    )
    assert bad.returncode != 0 and "requested schema" in bad.stderr
    not_json = tether(
        "sessions", "answer", session_id, "call_0_0", "{name", "--store", url, cwd=tmp_path
    )
    assert not_json.returncode != 0 and "not valid JSON" in not_json.stderr
    good = tether(
        "sessions", "answer", session_id, "call_0_0", '{"name": "Ada"}', "--store", url, "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["done"] == "call_0_0 answered (accept)"

    store = SQLiteStore(str(tmp_path / "t.db"))
    events = await store.read(session_id)
    assert [w.session_id for w in await store.runnable()] == [session_id]  # runnable again
    await store.close()
    assert events[-1].payload == InputAnswered("call_0_0", "accept", {"name": "Ada"}, "k1")
    again = tether(
        "sessions",
        "answer",
        session_id,
        "call_0_0",
        "--action",
        "decline",
        "--store",
        url,
        cwd=tmp_path,
    )
    assert again.returncode != 0 and "not waiting for input" in again.stderr
