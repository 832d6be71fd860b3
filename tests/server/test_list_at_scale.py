"""Issue 33's list at 30,000 sessions: an older tenant owning the oldest 20 %, beside a busier
one, pages through every one of its sessions exactly once, newest first, and never sees one
of the other's: over HTTP (a real `tether serve` on loopback) and through `LocalRuntime`, on
SQLite and PostgreSQL (the memory store through `LocalRuntime` only: it lives in one
process). Before the catalog, the server looked through the newest 10,000 of all tenants and
the older tenant saw none of its sessions, `next_cursor` null."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from catalog_fill import Filled, fill
from postgres.conftest import pg_url  # noqa: F401  # the PostgreSQL schema of a test
from server.support import ACME, GLOBEX, serve
from server.test_listing import pages
from tether.runtime.local import LocalRuntime
from tether.store.base import Store
from tether.store.open import open_store

TOTAL = 30_000
OLDER = TOTAL // 5  # acme's: the oldest 20 %
PAGE = 500


async def _filled(store: Store) -> Filled:
    return await fill(store, [("acme", OLDER), ("globex", TOTAL - OLDER)])


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_the_older_tenant_pages_through_each_of_its_sessions_once(
    backend: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'scale.db'}" if backend == "sqlite" else "memory:"
    await pages_each_once(url, tmp_path)


async def test_the_older_tenant_pages_through_each_of_its_sessions_once_on_postgres(
    pg_url: str,  # noqa: F811  # the fixture imported above
    tmp_path: Path,
) -> None:
    # Filled without waiting for each commit's flush, on more connections: a load, not the
    # workload; the server then reads the store as any would.
    await pages_each_once(
        pg_url, tmp_path, fill_url=f"{pg_url}&synchronous_commit=off&pool_size=16"
    )


async def pages_each_once(store_url: str, tmp_path: Path, fill_url: str | None = None) -> None:
    store = open_store(fill_url or store_url)
    try:
        filled = await _filled(store)
        newest_first = filled.owners["acme"][::-1]
        async with LocalRuntime(store, workers=0) as rt:
            acme, globex = rt.for_tenant("acme"), rt.for_tenant("globex")
            seen: list[str] = []
            cursor: str | None = None
            while True:
                page = await acme.sessions(PAGE, cursor=cursor, counts=not seen)
                if not seen:
                    assert page.counts == {"pending": OLDER}, page.counts
                seen += [s.session_id for s in page]
                cursor = page.next_cursor
                if cursor is None:
                    break
                assert len(page) == PAGE
                # The other tenant, handed acme's cursor, gets its own sessions after that
                # place in the order (none: all of globex's are newer), never acme's.
                assert [s.session_id for s in await globex.sessions(PAGE, cursor=cursor)] == []
            assert seen == newest_first
            # Filtered: a metadata value and a word of the task find the one session, and
            # neither finds it for the other tenant.
            oldest = filled.owners["acme"][0]
            for options in ({"metadata": {"n": "0"}}, {"q": "task 0 of acme"}):
                found = await acme.sessions(10, **options)  # type: ignore[arg-type]
                assert [s.session_id for s in found] == [oldest], options
                assert list(await globex.sessions(10, **options)) == [], options  # type: ignore[arg-type]
            first = await globex.sessions(PAGE, counts=True)
            assert first.counts == {"pending": TOTAL - OLDER}
            assert first[0].session_id == filled.owners["globex"][-1]
    finally:
        await store.close()
    if store_url == "memory:":
        return  # nothing outlives the process: no server can read it
    with serve(tmp_path, "--workers", "0", store=store_url) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            got = await pages(client, ACME, limit=PAGE)
            listed = [s["session_id"] for p in got for s in p["sessions"]]
            assert listed == newest_first
            assert len(got) == OLDER // PAGE
            theirs: dict[str, Any] = (await client.get(
                "/v1/sessions", params={"limit": PAGE, "counts": "true"},
                headers={"Authorization": f"Bearer {GLOBEX}"},
            )).json()  # fmt: skip
            assert theirs["counts"] == {"pending": TOTAL - OLDER}
            assert not set(s["session_id"] for s in theirs["sessions"]) & set(listed)
