"""A loopback Anthropic that enforces extended thinking's rule: an assistant turn with a
`tool_use` must come back with the thinking block it was answered with, signature intact
(or its redacted block, data intact); anything else is the API's 400. It signs its own
thinking with a key only it knows, so a signature tether made up or changed fails.

Each answer asks for `add(step, 1)` until `STEPS` results are in, then answers in text.
Step 2 also carries a redacted block. Used by tests/providers/test_thinking_loopback.py and,
in its own process, by thinking_worker.py."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .fake_servers import Received, Reply

STEPS = 5
_KEY = b"only-the-fake-knows"


def sign(thought: str) -> str:
    return hashlib.sha256(_KEY + thought.encode()).hexdigest()[:40]


def _redacted(step: int) -> str:
    return "RED" + sign(f"redacted {step}")


def _refuse(message: str) -> Reply:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return Reply(400, json.dumps(body).encode(), {"content-type": "application/json"})


def check(body: dict[str, Any]) -> str | None:
    """What the real API would refuse in this request, or None."""
    if body.get("thinking", {}).get("type") != "enabled":
        return "thinking is not enabled"
    for i, message in enumerate(body["messages"]):
        content = message["content"]
        if message["role"] != "assistant" or not isinstance(content, list):
            continue
        if not any(b["type"] == "tool_use" for b in content):
            continue
        first = content[0]
        if first["type"] == "thinking":
            if first.get("signature") != sign(first["thinking"]):
                return f"messages.{i}.content.0: Invalid `signature` in `thinking` block"
        elif first["type"] != "redacted_thinking":
            return (
                f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
                f"found `{first['type']}`. When `thinking` is enabled, a final `assistant` "
                "message must start with a thinking block."
            )
        for block in content:
            if block["type"] == "redacted_thinking" and not block["data"].startswith("RED"):
                return f"messages.{i}: invalid redacted_thinking data"
    return None


def answer(body: dict[str, Any]) -> dict[str, Any]:
    done = sum(
        1
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    )
    step = done + 1
    thought = f"Step {step}: I will add {step} and 1."
    content: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": thought, "signature": sign(thought)}
    ]
    if step == 2:
        content.append({"type": "redacted_thinking", "data": _redacted(step)})
    if done < STEPS:
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{step:02d}",
                "name": "add",
                "input": {"a": step, "b": 1},
            }
        )
        stop = "tool_use"
    else:
        content.append({"type": "text", "text": f"Done after {done} additions."})
        stop = "end_turn"
    return {
        "id": f"msg_{step}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": stop,
        "usage": {"input_tokens": 100 * step, "output_tokens": 30},
    }


def _sse(message: dict[str, Any]) -> bytes:
    head = {**message, "content": [], "stop_reason": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": head})
    ]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        start: dict[str, Any] = {
            "thinking": {"type": "thinking", "thinking": "", "signature": ""},
            "text": {"type": "text", "text": ""},
            "tool_use": {**block, "input": {}},
            "redacted_thinking": block,
        }[kind]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        deltas: list[dict[str, Any]] = []
        if kind == "thinking":
            half = len(block["thinking"]) // 2
            deltas += [
                {"type": "thinking_delta", "thinking": block["thinking"][:half]},
                {"type": "thinking_delta", "thinking": block["thinking"][half:]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        elif kind == "text":
            deltas.append({"type": "text_delta", "text": block["text"]})
        elif kind == "tool_use":
            deltas.append({"type": "input_json_delta", "partial_json": json.dumps(block["input"])})
        for delta in deltas:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"]},
                "usage": {"output_tokens": 30},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return b"".join(f"event: {n}\ndata: {json.dumps(d)}\n\n".encode() for n, d in events)


def handle(received: Received) -> Reply:
    body = received.json()
    refused = check(body)
    if refused is not None:
        return _refuse(refused)
    message = answer(body)
    if body.get("stream"):
        return Reply(200, _sse(message), {"content-type": "text/event-stream"})
    return Reply(200, json.dumps(message).encode(), {"content-type": "application/json"})
