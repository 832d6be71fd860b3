"""The HTTP runtime under load, against a real `tether serve` on loopback:

1. N sessions (default 1,000) started, polled and completed through HTTP (one model call
   each, the scripted model answering at once): sessions per second, beside the same work
   through `LocalRuntime` in-process and a bare asyncio loop.
2. One session's event stream fanned out to M SSE subscribers (default 100): delivery
   latency from the event's commit time to each subscriber, p50 and p99.

    .venv/bin/python bench/bench_http.py [SESSIONS] [SUBSCRIBERS]
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))

from common import bare_loop

MODEL = "python:tether.testing.runtime_fixtures:model"
CLIENTS = 8  # requests in flight from the client (httpx's pool slows down past a few dozen)
POLL = 0.1  # seconds between a client's polls of one session


def start_server(store: str, workers: int) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--port", "0", "--no-auth", "--store", store,
         "--workers", str(workers), "--poll-interval", "0.02",
         "--allow-code", "tether.testing.runtime_fixtures:*"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = process.stdout.readline() if process.stdout else ""
    found = re.search(r"listening on (http://\S+)", line)
    if found is None:
        raise SystemExit(f"tether serve did not start: {line!r}")
    return process, found.group(1)


async def sessions_over_http(url: str, n: int) -> float:
    gate = asyncio.Semaphore(CLIENTS)
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:

        async def one(i: int) -> None:
            async with gate:
                made = await client.post(
                    "/v1/sessions",
                    json={"model": MODEL, "task": f"echo {i}", "end_after_turn": True},
                )
                sid = made.json()["session_id"]
            while True:
                await asyncio.sleep(POLL)
                async with gate:
                    status = (await client.get(f"/v1/sessions/{sid}")).json()
                if status["state"] in ("completed", "failed", "canceled"):
                    assert status["state"] == "completed", status
                    return

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return time.perf_counter() - t0


async def sessions_in_process(store: str, n: int) -> float:
    from tether.runtime import LocalRuntime
    from tether.testing.runtime_conformance import spec

    async with LocalRuntime(store, workers=64, poll_interval=0.02) as rt:
        t0 = time.perf_counter()
        refs = await asyncio.gather(
            *(rt.start(spec(f"echo {i}", end_after_turn=True)) for i in range(n))
        )
        for ref in refs:  # the same polling as the HTTP clients', without the network
            while not (await rt.poll(ref)).terminal:  # noqa: ASYNC110 (polling is what is measured)
                await asyncio.sleep(POLL)
        return time.perf_counter() - t0


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


async def fan_out(url: str, subscribers: int) -> tuple[list[float], int]:
    """Subscribers connect to an idle session and read its history; then a message starts a
    40-step turn, and only the live events are timed."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        made = await client.post("/v1/sessions", json={"model": MODEL, "task": "echo hi"})
        sid = made.json()["session_id"]
        while (await client.get(f"/v1/sessions/{sid}")).json()["state"] != "idle":  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        history = (await client.get(f"/v1/sessions/{sid}")).json()["last_seq"]
    latencies: list[float] = []
    counts: list[int] = []
    caught_up = 0
    all_caught_up = asyncio.Event()

    async def subscribe() -> None:
        nonlocal caught_up
        limits = httpx.Limits(max_connections=1)
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
            params = {"timeout": 60}
            async with client.stream(
                "GET", f"/v1/sessions/{sid}/stream", params=params
            ) as response:
                seen = 0
                async for line in response.aiter_lines():
                    if not (line.startswith("data: {") and '"seq"' in line):
                        continue
                    event = json.loads(line[6:])
                    if event["seq"] == history:
                        caught_up += 1
                        if caught_up == subscribers:
                            all_caught_up.set()
                    elif event["seq"] > history:
                        latencies.append(time.time() - _epoch(event["time"]))
                        seen += 1
                        if event["type"] == "turn.ended":
                            counts.append(seen)
                            return

    tasks = [asyncio.create_task(subscribe()) for _ in range(subscribers)]
    await asyncio.wait_for(all_caught_up.wait(), 60)
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        await client.post(f"/v1/sessions/{sid}/messages", json={"text": "note 40 0.05"})
    await asyncio.gather(*tasks)
    assert len(set(counts)) == 1, f"subscribers saw different numbers of events: {set(counts)}"
    return latencies, counts[0]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(n: int, subscribers: int) -> None:
    directory = Path(tempfile.mkdtemp())
    t0 = time.perf_counter()
    await asyncio.gather(*(bare_loop(0) for _ in range(n)))
    bare = time.perf_counter() - t0
    local = await sessions_in_process(f"sqlite:///{directory / 'local.db'}", n)
    process, url = start_server(f"sqlite:///{directory / 'http.db'}", workers=64)
    try:
        http = await sessions_over_http(url, n)
        latencies, events = await fan_out(url, subscribers)
    finally:
        process.terminate()
        process.wait(timeout=30)
    print(
        f"{n} sessions (one model call each, SQLite store), started, polled every {POLL * 1000:.0f} ms, completed:"
    )
    print(f"  through HTTP (tether serve, 64 workers)  {http:6.2f} s   {n / http:8.0f} sessions/s")
    print(
        f"  LocalRuntime in-process (64 workers)     {local:6.2f} s   {n / local:8.0f} sessions/s"
    )
    print(f"  bare asyncio loop (baseline)             {bare:6.3f} s   {n / bare:8.0f} sessions/s")
    print(f"one session's live events ({events}, a 40-step turn) to {subscribers} SSE subscribers:")
    print(
        f"  delivery latency from commit: p50 {quantile(latencies, 0.5) * 1000:.1f} ms, "
        f"p99 {quantile(latencies, 0.99) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms "
        f"({len(latencies)} deliveries; mean {statistics.mean(latencies) * 1000:.1f} ms)"
    )


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    asyncio.run(main(args[0] if args else 1000, args[1] if len(args) > 1 else 100))
