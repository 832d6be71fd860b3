"""`max_running` holds across processes: two processes, each with its own store, start 50
sessions of one tenant at once under `max_running` 3, and exactly 3 are admitted; the
refused ones have nothing stored."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tether.store.catalog import CatalogQuery
from tether.store.postgres import PostgresStore

ROOT = Path(__file__).resolve().parents[2]


async def test_fifty_concurrent_starts_in_two_processes_admit_exactly_three(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.count_sessions()  # migrated before either process opens
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.postgres.admit_worker",
            pg_url,
            prefix,
            "25",
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for prefix in ("a", "b")
    ]
    try:
        for proc in procs:  # both hold their connections open before either starts
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line == b"ready\n", line
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        admitted: list[str] = []
        for proc in procs:
            out, _ = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0
            admitted += json.loads(out.decode().splitlines()[-1])
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert len(admitted) == 3, admitted
    rows = await store.catalog(CatalogQuery(tenant="acme", limit=100))
    assert sorted(r.session_id for r in rows) == sorted(admitted)
    assert await store.count_sessions() == 3
    await store.close()
