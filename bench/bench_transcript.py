"""A page of a long session's transcript (`GET /v1/sessions/{id}/transcript`, its work without
HTTP): one session of 100,000 events in SQLite, 25,000 tool steps whose results are 2,000
characters each. Reports the first fold of the log (what the first poll pays anyway), a page
of 50 messages from the start and from the end on the fold polls keep, their bytes, and the
bytes the whole transcript would have been in one answer.

    .venv/bin/python bench/bench_transcript.py [EVENTS]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tether.events import (
    ModelRequested,
    ModelResponded,
    Payload,
    SessionCreated,
    ToolFinished,
    ToolStarted,
    UserMessage,
)
from tether.messages import Message, Text, ToolCall, Usage, user
from tether.runtime.base import SessionRef
from tether.runtime.local import LocalRuntime
from tether.server import transcript
from tether.session.log import SessionLog, new_session_id
from tether.store import SQLiteStore

REPEATS = 20
RESULT = 2_000  # characters of each tool result


def history(steps: int) -> list[Payload]:
    payloads: list[Payload] = [SessionCreated(model="scripted"), UserMessage(user("read it all"))]
    for i in range(steps):
        call = ToolCall(f"call_{i}", "read", {"page": i})
        payloads += [
            ModelRequested("scripted", f"{i:064x}", 100 + i),
            ModelResponded(
                Message("assistant", (Text(f"reading page {i}"), call)),
                "tool_calls",
                usage=Usage(100 + i, 20),
            ),
            ToolStarted(call.id, "read", "read"),
            ToolFinished(call.id, "ok", f"page {i} " + "x" * RESULT, 0.1),
        ]
    return payloads


def timed(fn: object, *args: object) -> tuple[float, object]:
    laps, out = [], None
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        out = fn(*args)  # type: ignore[operator]
        laps.append(time.perf_counter() - t0)
    return statistics.median(laps), out


async def main(events: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / "long.db")
        store = SQLiteStore(path)
        log = SessionLog(store, new_session_id())
        payloads = history((events - 2) // 4)
        for start in range(0, len(payloads), 1000):
            await log.append(*payloads[start : start + 1000])

        rt = LocalRuntime(store, workers=0)
        ref = SessionRef(log.session_id)
        t0 = time.perf_counter()
        folder = await rt.folded(ref)
        first = time.perf_counter() - t0
        assert folder is not None
        total = len(folder.messages)
        start_s, start_page = timed(transcript.page, folder, 0, 50, transcript.CLIP)
        end_s, end_page = timed(transcript.page, folder, total - 50, 50, transcript.CLIP)
        whole = len(json.dumps(folder.transcript().to_json()))
        await rt.close()
        await store.close()

    def size(page: object) -> int:
        return len(json.dumps(page))

    print(f"session: {len(payloads) + 1:,} events, {total:,} messages")
    print(f"first fold of the log (read and fold, as the first poll): {first:.2f} s")
    print(f"page of 50 from the start: {1000 * start_s:.2f} ms, {size(start_page) / 1024:.0f} KB")
    print(f"page of 50 at the end:     {1000 * end_s:.2f} ms, {size(end_page) / 1024:.0f} KB")
    print(f"the whole transcript in one answer would be {whole / 1e6:.1f} MB")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
