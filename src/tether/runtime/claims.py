"""Taking work for a worker: claim runnable sessions, and end the ones that keep killing
their workers.

A session whose lease was claimed more than `max_claims` times since its last clean release
has had that many workers die (or hang) while running it. Rather than let it take down
worker after worker, `take_work` ends it `failed`, naming why, and hands out the rest. What
a worker then does with a session (run its turn) is the caller's: see `run_session(lease=)`.
"""

from __future__ import annotations

from tether.recovery import closing
from tether.session.lease import holding
from tether.session.log import SessionLog
from tether.store.base import Claimed, Store

DEFAULT_MAX_CLAIMS = 3


def poison_reason(claims: int) -> str:
    return (
        f"poisoned: the session's workers stopped without releasing it {claims - 1} times in a "
        "row (crashed, killed or hung); ended so it cannot take down more workers"
    )


async def take_work(
    store: Store,
    owner: str,
    *,
    ttl: float,
    limit: int,
    alone: bool,
    max_claims: int = DEFAULT_MAX_CLAIMS,
) -> list[Claimed]:
    """Claim up to `limit` runnable sessions; those past `max_claims` are ended, not
    returned. `alone`: the worker runs nothing now, so it may take a suspect (by itself).
    The caller runs each returned session under its lease and releases it."""
    while True:
        claimed = await store.claim_runnable(owner, ttl, limit, alone=alone)
        runnable: list[Claimed] = []
        for item in claimed:
            if item.claims > max_claims:
                await end_poisoned(store, item, poison_reason(item.claims))
            else:
                runnable.append(item)
        if runnable or not claimed:
            return runnable
        # Everything claimed was ended: the worker is as free as before, look again.


async def end_poisoned(store: Store, item: Claimed, reason: str) -> None:
    """End the claimed session `failed` with `reason`: open calls answered (a started one
    with unknown effect, never run again), the turn closed, the session ended; then its
    wakeup cleared and its lease released."""
    log = await SessionLog.load(store, item.lease.session_id)
    async with holding(log, item.lease.owner, 0, lease=item.lease):
        # A session whose turn had ended was not what killed its workers: nothing to end.
        if log.folder.turn_open:
            batch = closing(log.folder, "error", reason, calls="abandoned", end="failed")
            if batch:
                await log.append(*batch)
        await store.clear_runnable(item.wakeup)
