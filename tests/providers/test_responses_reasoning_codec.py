"""Responses reasoning items in the codec: decoded whole (plain and streamed) into a `Thinking`
part that keeps the item with sorted keys, sent back as it came before its turn's other
items, left out for another provider; `include` asks for the encrypted content."""

from __future__ import annotations

import json
from typing import Any

import openai.types.responses
import pydantic

from tether.messages import Message, Text, Thinking, ToolCall, ToolResult, tool_results, user
from tether.providers.base import Delta
from tether.providers.openai_responses import OpenAIResponsesModel, encode_request
from tether.settings import ModelSettings, Reasoning

from .conftest import Recorder, wire_json
from .transcripts import request

PARAMS = pydantic.TypeAdapter(openai.types.responses.ResponseCreateParams)
PARIS = ToolCall("call_1", "get_weather", {"location": "Paris"})
# Keys as the API sends them, not sorted.
ITEM: dict[str, Any] = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [
        {"type": "summary_text", "text": "**Weather** I need the tool."},
        {"type": "summary_text", "text": "Paris it is."},
    ],
    "encrypted_content": "gAAAAB-secret",
}


def _model(recorder: Recorder, stream: bool = False) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("o4-mini", http_client=recorder.client(), stream=stream)


def _answer(output: list[Any]) -> bytes:
    body = wire_json("openai-responses-response-function-call.json")
    body["output"] = output
    openai.types.responses.Response.model_validate(body)
    return json.dumps(body).encode()


CALL_ITEM = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"location":"Paris"}',
    "status": "completed",
}


async def test_a_reasoning_item_becomes_the_first_part_kept_whole_with_sorted_keys(
    recorder: Recorder,
) -> None:
    recorder.reply(200, _answer([ITEM, CALL_ITEM]))
    response = await _model(recorder).complete(request((user("weather?"),)))
    thinking, call = response.message.parts
    assert thinking == Thinking(
        "**Weather** I need the tool.\n\nParis it is.", "openai-responses", ITEM
    )
    assert isinstance(thinking, Thinking) and list(thinking.data) == sorted(ITEM)
    assert call == PARIS


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def _stream(final_output: list[Any]) -> bytes:
    started = {**ITEM, "encrypted_content": "gAAAAB-se"}  # `.added` may hold a partial one
    completed = json.loads(_answer(final_output))
    return _sse(
        {"type": "response.output_item.added", "output_index": 0, "item": started},
        *(
            {
                "type": "response.reasoning_summary_text.delta",
                "item_id": "rs_1",
                "output_index": 0,
                "summary_index": 0,
                "delta": piece,
            }
            for piece in ("**Weather** ", "I need the tool.")
        ),
        {"type": "response.output_item.done", "output_index": 0, "item": ITEM},
        {"type": "response.output_item.done", "output_index": 1, "item": CALL_ITEM},
        {"type": "response.completed", "response": completed},
    )


async def test_a_stream_offers_the_summary_as_reasoning_deltas_and_keeps_the_done_item(
    recorder: Recorder,
) -> None:
    for final_output in ([ITEM, CALL_ITEM], []):  # the whole output, or only the events
        seen: list[Delta] = []
        recorder.reply(200, _stream(final_output))
        response = await _model(recorder, stream=True).complete(
            request((user("weather?"),), on_delta=seen.append)
        )
        assert seen == [Delta("reasoning", "**Weather** "), Delta("reasoning", "I need the tool.")]
        (thinking,) = response.message.thinking
        assert thinking.data == ITEM and thinking.data["encrypted_content"] == "gAAAAB-secret"
        assert response.message.tool_calls == (PARIS,)


def _turn(*thinking: Thinking) -> tuple[Message, ...]:
    return (
        user("weather?"),
        Message("assistant", (*thinking, Text("Let me look."), PARIS)),
        tool_results([ToolResult("call_1", "14 C")]),
    )


def test_its_own_reasoning_goes_back_as_received_before_the_turns_items() -> None:
    own = Thinking("x", "openai-responses", ITEM)
    body = encode_request("o4-mini", request(_turn(own)))
    assert body["input"][1:4] == [
        ITEM,
        {"role": "assistant", "content": "Let me look."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"location":"Paris"}',
        },
    ]
    assert json.dumps(body["input"][1]) == json.dumps(ITEM)  # the item's own key order
    PARAMS.validate_python(body)


def test_reasoning_of_another_provider_or_without_its_encrypted_content_is_left_out() -> None:
    foreign = Thinking("x", "anthropic", {"signature": "sig"})
    bare = Thinking("x", "openai-responses", {"id": "rs_2", "summary": [], "type": "reasoning"})
    body = encode_request("o4-mini", request(_turn(foreign, bare)))
    assert [i.get("type", i.get("role")) for i in body["input"]] == [
        "user",
        "assistant",
        "function_call",
        "function_call_output",
    ]
    # Stored responses are found by id: then the bare item goes back too.
    stored = request(_turn(bare), settings=ModelSettings(extra={"store": True}))
    assert encode_request("o4-mini", stored)["input"][1] == bare.data
    # Reasoning alone (its call cut by the output limit) would lack its following item.
    alone = (user("x"), Message("assistant", (Thinking("x", "openai-responses", ITEM),)))
    assert encode_request("o4-mini", request(alone))["input"] == [{"role": "user", "content": "x"}]
    # A codec under another name keeps only what that name wrote.
    renamed = encode_request("m", request(_turn(Thinking("", "azure", ITEM))), provider="azure")
    assert renamed["input"][1] == ITEM


def test_a_reasoning_setting_asks_for_the_encrypted_content_and_no_summary() -> None:
    settings = ModelSettings(reasoning=Reasoning(effort="high"))
    body = encode_request("o4-mini", request((user("x"),), settings=settings))
    assert body["reasoning"] == {"effort": "high"}
    assert body["include"] == ["reasoning.encrypted_content"] and body["store"] is False
    PARAMS.validate_python(body)
    summary = ModelSettings(
        reasoning=Reasoning(effort="low"), extra={"reasoning": {"summary": "auto"}}
    )
    body = encode_request("o4-mini", request((user("x"),), settings=summary))
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert "include" not in encode_request("o4-mini", request((user("x"),)))
