"""The fold is pure: golden logs give byte-identical transcripts, and applying events one
at a time agrees with folding the whole log, whatever the order of events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.events import (
    ApprovalDecided,
    ApprovalRequested,
    CancelRequested,
    ContextCompacted,
    Event,
    ModelFailed,
    ModelRequested,
    ModelResponded,
    Payload,
    SessionCreated,
    SessionEnded,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UserMessage,
)
from tether.fold import Folder, fold
from tether.messages import Message, Text, ToolCall, Usage, user

GOLDEN = Path(__file__).parent / "golden"


def _read_log(path: Path) -> list[Event]:
    return [Event.from_json(json.loads(line)) for line in path.read_text().splitlines() if line]


@pytest.mark.parametrize(
    "log", sorted(GOLDEN.glob("*.events.jsonl")), ids=lambda p: p.name.split(".")[0]
)
def test_golden_logs_fold_to_byte_identical_transcripts(log: Path) -> None:
    name = log.name.removesuffix(".events.jsonl")
    transcript, view = fold(_read_log(log))
    expected = (GOLDEN / f"{name}.transcript.json").read_text()
    assert transcript.canonical() + "\n" == expected
    expected_view = json.loads((GOLDEN / f"{name}.view.json").read_text())
    assert view.to_json() == expected_view
    threads = GOLDEN / f"{name}.threads.json"
    if threads.exists():  # schema 3: each sub-agent thread folds to its own transcript
        for thread, body in json.loads(threads.read_text()).items():
            assert thread in {node["thread"] for node in expected_view["threads"]}
            assert fold(_read_log(log), thread)[0].to_json() == body


def test_there_are_golden_logs_to_check() -> None:
    assert len(list(GOLDEN.glob("*.events.jsonl"))) >= 3
    assert list(GOLDEN.glob("*.threads.json")), "no golden log has sub-agent threads"


def test_results_of_one_turn_go_back_as_one_message_in_call_order() -> None:
    calls = (ToolCall("a", "t", {}), ToolCall("b", "t", {}), ToolCall("c", "t", {}))
    payloads: list[Payload] = [
        SessionCreated("m"),
        UserMessage(user("go")),
        ModelResponded(Message("assistant", (Text("three"), *calls))),
        ToolFinished("c", "ok", "C"),
        ToolFinished("a", "error", "A failed"),
        ToolFinished("b", "ok", "B"),
    ]
    transcript, view = fold(_events(payloads))
    last = transcript.messages[-1]
    assert last.role == "tool"
    assert [(r.call_id, r.content, r.is_error) for r in last.tool_results] == [
        ("a", "A failed", True),
        ("b", "B", False),
        ("c", "C", False),
    ]
    assert len(transcript.messages) == 3
    assert view.open_calls == ()


def test_a_call_cut_by_the_output_limit_never_reaches_the_transcript() -> None:
    cut = Message("assistant", (Text("let me"), ToolCall("x", "t", {}, raw_arguments='{"a": ')))
    transcript, view = fold(
        _events(
            [SessionCreated("m"), UserMessage(user("go")), ModelResponded(cut, incomplete=True)]
        )
    )
    assert transcript.messages[-1].tool_calls == ()
    assert transcript.messages[-1].text == "let me"
    assert view.open_calls == ()


def test_terminal_states_absorb_everything_after_them() -> None:
    payloads: list[Payload] = [
        SessionCreated("m"),
        UserMessage(user("a")),
        SessionEnded("canceled"),
    ]
    before = fold(_events(payloads))[1]
    after = fold(_events([*payloads, UserMessage(user("b")), ModelRequested("m", "h", 1)]))[1]
    assert before.state == after.state == "canceled"


def test_unknown_cost_stays_unknown_rather_than_zero() -> None:
    answer = Message("assistant", (Text("hi"),))
    priced = fold(_events([SessionCreated("m"), ModelResponded(answer, cost_usd=0.5)]))[1]
    unpriced = fold(
        _events([SessionCreated("m"), ModelResponded(answer, cost_usd=0.5), ModelResponded(answer)])
    )[1]
    assert priced.cost_usd == 0.5
    assert unpriced.cost_usd is None


def _events(payloads: list[Payload], thread: str = "") -> list[Event]:
    return [
        Event("s", i, f"e{i}", f"2026-01-01T00:00:{i % 60:02d}.000000Z", p, thread)
        for i, p in enumerate(payloads, start=1)
    ]


# -- property: incremental fold == full fold, on arbitrary (even nonsensical) sequences -------
call_ids = st.sampled_from(["c1", "c2", "c3"])
texts = st.text(max_size=12)
calls = st.lists(
    st.builds(ToolCall, call_ids, st.sampled_from(["read", "write"]), st.just({})),
    max_size=3,
    unique_by=lambda c: c.id,
)
payloads = st.one_of(
    st.builds(SessionCreated, st.just("m"), st.none() | texts),
    st.builds(lambda t: UserMessage(user(t)), texts),
    st.builds(ModelRequested, st.just("m"), st.just("h"), st.integers(0, 100)),
    st.builds(
        lambda t, cs, inc, u, cost: ModelResponded(
            Message("assistant", (Text(t), *cs)), incomplete=inc, usage=Usage(u, u), cost_usd=cost
        ),
        texts,
        calls,
        st.booleans(),
        st.integers(0, 50),
        st.none() | st.floats(0, 1),
    ),
    st.builds(ModelFailed, st.just("rate_limited"), texts),
    st.builds(ToolStarted, call_ids, st.just("t")),
    st.builds(ToolFinished, call_ids, st.sampled_from(["ok", "error", "canceled"]), texts),
    st.builds(ApprovalRequested, call_ids, st.just("t")),
    st.builds(ApprovalDecided, call_ids, st.booleans(), st.none() | texts),
    st.builds(CancelRequested, st.sampled_from(["turn", "session"])),
    st.builds(TurnEnded, st.sampled_from(["end_turn", "interrupted", "awaiting_approval"])),
    st.builds(SessionEnded, st.sampled_from(["completed", "failed", "canceled"])),
    st.builds(
        lambda first, span, summary, cleared, u: ContextCompacted(
            first,
            first + span,
            summary,
            tuple(cleared),
            None if summary is None else "m",
            Usage(u, u),
            None if summary is None else 0.01,
        ),
        st.integers(1, 40),
        st.integers(0, 10),
        st.none() | texts,
        st.lists(call_ids, max_size=3),
        st.integers(0, 50),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(payloads, max_size=40))
def test_incremental_fold_agrees_with_the_full_fold(items: list[Payload]) -> None:
    events = _events(items)
    live = Folder()
    snapshots = []
    for event in events:
        live.apply(event)
        snapshots.append((live.transcript().canonical(), live.view()))
    # Earlier snapshots must not have been changed by later events (no shared mutable state).
    for k, (transcript_text, view) in enumerate(snapshots, start=1):
        full_transcript, full_view = fold(events[:k])
        assert transcript_text == full_transcript.canonical()
        assert view == full_view


@settings(max_examples=200, deadline=None)
@given(st.lists(payloads, max_size=40))
def test_folding_events_read_back_from_json_gives_the_same_bytes(items: list[Payload]) -> None:
    events = _events(items)
    reread = [Event.from_json(json.loads(e.canonical())) for e in events]
    assert reread == events
    assert fold(reread)[0].canonical() == fold(events)[0].canonical()
    assert json.dumps(fold(reread)[1].to_json()) == json.dumps(fold(events)[1].to_json())


def test_each_thread_folds_to_its_own_transcript() -> None:
    main = _events([SessionCreated("m"), UserMessage(user("main task"))])
    sub = [
        Event(
            "s", 3, "e3", "2026-01-01T00:00:03.000000Z", UserMessage(user("sub task")), "researcher"
        )
    ]
    assert [m.text for m in fold(main + sub)[0].messages] == ["main task"]
    assert [m.text for m in fold(main + sub, thread="researcher")[0].messages] == ["sub task"]
