"""The takeover scenario, on any store: a worker died holding 8 sessions while the fleet's
one live worker is busy; the live worker takes all 8 over, without first running dry."""

from __future__ import annotations

import asyncio
import statistics
import time

from tether.runtime import LocalRuntime, Worker
from tether.store.base import Store
from tether.testing.runtime_conformance import WAIT, spec

TTL = 1.0
DEAD = 8
BUSY = 3


async def dead_worker_sessions_resume_on_a_busy_worker(store: Store) -> list[float]:
    """Seconds from each dead lease's expiry to its session's end (by this machine's clock,
    which the stores here share)."""
    async with LocalRuntime(store, workers=0) as rt:
        refs = [await rt.start(spec(f"echo {i}", end_after_turn=True)) for i in range(DEAD)]
        dead = await store.claim_runnable("dead-worker", ttl=TTL, limit=DEAD, alone=False)
        assert sorted(c.lease.session_id for c in dead) == sorted(r.session_id for r in refs)
        expires = {c.lease.session_id: c.lease.expires for c in dead}
        for i in range(BUSY):
            await rt.start(spec(f"hang {i}"))
        worker = Worker(store, concurrency=16, poll_interval=0.05, lease_ttl=5.0)
        task = asyncio.create_task(worker.run())
        ended: dict[str, float] = {}
        least_busy = DEAD + BUSY
        try:
            async with asyncio.timeout(WAIT):
                busy = False
                while len(ended) < DEAD:
                    busy = busy or worker.running >= BUSY  # the hanging sessions came first
                    if busy:
                        least_busy = min(least_busy, worker.running)
                    for ref in refs:
                        if ref.session_id not in ended:
                            status = await rt.poll(ref)
                            if status.terminal:
                                ended[ref.session_id] = time.time()
                    await asyncio.sleep(0.02)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await worker.stop(hand_over=False)
        for i, ref in enumerate(refs):
            status = await rt.poll(ref)
            assert (status.state, status.last_output) == ("completed", f"echo: {i}")
    assert least_busy >= BUSY, "the worker ran dry before it took the dead worker's sessions"
    return sorted(ended[sid] - expires[sid] for sid in expires)


def figures(latencies: list[float]) -> str:
    p50 = statistics.median(latencies)
    return f"resumed and finished after lease expiry: p50 {p50:.2f} s, max {max(latencies):.2f} s"
