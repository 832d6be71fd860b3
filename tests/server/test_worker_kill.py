"""A `tether worker` killed (SIGKILL) mid-session: a new worker takes the session over once
the lease expires and finishes it, and an SSE subscriber sees one continuous stream."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import httpx

from server.support import ACME, serve, sse_frames, start_worker, stop_worker
from tether.runtime.http import HttpRuntime
from tether.testing.runtime_conformance import WAIT, Observer, spec


async def _subscribe(
    url: str, session_id: str, frames: list[tuple[str, str, str]], seen: asyncio.Event
) -> None:
    headers = {"Authorization": f"Bearer {ACME}", "Accept": "text/event-stream"}
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(WAIT)) as client,
        client.stream("GET", f"{url}/v1/sessions/{session_id}/stream", headers=headers) as response,
    ):
        assert response.status_code == 200
        lines: list[str] = []
        async for line in response.aiter_lines():
            lines.append(line)
            if not line:  # a frame is complete: parse what came so far
                frames[:] = sse_frames(lines)
                seen.set()


async def test_a_killed_worker_is_replaced_and_the_stream_stays_continuous(tmp_path: Path) -> None:
    with serve(tmp_path, "--workers", "0") as server:
        first = start_worker(server.store, "--lease-ttl", "1.5")
        second = None
        rt = HttpRuntime(server.url, ACME)
        try:
            ref = await rt.start(spec("note 8 0.25", end_after_turn=True))
            frames: list[tuple[str, str, str]] = []
            seen = asyncio.Event()
            subscriber = asyncio.create_task(_subscribe(server.url, ref.session_id, frames, seen))
            async with asyncio.timeout(WAIT):
                while sum(kind == "tool.finished" for kind, _, _ in frames) < 2:
                    await seen.wait()
                    seen.clear()
            first.send_signal(signal.SIGKILL)  # no chance to release its lease or close anything
            first.wait(timeout=WAIT)
            killed_at = len(frames)
            assert (await rt.poll(ref)).state != "completed"
            second = start_worker(server.store, "--lease-ttl", "1.5")
            async with asyncio.timeout(WAIT * 2):
                await subscriber
            status = await Observer(rt, ref).poll()
        finally:
            await rt.close()
            stop_worker(first)
            if second is not None:
                stop_worker(second)
    assert status.state == "completed" and status.last_output == "noted 8", status.to_json()
    events = [json.loads(data) for kind, _, data in frames if kind != "end"]
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, status.last_seq + 1)), seqs  # no gap, no duplicate
    assert [int(ident) for kind, ident, _ in frames if kind != "end"] == seqs
    assert frames[-1][0] == "end" and events[-1]["type"] == "session.ended"
    assert len(events) > killed_at, "the stream stopped at the kill"
    outcomes = [e["data"]["outcome"] for e in events if e["type"] == "tool.finished"]
    assert outcomes.count("ok") == 8 and set(outcomes) == {"ok"}, outcomes
