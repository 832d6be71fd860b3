"""Claiming a session's lease for a run: who this worker is, and waiting out another's lease.

The store keeps leases and fences appends with them; this only decides how long to wait.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import time

from tether.errors import LeaseHeld
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
