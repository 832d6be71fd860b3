"""One process runs an experiment at a time: a claim on the experiment in its store.

Two processes continuing one experiment id at once would each see the same cells missing and
each run them, so the experiment's runs would count twice. The claim is the store's own session
lease (every backend has it, fenced by generation) on a reserved key, `experiment:ID`: no
session id holds a colon, so the key never meets a session. It is taken before anything of the
experiment is read, renewed while it runs, and released when it ends.

A holder that dies leaves its claim to run out within its ttl; one that died on this machine
(its process is gone from this machine's process table) is taken over at once, so a run killed
with SIGKILL can be continued straight away. "This machine" is the boot and the pid namespace,
not the host name: containers that share a name and a kernel but not their processes never
take each other's claims.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import secrets
import socket
from collections.abc import AsyncIterator

from tether.errors import ExperimentRunning, LeaseHeld, LeaseLost, StoreError, UsageError
from tether.session import blips
from tether.store.base import Lease, Store

log = logging.getLogger("tether.experiment")

CLAIM_PREFIX = "experiment:"


class ExperimentClaim:
    """The claim a running experiment holds; `lost` once another process took it over
    (this one was stalled past its ttl), after which no new run may start here."""

    def __init__(self, store: Store, lease: Lease, ttl: float) -> None:
        self.store, self.lease, self.ttl = store, lease, ttl
        self.lost = False

    async def keep(self) -> None:
        """Renew the claim once a third of its ttl has run, until cancelled or lost; a renewal
        that fails for a blip is tried again at the next round."""
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                self.lease = await self.store.renew(self.lease, self.ttl)
            except LeaseLost:
                log.warning(
                    "%s: the claim was taken over; no new run starts", self.lease.session_id
                )
                self.lost = True
                return
            except StoreError as exc:
                log.warning("%s: renewing the claim failed: %s", self.lease.session_id, exc)


@contextlib.asynccontextmanager
async def claiming(store: Store, experiment_id: str, ttl: float) -> AsyncIterator[ExperimentClaim]:
    """The experiment's claim for the block (`ExperimentRunning` when another process holds
    it), renewed meanwhile and released at the end, whatever happened."""
    if not (ttl > 0 and math.isfinite(ttl)):
        raise UsageError(f"an experiment's lease_ttl must be positive and finite, not {ttl!r}")
    claim = ExperimentClaim(store, await _claim(store, experiment_id, ttl), ttl)
    keeper = asyncio.create_task(claim.keep())
    try:
        yield claim
    finally:
        keeper.cancel()
        # Shielded: cancelled while it ends, the claim is still let go.
        await blips.shielded(_let_go(claim, keeper), f"experiment {experiment_id}: a release")


async def _let_go(claim: ExperimentClaim, keeper: asyncio.Task[None]) -> None:
    """Release the claim once the renewal under way (if any) is over."""
    await asyncio.wait([keeper])
    await blips.release(claim.store, claim.lease)


async def _claim(store: Store, experiment_id: str, ttl: float) -> Lease:
    key = CLAIM_PREFIX + experiment_id
    owner = _owner()
    try:
        return await store.claim(key, owner, ttl)
    except LeaseHeld as held:
        current = await store.current_lease(key)
        if current is None or not _died_here(current.owner):
            raise ExperimentRunning(experiment_id, _who(held.owner), held.expires) from None
        # Fenced by generation: if another process took it over first, this does nothing and
        # the claim below is refused by that one's claim.
        await store.release(current)
    try:
        return await store.claim(key, owner, ttl)
    except LeaseHeld as held:
        raise ExperimentRunning(experiment_id, _who(held.owner), held.expires) from None


def _machine() -> str:
    """This boot of this machine and this pid namespace, as a short key; '-' where it cannot
    be told (no /proc): then no claim is ever taken over before it runs out."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return "-"
    return hashlib.sha256(f"{boot}:{namespace}".encode()).hexdigest()[:12]


_MACHINE = _machine()


def _owner() -> str:
    """host:pid:machine:random, the holder a refusal names."""
    return f"{socket.gethostname()}:{os.getpid()}:{_MACHINE}:{secrets.token_hex(3)}"


def _who(owner: str) -> str:
    parts = owner.split(":")
    if len(parts) == 4 and parts[1].isdigit():
        return f"process {parts[1]} on {parts[0]}"
    return owner


def _died_here(owner: str) -> bool:
    """Whether the owner is a process of this machine that no longer exists."""
    parts = owner.split(":")
    if len(parts) != 4 or not parts[1].isdigit() or _MACHINE == "-" or parts[2] != _MACHINE:
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # another user's process: alive
    return False
