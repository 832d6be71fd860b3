"""Shared rate limits: four worker processes, each with its own gateway, against one loopback
backend that allows a fixed number of requests per minute. With the budget kept in
PostgreSQL they never exceed it together: the backend refuses none of their requests."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from tether.scheduler.shared_limits import SharedBucket
from tether.store.postgres import PostgresStore
from tether.testing.sim_server import LoopbackServer
from tether.testing.simulate import Capacity

ROOT = Path(__file__).resolve().parents[2]
RPM = 240  # a full minute's burst, then 4 a second, like the gateway's own buckets
WORKERS = 4
# Seconds of the budget the shared buckets keep back (`SharedLimits(headroom=)`): a request
# reaches the backend a while after it was taken from the budget, and the backend counts it
# then. The default, 1 s, covers a network; on a loaded machine (CI's two cores running the
# suite, a flake hunt beside it) four worker processes may take seconds to send what they
# took, and with 1 s the backend refused a few now and then. The backend's own bucket is
# full at the start and the shared one holds `BURST`.
HEADROOM = 10.0
BURST = RPM * (1 - HEADROOM / 60)  # 200
CALLS = 56  # 224 in all: 24 past the burst, so the refill rate is what holds them back


async def test_four_workers_together_never_exceed_the_backends_requests_per_minute(
    pg_url: str,
) -> None:
    capacity = Capacity(max_concurrency=256, requests_per_minute=RPM, tokens_per_minute=10**9)
    async with LoopbackServer(capacity, headers=False) as server:
        started = time.monotonic()
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.postgres.rate_worker",
                pg_url,
                server.base_url,
                "--rpm",
                str(RPM),
                "--calls",
                str(CALLS),
                "--headroom",
                str(HEADROOM),
                cwd=ROOT,
                stdout=asyncio.subprocess.PIPE,
            )
            for _ in range(WORKERS)
        ]
        outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 120)
        took = time.monotonic() - started
        assert server.meter is not None
        totals = server.meter.snapshot(asyncio.get_running_loop().time())
    reports = [json.loads(out.decode().strip().splitlines()[-1]) for out, _ in outputs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(r["answered"] for r in reports) == WORKERS * CALLS
    assert totals.refused["requests"] == 0, totals.refused
    assert totals.requests == WORKERS * CALLS
    # Not vacuous: the calls past the burst had to wait for the refill (24 at 4 a second).
    assert took >= (WORKERS * CALLS - BURST) / (RPM / 60) * 0.8, took


async def test_a_shared_bucket_refills_by_the_database_clock_and_reports_the_wait(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url)
    bucket = SharedBucket(store, "b", per_minute=60)  # 1 a second, 60 at most
    emptied = time.monotonic()
    assert await bucket.try_take(60) == 0.0
    wait = await bucket.try_take(5)
    # 5 more need 5 s of refill, less what refilled since the budget was emptied: however
    # long a loaded machine took between the two statements, no more than that.
    assert 5 - (time.monotonic() - emptied) - 0.05 <= wait <= 5, wait
    other = SharedBucket(PostgresStore(pg_url), "b", per_minute=60)
    asked = time.monotonic()
    told = await other.try_take(5)
    assert 0 < told <= wait, told  # the other process sees the same, emptied budget
    await other.take(5, max_wait=10)
    # It waited for the refill the database clock gave: never less than it was told.
    assert time.monotonic() - asked >= told - 0.05
    await bucket.give(1000)
    assert await bucket.level() == 60  # never above the capacity
    await other.store.close()
    await store.close()
