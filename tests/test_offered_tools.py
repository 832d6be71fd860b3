"""Each `model.requested` says which tools it offered when they differ from the ones before
it (sparse `tools` and `tools_digest`), so the log is honest about every request: a server
that changes its list mid-run, or a session resumed with other tools than it had. A session
whose tools never change carries neither field in any stored event."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tether import Agent
from tether.events import (
    Event,
    ModelRequested,
    Payload,
    SessionCreated,
    ToolFinished,
    UserMessage,
    offered_digest,
    payload_to_json,
)
from tether.fold import Folder
from tether.messages import user
from tether.render import Timeline
from tether.session.log import SessionLog
from tether.store import MemoryStore, SQLiteStore
from tether.testing import ScriptedModel, call
from tether.tools import Tool, Toolbox, tool
from tools.mcp_servers.harness import catalog_stdio, no_orphan_servers

__all__ = ["no_orphan_servers"]


@tool(effect="read")
def alpha() -> str:
    """The first tool."""
    return "a"


@tool(effect="read")
def beta() -> str:
    """The second tool."""
    return "b"


@tool(effect="read")
def gamma() -> str:
    """A tool the session did not start with."""
    return "c"


def offered_of(*tools: object) -> tuple[tuple[str, ...], str]:
    return Toolbox(tools).offered  # type: ignore[arg-type]


def requests(events: list[Event], thread: str = "") -> list[ModelRequested]:
    return [
        e.payload for e in events if isinstance(e.payload, ModelRequested) and e.thread == thread
    ]


def stored_rows(db: Path) -> list[tuple[str, dict[str, object]]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT type, data FROM events ORDER BY pos").fetchall()
    return [(kind, json.loads(data)) for kind, data in rows]


async def test_a_session_whose_tools_never_change_stores_no_offered_tools(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = SQLiteStore(str(db))
    model = ScriptedModel([call("alpha"), call("beta"), "done"])
    await Agent(model, tools=[alpha, beta], store=store).run("use both")
    await store.close()
    rows = stored_rows(db)
    assert sum(kind == "model.requested" for kind, _ in rows) == 3
    assert all("tools" not in data and "tools_digest" not in data for _, data in rows[1:])
    requested = [data for kind, data in rows if kind == "model.requested"]
    assert {tuple(sorted(data)) for data in requested} == {
        ("input_tokens_estimate", "model", "request_hash")
    }


def test_the_digest_names_the_set_not_its_order() -> None:
    assert offered_of(alpha, beta) == offered_of(beta, alpha)
    assert offered_of(alpha, beta)[0] == ("alpha", "beta")
    assert offered_of(alpha, beta)[1] != offered_of(alpha, gamma)[1]
    hashes = {t.name: t.schema_hash for t in (alpha, beta)}
    assert offered_of(alpha, beta)[1] == offered_digest(hashes)


def test_a_field_absent_is_no_change_and_a_digest_alone_is_no_tools() -> None:
    plain = ModelRequested("m", "h", 1)
    assert "tools" not in payload_to_json(plain) and "tools_digest" not in payload_to_json(plain)
    none = ModelRequested("m", "h", 1, tools=(), tools_digest=offered_digest({}))
    assert payload_to_json(none) == {
        "model": "m",
        "request_hash": "h",
        "input_tokens_estimate": 1,
        "tools_digest": offered_digest({}),
    }


def requested(offered: tuple[tuple[str, ...], str]) -> ModelRequested:
    return ModelRequested("m", "h", 1, tools=offered[0], tools_digest=offered[1])


def _event(seq: int, payload: Payload, thread: str = "") -> Event:
    time = "2026-12-02T08:00:00.000000Z"
    return Event("ses_x", seq, f"ev_{seq}", time, payload=payload, thread=thread)


def test_the_fold_keeps_the_set_each_thread_last_offered() -> None:
    created = SessionCreated("m", tools={t.name: t.schema_hash for t in (alpha, beta)})
    folder = Folder()
    assert folder.offered is None  # no session.created: nothing to say
    folder.apply(_event(1, created))
    assert folder.offered == offered_of(alpha, beta)
    folder.apply(_event(2, UserMessage(user("go"))))
    folder.apply(_event(3, ModelRequested("m", "h", 1)))
    assert folder.offered == offered_of(alpha, beta)  # a request that records nothing
    changed = offered_of(alpha, gamma)
    folder.apply(_event(4, requested(changed)))
    assert folder.offered == changed
    # A sub-agent's thread: its log names no tools until one of its requests records some;
    # the main thread's set is not changed by a request below it.
    child = Folder("helper-1")
    child.apply(_event(1, created))
    assert child.offered is None
    below = _event(5, requested(offered_of(beta)), "helper-1")
    child.apply(below)
    folder.apply(below)
    assert child.offered == offered_of(beta)
    assert folder.offered == changed


def test_the_timeline_says_what_changed() -> None:
    created = SessionCreated("m", tools={t.name: t.schema_hash for t in (alpha, beta)})
    timeline = Timeline()
    timeline.line(_event(1, created))
    line = timeline.line(_event(2, requested(offered_of(alpha, gamma))))
    assert line.endswith("tools changed: +gamma −beta")
    line = timeline.line(_event(3, ModelRequested("m", "h", 1)))
    assert "tools" not in line
    line = timeline.line(_event(4, requested(((), offered_digest({})))))
    assert line.endswith("tools changed: −alpha −gamma")
    child = timeline.line(_event(5, requested(offered_of(beta)), "helper-1"))
    assert child.endswith("tools offered: beta")


async def _crashed_in_a_request(store: MemoryStore, tools: list[Tool]) -> str:
    """A session whose runner died after writing its request (commit point 2)."""
    log = SessionLog(store, "ses_crashed")
    await log.append(
        SessionCreated("scripted", tools={t.name: t.schema_hash for t in tools}),
        UserMessage(user("go")),
        ModelRequested("scripted", "h", 1),
    )
    return log.session_id


async def test_a_resume_with_other_tools_records_them_on_its_first_request() -> None:
    store = MemoryStore()
    sid = await _crashed_in_a_request(store, [alpha, beta])
    model = ScriptedModel([call("gamma"), "done"])
    result = await Agent(model, tools=[alpha, gamma], store=store).run(None, session_id=sid)
    assert result.stop_reason == "end_turn"
    events = await store.read(sid)
    after = requests(events)[1:]
    assert (after[0].tools, after[0].tools_digest) == offered_of(alpha, gamma)
    assert [(r.tools, r.tools_digest) for r in after[1:]] == [((), "")]  # the same set after
    folder = Folder().apply_all(events)
    assert folder.offered == offered_of(alpha, gamma)
    finished = [e.payload for e in events if isinstance(e.payload, ToolFinished)]
    assert [(f.outcome, f.content) for f in finished] == [("ok", "c")]


async def test_a_resume_with_the_recorded_tools_records_nothing() -> None:
    store = MemoryStore()
    sid = await _crashed_in_a_request(store, [alpha, beta])
    model = ScriptedModel([call("beta"), "done"])
    await Agent(model, tools=[beta, alpha], store=store).run(None, session_id=sid)
    assert all(not r.tools_digest for r in requests(await store.read(sid)))


async def test_a_resume_after_a_change_compares_with_the_changed_set() -> None:
    """The set a request recorded is what the next run compares with, not the first one."""
    store = MemoryStore()
    sid = await _crashed_in_a_request(store, [alpha, beta])
    await Agent(ScriptedModel(["first"]), tools=[alpha, gamma], store=store).run(
        None, session_id=sid
    )
    again = Agent(ScriptedModel(["first", "second"]), tools=[alpha, gamma], store=store)
    await again.run("more", session_id=sid)
    back = Agent(ScriptedModel(["first", "second", "third"]), tools=[alpha, beta], store=store)
    await back.run("and more", session_id=sid)
    recorded = [(r.tools, r.tools_digest) for r in requests(await store.read(sid))]
    assert recorded == [
        ((), ""),
        offered_of(alpha, gamma),
        ((), ""),
        offered_of(alpha, beta),
    ]


async def test_a_toolbox_changed_between_steps_is_recorded_at_the_next_request() -> None:
    """A follower that swaps the tools (what an MCP source does) before the second step."""
    store = MemoryStore()
    agent = Agent(ScriptedModel([call("alpha"), call("gamma"), "done"]), tools=[alpha], store=store)
    swapped: list[int] = []

    async def swap(toolbox: Toolbox) -> None:
        if len(swapped) == 1:
            toolbox.replace([alpha, gamma])
        swapped.append(1)

    agent.toolbox.follow(swap)
    result = await agent.run("go")
    recorded = [(r.tools, r.tools_digest) for r in requests(await store.read(result.session_id))]
    assert recorded == [((), ""), offered_of(alpha, gamma), ((), "")]


@pytest.mark.parametrize("protocol", ["legacy"])
async def test_an_mcp_server_that_grows_a_tool_has_the_new_set_recorded(protocol: str) -> None:
    from tether.tools.mcp import McpToolSource

    store = MemoryStore()
    model = ScriptedModel([call("grow", name="shiny"), call("shiny"), "done"])
    async with McpToolSource([catalog_stdio(protocol=protocol)]) as source:
        listed = await source.list_tools()
        agent = Agent(model, tools=listed, store=store)
        source.keep_current(agent.toolbox)
        result = await agent.run("grow a tool and use it")
        grown = agent.toolbox.offered
    events = await store.read(result.session_id)
    recorded = requests(events)
    assert not recorded[0].tools_digest  # as session.created said
    assert "shiny" in recorded[1].tools and "shiny" not in {t.name for t in listed}
    assert (recorded[1].tools, recorded[1].tools_digest) == grown
    assert set(recorded[1].tools) == {t.name for t in listed} | {"shiny"}
    assert not recorded[2].tools_digest  # nothing changed after that
    assert Folder().apply_all(events).offered == grown
    timeline = Timeline()
    lines = [timeline.line(e) for e in events]
    assert any(line.endswith("tools changed: +shiny") for line in lines)


@pytest.mark.parametrize("followed", [False, True])
async def test_a_sub_agents_set_is_recorded_only_when_its_tools_may_change(followed: bool) -> None:
    """`thread.started` names no tools: a static child records none; a child whose toolbox
    has followers records its set on its first request, then only changes."""
    helper = Agent(ScriptedModel([call("alpha"), "helped"]), name="helper", tools=[alpha])
    if followed:

        async def unchanged(toolbox: Toolbox) -> None:
            return None

        helper.toolbox.follow(unchanged)
    store = MemoryStore()
    parent = Agent(
        ScriptedModel([call("helper", task="help"), "done"]),
        tools=[helper.as_tool()],
        store=store,
    )
    result = await parent.run("go")
    events = await store.read(result.session_id)
    child = next(e.thread for e in events if e.thread)
    in_child = [(r.tools, r.tools_digest) for r in requests(events, child)]
    first = offered_of(alpha) if followed else ((), "")
    assert in_child == [first, ((), "")]
    assert all(not r.tools_digest for r in requests(events))


async def test_tools_replaced_without_followers_are_recorded_at_the_next_request() -> None:
    """The loop looks again whenever the toolbox was replaced, whoever replaced it."""
    store = MemoryStore()
    box: list[Toolbox] = []

    @tool(effect="read")
    def swap() -> str:
        """Offer gamma from now on."""
        box[0].replace([swap, gamma])
        return "swapped"

    agent = Agent(ScriptedModel([call("swap"), call("gamma"), "done"]), tools=[swap], store=store)
    box.append(agent.toolbox)
    result = await agent.run("go")
    recorded = [(r.tools, r.tools_digest) for r in requests(await store.read(result.session_id))]
    assert recorded == [((), ""), offered_of(swap, gamma), ((), "")]
