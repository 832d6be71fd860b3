"""How SQL stores keep an event: `event_to_row` writes the payload with a fast encoder that must
be byte-identical to `canonical_json(payload_to_json(payload))` for every payload, or raise
where that raises, since stored logs are hashed and compared across versions. The one
exception: a payload with a lone surrogate has no UTF-8 form to store, so it is kept with its
non-ASCII characters escaped, and reads back the same. An ordinary event read back from its
row equals the event.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import get_args

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tether.events import (
    PAYLOAD_TYPES,
    CancelScope,
    ContextCompacted,
    Effect,
    EndOutcome,
    Event,
    ForkKind,
    InputAction,
    ModelResponded,
    Outcome,
    Payload,
    SessionCreated,
    ToolFinished,
    UserMessage,
    payload_to_json,
)
from tether.messages import (
    IMAGE_TYPES,
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Usage,
    canonical_json,
    user,
)
from tether.store import SQLiteStore
from tether.store.base import event_from_row, event_to_row

# Strings with the corners JSON encoders get wrong: lone surrogates, NUL, line separators,
# quotes and backslashes, characters outside the BMP.
awkward_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=20) | (
    st.sampled_from(["", "\u2028", "\x00", "é", "\ud800", "😀", '"\\'])
)
awkward_floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, 1e16, 1e-7, 0.1, 1e300]
)
big_ints = st.integers(min_value=-(10**30), max_value=10**30)


def json_values(
    text: st.SearchStrategy[str], floats: st.SearchStrategy[float], odd: bool
) -> st.SearchStrategy[object]:
    """JSON values; with `odd`, also what is not quite JSON: tuples and integer keys."""
    leaf = st.none() | st.booleans() | big_ints | floats | text

    def nest(inner: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
        shapes: list[st.SearchStrategy[object]] = [
            st.lists(inner, max_size=4),
            st.dictionaries(text, inner, max_size=4),
        ]
        if odd:
            shapes += [st.tuples(inner, inner), st.dictionaries(big_ints, inner, max_size=2)]
        return st.one_of(shapes)

    return st.recursive(leaf, nest, max_leaves=12)


MAGIC = [b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF89a", b"RIFF\x00\x00\x00\x00WEBP"]
images = st.builds(
    lambda magic, rest: Image(magic + rest), st.sampled_from(MAGIC), st.binary(max_size=24)
) | st.builds(
    lambda path, kind: Image(url=f"https://example.com/{path}", media_type=kind),
    st.text(max_size=8),
    st.none() | st.sampled_from(IMAGE_TYPES),
)


def payloads(
    text: st.SearchStrategy[str], floats: st.SearchStrategy[float], odd: bool
) -> st.SearchStrategy[Payload]:
    """Every payload type, each field drawn by its annotation (a new kind of field fails here
    with a KeyError, so that it gets a strategy)."""
    objects = st.dictionaries(text, json_values(text, floats, odd), max_size=5)
    parts = (
        st.builds(Text, text)
        | st.builds(ToolCall, text, text, objects, st.none() | text)
        | st.builds(ToolResult, text, text, st.booleans(), st.lists(images, max_size=2).map(tuple))
        | images
        | st.builds(Thinking, text, text, objects)
    )
    message = st.builds(
        Message,
        st.sampled_from(["user", "assistant", "tool"]),
        st.lists(parts, max_size=4).map(tuple),
    )
    by_annotation: dict[str, st.SearchStrategy[object]] = {
        "str": text,
        "str | None": st.none() | text,
        "int": big_ints,
        "int | None": st.none() | big_ints,
        "float": floats,
        "float | None": st.none() | floats,
        "bool": st.booleans(),
        "JSONObject": objects,
        "Message": message,
        "tuple[Message, ...]": st.lists(message, max_size=3).map(tuple),
        "Usage": st.builds(Usage, big_ints, big_ints, big_ints, big_ints, big_ints),
        "tuple[str, ...]": st.lists(text, max_size=3).map(tuple),
        "tuple[Image, ...]": st.lists(images, max_size=2).map(tuple),
        # Closed sets: a row holds what was written, and old logs may hold any string.
        "Effect": st.sampled_from(get_args(Effect)) | text,
        "Outcome": st.sampled_from(get_args(Outcome)) | text,
        "EndOutcome": st.sampled_from(get_args(EndOutcome)) | text,
        "CancelScope": st.sampled_from(get_args(CancelScope)) | text,
        "InputAction": st.sampled_from(get_args(InputAction)) | text,
        "ForkKind": st.sampled_from(get_args(ForkKind)) | text,
    }
    return st.one_of(
        *[
            st.builds(cls, **{f.name: by_annotation[str(f.type)] for f in dataclasses.fields(cls)})
            for cls in PAYLOAD_TYPES.values()
        ]
    )


def event_of(payload: Payload) -> Event:
    return Event("s", 1, "s-1", "2026-01-01T00:00:00.000000Z", payload, thread="t")


def outcome(encode: Callable[[], str]) -> tuple[str, str]:
    """What an encoding gave: the text, or the kind of error it raised."""
    try:
        return "ok", encode()
    except Exception as exc:
        return "raised", type(exc).__name__


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads(awkward_text, awkward_floats, odd=True))
@example(ModelResponded(user("x"), cost_usd=float("nan"), latency_ms=-0.0))
@example(ModelResponded(user("x"), cost_usd=float("inf"), latency_ms=float("-inf")))
@example(ToolFinished("c", "ok", "\ud800 alone", duration_ms=1e300))
@example(SessionCreated("m", metadata={"n": 10**30, "k": {1: "int key"}, "t": (1, "two")}))  # type: ignore[dict-item]
@example(SessionCreated("m", metadata={"k": {1: "int", "s": "str"}}))  # type: ignore[dict-item]
@example(UserMessage(Message("user", (ToolCall("c", "t", {"x": [float("nan"), -0.0]}),))))
@example(ContextCompacted(1, 2, cleared_call_ids=("a", "\u2028"), usage=Usage(10**30)))
def test_a_stored_payload_is_exactly_its_canonical_json_or_both_raise(payload: Payload) -> None:
    stored = outcome(lambda: event_to_row(event_of(payload))[6])
    canonical = outcome(lambda: canonical_json(payload_to_json(payload)))
    if canonical[0] == "ok" and not _has_utf8_form(canonical[1]):
        assert stored[0] == "ok" and stored[1].isascii()
        # The same value (compared re-encoded: NaN is not equal to itself).
        assert canonical_json(json.loads(stored[1])) == canonical_json(json.loads(canonical[1]))
    else:
        assert stored == canonical


def _has_utf8_form(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def test_a_lone_surrogate_fails_no_append_and_reads_back_as_written(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"))
    odd = ToolFinished("c", "ok", "bad \ud800 half")
    await store.append("s", [Event("s", 1, "s-1", "2026-01-01T00:00:00.000000Z", odd)], 0)
    (event,) = await store.read("s")
    assert event.payload == odd
    await store.close()


def test_a_usage_nested_in_a_json_field_is_refused_as_canonical_json_refuses_it() -> None:
    payload = SessionCreated("m", metadata={"usage": Usage(1)})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        canonical_json(payload_to_json(payload))
    with pytest.raises(TypeError):
        event_to_row(event_of(payload))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.builds(
        Event,
        st.text(max_size=8),
        st.integers(1, 10**9),
        st.text(max_size=8),
        st.text(max_size=30),
        payloads(st.text(max_size=20), st.floats(allow_nan=False), odd=False),
        st.text(max_size=8),
    )
)
def test_an_ordinary_event_read_back_from_its_row_equals_the_event(event: Event) -> None:
    assert event_from_row(event_to_row(event)) == event
