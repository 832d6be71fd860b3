"""A runtime's workers stream their sessions' model calls (their deltas feed the live
streams); a worker with no delta observer (`tether worker`) asks for whole answers. The same
conversation over each wire dialect, against a loopback server that answers both ways with
the same content, folds to the same transcript either way (call ids a server leaves out,
synthesized, included) and records the same request hashes: streaming changes what travels,
never what the log says."""

from __future__ import annotations

import asyncio

import pytest

from providers.fake_servers import FakeServer
from providers.test_loopback import MODEL_NAMES
from providers.toy_dialects import HANDLERS, ToyModel
from tether.events import Event, ModelRequested
from tether.fold import fold
from tether.runtime.base import SessionSpec
from tether.runtime.local import LocalRuntime
from tether.runtime.worker import Worker
from tether.store import MemoryStore
from tether.testing.runtime_conformance import TOOLS, Observer

PLAN = [("note", {"text": "a"}), ("note", {"text": "b"})]


def environment(dialect: str, url: str) -> dict[str, str]:
    if dialect == "anthropic":
        return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-loopback"}
    if dialect == "ollama":
        return {"OLLAMA_HOST": url}
    return {"OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "sk-loopback"}


async def run(
    dialect: str, streamed: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[Event], list[bool]]:
    """The session's log, and whether each request the server heard asked for a stream."""
    store = MemoryStore()
    spec = SessionSpec(
        model=f"{dialect}:{MODEL_NAMES[dialect]}",
        task="note a and b",
        tools=TOOLS,
        end_after_turn=True,
    )
    async with FakeServer(HANDLERS[dialect](ToyModel(PLAN))) as server:
        for name, value in environment(dialect, server.url).items():
            monkeypatch.setenv(name, value)
        async with LocalRuntime(store, workers=1 if streamed else 0, poll_interval=0.02) as rt:
            ref = await rt.start(spec)
            worker = None if streamed else Worker(store, poll_interval=0.02)
            running = None if worker is None else asyncio.create_task(worker.run())
            try:
                status = await Observer(rt, ref).settled()
            finally:
                if worker is not None and running is not None:
                    running.cancel()
                    await asyncio.gather(running, return_exceptions=True)
                    await worker.stop()
        asked = [bool(r.json().get("stream")) for r in server.requests]
    assert status.state == "completed", status.view.stop_detail
    return await store.read(ref.session_id, 0, limit=1_000), asked


@pytest.mark.parametrize("dialect", ["anthropic", "openai", "openai-responses", "ollama"])
async def test_a_streamed_session_folds_to_the_whole_answers_transcript(
    dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    streamed, streamed_asked = await run(dialect, True, monkeypatch)
    whole, whole_asked = await run(dialect, False, monkeypatch)
    assert streamed_asked == [True, True] and whole_asked == [False, False]
    transcript, view = fold(streamed)
    assert transcript == fold(whole)[0]
    assert view.last_output == "Results: noted: a, noted: b"
    assert len(transcript.messages[1].tool_calls) == 2

    def hashes(events: list[Event]) -> list[str]:
        return [e.payload.request_hash for e in events if isinstance(e.payload, ModelRequested)]

    assert hashes(streamed) == hashes(whole) and len(hashes(whole)) == 2
