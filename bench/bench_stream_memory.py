"""Memory of a real `tether serve` while clients hold event streams of a long log open.

A session of 100,000 events (written straight into a SQLite store, in batches) is served by
`tether serve`; N clients (default 10) open `GET /v1/sessions/{id}/stream` on raw sockets,
send the request and never read. The server's RSS is printed before, while they hang, and
after they close; then the same clients read the stream to its last event (its last 10,000
events by default: the server streams a few thousand events a second on two cores, so all
of them, `BENCH_READ=100000`, takes minutes), for the RSS beside it. The baseline is what one whole-log read of that session holds as events in a
process (what each stream held before streams read in pages), and the log's size on disk.
Prints and never fails on time.

    .venv/bin/python bench/bench_stream_memory.py
        (BENCH_EVENTS=100000 BENCH_CLIENTS=10 BENCH_READ=10000 by default)
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import subprocess
import sys
import tempfile
import termios
import time
import tracemalloc
from pathlib import Path

import httpx
import psutil

from serving import spawn_serve
from tether.events import Event, SessionCreated, UserMessage
from tether.messages import user
from tether.store.sqlite import SQLiteStore

EVENTS = int(os.environ.get("BENCH_EVENTS", "100000"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "10"))
READ = min(EVENTS, int(os.environ.get("BENCH_READ", "10000")))  # events the readers read
HOLD = 6.0  # seconds the clients that never read keep their streams open
SETTLE = 3.0  # seconds after the clients close before the RSS is read again
SID = "ses_benchstreammem"
MiB = 1024 * 1024


async def write_log(path: str) -> None:
    """The session's events, a realistic ~280 bytes each, in batches of 2,000."""
    store = SQLiteStore(path)
    stamp = "2026-01-01T00:00:00.000000Z"
    text = "a line of a long conversation, " * 6  # ~190 characters
    seq = 0
    while seq < EVENTS:
        batch = []
        for n in range(seq + 1, min(seq + 2_000, EVENTS) + 1):
            payload = SessionCreated(model="bench") if n == 1 else UserMessage(user(f"{n} {text}"))
            batch.append(Event(SID, n, f"ev_bench_{n}", stamp, payload))
        await store.append(SID, batch, seq)
        seq += len(batch)
    await store.close()


async def whole_log_read(path: str) -> float:
    """MiB that one read of the whole log holds as events: what a stream held before."""
    store = SQLiteStore(path)
    tracemalloc.start()
    events = await store.read(SID)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(events) == EVENTS
    del events
    await store.close()
    return held / MiB


def disk_size(directory: Path) -> float:
    """MiB of the store's files (the database and its WAL)."""
    return sum(p.stat().st_size for p in directory.glob("bench.db*")) / MiB


def start_server(store: str) -> tuple[subprocess.Popen[str], str]:
    return spawn_serve(
        "--host", "127.0.0.1", "--no-auth", "--store", store, "--workers", "0",
        "--log-level", "error", quiet=True,
    )  # fmt: skip


def rss(proc: psutil.Process) -> float:
    return float(proc.memory_info().rss) / MiB


def request(host: str, after_seq: int = 0) -> bytes:
    return (
        f"GET /v1/sessions/{SID}/stream?after_seq={after_seq} HTTP/1.1\r\nHost: {host}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()


def unread(sock: socket.socket) -> int:
    """Bytes the server sent that wait unread in this client's receive buffer."""
    waiting = bytearray(4)
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, waiting)
    return int.from_bytes(waiting, sys.byteorder)


async def sample(proc: psutil.Process, seconds: float) -> tuple[float, float]:
    """(peak, last) RSS over `seconds`, read every 0.1 s."""
    peak = last = rss(proc)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        last = rss(proc)
        peak = max(peak, last)
    return peak, last


async def hanging_clients(proc: psutil.Process, host: str, port: int) -> tuple[float, float, float]:
    """N streams opened and never read: (peak RSS, last RSS, mean unread bytes per client)."""
    socks = [socket.create_connection((host, port)) for _ in range(CLIENTS)]
    for sock in socks:
        sock.sendall(request(host))
    peak, last = await sample(proc, HOLD)
    waiting = sum(unread(s) for s in socks) / len(socks)
    for sock in socks:
        sock.close()
    return peak, last, waiting


async def reading_clients(proc: psutil.Process, host: str, port: int) -> tuple[float, float]:
    """N streams of the last `READ` events read to the last one: (peak RSS, seconds until
    all of them had it)."""
    last_id = f"\nid: {EVENTS}\n".encode()

    async def read_all() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request(host, EVENTS - READ))
        tail = b""
        while True:
            chunk = await reader.read(256 * 1024)
            if not chunk:
                raise SystemExit("the stream ended before its last event")
            if last_id in tail + chunk:
                break
            tail = chunk[-32:]
        writer.close()

    started = time.perf_counter()
    readers = asyncio.gather(*(read_all() for _ in range(CLIENTS)))
    peak = rss(proc)
    while not readers.done():
        await asyncio.wait({readers}, timeout=0.1)
        peak = max(peak, rss(proc))
    await readers
    return peak, time.perf_counter() - started


async def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / "bench.db")
        began = time.perf_counter()
        await write_log(path)
        written = time.perf_counter() - began
        size = disk_size(Path(directory))
        whole = await whole_log_read(path)
        server, url = start_server(f"sqlite:///{path}")
        try:
            proc = psutil.Process(server.pid)
            host, port = url.removeprefix("http://").rsplit(":", 1)
            async with httpx.AsyncClient(base_url=url, timeout=600) as client:
                status = (await client.get(f"/v1/sessions/{SID}")).json()  # the fold, cached
            assert status["last_seq"] == EVENTS, status
            await asyncio.sleep(SETTLE)
            before = rss(proc)
            hang_peak, hang_last, waiting = await hanging_clients(proc, host, int(port))
            await asyncio.sleep(SETTLE)
            after_hang = rss(proc)
            read_peak, read_time = await reading_clients(proc, host, int(port))
            await asyncio.sleep(SETTLE)
            after_read = rss(proc)
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(
        f"a session of {EVENTS:,} events ({size:.1f} MiB on disk, written in {written:.1f} s); "
        f"one whole-log read holds {whole:.0f} MiB of events (the baseline: what each "
        "stream held before streams read in pages)"
    )
    print(f"tether serve RSS before the streams: {before:.0f} MiB (the session's fold cached)")
    print(
        f"{CLIENTS} clients that never read, for {HOLD:.0f} s: +{hang_last - before:.1f} MiB "
        f"(peak +{hang_peak - before:.1f} MiB; {waiting / 1024:.0f} KiB unread in each "
        f"client's socket); {SETTLE:.0f} s after they close: {after_hang - before:+.1f} MiB"
    )
    print(
        f"the same {CLIENTS} clients reading the last {READ:,} events: peak "
        f"+{read_peak - before:.1f} MiB, {read_time:.1f} s; {SETTLE:.0f} s after they close: "
        f"{after_read - before:+.1f} MiB"
    )


if __name__ == "__main__":
    asyncio.run(main())
