"""The lease a run holds, as its tools see it (`ToolContext.fence`, `ensure_held`,
`lease_lost`): the fencing token of Kleppmann's fencing tokens, a check of the store's
current lease before an effect, and a flag for threads.

Owns only what a tool is told. The store fences appends itself; this cannot stop a tool
that never asks.
"""

from __future__ import annotations

import threading

from tether.errors import LeaseLost
from tether.session.log import SessionLog
from tether.store.base import Lease


class LeaseFence:
    """The lease `lease` of the run of `log`'s session. `lost` is set once the run no longer
    holds it (`lose`: a takeover noticed, a hand-over, the run's end) or a check finds it
    gone; it is never cleared."""

    __slots__ = ("_log", "generation", "lost", "owner")

    def __init__(self, log: SessionLog, lease: Lease) -> None:
        self._log = log
        self.generation = lease.generation
        self.owner = lease.owner
        self.lost = threading.Event()

    def lose(self) -> None:
        self.lost.set()

    async def ensure_held(self) -> None:
        """Return if the store's current lease of the session is this one (the same owner
        and generation, unexpired by the store's clock, not released); else set `lost` and
        raise `LeaseLost`. One read of one lease row; a store error propagates (the holder
        is then unknown, so the caller must not act either)."""
        sid = self._log.session_id
        if not self.lost.is_set():
            current = await self._log.store.current_lease(sid)
            if (
                current is not None
                and current.generation == self.generation
                and current.owner == self.owner
            ):
                return
            self.lost.set()
        raise LeaseLost(
            f"session {sid}: this worker no longer holds its lease (generation "
            f"{self.generation}): another runner may have the session, so do not act for it"
        )
