"""How the fold reads a call's questions: an elicitation puts the session in `waiting_input`
until answered (named like approvals, a sub-agent's as THREAD:CALL_ID), a call that ends
drops its question, and a sampling answer adds its usage and cost. `LogAsker` answers a
question the log has answered already without asking or calling the model again."""

from __future__ import annotations

import json

from tether.events import (
    Event,
    InputAnswered,
    InputRequested,
    ModelRequested,
    ModelResponded,
    Payload,
    SamplingAnswered,
    SessionCreated,
    ThreadStarted,
    ToolFinished,
    ToolStarted,
    UserMessage,
)
from tether.fold import Folder, fold
from tether.limits import Limits
from tether.loop import Engine, TurnContext
from tether.messages import JSONObject, Message, ToolCall, Usage, canonical_json, user
from tether.session.inputs import LogAsker
from tether.session.log import SessionLog
from tether.store import MemoryStore
from tether.testing import ScriptedModel
from tether.tools.base import Toolbox
from tether.tools.inputs import SamplingRequest, input_key

SCHEMA: JSONObject = {"type": "object", "properties": {"name": {"type": "string"}}}
ASKED = InputRequested("c1", "asking", "Name?", SCHEMA, "k1")


def log_of(*payloads: Payload | tuple[str, Payload]) -> list[Event]:
    events = []
    for seq, item in enumerate(payloads, start=1):
        thread, payload = item if isinstance(item, tuple) else ("", item)
        events.append(Event("s", seq, f"e{seq}", "2026-01-01T00:00:00.000000Z", payload, thread))
    return events


def calling(*ids: str) -> list[Payload]:
    calls = tuple(ToolCall(i, "greet", {}) for i in ids)
    return [
        SessionCreated("m"),
        UserMessage(user("hi")),
        ModelRequested("m", "h", 1),
        ModelResponded(Message("assistant", calls)),
        *(ToolStarted(i, "greet", "read") for i in ids),
    ]


def test_an_elicitation_waits_in_waiting_input_until_answered() -> None:
    _, asked = fold(log_of(*calling("c1"), ASKED))
    assert asked.state == "waiting_input" and asked.pending_inputs == {"c1": ASKED}
    assert json.loads(canonical_json(asked.to_json()))["pending_inputs"]["c1"]["message"] == "Name?"
    folder = Folder().apply_all(
        log_of(*calling("c1"), ASKED, InputAnswered("c1", "accept", {"name": "Ada"}, "k1"))
    )
    view = folder.view()
    assert view.state == "waiting_tool" and view.pending_inputs == {}
    assert "pending_inputs" not in view.to_json()  # an older view's bytes, when none waits
    assert folder.input_answers[("c1", "k1")].content == {"name": "Ada"} and folder.turn_open


def test_a_call_that_ends_unanswered_drops_its_question() -> None:
    events = log_of(*calling("c1", "c2"), ASKED, ToolFinished("c1", "timeout", "too slow"))
    _, view = fold(events)
    assert view.pending_inputs == {} and view.state == "waiting_tool"


def test_an_answer_to_another_question_of_the_call_leaves_the_first_waiting() -> None:
    _, view = fold(log_of(*calling("c1"), ASKED, InputAnswered("c1", "accept", {}, "other")))
    assert view.state == "waiting_input" and list(view.pending_inputs) == ["c1"]


def test_a_sub_agents_question_is_named_thread_colon_call_in_the_main_fold() -> None:
    child = "helper-1"
    asking: list[Payload | tuple[str, Payload]] = [
        *calling("c1"),
        (child, ThreadStarted(child, "helper", "c1")),
        (child, InputRequested("d1", "asking", "Name?", SCHEMA, "k1")),
    ]
    _, view = fold(log_of(*asking))
    assert view.state == "waiting_input" and list(view.pending_inputs) == ["helper-1:d1"]
    _, after = fold(log_of(*asking, (child, InputAnswered("d1", "decline", {}, "k1"))))
    assert after.pending_inputs == {} and after.state == "waiting_tool"


def test_a_sampling_answer_adds_its_usage_and_cost_and_a_refusal_nothing() -> None:
    sampled = SamplingAnswered("c1", "asking", "m", "a line", usage=Usage(7, 3), cost_usd=0.5)
    refused = SamplingAnswered("c1", "asking", "m", refused="budget spent", key="k2")
    _, before = fold(log_of(*calling("c1")))
    _, view = fold(log_of(*calling("c1"), sampled, refused))
    assert view.usage.input_tokens == before.usage.input_tokens + 7
    assert view.usage.output_tokens == before.usage.output_tokens + 3
    assert view.cost_usd is None  # the model's own answers had no price
    _, priced = fold(log_of(SessionCreated("m"), UserMessage(user("hi")), sampled))
    assert priced.cost_usd == 0.5


async def asker_on(events: list[Payload], model: ScriptedModel) -> tuple[LogAsker, SessionLog]:
    store = MemoryStore()
    log = SessionLog(store, "s")
    await log.append(*events)
    engine = Engine(model, Toolbox([]), Limits())
    return LogAsker(TurnContext(log, engine)), log


async def test_a_question_the_log_answered_is_answered_again_without_asking() -> None:
    key = input_key("asking", "Name?", SCHEMA)
    asked = InputRequested("c1", "asking", "Name?", SCHEMA, key)
    answered = InputAnswered("c1", "accept", {"name": "Ada"}, key)
    asker, log = await asker_on([*calling("c1"), asked, answered], ScriptedModel([]))
    seq = log.folder.last_seq
    answer = await asker.elicit("c1", "asking", "Name?", SCHEMA)
    assert (answer.action, answer.content) == ("accept", {"name": "Ada"})
    assert log.folder.last_seq == seq


async def test_a_sampling_request_asked_again_is_not_sent_to_the_model_again() -> None:
    model = ScriptedModel(["a line"])  # one answer only: a second call would fail
    asker, log = await asker_on(calling("c1"), model)
    request = SamplingRequest((user("a line on rain"),), "Be brief.", 50)
    first = await asker.sample("c1", "asking", request)
    seq = log.folder.last_seq
    again = await asker.sample("c1", "asking", request)
    assert first == again and first.text == "a line" and log.folder.last_seq == seq
