"""The HTTP path under concurrent clients, against a real `tether serve` on loopback with real
`tether worker` processes on one SQLite file (serve runs no sessions itself: `--workers 0`):

1. Starts: C clients (10, 100, 500), each on its own keep-alive connection, POST
   /v1/sessions back to back until N sessions are started: starts per second, the start's
   latency, and the first-event latency (from sending the POST to the worker's first event
   of the session, `model.requested`, by the event's own time stamp).
2. End to end: N sessions (default 500) at once, each client starting one and reading its
   event stream to the end: sessions per second and the first event's latency as the client
   reads it.
3. The same N sessions through `LocalRuntime` in-process (with its own workers), and a bare
   asyncio loop, beside.

The clients speak HTTP/1.1 over asyncio streams themselves, so the load generator costs
little CPU next to the server (httpx costs more per request than the server does). Each
session is one model call of the runtime fixtures' model, answered at once. On a shared
machine run it two or three times and read the range; it never fails on time.

    .venv/bin/python bench/bench_http.py [N]      (BENCH_WORKERS=2 worker processes)
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).parent))

from common import bare_loop
from serving import spawn_serve

MODEL = "python:tether.testing.runtime_fixtures:model"
ALLOW = "tether.testing.runtime_fixtures:*"
WORKERS = int(os.environ.get("BENCH_WORKERS", "2"))
CONCURRENCY = 128  # sessions each worker process runs at once
CLIENTS = (10, 100, 500)


def start_server(store: str) -> tuple[subprocess.Popen[str], str]:
    return spawn_serve(
        "--no-auth", "--store", store, "--workers", "0", "--poll-interval", "0.02",
        "--allow-code", ALLOW,
    )  # fmt: skip


def start_workers(store: str) -> list[subprocess.Popen[str]]:
    command = [sys.executable, "-m", "tether", "worker", "--store", store, "--concurrency",
               str(CONCURRENCY), "--poll-interval", "0.02"]  # fmt: skip
    workers = [
        subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(WORKERS)
    ]
    time.sleep(1.0)
    for worker in workers:
        if worker.poll() is not None:
            raise SystemExit(f"tether worker did not start: {worker.communicate()[1][-500:]}")
    return workers


async def warm_up(url: str) -> None:
    """A few sessions end to end, so every worker process has started (imports take
    seconds on a busy machine) before anything is timed."""
    await end_to_end(url, 2 * WORKERS)


class Client:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> Client:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.writer is not None:
            self.writer.close()

    async def post(self, path: str, body: dict[str, object]) -> tuple[int, bytes]:
        data = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        )
        assert self.reader is not None and self.writer is not None
        self.writer.write(head.encode() + data)
        status, headers = await self._head()
        length = int(headers.get("content-length", "0"))
        return status, await self.reader.readexactly(length)

    async def stream(self, path: str, first: bytes, end: bytes) -> float | None:
        """Read an SSE stream to its `end` frame; the time the first chunk holding `first`
        arrived (perf_counter), or None."""
        assert self.reader is not None and self.writer is not None
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
        status, _ = await self._head()
        assert status == 200, status
        seen: float | None = None
        while True:
            size = int((await self.reader.readline()).strip(), 16)
            chunk = await self.reader.readexactly(size + 2)
            if seen is None and first in chunk:
                seen = time.perf_counter()
            if end in chunk or size == 0:
                return seen

    async def _head(self) -> tuple[int, dict[str, str]]:
        assert self.reader is not None
        lines = (await self.reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(lines[0].split()[1]), headers


def body(i: int) -> dict[str, object]:
    return {"model": MODEL, "task": f"echo {i}", "end_after_turn": True}


def quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    if not ordered:
        return "none"

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return f"p50 {at(0.5):7.1f} ms  p99 {at(0.99):7.1f} ms"


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


async def first_events(db: Path, sent: dict[str, float], deadline: float) -> list[float]:
    """Each session's first worker event time less its POST's send time (wall clock)."""
    found: dict[str, float] = {}
    conn = sqlite3.connect(db)
    while len(found) < len(sent) and time.monotonic() < deadline:
        rows = conn.execute(
            "SELECT session_id, time FROM events WHERE seq = 3 AND type = 'model.requested'"
        ).fetchall()
        found = {sid: _epoch(t) for sid, t in rows if sid in sent}
        await asyncio.sleep(0.2)
    conn.close()
    return [found[sid] - sent[sid] for sid in found]


async def starts(url: str, db: Path, clients: int, total: int) -> str:
    sent: dict[str, float] = {}
    latencies: list[float] = []
    left = total

    async def client() -> None:
        nonlocal left
        async with Client(url) as conn:
            while left > 0:
                left -= 1
                wall, t0 = time.time(), time.perf_counter()
                status, answer = await conn.post("/v1/sessions", body(left))
                latencies.append(time.perf_counter() - t0)
                assert status == 201, (status, answer[:200])
                sent[json.loads(answer)["session_id"]] = wall

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - t0
    firsts = await first_events(db, sent, time.monotonic() + 120)
    return (
        f"  {clients:>3} clients  {total / wall:6.0f} starts/s  start {quantiles(latencies)}  "
        f"first event {quantiles(firsts)} ({len(firsts)}/{total})"
    )


async def end_to_end(url: str, n: int) -> tuple[float, list[float]]:
    firsts: list[float] = []

    async def one(i: int) -> None:
        async with Client(url) as conn:
            t0 = time.perf_counter()
            status, answer = await conn.post("/v1/sessions", body(i))
            assert status == 201, (status, answer[:200])
            sid = json.loads(answer)["session_id"]
            seen = await conn.stream(
                f"/v1/sessions/{sid}/stream?timeout=120",
                b'"type":"model.requested"',
                b"event: end",
            )
            if seen is not None:
                firsts.append(seen - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - t0, firsts


async def in_process(store: str, n: int) -> tuple[float, float]:
    from tether.runtime import LocalRuntime
    from tether.testing.runtime_conformance import spec

    async with LocalRuntime(store, workers=CONCURRENCY, poll_interval=0.02) as rt:
        t0 = time.perf_counter()
        refs = await asyncio.gather(
            *(rt.start(spec(f"echo {i}", end_after_turn=True)) for i in range(n))
        )
        started = time.perf_counter() - t0

        async def finish(ref) -> None:  # type: ignore[no-untyped-def]
            async for _ in rt.events(ref, 0, timeout=120):
                pass

        await asyncio.gather(*(finish(ref) for ref in refs))
        return started, time.perf_counter() - t0


async def main(n: int) -> None:
    directory = Path(tempfile.mkdtemp())
    t0 = time.perf_counter()
    await asyncio.gather(*(bare_loop(0) for _ in range(n)))
    bare = time.perf_counter() - t0
    started, local = await in_process(f"sqlite:///{directory / 'local.db'}", n)
    lines = []
    for run, clients in enumerate(CLIENTS):
        db = directory / f"starts-{run}.db"
        store = f"sqlite:///{db}"
        server, url = start_server(store)
        workers = start_workers(store)
        try:
            await warm_up(url)
            lines.append(await starts(url, db, clients, max(n, 2 * clients)))
        finally:
            for p in (server, *workers):
                p.terminate()
            for p in (server, *workers):
                p.wait(timeout=60)
    store = f"sqlite:///{directory / 'e2e.db'}"
    server, url = start_server(store)
    workers = start_workers(store)
    try:
        await warm_up(url)
        wall, firsts = await end_to_end(url, n)
    finally:
        for p in (server, *workers):
            p.terminate()
        for p in (server, *workers):
            p.wait(timeout=60)
    print(
        f"POST /v1/sessions, tether serve --workers 0 + {WORKERS} tether worker processes "
        f"(--concurrency {CONCURRENCY}), SQLite; at least {n} starts per row:"
    )
    print("\n".join(lines))
    print(f"{n} sessions end to end (one model call each), {n} clients at once:")
    print(
        f"  through HTTP        {wall:6.2f} s  {n / wall:6.0f} sessions/s  "
        f"first event {quantiles(firsts)} ({len(firsts)}/{n})"
    )
    print(
        f"  LocalRuntime in-process ({CONCURRENCY} slots)  {local:6.2f} s  {n / local:6.0f} "
        f"sessions/s  ({n / started:.0f} starts/s)"
    )
    print(f"  bare asyncio loop   {bare:6.3f} s  {n / bare:6.0f} sessions/s")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 500))
