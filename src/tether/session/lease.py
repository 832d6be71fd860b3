"""Claiming a session's lease: who this worker is, waiting out another's lease, and holding
one for a block of appends (`holding`).

The store keeps leases and fences appends with them; this decides how long to wait, and
makes sure a lease taken is let go.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tether.errors import LeaseHeld
from tether.session import blips
from tether.session.log import SessionLog
from tether.store.base import Lease, Store

_PROCESS = f"{socket.gethostname()}:{os.getpid()}"


def worker_id() -> str:
    """A new owner name for each run: the host, the process, and a random part."""
    return f"{_PROCESS}:{secrets.token_hex(3)}"


async def claim_lease(store: Store, session_id: str, owner: str, ttl: float, wait: float) -> Lease:
    """Claim now, or keep trying for `wait` seconds while another worker holds the lease."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return await store.claim(session_id, owner, ttl)
        except LeaseHeld as held:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            until_free = held.expires - time.time()
            await asyncio.sleep(max(0.01, min(left, until_free, 0.25)))


@asynccontextmanager
async def holding(
    log: SessionLog, owner: str, ttl: float, *, lease: Lease | None = None
) -> AsyncIterator[SessionLog]:
    """`log` under the session's lease for the block, caught up once the lease is held:
    a lease claimed here (`LeaseHeld` when another holds it), or `lease`, claimed already
    with the work. Every append in the block is fenced by it; at the end it is let go,
    whatever happened. For the short closers (a cancel nobody runs, a session no worker can
    run); a turn's run holds its lease through `session.run.run_session`."""
    held = lease or await log.store.claim(log.session_id, owner, ttl)
    log.lease = held
    try:
        await log.refresh()
        yield log
    finally:
        log.lease = None
        await blips.shielded(blips.release(log.store, held), f"session {log.session_id}: a release")
