"""The log invariants helper catches each kind of broken log, so a passing check means
something. Each case takes a real run's log and breaks one rule."""

from __future__ import annotations

import dataclasses

import pytest

from invariants import assert_log_invariants, read_checked
from tether import Agent, Event, tool
from tether.events import ToolFinished, TurnEnded, UserMessage
from tether.messages import user
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call


@tool(effect="read")
def look(n: int) -> str:
    return f"seen {n}"


async def a_good_log() -> list[Event]:
    store = MemoryStore()
    model = ScriptedModel([[call("look", n=1), call("look", n=2)], "done"])
    result = await Agent(model, tools=[look], store=store).run("look twice")
    return await read_checked(store, result.session_id)


def renumber(events: list[Event]) -> list[Event]:
    return [dataclasses.replace(e, seq=i) for i, e in enumerate(events, start=1)]


def without_first(events: list[Event], kind: type[object]) -> list[Event]:
    index = next(i for i, e in enumerate(events) if isinstance(e.payload, kind))
    return renumber(events[:index] + events[index + 1 :])


async def test_a_gap_in_seq_is_caught() -> None:
    events = await a_good_log()
    with pytest.raises(AssertionError, match="seq is not dense"):
        assert_log_invariants(events[:3] + events[4:])


async def test_a_call_never_answered_is_caught() -> None:
    events = await a_good_log()
    # Cut the log right after the first result: the second call is open, the turn too.
    cut = next(i for i, e in enumerate(events) if isinstance(e.payload, ToolFinished))
    with pytest.raises(AssertionError, match="never answered"):
        assert_log_invariants(events[: cut + 1], turn_closed=False)


async def test_a_call_answered_twice_is_caught() -> None:
    events = await a_good_log()
    index = next(i for i, e in enumerate(events) if isinstance(e.payload, ToolFinished))
    duplicate = dataclasses.replace(events[index], id="ev_dup")
    broken = [*events[: index + 1], duplicate, *events[index + 1 :]]
    with pytest.raises(AssertionError, match="answered more than once"):
        assert_log_invariants(renumber(broken))


async def test_a_model_request_before_every_result_is_in_is_caught() -> None:
    events = await a_good_log()
    with pytest.raises(AssertionError, match="model asked again while calls"):
        assert_log_invariants(without_first(events, ToolFinished))


async def test_a_turn_without_its_end_is_caught() -> None:
    events = await a_good_log()
    with pytest.raises(AssertionError, match=r"no turn\.ended"):
        assert_log_invariants(without_first(events, TurnEnded))


async def test_two_ends_of_one_turn_are_caught() -> None:
    events = await a_good_log()
    extra = dataclasses.replace(events[-1], id="ev_extra", seq=len(events) + 1)
    with pytest.raises(AssertionError, match="no open turn"):
        assert_log_invariants([*events, extra])


async def test_a_second_user_message_inside_an_open_turn_is_caught() -> None:
    events = await a_good_log()
    sneaky = dataclasses.replace(events[1], id="ev_user", payload=UserMessage(user("me too")))
    with pytest.raises(AssertionError, match=r"user\.message while a turn is open"):
        assert_log_invariants(renumber([*events[:3], sneaky, *events[3:]]))


async def test_a_good_log_passes() -> None:
    events = await a_good_log()
    assert_log_invariants(events)
    assert [type(e.payload).__name__ for e in events][-1] == "TurnEnded"
