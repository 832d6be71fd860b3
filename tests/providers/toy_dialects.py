"""Toy models speaking each dialect over `FakeServer`: asked with tools, a `ToyModel` calls
them as planned (in parallel, fragments interleaved when streamed); given their results, it
answers with a text naming them. One handler per dialect writes its JSON or its stream.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .fake_servers import Handler, Received, Reply

Json = Any


def sse(events: list[tuple[str | None, Json]]) -> list[bytes]:
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "").encode() + f"data: {text}\n\n".encode())
    return out


def words(text: str) -> list[str]:
    """The text in word-sized pieces that join to it exactly, as a stream sends it: a
    streamed answer holds the very text the whole one does."""
    parts = text.split(" ")
    return [w + " " for w in parts[:-1]] + [parts[-1]]


def split_args(arguments: dict[str, Any]) -> list[str]:
    """Argument JSON in three fragments, as models stream it."""
    text = json.dumps(arguments)
    third = max(1, len(text) // 3)
    return [text[:third], text[third : 2 * third], text[2 * third :]]


@dataclass
class ToyModel:
    """Plays a model: first calls `plan` in parallel, then answers with the results it got."""

    plan: list[tuple[str, dict[str, Any]]]
    stream: bool = False
    turns: int = 0

    def answer(self, results: list[str]) -> str:
        return "Results: " + ", ".join(results)


# --- per-dialect: read the results of the last turn, write the answer --------------------


def anthropic_handler(toy: ToyModel) -> Handler:
    def handle(request: Received) -> Reply:
        body = request.json()
        last = body["messages"][-1]
        blocks = last["content"] if isinstance(last["content"], list) else []
        results = [b["content"] for b in blocks if b.get("type") == "tool_result"]
        usage = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 50}
        if results or not body.get("tools"):
            text = toy.answer(results)
            if not body.get("stream"):
                content = [{"type": "text", "text": text}]
                return _json(_anthropic_message(content, "end_turn", usage))
            events: list[tuple[str | None, Json]] = [
                (
                    "message_start",
                    {"type": "message_start", "message": _anthropic_message([], None, usage)},
                ),
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                ),
            ]
            for word in words(text):
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "text_delta", "text": word},
                        },
                    )
                )
            return _anthropic_end(events, 1, "end_turn")
        calls = [(f"toolu_{i}", name, args) for i, (name, args) in enumerate(toy.plan)]
        if not body.get("stream"):
            content = [{"type": "tool_use", "id": c, "name": n, "input": a} for c, n, a in calls]
            return _json(_anthropic_message(content, "tool_use", usage))
        events = [
            (
                "message_start",
                {"type": "message_start", "message": _anthropic_message([], None, usage)},
            )
        ]
        for i, (call_id, name, args) in enumerate(calls):
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {
                            "type": "tool_use",
                            "id": call_id,
                            "name": name,
                            "input": {},
                        },
                    },
                )
            )
            for piece in split_args(args):
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "input_json_delta", "partial_json": piece},
                        },
                    )
                )
            events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
        return _anthropic_end(events, len(calls), "tool_use")

    return handle


def _anthropic_message(content: list[Json], stop: str | None, usage: Json) -> Json:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


def _anthropic_end(events: list[tuple[str | None, Json]], blocks: int, stop: str) -> Reply:
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 20},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return Reply(chunks=sse(events), headers={"content-type": "text/event-stream"})


def openai_chat_handler(toy: ToyModel) -> Handler:
    def handle(request: Received) -> Reply:
        body = request.json()
        results = []
        for message in reversed(body["messages"]):
            if message["role"] != "tool":
                break
            results.insert(0, message["content"])
        usage = {
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "total_tokens": 120,
            "prompt_tokens_details": {"cached_tokens": 50},
        }
        calls = (
            []
            if results or not body.get("tools")
            else [(f"call_{i}", name, args) for i, (name, args) in enumerate(toy.plan)]
        )
        text = toy.answer(results) if not calls else None
        if not body.get("stream"):
            message: Json = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = [
                    {
                        "id": c,
                        "type": "function",
                        "function": {"name": n, "arguments": json.dumps(a)},
                    }
                    for c, n, a in calls
                ]
            choice = {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
            }
            return _json(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": body["model"],
                    "choices": [choice],
                    "usage": usage,
                }
            )
        deltas: list[Json] = [{"role": "assistant", "content": ""}]
        if text:
            deltas += [{"content": w} for w in words(text)]
        for i, (call_id, name, _) in enumerate(calls):
            deltas.append(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
        # Interleave the fragments of all calls, as parallel calls stream.
        pieces = [split_args(a) for _, _, a in calls]
        for round_ in range(3):
            for i, parts in enumerate(pieces):
                deltas.append(
                    {"tool_calls": [{"index": i, "function": {"arguments": parts[round_]}}]}
                )
        chunks = [_chat_chunk(d, None) for d in deltas]
        chunks.append(_chat_chunk({}, "tool_calls" if calls else "stop"))
        chunks.append(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "m",
                "choices": [],
                "usage": usage,
            }
        )
        return Reply(
            chunks=sse([(None, c) for c in chunks]) + sse([(None, "[DONE]")]),
            headers={"content-type": "text/event-stream"},
        )

    return handle


def _chat_chunk(delta: Json, finish: str | None) -> Json:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def responses_handler(toy: ToyModel) -> Handler:
    def handle(request: Received) -> Reply:
        body = request.json()
        results = []
        for item in reversed(body["input"]):
            if item.get("type") != "function_call_output":
                break
            results.insert(0, item["output"])
        calls = [] if results or not body.get("tools") else toy.plan
        output: list[Json] = [
            {
                "type": "function_call",
                "id": f"fc_{i}",
                "call_id": f"call_{i}",
                "name": n,
                "arguments": json.dumps(a),
                "status": "completed",
            }
            for i, (n, a) in enumerate(calls)
        ]
        if not calls:
            output = [
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": toy.answer(results), "annotations": []}
                    ],
                }
            ]
        response = {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "status": "completed",
            "model": body["model"],
            "output": output,
            "error": None,
            "incomplete_details": None,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": body.get("tools", []),
            "usage": {
                "input_tokens": 100,
                "input_tokens_details": {"cached_tokens": 50, "cache_write_tokens": 0},
                "output_tokens": 20,
                "output_tokens_details": {"reasoning_tokens": 5},
                "total_tokens": 120,
            },
        }
        if not body.get("stream"):
            return _json(response)
        events: list[tuple[str | None, Json]] = [
            (
                "response.created",
                {
                    "type": "response.created",
                    "response": {**response, "status": "in_progress", "output": []},
                },
            )
        ]
        for i, item in enumerate(output):
            events.append(
                (
                    "response.output_item.added",
                    {
                        "type": "response.output_item.added",
                        "output_index": i,
                        "item": {**item, "arguments": ""}
                        if item["type"] == "function_call"
                        else {**item, "content": []},
                    },
                )
            )
            if item["type"] == "function_call":
                for piece in split_args(json.loads(item["arguments"])):
                    events.append(
                        (
                            "response.function_call_arguments.delta",
                            {
                                "type": "response.function_call_arguments.delta",
                                "output_index": i,
                                "item_id": item["id"],
                                "delta": piece,
                            },
                        )
                    )
            else:
                events.append(
                    (
                        "response.output_text.delta",
                        {
                            "type": "response.output_text.delta",
                            "output_index": i,
                            "item_id": item["id"],
                            "content_index": 0,
                            "logprobs": [],
                            "delta": item["content"][0]["text"],
                        },
                    )
                )
            events.append(
                (
                    "response.output_item.done",
                    {"type": "response.output_item.done", "output_index": i, "item": item},
                )
            )
        events.append(("response.completed", {"type": "response.completed", "response": response}))
        for number, (_, event) in enumerate(events):
            event["sequence_number"] = number
        return Reply(chunks=sse(events), headers={"content-type": "text/event-stream"})

    return handle


def ollama_handler(toy: ToyModel) -> Handler:
    def handle(request: Received) -> Reply:
        body = request.json()
        results = []
        for message in reversed(body["messages"]):
            if message["role"] != "tool":
                break
            results.insert(0, message["content"])
        calls = [] if results or not body.get("tools") else toy.plan
        # Legacy servers send calls without ids: the codec must synthesize stable ones.
        wire_calls = [{"function": {"name": n, "arguments": a}} for n, a in calls]
        text = "" if calls else toy.answer(results)
        final = {
            "model": body["model"],
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 100,
            "eval_count": 20,
        }
        if not body.get("stream"):
            final["message"] = {
                "role": "assistant",
                "content": text,
                **({"tool_calls": wire_calls} if calls else {}),
            }
            return _json(final)
        lines: list[Json] = [
            {
                "model": body["model"],
                "message": {"role": "assistant", "content": w},
                "done": False,
            }
            for w in (words(text) if text else [])
        ]
        if calls:
            lines.append(
                {
                    "model": body["model"],
                    "message": {"role": "assistant", "content": "", "tool_calls": wire_calls},
                    "done": False,
                }
            )
        lines.append(final)
        return Reply(
            chunks=[json.dumps(line).encode() + b"\n" for line in lines],
            headers={"content-type": "application/x-ndjson"},
        )

    return handle


def _json(data: Json) -> Reply:
    return Reply(body=json.dumps(data).encode(), headers={"content-type": "application/json"})


HANDLERS: dict[str, Callable[[ToyModel], Handler]] = {
    "anthropic": anthropic_handler,
    "openai": openai_chat_handler,
    "openai-responses": responses_handler,
    "ollama": ollama_handler,
}
