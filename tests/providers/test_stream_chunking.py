"""However the network cuts a stream into chunks, every codec assembles the same response, or
raises the same error."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.errors import ProviderError
from tether.providers import anthropic, ollama, openai_chat, openai_responses

from .conftest import wire_bytes

STREAMS: list[tuple[str, Callable[[], Any]]] = [
    ("anthropic-stream-tool-use.sse", lambda: anthropic.StreamAssembler("claude-sonnet-4-5")),
    ("anthropic-stream-max-tokens-incomplete-tool-use.sse", lambda: anthropic.StreamAssembler("m")),
    ("anthropic-stream-error-overloaded.sse", lambda: anthropic.StreamAssembler("m")),
    ("openai-chat-stream-tool-calls.sse", lambda: openai_chat.StreamAssembler("gpt-4.1")),
    ("openai-chat-stream-error-midstream.sse", lambda: openai_chat.StreamAssembler("m")),
    ("openrouter-stream-error-midstream.sse", lambda: openai_chat.StreamAssembler("m")),
    ("openai-responses-stream-function-call.sse", lambda: openai_responses.StreamAssembler("m")),
    ("ollama-chat-stream-tool-calls.ndjson", lambda: ollama.StreamAssembler("qwen3", None, "s")),
    ("ollama-stream-error-midstream.ndjson", lambda: ollama.StreamAssembler("qwen3", None, "s")),
]


def assemble(make: Callable[[], Any], body: bytes, cuts: list[int]) -> object:
    assembler = make()
    points = [0, *sorted(set(cuts)), len(body)]
    try:
        for start, end in itertools.pairwise(points):
            assembler.feed(body[start:end])
        return assembler.finish(body)
    except ProviderError as exc:
        return type(exc), exc.message


@pytest.mark.parametrize(("name", "make"), STREAMS, ids=[s[0] for s in STREAMS])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_chunk_boundaries_never_change_the_result(
    name: str, make: Callable[[], Any], data: st.DataObject
) -> None:
    body = wire_bytes(name)
    cuts = data.draw(st.lists(st.integers(min_value=1, max_value=len(body) - 1), max_size=40))
    assert assemble(make, body, cuts) == assemble(make, body, [])


def test_byte_by_byte_feeding_matches_whole_feeding() -> None:
    for name, make in STREAMS:
        body = wire_bytes(name)
        assert assemble(make, body, list(range(1, len(body)))) == assemble(make, body, []), name
