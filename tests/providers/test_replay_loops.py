"""A recording `ReplayModel` used from two event loops (`Agent.run_sync` twice): the
connections it keeps alive from the first loop must not be reused by the second."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import tether
from tether.providers.replay import Cassette, ReplayModel

from .fake_servers import FakeServer
from .toy_dialects import HANDLERS, ToyModel


@pytest.fixture
def keep_alive_url() -> Iterator[str]:
    """A keep-alive server on its own loop in a thread, so it outlives each `asyncio.run`."""
    ready = threading.Event()
    stop: list[asyncio.Event] = []
    urls: list[str] = []
    loops: list[asyncio.AbstractEventLoop] = []

    async def serve() -> None:
        async with FakeServer(HANDLERS["openai"](ToyModel([])), keep_alive=True) as server:
            urls.append(server.url)
            stop.append(asyncio.Event())
            loops.append(asyncio.get_running_loop())
            ready.set()
            await stop[0].wait()

    thread = threading.Thread(target=asyncio.run, args=(serve(),))
    thread.start()
    try:
        assert ready.wait(10)
        yield urls[0]
    finally:
        if loops:
            loops[0].call_soon_threadsafe(stop[0].set)
        thread.join(10)


def test_a_recording_model_runs_sync_twice_and_records_both(
    tmp_path: Path, keep_alive_url: str
) -> None:
    cassette = tmp_path / "twice.json"
    model = ReplayModel(
        "openai:gpt-4.1",
        cassette,
        mode="record",
        api_key="sk-loopback-key",
        base_url=keep_alive_url + "/v1",
    )
    agent = tether.Agent(model, store="memory:")
    first = agent.run_sync("hello")
    second = agent.run_sync("hello again")
    assert first.stop_reason == "end_turn", first.stop_detail
    assert second.stop_reason == "end_turn", second.stop_detail
    assert first.output == second.output == "Results: "
    assert len(Cassette.load(cassette).exchanges) == 2

    player = tether.Agent(ReplayModel("openai:gpt-4.1", cassette), store="memory:")
    assert player.run_sync("hello").output == "Results: "
