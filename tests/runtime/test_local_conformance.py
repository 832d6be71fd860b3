"""LocalRuntime passes the runtime conformance suite on both embedded stores."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tether.runtime import LocalRuntime
from tether.store import Store
from tether.testing import RUNTIME_CHECKS


@pytest.fixture
async def runtime(store: Store) -> AsyncIterator[LocalRuntime]:
    async with LocalRuntime(store, workers=4, poll_interval=0.05, watch_interval=0.05) as rt:
        yield rt


@pytest.mark.parametrize("check", RUNTIME_CHECKS, ids=lambda c: c.__name__)
async def test_local_runtime_conformance(runtime: LocalRuntime, check) -> None:  # type: ignore[no-untyped-def]
    await check(runtime)
