"""`Message.canonical()` writes canonical JSON directly; it must be byte-identical to
`canonical_json(message.to_json())` for every message, since the fold hashes and measures
transcripts with it and stored logs must fold the same in every version."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.messages import Message, Text, Thinking, ToolCall, ToolResult, canonical_json

# Any JSON a model may send as arguments, including the awkward corners: non-ASCII and
# control characters, line separators, big and negative integers, floats of every kind.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
parts = st.one_of(
    st.builds(Text, st.text()),
    st.builds(
        ToolCall,
        st.text(max_size=8),
        st.text(max_size=8),
        st.dictionaries(st.text(max_size=6), json_values, max_size=4),
        st.none() | st.text(max_size=10),
    ),
    st.builds(ToolResult, st.text(max_size=8), st.text(), st.booleans()),
    st.builds(
        Thinking,
        st.text(),
        st.text(max_size=8),
        st.dictionaries(st.text(max_size=6), json_values, max_size=3),
    ),
)
messages = st.builds(
    Message, st.sampled_from(["user", "assistant", "tool"]), st.lists(parts, max_size=4).map(tuple)
)


@settings(max_examples=400)
@given(messages)
def test_canonical_is_byte_identical_to_the_sorted_json_encoder(message: Message) -> None:
    assert message.canonical() == canonical_json(message.to_json())


def test_arguments_the_fast_writer_does_not_know_still_encode_the_same() -> None:
    odd = ToolCall("c", "t", {"n": float("nan"), "k": {1: "int key"}, "t": (1, "two")})  # type: ignore[dict-item]
    message = Message("assistant", (odd,))
    assert message.canonical() == canonical_json(message.to_json())
    assert '"n":NaN' in message.canonical()
