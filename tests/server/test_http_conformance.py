"""HttpRuntime against a real `tether serve` on loopback passes the runtime conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from server.support import ACME, Server
from tether.runtime.http import HttpRuntime
from tether.testing import RUNTIME_CHECKS


@pytest.fixture
async def runtime(server: Server) -> AsyncIterator[HttpRuntime]:
    rt = HttpRuntime(server.url, ACME)
    yield rt
    await rt.close()


@pytest.mark.parametrize("check", RUNTIME_CHECKS, ids=lambda c: c.__name__)
async def test_http_runtime_conformance(runtime: HttpRuntime, check) -> None:  # type: ignore[no-untyped-def]
    await check(runtime)
