"""Taking work for a worker: claim runnable sessions, and end the ones that keep killing
their workers, and only those.

A claim whose count is above 1 follows a worker that died (or hung) holding the session. The
log says whether the session could have done it: a death with one of its tool calls in flight
(`tool.started`, no `tool.finished`) is a *strike*; a death while it was idle or waiting on
its model is none of its doing, and is forgiven (`Store.acquit`). A session struck
`poison_after` times in a row is ended `failed`, naming the calls; the store hands one with a
strike only to a worker running nothing else, so its later strikes are on workers that ran
little besides it. What a worker does with a session (run its turn) is the caller's: see
`run_session(lease=)`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tether.recovery import closing
from tether.session.lease import holding
from tether.session.log import SessionLog
from tether.store.base import Claimed, Store

DEFAULT_MAX_CLAIMS = 3  # strikes before a session is ended: `tether worker --poison-after`

log = logging.getLogger("tether.worker")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a takeover found: `strikes`, the deaths in a row with a call of the session in
    flight, counting the last; `calls`, those in flight at the last, as `name (id)`."""

    strikes: int
    calls: tuple[str, ...]


def poison_reason(verdict: Verdict) -> str:
    return (
        f"poisoned: its worker died {verdict.strikes} times in a row while it ran "
        f"{', '.join(verdict.calls)} (crashed, killed or hung); ended so it cannot take down "
        "more workers"
    )


def in_flight(session_log: SessionLog) -> tuple[str, ...]:
    """The calls of the session's last answer started and never finished: what was running
    when its worker died."""
    folder = session_log.folder
    calls = folder.view().open_calls
    return tuple(f"{c.name} ({c.id})" for c in calls if c.id in folder.started)


async def take_work(
    store: Store,
    owner: str,
    *,
    ttl: float,
    limit: int,
    alone: bool,
    max_claims: int = DEFAULT_MAX_CLAIMS,
) -> list[Claimed]:
    """Claim up to `limit` runnable sessions; those struck `max_claims` times in a row are
    ended, not returned. `alone`: the worker runs nothing now, so it may take a suspect (by
    itself). The caller runs each returned session under its lease and releases it."""
    while True:
        claimed = await store.claim_runnable(owner, ttl, limit, alone=alone)
        runnable: list[Claimed] = []
        for item in claimed:
            if item.claims > 1 and await judge(store, item, max_claims):
                continue
            runnable.append(item)
        if runnable or not claimed:
            return runnable
        # Everything claimed was ended: the worker is as free as before, look again.


async def judge(store: Store, item: Claimed, max_claims: int) -> bool:
    """Weigh the death that preceded this claim: forgive it, or count a strike; True when
    the session was ended as poisoned (it is not to be run)."""
    session_log = await SessionLog.load(store, item.lease.session_id)
    calls = in_flight(session_log) if session_log.folder.turn_open else ()
    if not calls:
        await store.acquit(item.lease)
        return False
    verdict = Verdict(item.claims - 1, calls)
    if verdict.strikes < max_claims:
        log.warning(
            "session %s: its worker died while it ran %s (strike %d of %d)",
            item.lease.session_id,
            ", ".join(calls),
            verdict.strikes,
            max_claims,
        )
        return False
    await end_poisoned(store, item, poison_reason(verdict), session_log)
    return True


async def end_poisoned(
    store: Store, item: Claimed, reason: str, session_log: SessionLog | None = None
) -> None:
    """End the claimed session `failed` with `reason`: open calls answered (a started one
    with unknown effect, never run again), the turn closed, the session ended; then its
    wakeup cleared and its lease released."""
    if session_log is None:
        session_log = await SessionLog.load(store, item.lease.session_id)
    async with holding(session_log, item.lease.owner, 0, lease=item.lease):
        # A session whose turn had ended was not what killed its workers: nothing to end.
        if session_log.folder.turn_open:
            batch = closing(session_log.folder, "error", reason, calls="abandoned", end="failed")
            if batch:
                await session_log.append(*batch)
                log.warning("session %s failed: %s", item.lease.session_id, reason)
        await store.clear_runnable(item.wakeup)
