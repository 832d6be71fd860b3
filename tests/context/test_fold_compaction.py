"""The fold applies `context.compacted`: cleared results keep a marker, a summarised range
becomes one message, and the whole log folds to what the incremental fold held."""

from __future__ import annotations

from tether.events import (
    ContextCompacted,
    Event,
    ModelRequested,
    ModelResponded,
    Payload,
    SessionCreated,
    ToolFinished,
    UserMessage,
)
from tether.fold import CLEARED_PREFIX, SUMMARY_PREFIX, Folder, fold
from tether.messages import Message, Text, ToolCall, Usage, canonical_json, user


def _events(payloads: list[Payload]) -> list[Event]:
    return [
        Event("s", i, f"e{i}", "2026-01-01T00:00:00.000000Z", p)
        for i, p in enumerate(payloads, start=1)
    ]


def _steps(n: int) -> list[Payload]:
    """session.created, the first message (seq 2), then n steps of a call and its result:
    the answer of step k is at seq 2k+1, its result at 2k+2."""
    out: list[Payload] = [SessionCreated("m", system="sys"), UserMessage(user("task"))]
    for k in range(1, n + 1):
        call = ToolCall(f"c{k}", "read", {"k": k})
        out += [
            ModelResponded(Message("assistant", (call,))),
            ToolFinished(f"c{k}", "ok", "x" * 100 * k),
        ]
    return out


def test_cleared_results_keep_their_call_and_a_marker_naming_it() -> None:
    log = [*_steps(3), ContextCompacted(3, 6, None, ("c1", "c2"))]
    transcript, _ = fold(_events(log))
    results = [m.tool_results[0] for m in transcript.messages if m.role == "tool"]
    assert results[0].content == f"{CLEARED_PREFIX} read call c1, 100 characters]"
    assert results[1].content == f"{CLEARED_PREFIX} read call c2, 200 characters]"
    assert results[2].content == "x" * 300
    assert [m.role for m in transcript.messages] == ["user", *["assistant", "tool"] * 3]


def test_a_summary_replaces_its_range_with_one_message_and_keeps_the_rest() -> None:
    log = [*_steps(4), ContextCompacted(3, 6, "read c1 and c2")]
    transcript, _ = fold(_events(log))
    assert [m.role for m in transcript.messages] == [
        "user",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert transcript.messages[0].text == "task"
    summary = transcript.messages[1].text
    assert summary.startswith(SUMMARY_PREFIX) and "4 messages" in summary
    assert summary.endswith("read c1 and c2")
    assert [c.id for m in transcript.messages for c in m.tool_calls] == ["c3", "c4"]


def test_a_later_summary_can_take_in_an_earlier_one() -> None:
    log = [*_steps(4), ContextCompacted(3, 6, "first"), ContextCompacted(3, 8, "second")]
    folder = Folder().apply_all(_events(log))
    assert [m.role for m in folder.messages] == ["user", "user", "assistant", "tool"]
    assert folder.messages[1].text.endswith("second")
    assert folder.message_seqs == [2, 3, 9, 10]


def test_compaction_keeps_the_size_counters_true_to_the_transcript() -> None:
    log = [*_steps(5), ContextCompacted(3, 4, None, ("c1",)), ContextCompacted(5, 8, "s")]
    folder = Folder().apply_all(_events(log))
    bodies = [canonical_json(m.to_json()) for m in folder.messages]
    assert folder.message_chars == [len(b) for b in bodies]
    assert folder.transcript_chars == sum(len(b) for b in bodies)
    assert folder.message_seqs == [2, 3, 4, 5, 9, 10, 11, 12]


def test_each_compaction_changes_the_transcript_hash() -> None:
    before = Folder().apply_all(_events(_steps(3)))
    after = Folder().apply_all(_events([*_steps(3), ContextCompacted(3, 4, None, ("c1",))]))
    assert before.transcript_hash != after.transcript_hash
    assert after.compactions == 1


def test_a_range_that_would_part_open_calls_from_their_results_is_ignored() -> None:
    log = [*_steps(2), ModelResponded(Message("assistant", (ToolCall("c9", "read", {}),)))]
    log += [ContextCompacted(3, 7, "everything")]
    transcript, view = fold(_events(log))
    assert [c.id for c in view.open_calls] == ["c9"]
    assert transcript.messages[-1].tool_calls[0].id == "c9"
    assert not any(m.text.startswith(SUMMARY_PREFIX) for m in transcript.messages)


def test_the_summary_call_counts_in_usage_and_cost() -> None:
    log = [*_steps(2), ContextCompacted(3, 4, "s", (), "m", Usage(100, 20), 0.5)]
    _, view = fold(_events(log))
    assert view.usage.input_tokens == 100 and view.usage.output_tokens == 20
    assert view.cost_usd is None  # the steps' answers had no known cost
    priced = [
        SessionCreated("m"),
        UserMessage(user("t")),
        ModelResponded(Message("assistant", (Text("a"),)), cost_usd=0.25),
        ContextCompacted(3, 3, "s", (), "m", Usage(1, 1), 0.5),
    ]
    assert fold(_events(priced))[1].cost_usd == 0.75


def test_the_fold_records_what_the_provider_counted_for_the_last_request() -> None:
    log: list[Payload] = [SessionCreated("m"), UserMessage(user("hello"))]
    log += [
        ModelRequested("m", "h", 1),
        ModelResponded(Message("assistant", (Text("a"),)), usage=Usage(42, 1)),
    ]
    folder = Folder().apply_all(_events(log))
    first_chars = folder.message_chars[0]
    assert folder.calibration == (first_chars, 42)
