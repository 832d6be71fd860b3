"""`max_running` holds across processes: two `tether serve` processes on one PostgreSQL
store, 50 concurrent starts of one tenant spread over both, and exactly its quota of them
admitted. The store counts the tenant's running sessions in the transaction of the append
that creates one, so neither server's own count decides."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from server.support import ACME, serve
from server.test_quotas import start, tokens_with
from tether.store import open_store
from tether.store.catalog import CatalogQuery

STARTS = 50
MAX_RUNNING = 3


async def test_max_running_3_admits_exactly_3_of_50_concurrent_starts_on_two_servers(
    tmp_path: Path, pg_url: str
) -> None:
    tokens = tokens_with(tmp_path, max_running=MAX_RUNNING)
    # No workers: every session admitted stays pending with its turn open, so it runs.
    args = ("--workers", "0", "--tokens", str(tokens))
    with (
        serve(tmp_path, *args, store=pg_url) as one,
        serve(tmp_path, *args, store=pg_url) as two,
    ):
        async with (
            httpx.AsyncClient(base_url=one.url, timeout=60) as a,
            httpx.AsyncClient(base_url=two.url, timeout=60) as b,
        ):
            answers = await asyncio.gather(*(start(a if i % 2 else b, ACME) for i in range(STARTS)))
    admitted = [r for r in answers if r.status_code == 201]
    refused = [r for r in answers if r.status_code != 201]
    assert len(admitted) == MAX_RUNNING, [r.status_code for r in answers]
    for r in refused:
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "quota_exceeded"
        assert f"its limit is {MAX_RUNNING} (max_running)" in r.json()["error"]["message"]
        assert int(r.headers["retry-after"]) >= 1
    store = open_store(pg_url)
    try:  # the refused starts created nothing
        counts = await store.catalog_counts(CatalogQuery(tenant="acme"))
    finally:
        await store.close()
    assert sum(counts.values()) == MAX_RUNNING
