"""LocalRuntime on a PostgreSQL store passes the runtime conformance suite, its fork checks
too."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tether.runtime import LocalRuntime
from tether.runtime.base import Runtime
from tether.store.postgres import PostgresStore
from tether.testing import FORK_CHECKS, RUNTIME_CHECKS


@pytest.fixture
async def runtime(pg_url: str) -> AsyncIterator[LocalRuntime]:
    store = PostgresStore(pg_url, pool_size=8)
    async with LocalRuntime(store, workers=4, poll_interval=0.05, watch_interval=0.05) as rt:
        yield rt
    await store.close()


@pytest.mark.parametrize("check", [*RUNTIME_CHECKS, *FORK_CHECKS], ids=lambda c: c.__name__)
async def test_local_runtime_conformance_on_postgres(
    runtime: LocalRuntime, check: Callable[[Runtime], Awaitable[None]]
) -> None:
    await check(runtime)
