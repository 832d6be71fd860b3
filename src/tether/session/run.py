"""Running a session's turn under its lease: the one path `Agent` and the worker both take.

`run_session` holds the lease (claimed here, or handed in by a worker that claimed it with
the work), appends what opens the turn, drives `loop.run_turn`, and lets the lease go.
`Runs` is what one process runs now: one `Watcher` (a follower of the process's store
`Tail`) renews every lease and folds in what other processes append (a cancel, an
interrupt, a decision), and `Runs.stop(session_id, cause)` is the one way to stop a run
from outside its turn (`loop.StopCause`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence

from tether import process
from tether.errors import HandedOver, LeaseLost, UsageError
from tether.events import Payload
from tether.loop import (
    WRITES_NOTHING,
    Engine,
    StopCause,
    TurnContext,
    close_canceled_turn,
    run_turn,
)
from tether.providers.base import Caller, DeltaObserver
from tether.session import blips, control
from tether.session.fence import LeaseFence
from tether.session.lease import claim_lease, worker_id
from tether.session.log import SessionLog
from tether.session.tail import Tail
from tether.session.watch import Watched, Watcher
from tether.state import SessionView
from tether.store.base import Lease, Store

_log = logging.getLogger("tether.session")


class Runs:
    """The turns this process runs now, by session. `lease_ttl`: how long a run's lease
    lasts unrenewed (a dead process's sessions wait this long for another); `watch_interval`:
    how often other processes' appends are looked for (a cancel is noticed within it);
    `tail`: the process's tail of `store`, shared with its other followers (an event hub);
    None: the runs make their own."""

    def __init__(
        self,
        store: Store,
        *,
        lease_ttl: float = 30.0,
        watch_interval: float = 0.5,
        tail: Tail | None = None,
    ):
        self.store = store
        self.lease_ttl = lease_ttl
        self._watcher = Watcher(store, watch_interval, tail=tail)
        self._running: dict[str, tuple[asyncio.Task[None], TurnContext]] = {}

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._running

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._running))

    def turn(self, session_id: str) -> TurnContext | None:
        """The running turn of the session here, if any."""
        running = self._running.get(session_id)
        return None if running is None else running[1]

    async def stop(self, session_id: str, cause: StopCause) -> bool:
        """Stop the session's run here for `cause`, and wait until it has stopped; False
        when this process is not running it."""
        running = self._running.get(session_id)
        if running is None:
            return False
        inner, ctx = running
        ctx.stop(cause)
        if cause in WRITES_NOTHING:
            _lose(ctx)  # before the cancel: a tool on a thread stops as soon as it can
        inner.cancel()
        await asyncio.gather(inner, return_exceptions=True)
        return True

    async def close(self) -> None:
        await self._watcher.close()

    async def drive(self, ctx: TurnContext) -> None:
        """Run the turn to its end, watched: news of a cancel from another process stops it
        `interrupted`, a lost lease stops it unwritten, the time limit stops it by name."""
        sid = ctx.log.session_id
        inner = asyncio.create_task(run_turn(ctx))
        self._running[sid] = (inner, ctx)

        def on_news() -> None:
            if ctx.log.folder.cancel_scope and not inner.done():
                inner.cancel()  # another process asked: the turn closes as interrupted

        def on_lease_lost() -> None:
            # The stale lease stays on the log, so any append still in flight is refused.
            ctx.stop("lease_lost")
            _lose(ctx)
            inner.cancel()

        self._watcher.watch(Watched(ctx.log, self.lease_ttl, on_news, on_lease_lost))
        try:
            await _await_turn(inner, ctx)
        finally:
            if inner.cancelled() and not ctx.writes_nothing:
                # A turn cancelled before its first step never ran run_turn's own close;
                # for one that did, this finds the turn closed and does nothing.
                await blips.shielded(
                    close_canceled_turn(
                        ctx.log,
                        ctx.stop_cause,
                        turns_before=ctx.turns_before,
                        toolbox=ctx.engine.toolbox,
                        gone=ctx.started_before,
                    ),
                    f"session {sid}: closing its turn",
                )
            self._watcher.unwatch(sid)
            self._running.pop(sid, None)


def _lose(ctx: TurnContext) -> None:
    """Tell the run's tools that the lease is no longer theirs (`ToolContext.lease_lost`)."""
    if isinstance(ctx.fence, LeaseFence):
        ctx.fence.lose()


async def _await_turn(inner: asyncio.Task[None], ctx: TurnContext) -> None:
    """Wait for the turn. A cancel of our caller reaches the turn through the await (it
    closes itself, then the cancel propagates); a cancel of the turn alone (`Runs.stop`,
    another process, the time limit) ends it here. A timer rather than `asyncio.wait`: with
    thousands of sessions, every object a waiting run holds counts."""
    deadline = ctx.engine.limits.max_seconds
    timer = None
    if deadline is not None:

        def expire() -> None:
            if not inner.done():
                ctx.stop("time_limit")
                inner.cancel()

        timer = asyncio.get_running_loop().call_later(deadline, expire)
    try:
        await inner
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    finally:
        if timer is not None:
            timer.cancel()


async def run_session(
    runs: Runs,
    engine: Engine,
    log: SessionLog,
    *,
    opening: Sequence[Payload] = (),
    lease: Lease | None = None,
    lease_wait: float = 0.0,
    end_session: bool = False,
    caller: Caller | None = None,
    on_delta: DeltaObserver | None = None,
    settled: Callable[[], Awaitable[object]] | None = None,
) -> SessionView:
    """Run the session's turn: append `opening` (what starts a turn: `session.created` for a
    new session, a user message) and go on until the turn ends; with nothing to open,
    continue the open turn (after an approval, a hand-over or a crash: `tether.recovery`).
    With `end_session`, a turn that stops for good also ends the session, in one batch.

    Under `lease`, when the caller claimed it with the work (the run releases it as its
    own); otherwise the run claims one, waiting up to `lease_wait` seconds for another
    holder (`LeaseHeld`). Raises `HandedOver` or `LeaseLost` when the run stopped without
    closing its turn. `caller` goes with every model request (a shared gateway orders and
    parks by it). `settled` is awaited once the turn has run to its stop, before the lease
    goes: a worker clears the session's wakeup there, since a mark still standing once the
    lease is let go would be free work to every other worker."""
    sid = log.session_id
    if sid in runs:
        raise UsageError(f"session {sid} is already running in this process")
    if log.folder.terminal:
        raise UsageError(f"session {sid} has ended ({log.folder.state}); start a new one")
    if lease is not None and lease.session_id != sid:
        raise UsageError(f"a lease of session {lease.session_id} cannot run {sid}")
    store = runs.store
    process.session_started()  # many at once raise the collector's thresholds
    try:
        log.lease = lease or await claim_lease(store, sid, worker_id(), runs.lease_ttl, lease_wait)
    except BaseException:
        process.session_finished()
        raise
    fence = LeaseFence(log, log.lease)
    try:
        try:
            if log.folder.last_seq:
                await log.refresh()  # what was appended between reading and claiming
            if opening:
                await log.append(*opening)
        except asyncio.CancelledError:
            # Cancelled before the loop took over: a turn that opened (the batch may have
            # landed all the same) still ends by name.
            await blips.shielded(
                close_canceled_turn(log, "interrupted", toolbox=engine.toolbox),
                f"session {sid}: closing its turn",
            )
            raise
        ctx = TurnContext(
            log,
            engine,
            on_delta,
            started_at=time.monotonic(),
            end_after_turn=end_session,
            # A run with no caller of its own still names its session (a prompt cache key).
            caller=caller or Caller(sid),
            fence=fence,
        )
        await runs.drive(ctx)
        if settled is not None and not ctx.writes_nothing:
            await settled()
    finally:
        # A call left running on its thread (abandoned after its grace) runs under no lease
        # from here on: its flag tells it so.
        fence.lose()
        process.session_finished()
        if log.held and log.lease is not None:  # a result waiting for a commit that never came
            try:
                await blips.shielded(log.flush(), f"session {sid}: a held result")
            except Exception as exc:  # lost with the lease, as an unheld one would be
                _log.warning("session %s: a held tool result was not committed: %s", sid, exc)
        if log.lease is not None:
            await blips.shielded(blips.release(store, log.lease), f"session {sid}: a release")
    if ctx.stop_cause == "handed_over":
        raise HandedOver(f"session {sid}: handed over; its turn stays open for the next runner")
    if ctx.stop_cause == "lease_lost":
        raise LeaseLost(
            f"session {sid}: another worker took the session over; this run stopped without writing"
        )
    # A cancel that came as the turn ended, after the runner's last look, was addressed to
    # this run: honour it now (control closes it itself only once the lease is free).
    await log.refresh()
    if log.folder.cancel_scope == "session" and not log.folder.terminal:
        await control.request_stop(store, sid, "session")
        await log.refresh()
    log.keep()  # the next run of the session here starts from this fold
    return log.folder.view()
