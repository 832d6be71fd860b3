"""Taking work for a worker: claim runnable sessions, and end the ones that keep killing
their workers, and only those.

A claim whose count is above 1 follows a worker that died (or hung) holding the session. The
log says whether the session could have done it: a death with one of its tool calls in flight
(`tool.started`, no `tool.finished`) is a *strike*; a death while it was idle or waiting on
its model is none of its doing, and is forgiven (`Store.acquit`), as are the strikes before
a run in which its calls return (`Probation`). A session struck `poison_after` times in a
row, with no progress between, is ended `failed`, naming the calls; the store hands one
struck twice to any worker with a free slot that runs no other such suspect, in a claim of
its own, so it never waits for a worker that runs nothing, and no worker runs two of them.
What a worker does with a session (run its turn) is the caller's: see
`run_session(lease=)`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from tether.events import Event, ToolFinished, ToolStarted, TurnEnded
from tether.recovery import closing, threads_of
from tether.session.lease import holding
from tether.session.log import SessionLog
from tether.store.base import Claimed, Lease, Store
from tether.telemetry import metrics

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


# What shows a session's calls return under its worker: a result the tool gave (not one
# recovery wrote for a call a dead worker left), or a turn's end.
PROGRESS: frozenset[str] = frozenset({"ok", "error", "timeout"})


class Probation:
    """The observer of a struck session's run (one whose last worker died with a call of it
    in flight): the first sign of progress here forgives its strikes (`Store.acquit`, through
    `spawn`, which owns the task), so only deaths in a row with none between them count."""

    def __init__(self, lease: Lease, acquit: Callable[[Lease], None]) -> None:
        self.lease = lease
        self._acquit: Callable[[Lease], None] | None = acquit

    def __call__(self, event: Event) -> None:
        payload = event.payload
        progressed = isinstance(payload, TurnEnded) or (
            isinstance(payload, ToolFinished) and payload.outcome in PROGRESS
        )
        if progressed and self._acquit is not None:
            acquit, self._acquit = self._acquit, None
            acquit(self.lease)


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
    ended, not returned. `alone`: the worker runs no suspect now, so it may take one (by
    itself). The caller runs each returned session under its lease and releases it."""
    while True:
        claimed = await store.claim_runnable(owner, ttl, limit, alone=alone)
        runnable: list[Claimed] = []
        for item in claimed:
            if item.claims > 1:
                struck = await judge(store, item, max_claims)
                if struck is None:
                    continue  # ended
                item = struck
            runnable.append(item)
        if runnable or not claimed:
            return runnable
        # Everything claimed was ended: the worker is as free as before, look again.


async def judge(store: Store, item: Claimed, max_claims: int) -> Claimed | None:
    """Weigh the death that preceded this claim: forgive it (the claim comes back with a
    count of 1), or count a strike (as claimed); None when the session was ended as
    poisoned (it is not to be run)."""
    session_log = await SessionLog.load(store, item.lease.session_id)
    calls = in_flight(session_log) if session_log.folder.turn_open else ()
    if not calls:
        await store.acquit(item.lease)
        metrics.took_over("forgiven")
        return replace(item, claims=1)
    # A death is evidence against the session only if its call was running then: a call
    # started (again) by the claim that died. A worker killed before it ran anything of the
    # session (killed from outside just after claiming it) proves nothing, so the strikes
    # are at most the times the call was started.
    starts = await _starts(store, item.lease.session_id, session_log)
    verdict = Verdict(min(item.claims - 1, starts), calls)
    if verdict.strikes < max_claims:  # on probation: `Probation` forgives it on progress
        metrics.took_over("struck")
        log.warning(
            "session %s: its worker died while it ran %s (strike %d of %d)",
            item.lease.session_id,
            ", ".join(calls),
            verdict.strikes,
            max_claims,
        )
        return item
    await end_poisoned(store, item, poison_reason(verdict), session_log)
    metrics.took_over("poisoned")
    return None


async def _starts(store: Store, session_id: str, session_log: SessionLog) -> int:
    """The most times any call in flight was started (`tool.started` events for its id)."""
    folder = session_log.folder
    open_ids = {c.id for c in folder.view().open_calls if c.id in folder.started}
    counts = dict.fromkeys(open_ids, 0)
    for event in await store.read(session_id):  # a takeover with calls in flight: rare
        payload = event.payload
        if isinstance(payload, ToolStarted) and payload.call_id in counts:
            counts[payload.call_id] += 1
    return max(counts.values(), default=0)


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
                await session_log.append(*batch, threads=threads_of(batch, session_log.thread))
                log.warning("session %s failed: %s", item.lease.session_id, reason)
                metrics.parked("poisoned")
        await store.clear_runnable(item.wakeup)
