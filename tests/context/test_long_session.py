"""A 1,000-step session with tool outputs of random sizes up to 200 KB, against a model with a
small window that checks every request it gets."""

from __future__ import annotations

from invariants import payloads, read_checked
from tether import Agent
from tether.context import DefaultPolicy, blob_refs
from tether.events import ContextCompacted, ModelRequested, ToolFinished
from tether.limits import Limits
from tether.messages import user
from tether.store.memory import MemoryStore

from .support import FIRST, SYSTEM, WindowedModel, document, fetch_tool

WINDOW = 16_000
OUTPUT_CAP = 6_000


async def test_a_thousand_steps_stay_in_a_small_window_with_every_call_answered() -> None:
    model = WindowedModel(window=WINDOW, steps=1_000, first=user(FIRST))
    store = MemoryStore()
    agent = Agent(
        model,
        tools=[fetch_tool(OUTPUT_CAP)],
        system=SYSTEM,
        limits=Limits(max_steps=1_100, max_output_tokens=1_000),
        store=store,
        context=DefaultPolicy(window=WINDOW),
    )
    result = await agent.run(FIRST)

    assert result.stop_reason == "end_turn" and result.output == "done"
    assert result.steps == 1_001
    assert model.problems == []  # every request under the window, paired, with its head
    assert len(model.bodies) == 1_001
    events = await read_checked(store, result.session_id)
    compactions = payloads(events, ContextCompacted)
    cleared = [c for c in compactions if c.summary is None]
    summarised = [c for c in compactions if c.summary is not None]
    assert len(cleared) > 10 and len(summarised) >= 3
    assert model.summaries == len(summarised)
    # Every summary was written by the model, and its cost counted in the session's usage.
    assert all(c.model == "windowed" and c.usage.input_tokens > 0 for c in summarised)
    # The size of the transcript stays bounded: the last request is no larger than the window.
    assert max(model.tokens_sent) <= WINDOW - 1_000
    assert len(payloads(events, ModelRequested)) == 1_001


async def test_outputs_over_the_cap_are_cut_with_a_marker_and_kept_whole_as_blobs() -> None:
    model = WindowedModel(window=WINDOW, steps=40, first=user(FIRST))
    store = MemoryStore()
    agent = Agent(
        model,
        tools=[fetch_tool(OUTPUT_CAP)],
        system=SYSTEM,
        limits=Limits(max_output_tokens=1_000),
        store=store,
        context=DefaultPolicy(window=WINDOW),
    )
    result = await agent.run(FIRST)
    events = await read_checked(store, result.session_id)
    finished = {f.call_id: f for f in payloads(events, ToolFinished)}
    cut = 0
    for n in range(1, 41):
        full = document(n)
        content = finished[f"f{n}"].content
        if len(full) <= OUTPUT_CAP:
            assert content == full and not blob_refs(content)
            continue
        cut += 1
        assert content.startswith(full[:OUTPUT_CAP])
        assert f"{len(full):,} characters, first {OUTPUT_CAP:,} shown" in content
        (digest,) = blob_refs(content)
        assert await store.get_blob(digest) == full.encode()
    assert cut > 30  # sizes are uniform up to 200 KB: nearly all are over a 6,000 cap
