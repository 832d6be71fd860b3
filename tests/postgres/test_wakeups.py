"""Wake-ups on PostgreSQL: control-plane appends NOTIFY, so a cancel, a message or a decision
reaches the worker at once; polling stays the fallback, so a lost notification only delays."""

from __future__ import annotations

import asyncio
import time

from psycopg import AsyncConnection

from tether.agent import Agent
from tether.session import control
from tether.store.postgres import PostgresStore
from tether.testing import Hang, ScriptedModel
from tether.testing.store_conformance import _sample, make_events


async def test_a_subscription_hears_control_appends_and_marks_but_not_leased_appends(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url)
    news = store.subscribe()
    assert await news.wait(0.05) == set()
    lease = await store.claim("worked", "worker-a", ttl=30)
    await store.append("worked", make_events("worked", 1, _sample(1)), 0, lease=lease)
    await store.append("steered", make_events("steered", 1, _sample(1)), 0)
    await store.mark_runnable("started")
    heard: set[str] = set()
    deadline = time.monotonic() + 10
    while heard != {"steered", "started"} and time.monotonic() < deadline:
        heard |= await news.wait(1.0)
    assert heard == {"steered", "started"}
    news.close()
    await store.close()


async def _cancel_reaches_the_run(url: str, watch_interval: float, *, cut_listener: bool) -> float:
    worker_store, control_store = PostgresStore(url), PostgresStore(url)
    agent = Agent(ScriptedModel([Hang()]), store=worker_store, watch_interval=watch_interval)
    run = asyncio.create_task(agent.run("wait for ever"))
    for _ in range(1000):  # the run has created its session and holds its lease
        listed = await worker_store.sessions()
        if listed and await worker_store.current_lease(listed[0].session_id) is not None:
            break
        await asyncio.sleep(0.02)
    sid = listed[0].session_id
    await asyncio.sleep(0.2)  # the watcher is listening by now
    if cut_listener:
        async with await AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'"
            )
    asked = time.monotonic()
    await control.request_stop(control_store, sid, "session", "the user gave up")
    result = await asyncio.wait_for(run, timeout=60)
    took = time.monotonic() - asked
    assert result.state == "canceled"
    await agent.close()
    await control_store.close()
    return took


async def test_a_cancel_reaches_the_running_worker_at_once_not_at_its_next_poll(
    pg_url: str,
) -> None:
    # The worker polls only every 30 s: the cancel arrives by NOTIFY well before.
    took = await _cancel_reaches_the_run(pg_url, watch_interval=30.0, cut_listener=False)
    assert took < 10.0, f"the cancel took {took:.1f} s"


async def test_a_lost_notification_only_delays_until_the_next_poll(pg_url: str) -> None:
    # The LISTEN connection is cut just before the cancel: polling (every 0.5 s) finds it.
    took = await _cancel_reaches_the_run(pg_url, watch_interval=0.5, cut_listener=True)
    assert took < 20.0, f"the cancel took {took:.1f} s"
