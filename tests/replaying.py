"""Recorded sessions to replay, for the replay and experiment tests: real tools that count
their calls (`lookup` reads, `note` writes), the model that recorded the sessions, and the
variants that replay them (scripted models, the only doubles). Importable as `replaying`
(a check is found again by `MODULE:ATTR`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tether import Agent, RunResult
from tether.messages import Message, ToolResult
from tether.store.base import Store
from tether.testing import ScriptedModel, call
from tether.testing.scripted import Reply
from tether.tools.base import Tool, make_tool


@dataclass
class Kit:
    """`lookup` (effect read) and `note` (write), each recording the arguments it ran with."""

    looked: list[str] = field(default_factory=list)
    noted: list[str] = field(default_factory=list)

    @property
    def tools(self) -> list[Tool]:
        def lookup(q: str) -> str:
            """Look a question up."""
            self.looked.append(q)
            return f"answer to {q}"

        def note(text: str) -> str:
            """Write a note down."""
            self.noted.append(text)
            return f"noted {text}"

        return [make_tool(lookup, effect="read"), make_tool(note)]

    def clear(self) -> None:
        self.looked.clear()
        self.noted.clear()


def _results(message: Message) -> list[ToolResult]:
    return [p for p in message.parts if isinstance(p, ToolResult)]


def question(messages: Sequence[Message]) -> str:
    return next(m.text for m in reversed(messages) if m.role == "user" and m.text)


def recorder_reply(messages: Sequence[Message]) -> Reply:
    """Looks the question up and notes it, then answers with what it found."""
    results = _results(messages[-1])
    if results:
        return "found: " + results[0].content
    q = question(messages)
    return [call("lookup", q=q), call("note", text=q)]


def same_reply(messages: Sequence[Message]) -> Reply:
    """What the recorder did, call for call: every call repeats a recorded one."""
    return recorder_reply(messages)


def curious_reply(messages: Sequence[Message]) -> Reply:
    """Looks the question up twice (the second a new call, run live); on sessions whose
    number is a multiple of 3 it notes something new instead (a write, refused) and then
    answers that it could not."""
    results = _results(messages[-1])
    if results:
        if any(r.is_error for r in results):
            return "could not note it"
        return "found: " + results[0].content
    q = question(messages)
    if session_number(q) % 3 == 0:
        return [call("lookup", q=q), call("note", text=f"curious about {q}")]
    return [call("lookup", q=q), call("lookup", q=f"{q}?")]


def session_number(question: str) -> int:
    """`s7-t2` (session 7, turn 2) -> 7."""
    return int(question.split("-")[0][1:])


def model(reply: str) -> ScriptedModel:
    replies = {"recorder": recorder_reply, "same": same_reply, "curious": curious_reply}
    return ScriptedModel([replies[reply]], repeat_last=True, price_per_million=(1.0, 2.0))


async def record(store: Store, kit: Kit, number: int, turns: int) -> str:
    """A session of `turns` turns (questions `s{number}-t{turn}`), each with a lookup and a
    note, recorded by an `Agent` on `store`; its id."""
    agent = Agent(model("recorder"), tools=kit.tools, store=store)
    first = await agent.run(f"s{number}-t1")
    for turn in range(2, turns + 1):
        await agent.run(f"s{number}-t{turn}", session_id=first.session_id)
    return first.session_id


def found(result: RunResult) -> bool:
    """The experiment's check: the replay's last answer is what a lookup found."""
    return result.output.startswith("found: ")


# For `tether experiment run`: the variants' models and tools by `MODULE:ATTR`.
tools = Kit().tools


def same_model() -> ScriptedModel:
    return model("same")


def curious_model() -> ScriptedModel:
    return model("curious")
