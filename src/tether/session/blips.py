"""Surviving a store that blips (a restart, a dropped connection): which failures are
transient, how long a leased writer keeps trying, letting a lease go without raising, and
shielded work whose failure is logged once even when its caller was cancelled.

It does not decide what a failure means for a run: `SessionLog.append` retries a batch, the
worker defers a run that failed. Refusals (a conflict, a lost lease) are never retried here.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Coroutine
from typing import Any, TypeVar

from tether.errors import StoreError, StoreUnavailable
from tether.store.base import Lease, Store

T = TypeVar("T")

log = logging.getLogger("tether.store")

FIRST_DELAY = 0.05  # the first wait before a retry; doubled each time
MAX_DELAY = 2.0


def transient(exc: BaseException) -> bool:
    """A store failure that says nothing about the data (the store could not be reached, or
    failed mid-statement): the same request may be made again. Its refusals (`Conflict`,
    `LeaseLost`, `LeaseHeld`, a `CorruptLog`) are subclasses, and never transient."""
    return type(exc) in (StoreError, StoreUnavailable)


def backoff(delay: float) -> float:
    return min(MAX_DELAY, delay * 2)


def lasts(lease: Lease, delay: float) -> bool:
    """Whether `lease` is still ours after waiting `delay` more seconds (by this process's
    clock: the store fences an append in any case)."""
    return lease.expires - time.time() > delay


# Leases given up on after a failed release, so a second release of one (a worker releases
# again what its run may have released) neither waits nor says so again. Bounded.
_GIVEN_UP: OrderedDict[tuple[str, int], None] = OrderedDict()
_GIVEN_UP_MAX = 1024
RELEASE_TRIES = 4  # about 0.35 s: a lease not let go runs out, which costs little


async def release(store: Store, lease: Lease) -> None:
    """Let the lease go, trying again a few times while the store blips; never raises for
    the store, and says once when it gave up. A lease that could not be let go runs out
    instead; the next claim finds nothing of the session in flight and forgives the death
    (`runtime.claims`), so its count of claims does not make it a suspect."""
    key = (lease.session_id, lease.generation)
    if key in _GIVEN_UP:
        return
    delay = FIRST_DELAY
    for attempt in range(1, RELEASE_TRIES + 1):
        try:
            await store.release(lease)
            return
        except StoreError as exc:
            if not transient(exc) or attempt == RELEASE_TRIES or not lasts(lease, delay):
                log.warning(
                    "session %s: releasing lease generation %d failed (%s); it runs out instead",
                    lease.session_id,
                    lease.generation,
                    exc,
                )
                _GIVEN_UP[key] = None
                while len(_GIVEN_UP) > _GIVEN_UP_MAX:
                    _GIVEN_UP.popitem(last=False)
                return
        await asyncio.sleep(delay)
        delay = backoff(delay)


async def shielded(coro: Coroutine[Any, Any, T], what: str) -> T:
    """`await asyncio.shield(coro)`; when the caller is cancelled meanwhile, the work goes
    on and a failure of it is logged (once) rather than left unretrieved."""
    task = asyncio.ensure_future(coro)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(functools.partial(_orphaned, what))
        raise


def _orphaned(what: str, task: asyncio.Future[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()  # retrieved here: nobody else is left to
    if exc is not None:
        log.warning("%s failed after its caller was cancelled: %s", what, exc)
