"""The default policy's decisions on a given transcript, and the checks on any policy's events."""

from __future__ import annotations

import math

import pytest

from tether.context import ContextView, DefaultPolicy
from tether.context.tokens import CharSizer
from tether.context.view import check_events
from tether.errors import ServerError, UsageError
from tether.events import (
    ContextCompacted,
    Event,
    ModelResponded,
    Payload,
    SessionCreated,
    ToolFinished,
    UserMessage,
)
from tether.fold import CLEARED_PREFIX, SUMMARY_PREFIX, Folder
from tether.messages import Message, Text, ToolCall, user
from tether.testing import Fail, ScriptedModel

SIZER = CharSizer(4.0)


def _folder(
    steps: int, result_chars: int = 4_000, calls_per_step: int = 1, text_chars: int = 10
) -> Folder:
    log: list[Payload] = [SessionCreated("m", system="sys"), UserMessage(user("the task"))]
    for k in range(1, steps + 1):
        calls = tuple(ToolCall(f"c{k}_{j}", "read", {"k": k}) for j in range(calls_per_step))
        log.append(
            ModelResponded(
                Message("assistant", (Text(f"step {k} ".ljust(text_chars, "z")), *calls))
            )
        )
        log += [ToolFinished(c.id, "ok", "y" * result_chars) for c in calls]
    events = [Event("s", i, f"e{i}", "t", p) for i, p in enumerate(log, start=1)]
    return Folder().apply_all(events)


def _view(folder: Folder, budget: int | None, overflowed: bool = False) -> ContextView:
    estimate = math.ceil(folder.transcript_chars / SIZER.chars_per_token)
    return ContextView(
        "s",
        "m",
        folder.system,
        folder.messages,
        folder.message_seqs,
        estimate,
        budget,
        SIZER,
        overflowed,
    )


def _apply(folder: Folder, events: list[ContextCompacted]) -> Folder:
    seq = folder.last_seq
    for i, payload in enumerate(events, start=1):
        folder.apply(Event("s", seq + i, f"x{seq + i}", "t", payload))
    return folder


def _tokens(folder: Folder) -> int:
    return math.ceil(folder.transcript_chars / SIZER.chars_per_token)


async def test_a_request_under_the_threshold_is_left_as_it_is() -> None:
    folder = _folder(5)
    view = _view(folder, budget=_tokens(folder) * 2)
    assert await DefaultPolicy()(view) == []


async def test_with_no_known_window_only_an_overflow_makes_it_act() -> None:
    folder = _folder(5)
    assert await DefaultPolicy()(_view(folder, budget=None)) == []
    acted = await DefaultPolicy()(_view(folder, budget=None, overflowed=True))
    assert acted and _tokens(_apply(folder, acted)) <= _view(folder, None).estimate


async def test_the_oldest_results_are_cleared_first_and_the_latest_are_kept() -> None:
    folder = _folder(10)
    budget = int(_tokens(folder) / 0.9)  # 90 % of the budget: over the 80 % threshold
    (event,) = await DefaultPolicy(keep_recent=3)(_view(folder, budget))
    assert event.summary is None
    cleared = list(event.cleared_call_ids)
    assert cleared == [f"c{k}_0" for k in range(1, len(cleared) + 1)]
    assert "c8_0" not in cleared and "c10_0" not in cleared
    _apply(folder, [event])
    assert _tokens(folder) <= 0.5 * budget
    results = [r for m in folder.messages for r in m.tool_results]
    assert all(r.content.startswith(CLEARED_PREFIX) for r in results[: len(cleared)])
    assert [m.role for m in folder.messages][:2] == ["user", "assistant"]


async def test_when_clearing_is_not_enough_the_oldest_turns_are_summarised() -> None:
    folder = _folder(40, result_chars=40, text_chars=400)  # clearing cannot save anything
    budget = int(_tokens(folder) / 0.95)
    summarizer = ScriptedModel(["they read 30 documents"])
    events = await DefaultPolicy(target=0.3, summarizer=summarizer)(_view(folder, budget))
    summaries = [e for e in events if e.summary is not None]
    assert len(summaries) == 1 and summaries[0].summary == "they read 30 documents"
    assert summaries[0].model == "scripted"
    _apply(folder, events)
    assert folder.messages[0] == user("the task")
    assert folder.messages[1].text.startswith(SUMMARY_PREFIX)
    assert folder.messages[2].role == "assistant"  # the kept turns start with a call
    assert folder.messages[-2].tool_calls[0].id == "c40_0"  # the latest turn is kept
    assert _tokens(folder) <= 0.8 * budget


async def test_a_summary_range_never_parts_parallel_calls_from_their_results() -> None:
    folder = _folder(30, result_chars=300, calls_per_step=3)
    budget = int(_tokens(folder) / 0.95)
    events = await DefaultPolicy(summarizer=ScriptedModel(["s"]))(_view(folder, budget))
    check_events(_view(folder, budget), events)
    _apply(folder, events)
    for i, message in enumerate(folder.messages):
        if message.role == "tool":
            asked = [c.id for c in folder.messages[i - 1].tool_calls]
            assert [r.call_id for r in message.tool_results] == asked


async def test_a_failed_summary_call_still_compacts_with_a_plain_note() -> None:
    folder = _folder(40, result_chars=40, text_chars=400)
    budget = int(_tokens(folder) / 0.95)
    summarizer = ScriptedModel([Fail(ServerError("upstream down", status=503))])
    events = await DefaultPolicy(target=0.3, summarizer=summarizer)(_view(folder, budget))
    (summary,) = [e for e in events if e.summary is not None]
    assert summary.model is None
    assert "no summary could be written (server_error" in (summary.summary or "")


async def test_without_a_summarizer_the_latest_results_are_cleared_as_a_last_resort() -> None:
    folder = _folder(3, result_chars=20_000)  # three huge results, all "recent"
    budget = int(_tokens(folder) / 0.95)
    events = await DefaultPolicy(keep_recent=3)(_view(folder, budget))
    assert events and all(e.summary is None for e in events)
    _apply(folder, events)
    assert _tokens(folder) <= 0.5 * budget


def test_policy_events_that_would_break_a_request_are_refused() -> None:
    folder = _folder(4)
    view = _view(folder, 1_000)
    seqs = folder.message_seqs
    with pytest.raises(UsageError, match="first user message"):
        check_events(view, [ContextCompacted(seqs[0], seqs[2], "s")])
    with pytest.raises(UsageError, match="part calls from their results"):
        check_events(view, [ContextCompacted(seqs[1], seqs[1], "s")])
    with pytest.raises(UsageError, match=r"only return context\.compacted"):
        check_events(view, [UserMessage(user("x"))])  # type: ignore[list-item]
    check_events(view, [ContextCompacted(seqs[1], seqs[2], "s")])  # a whole turn is fine


def test_a_policy_with_impossible_fractions_is_refused() -> None:
    with pytest.raises(UsageError, match="target <= threshold"):
        DefaultPolicy(threshold=0.5, target=0.8)
