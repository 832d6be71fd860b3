"""An accepted elicitation reaches the server with the requested schema's defaults for the
fields the answer left out (SEP-1034, the conformance harness's
`elicitation-sep1034-client-defaults`); what the user gave wins over a default."""

from __future__ import annotations

from typing import Any

from mcp import types as mcp_types

from tether.events import InputAction
from tether.messages import JSONObject
from tether.tools.inputs import ASKER, InputAnswer, SamplingAnswer, SamplingRequest
from tether.tools.mcp.asking import ServerRequests

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "verified": {"type": "boolean", "default": True},
        "status": {"type": "string", "enum": ["active", "pending"], "default": "active"},
        "note": {"type": "string"},
    },
}


class User:
    def __init__(self, action: InputAction, content: JSONObject) -> None:
        self.answer = InputAnswer(action, content)

    async def elicit(
        self, call_id: str, server: str, message: str, schema: JSONObject
    ) -> InputAnswer:
        return self.answer

    async def sample(self, call_id: str, server: str, request: SamplingRequest) -> SamplingAnswer:
        raise AssertionError("not asked")


async def ask(user: User) -> mcp_types.ElicitResult | mcp_types.ErrorData:
    requests = ServerRequests("s")
    params = mcp_types.ElicitRequestFormParams(message="Who?", requested_schema=SCHEMA)
    token = ASKER.set(user)
    try:
        with requests.calling("call_0"):
            return await requests.elicit(None, params)  # type: ignore[arg-type]
    finally:
        ASKER.reset(token)


async def test_an_accepted_answer_gets_the_defaults_of_the_fields_it_leaves_out() -> None:
    result = await ask(User("accept", {"age": 41, "note": "hi"}))
    assert isinstance(result, mcp_types.ElicitResult)
    assert result.action == "accept"
    assert result.content == {
        "name": "John Doe",
        "age": 41,
        "verified": True,
        "status": "active",
        "note": "hi",
    }


async def test_a_declined_elicitation_sends_no_defaults() -> None:
    result = await ask(User("decline", {}))
    assert isinstance(result, mcp_types.ElicitResult)
    assert (result.action, result.content) == ("decline", None)
