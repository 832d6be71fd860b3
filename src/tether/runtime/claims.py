"""Taking work from PostgreSQL for a worker: claim runnable sessions without contention, and
park the ones that keep killing their workers.

A session whose lease was claimed more than `max_claims` times since its last clean release
has had that many workers die (or hang) while running it. Rather than let it take down
worker after worker, `take_work` ends it `failed`, naming why, and hands out the rest. What
a worker then does with a session (run its turn) is the caller's: see `Agent.run(lease=...)`.
"""

from __future__ import annotations

import asyncio

from tether.recovery import closing
from tether.session_log import SessionLog
from tether.store.postgres import Claimed, PostgresStore

DEFAULT_MAX_CLAIMS = 3


def poison_reason(claims: int) -> str:
    return (
        f"poisoned: the session's workers stopped without releasing it {claims - 1} times in a "
        "row (crashed, killed or hung); parked so it cannot take down more workers"
    )


async def take_work(
    store: PostgresStore,
    owner: str,
    *,
    ttl: float,
    limit: int,
    alone: bool,
    max_claims: int = DEFAULT_MAX_CLAIMS,
) -> list[Claimed]:
    """Claim up to `limit` runnable sessions; those past `max_claims` are parked, not
    returned. `alone`: the worker runs nothing now, so it may take a suspect (by itself).
    The caller runs each returned session under its lease and releases it."""
    while True:
        claimed = await store.claim_runnable(owner, ttl, limit, alone=alone)
        runnable: list[Claimed] = []
        for item in claimed:
            if item.claims > max_claims:
                await park(store, item, poison_reason(item.claims))
            else:
                runnable.append(item)
        if runnable or not claimed:
            return runnable
        # Everything claimed was parked: the worker is as free as before, look again.


async def park(store: PostgresStore, item: Claimed, reason: str) -> None:
    """End the claimed session `failed` with `reason`: open calls answered (a started one
    with unknown effect, never run again), the turn closed, the session ended; then its
    wakeup cleared and its lease released."""
    log = await SessionLog.load(store, item.lease.session_id)
    log.lease = item.lease
    try:
        # A session whose turn had ended was not what killed its workers: nothing to end.
        if log.folder.turn_open:
            batch = closing(log.folder, "error", reason, calls="abandoned", end="failed")
            if batch:
                await log.append(*batch)
        await store.clear_runnable(item.wakeup)
    finally:
        await asyncio.shield(store.release(item.lease))
