"""Scripted review participants: the model is the only test double. Each answers from the
task the chair gave it (a sub-agent sees nothing else), so any process can run them: the
CLI and the crash worker import them as `python:review.participants:NAME` (tests/ on the
path). With `$REVIEW_CALLS` set, every model call appends `PID TASK-DIGEST` to that file,
so a test counts calls across processes that were killed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from tether import Agent
from tether.messages import Message
from tether.testing import Hang, ScriptedModel

CALLS_ENV = "REVIEW_CALLS"
PRICE = (1.0, 2.0)  # dollars per million tokens: a review's cost is known
ARTIFACT = "The plan: a very very long introduction, then the steps.\n"

Answer = Callable[[str], str]


def digest(task: str) -> str:
    return hashlib.sha256(task.encode()).hexdigest()[:16]


def block(task: str, tag: str) -> Any:
    """The JSON between `<tag>` and `</tag>` in a task."""
    found = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", task, re.DOTALL)
    assert found is not None, f"no <{tag}> in the task"
    text = found.group(1)
    return text if tag == "artifact" else json.loads(text)


def name_of(task: str) -> str:
    found = re.match(r"You are (\S+),", task)
    assert found is not None
    return found.group(1)


def round_of(task: str) -> int:
    found = re.search(r"round (\d+) of", task)
    assert found is not None
    return int(found.group(1))


def model(answer: Answer, name: str = "scripted") -> ScriptedModel:
    def reply(messages: Sequence[Message]) -> str:
        task = messages[0].text
        calls = os.environ.get(CALLS_ENV)
        if calls:
            with open(calls, "a") as f:
                f.write(f"{os.getpid()} {digest(task)}\n")
        return answer(task)

    return ScriptedModel([reply], name=f"scripted:{name}", price_per_million=PRICE)


def objections(*items: dict[str, str]) -> str:
    return json.dumps({"objections": list(items)})


# -- critics ---------------------------------------------------------------------------------


def stubborn(task: str) -> str:
    """The same objection every round: new at first, then repeated by the id it was given."""
    mine = [o for o in block(task, "ledger") if o["critic"] == name_of(task)]
    if mine:
        return objections({"id": mine[0]["id"], "text": "(as before)"})
    return objections({"text": "The introduction is too long."})


def wordy(task: str) -> str:
    """The same objection every round by its text alone (spelled differently after round
    1): it keeps its id all the same. In a fenced block, as models like to answer."""
    text = "Missing tests." if round_of(task) == 1 else "  missing   TESTS "
    return f"Here you go:\n```json\n{objections({'text': text})}\n```"


def restless(task: str) -> str:
    """A new objection every round: never converges."""
    return objections({"text": f"Problem number {round_of(task)}."})


def satisfied(task: str) -> str:
    return objections()


def garbled(task: str) -> str:
    return "I think it is fine, mostly."


def garbled_once(task: str) -> str:
    """Unreadable at first; right when told what was wrong."""
    if "could not be used" in task:
        return objections({"text": "Say who the plan is for."})
    return "{'objections': 'single quotes'}"


# -- proposers -------------------------------------------------------------------------------


def shortening(task: str) -> str:
    """Accepts the objections about length (and shortens the artifact), rejects the rest."""
    artifact = block(task, "artifact")
    dispositions = []
    revised = None
    for o in block(task, "objections"):
        if "long" in o["text"]:
            dispositions.append({"id": o["id"], "disposition": "accepted"})
            revised = artifact.replace("a very very long introduction", "a short introduction")
        else:
            dispositions.append(
                {"id": o["id"], "disposition": "rejected", "reason": "out of scope"}
            )
    return json.dumps({"dispositions": dispositions, "artifact": revised})


def deferring(task: str) -> str:
    asked = block(task, "objections")
    return json.dumps({"dispositions": [{"id": o["id"], "disposition": "deferred"} for o in asked]})


def forgetful(task: str) -> str:
    """Answers no objection at all, even when told."""
    return json.dumps({"dispositions": [], "artifact": None})


# -- as agents and as `python:` models -------------------------------------------------------


def agent(answer: Answer, name: str | None = None) -> Agent:
    return Agent(model(answer, name or answer.__name__), name=name)


def stubborn_model() -> ScriptedModel:
    return model(stubborn, "stubborn")


def wordy_model() -> ScriptedModel:
    return model(wordy, "wordy")


def restless_model() -> ScriptedModel:
    return model(restless, "restless")


def garbled_model() -> ScriptedModel:
    return model(garbled, "garbled")


def shortening_model() -> ScriptedModel:
    return model(shortening, "shortening")


def hanging_model() -> ScriptedModel:
    """Records its call, then never answers (until the review is interrupted)."""

    def reply(messages: Sequence[Message]) -> Hang:
        calls = os.environ.get(CALLS_ENV)
        if calls:
            with open(calls, "a") as f:
                f.write(f"{os.getpid()} {digest(messages[0].text)}\n")
        return Hang()

    return ScriptedModel([reply], name="scripted:hanging")
