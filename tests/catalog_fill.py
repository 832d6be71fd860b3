"""A store filled fast with many small sessions of several tenants, for tests of what reads
the catalog: each session is its first two events (created, the task), appended with its
catalog row (`catalog.row_for_log`) so the store folds nothing, many appends at once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from tether.events import Event, SessionCreated, UserMessage, format_time
from tether.messages import user
from tether.store import catalog
from tether.store.base import Store

MODEL = "scripted:runtime"
START = 1_780_000_000.0  # the first session's time: 2026-05-28, seconds since the epoch


@dataclass(frozen=True, slots=True)
class Filled:
    owners: dict[str, list[str]]  # tenant -> its session ids, oldest first


def session_events(session_id: str, tenant: str, at: float, n: int) -> list[Event]:
    when = format_time(at)
    created = SessionCreated(MODEL, metadata={"tenant": tenant, "n": str(n)})
    return [
        Event(session_id, 1, f"{session_id}-1", when, created),
        Event(session_id, 2, f"{session_id}-2", when, UserMessage(user(f"task {n} of {tenant}"))),
    ]


async def fill(store: Store, tenants: Sequence[tuple[str, int]], at_once: int = 64) -> Filled:
    """`tenants`' sessions (name, how many), each tenant's all older than the next's, one
    millisecond apart, appended `at_once` at a time."""
    plan: list[tuple[str, str, float, int]] = []
    owners: dict[str, list[str]] = {}
    for tenant, count in tenants:
        for _ in range(count):
            n = len(plan)
            session_id = f"ses_{n:07d}_{tenant}"
            plan.append((session_id, tenant, START + n / 1000, n))
            owners.setdefault(tenant, []).append(session_id)
    gate = asyncio.Semaphore(at_once)

    async def one(session_id: str, tenant: str, at: float, n: int) -> None:
        events = session_events(session_id, tenant, at, n)
        async with gate:
            await store.append(session_id, events, 0, row=catalog.row_for_log(events))

    await asyncio.gather(*(one(*p) for p in plan))
    return Filled(owners)
