"""Reasoning as a neutral part: `Thinking` keeps a provider's opaque payload in the log and
the transcript; a request to another provider leaves it out and `model.requested` counts
what it left (`dropped_reasoning`), written only when there is some."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tether import Agent
from tether.events import ModelRequested, payload_to_json
from tether.fold import fold
from tether.messages import Message, Text, Thinking, canonical_json, part_from_json, sorted_copy
from tether.providers.base import ModelRequest, ModelResponse
from tether.store import MemoryStore, SQLiteStore
from tether.store.base import payload_data


class Thinker:
    """A model named like a codec (`provider:model`) whose answers carry its reasoning."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.seen: list[Sequence[Message]] = []

    @property
    def name(self) -> str:
        return f"{self.provider}:m"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.seen.append(request.messages)
        thought = Thinking("let me see", self.provider, {"signature": f"sig-{len(self.seen)}"})
        return ModelResponse(Message("assistant", (thought, Text("done"))))


def test_a_thinking_part_round_trips_through_its_json_and_canonical_form() -> None:
    part = Thinking("", "openai-responses", {"encrypted_content": "gAAA", "id": "rs_1"})
    message = Message("assistant", (part, Text("hi")))
    assert message.canonical() == canonical_json(message.to_json())
    assert part_from_json(part.to_json()) == part
    assert Message.from_json(message.to_json()).thinking == (part,)
    with pytest.raises(ValueError, match="thinking data must be an object"):
        part_from_json({"type": "thinking", "text": "", "provider": "x", "data": "nope"})


def test_sorted_copy_orders_every_objects_keys_as_the_log_gives_them_back() -> None:
    value = {"z": [{"b": 1, "a": 2}], "a": {"d": None, "c": "x"}}
    copy = sorted_copy(value)
    assert copy == value
    assert list(copy) == ["a", "z"]  # type: ignore[arg-type]
    assert canonical_json(copy) == canonical_json(value)
    assert str(copy) == "{'a': {'c': 'x', 'd': None}, 'z': [{'a': 2, 'b': 1}]}"


def test_dropped_reasoning_is_written_only_when_some_was_dropped() -> None:
    plain = ModelRequested("m", "h", 10)
    assert "dropped_reasoning" not in payload_to_json(plain)
    assert "dropped_reasoning" not in payload_data(plain)
    some = ModelRequested("m", "h", 10, dropped_reasoning=2)
    assert payload_to_json(some)["dropped_reasoning"] == 2
    assert '"dropped_reasoning":2' in payload_data(some)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_reasoning_is_kept_for_its_provider_and_counted_when_another_gets_none(
    kind: str, tmp_path: object
) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(f"{tmp_path}/t.db")
    first = Thinker("anthropic")
    one = await Agent(first, store=store).run("hello")
    again = await Agent(first, store=store).run("more", session_id=one.session_id)
    # The same provider is sent its own reasoning back, with nothing counted as dropped.
    assert first.seen[1][1].thinking == (
        Thinking("let me see", "anthropic", {"signature": "sig-1"}),
    )
    other = Thinker("openai")
    await Agent(other, store=store).run("and now", session_id=again.session_id)

    events = await store.read(one.session_id)
    requested = [e.payload for e in events if isinstance(e.payload, ModelRequested)]
    assert [r.dropped_reasoning for r in requested] == [0, 0, 2]
    transcript, _ = fold(events)
    assert [len(m.thinking) for m in transcript.messages] == [0, 1, 0, 1, 0, 1]
    assert transcript.messages[-1].thinking[0].provider == "openai"
