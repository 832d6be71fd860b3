"""What people read: the timeline names each sub-agent's thread and says how threads start and
finish; the view shows the thread tree and the calls waiting for a decision."""

from __future__ import annotations

import json
from pathlib import Path

from tether.events import Event, Payload, ThreadFinished, ThreadStarted, UserMessage
from tether.fold import fold
from tether.messages import user
from tether.render import Timeline, render_view, summarize
from tether.state import SessionView, ThreadNode

GOLDEN = Path(__file__).parent / "golden" / "subagents.events.jsonl"


def _golden() -> list[Event]:
    return [Event.from_json(json.loads(line)) for line in GOLDEN.read_text().splitlines()]


def _event(payload: Payload, thread: str = "", seq: int = 1) -> Event:
    return Event("ses_1", seq, f"ev_{seq}", "2026-12-01T11:36:07.577913Z", payload, thread)


def test_the_timeline_labels_each_sub_agent_line_with_its_thread() -> None:
    timeline = Timeline()
    lines = {e.seq: (e.thread, timeline.line(e)) for e in _golden()}
    for thread, line in lines.values():
        if thread:
            assert f"  [{thread}] " in line, line
        else:
            assert "[researcher-" not in line, line
    # A thread starts: who runs it, on which model, for which call of which thread.
    assert lines[6][1].endswith(
        "[researcher-1] thread.started    researcher (scripted) runs call_0_0 of the main thread"
    )
    # It finishes: its stop reason and its answer.
    assert lines[21][1].endswith("[researcher-1] thread.finished   end_turn: found 'alpha'")
    # The main thread's own call of the same id is not labelled.
    assert lines[22][1].split("s  ", 1)[1].lstrip().startswith("tool.finished")


def test_a_deeper_thread_is_indented_further_and_names_its_parent() -> None:
    timeline = Timeline()
    top = timeline.line(_event(UserMessage(user("a")), "a-1"))
    nested = _event(ThreadStarted("a-1/b-2", agent="critic", parent_call_id="call_3"), "a-1/b-2")
    deep = timeline.line(nested)
    assert "s    [a-1] user.message" in top
    assert "s      [a-1/b-2] thread.started" in deep
    assert deep.endswith("critic runs call_3 of [a-1]")


def test_a_handoff_and_a_stopped_thread_read_as_such() -> None:
    history = (user("hi"), user("again"))
    handoff = ThreadStarted("billing-1", agent="billing", parent_call_id="c1", handoff=True,
                            history=history)  # fmt: skip
    assert summarize(_event(handoff, "billing-1")) == (
        "billing takes the turn over from c1 of the main thread, with 2 message(s)"
    )
    stopped = ThreadFinished("a-1", output="x " * 200, stop_reason="turn_limit", detail="3 steps")
    text = summarize(_event(stopped, "a-1"))
    assert text.startswith("turn_limit — 3 steps: x x")
    assert text.endswith("…") and len(text) < 100


def test_the_view_shows_the_thread_tree_by_depth() -> None:
    view = SessionView(
        session_id="ses_1",
        pending_approvals=("a-1/b-2:call_0_0",),
        threads=(
            ThreadNode("a-1", "researcher", "call_0_0", "running"),
            ThreadNode("a-1/b-2", "critic", "call_1_0", "waiting_approval"),
            ThreadNode("c-3", "writer", "call_0_1", "finished", "budget"),
        ),
    )
    lines = render_view(view).splitlines()
    assert "waiting  approval of a-1/b-2:call_0_0" in lines
    tree = lines[lines.index("threads  3") + 1 :]
    assert tree == [
        "  a-1  researcher · running · runs call_0_0 of the main thread",
        "    a-1/b-2  critic · waiting_approval · runs call_1_0 of [a-1]",
        "  c-3  writer · finished (budget) · runs call_0_1 of the main thread",
    ]


def test_a_view_without_threads_shows_no_tree() -> None:
    _, view = fold(_golden()[:4])
    labels = [line.split()[0] for line in render_view(view).splitlines()]
    assert labels == ["session", "state", "stop", "model", "steps", "usage", "cost"]
    assert "threads  2" in render_view(fold(_golden())[1])
