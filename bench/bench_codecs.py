"""Codec cost per model step at a 200-message transcript, and stream parsing throughput.

Prints each codec's encode (neutral -> wire bytes) and decode (response bytes -> neutral) cost
in microseconds beside a bare baseline (json.dumps of the same wire dicts, json.loads of the
same body), then MB/s of stream assembly beside a bare split-and-json.loads of the same bytes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tether.messages import Message, Text, ToolCall, ToolResult, tool_results, user
from tether.providers import anthropic, ollama, openai_chat, openai_responses
from tether.providers.base import ModelRequest, ToolSpec
from tether.providers.http import encode_body

TOOLS = tuple(
    ToolSpec(
        name,
        f"{name} a file in the workspace.",
        {
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"],
        },
    )
    for name in ("read_file", "write_file", "list_dir", "grep", "run_tests")
)


def transcript(size: int) -> tuple[Message, ...]:
    out: list[Message] = [user("Refactor the module and run the tests.")]
    i = 0
    while len(out) < size - 1:
        call = ToolCall(f"call_{i:04d}", "read_file", {"path": f"src/pkg/mod_{i}.py", "limit": 200})
        out.append(Message("assistant", (Text(f"Reading file {i}."), call)))
        out.append(tool_results([ToolResult(call.id, "def f(x):\n    return x * 2\n" * 20)]))
        i += 1
    out.append(Message("assistant", (Text("Done."),)))
    return tuple(out[:size])


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Best-of-5 mean microseconds per call."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best * 1e6


ANTHROPIC_RESPONSE = json.dumps(
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Reading two files."}]
        + [
            {
                "type": "tool_use",
                "id": f"toolu_{i}",
                "name": "read_file",
                "input": {"path": f"a{i}.py"},
            }
            for i in range(2)
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 40000, "output_tokens": 80},
    }
).encode()
CHAT_RESPONSE = json.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4.1",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Reading two files.",
                    "tool_calls": [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {
                                "name": "read_file",
                                "arguments": json.dumps({"path": f"a{i}.py"}),
                            },
                        }
                        for i in range(2)
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 40000, "completion_tokens": 80},
    }
).encode()
RESPONSES_RESPONSE = json.dumps(
    {
        "id": "r",
        "object": "response",
        "status": "completed",
        "model": "gpt-4.1",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Reading two files."}],
            }
        ]
        + [
            {
                "type": "function_call",
                "call_id": f"call_{i}",
                "name": "read_file",
                "arguments": json.dumps({"path": f"a{i}.py"}),
            }
            for i in range(2)
        ],
        "usage": {"input_tokens": 40000, "output_tokens": 80},
    }
).encode()
OLLAMA_RESPONSE = json.dumps(
    {
        "model": "qwen3",
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 40000,
        "eval_count": 80,
        "message": {
            "role": "assistant",
            "content": "Reading two files.",
            "tool_calls": [
                {"function": {"name": "read_file", "arguments": {"path": f"a{i}.py"}}}
                for i in range(2)
            ],
        },
    }
).encode()

CODECS: list[
    tuple[str, Callable[[ModelRequest], dict[str, Any]], Callable[[bytes], object], bytes]
] = [
    (
        "anthropic",
        lambda r: anthropic.encode_request("claude-sonnet-4-5", r),
        lambda b: anthropic.decode_response("claude-sonnet-4-5", b),
        ANTHROPIC_RESPONSE,
    ),
    (
        "openai-chat",
        lambda r: openai_chat.encode_request("gpt-4.1", r),
        lambda b: openai_chat.decode_response("gpt-4.1", b),
        CHAT_RESPONSE,
    ),
    (
        "openai-responses",
        lambda r: openai_responses.encode_request("gpt-4.1", r),
        lambda b: openai_responses.decode_response("gpt-4.1", b),
        RESPONSES_RESPONSE,
    ),
    (
        "ollama",
        lambda r: ollama.encode_request("qwen3", r),
        lambda b: ollama.decode_response("qwen3", b, "seed"),
        OLLAMA_RESPONSE,
    ),
]


def bench_codec(
    name: str,
    encode: Callable[[ModelRequest], dict[str, Any]],
    decode: Callable[[bytes], object],
    body: bytes,
    request: ModelRequest,
) -> None:
    wire = encode(request)
    enc = timed(lambda: encode_body(encode(request)), 200)
    enc_base = timed(
        lambda: json.dumps(wire, ensure_ascii=False, separators=(",", ":")).encode(), 200
    )
    dec = timed(lambda: decode(body), 2000)
    dec_base = timed(lambda: json.loads(body), 2000)
    size = len(encode_body(wire)) / 1024
    print(f"{name:18} {enc:9.1f} {enc_base:9.1f} {dec:9.1f} {dec_base:9.1f}  {size:7.1f}")


def bench_steps() -> None:
    messages = transcript(200)
    request = ModelRequest("m", "You are a careful engineer.", messages, TOOLS, 4096)
    print(f"per step, {len(messages)}-message transcript, {len(TOOLS)} tools (µs; lower is better)")
    print(f"{'codec':18} {'encode':>9} {'baseline':>9} {'decode':>9} {'baseline':>9}  wire KB")
    for name, encode, decode, body in CODECS:
        bench_codec(name, encode, decode, body, request)


def sse_stream(events: list[tuple[str | None, Any]]) -> bytes:
    parts = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        parts.append(f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n")
    return "".join(parts).encode()


def streams(n: int) -> list[tuple[str, bytes, Callable[[], Any]]]:
    word = "token "
    anth = sse_stream(
        [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {"usage": {"input_tokens": 10, "output_tokens": 1}},
                },
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
        + [
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": word},
                },
            )
        ]
        * n
        + [
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": n},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )
    chat_chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4.1",
        "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
    }
    chat = sse_stream(
        [(None, chat_chunk)] * n
        + [
            (None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            (None, "[DONE]"),
        ]
    )
    resp = sse_stream(
        [
            (
                "response.output_text.delta",
                {"type": "response.output_text.delta", "output_index": 0, "delta": word},
            )
        ]
        * n
        + [
            (
                "response.completed",
                {
                    "type": "response.completed",
                    "response": {"status": "completed", "output": [], "usage": {}},
                },
            )
        ]
    )
    line = (
        json.dumps(
            {"model": "qwen3", "message": {"role": "assistant", "content": word}, "done": False}
        )
        + "\n"
    )
    nd = (
        line * n
        + json.dumps(
            {"model": "qwen3", "message": {"role": "assistant", "content": ""}, "done": True}
        )
        + "\n"
    ).encode()
    return [
        ("anthropic", anth, lambda: anthropic.StreamAssembler("claude-sonnet-4-5")),
        ("openai-chat", chat, lambda: openai_chat.StreamAssembler("gpt-4.1")),
        ("openai-responses", resp, lambda: openai_responses.StreamAssembler("gpt-4.1")),
        ("ollama", nd, lambda: ollama.StreamAssembler("qwen3")),
    ]


def bare_parse(body: bytes) -> int:
    """The floor: split lines, json.loads every payload, nothing else."""
    count = 0
    for raw in body.split(b"\n"):
        if raw.startswith(b"data: {"):
            json.loads(raw[6:])
            count += 1
        elif raw.startswith(b"{"):
            json.loads(raw)
            count += 1
    return count


def bench_stream(name: str, body: bytes, make: Callable[[], Any], chunk: int) -> None:
    def run() -> None:
        assembler = make()
        for i in range(0, len(body), chunk):
            assembler.feed(body[i : i + chunk])
        assembler.finish(body)

    mb = len(body) / 1e6
    codec_s = timed(run, 1) / 1e6
    base_s = timed(lambda: bare_parse(body), 1) / 1e6
    print(f"{name:18} {mb:6.2f} {mb / codec_s:8.1f} {mb / base_s:9.1f}")


def bench_streams(n: int = 20_000, chunk: int = 16_384) -> None:
    print(
        f"\nstream assembly, {n} text deltas fed in {chunk // 1024} KB chunks (MB/s; higher is better)"
    )
    print(f"{'codec':18} {'MB':>6} {'codec':>8} {'baseline':>9}")
    for name, body, make in streams(n):
        bench_stream(name, body, make, chunk)


if __name__ == "__main__":
    bench_steps()
    bench_streams()
