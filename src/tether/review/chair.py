"""The chair: the main agent of a review session, a `Model` written in Python, not an LLM.
Its answer is a pure function of the transcript it is sent (`ledger.replay`): the calls to
the critics (in parallel) or the proposer that the minutes ask for next, with the minutes of
what the last results decided as its text; or, when the review stops, a final answer.

It spends nothing: its usage is zero and its price known (0), so a review's cost is its
participants'.
"""

from __future__ import annotations

import json

from tether.messages import JSONValue, Message, Text, ToolCall, Usage
from tether.providers.base import ModelRequest, ModelResponse, StopKind
from tether.review.ledger import Minutes, replay
from tether.review.tasks import tasks

CHAIR_MODEL = "tether:review-chair"


class Chair:
    @property
    def name(self) -> str:
        return CHAIR_MODEL

    def estimate_cost(self, input_tokens: int) -> float:
        return 0.0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        minutes = replay(request.system, request.messages)
        message = next_answer(minutes)
        stop: StopKind = "tool_calls" if message.tool_calls else "end_turn"
        return ModelResponse(message, stop, stop, Usage(), 0.0)


def next_answer(minutes: Minutes) -> Message:
    ask = minutes.ask
    if ask is None:
        return Message("assistant", (Text(_dumps(final_json(minutes))),))
    calls = tuple(
        ToolCall(f"a{minutes.answers + 1}_r{ask.round}_{name}", name, {"task": task})
        for name, task in tasks(minutes, ask)
    )
    note = (Text(_dumps(minutes.note)),) if minutes.note else ()
    return Message("assistant", (*note, *calls))


def final_json(minutes: Minutes) -> dict[str, JSONValue]:
    """The chair's final answer: how the review stopped, its ledger and the artifact."""
    return {
        **minutes.note,
        "rounds": minutes.round,
        "ledger": [o.to_json() for o in minutes.ledger.values()],
        "artifact": minutes.artifact,
    }


def _dumps(value: dict[str, JSONValue]) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
