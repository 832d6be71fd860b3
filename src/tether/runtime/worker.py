"""The worker loop: find sessions with work (the store's wakeups), run each turn with an
`Agent` rebuilt from what `session.created` recorded, and settle what the turn left.

Used in-process by `LocalRuntime` and on its own by `tether worker`, so serving and running
scale apart. Leases keep two workers off one session; a worker that dies leaves its mark,
and another takes the session over once the lease expires (recovery: DESIGN §4).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from tether.agent import Agent
from tether.errors import LeaseHeld, LeaseLost, StoreError, UsageError
from tether.events import Event, SessionCreated, SessionEnded, ToolFinished, TurnEnded
from tether.lease import worker_id
from tether.runtime.base import FAILED_STOPS, NOT_FINAL
from tether.runtime.sessions import Runner, build_runner
from tether.session_log import SessionLog
from tether.state import TERMINAL_STATES
from tether.store.base import Store, Wakeup

log = logging.getLogger("tether.worker")

AGENTS = 64  # rebuilt runners kept, by model, tools and limits


class Worker:
    """`concurrency`: sessions run at once. `poll_interval`: how often to look for work
    when nobody in this process said there is some (`wake`). `lease_ttl`: how long a
    session whose worker died waits before another takes it over."""

    def __init__(
        self,
        store: Store,
        *,
        concurrency: int = 16,
        poll_interval: float = 0.2,
        lease_ttl: float = 30.0,
        watch_interval: float = 0.2,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        if concurrency < 1:
            raise UsageError(f"a worker needs concurrency of at least 1, not {concurrency}")
        self.store = store
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self.lease_ttl = lease_ttl
        self.watch_interval = watch_interval
        self.on_event = on_event
        self.owner = worker_id()
        self.turns_run = 0
        self.failures = 0
        self._wake = asyncio.Event()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._agents: OrderedDict[str, Agent] = OrderedDict()
        self._retry_at: dict[str, tuple[float, int]] = {}

    @property
    def running(self) -> int:
        return len(self._running)

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Take work until cancelled. The turns it started go on running: `stop` ends them."""
        while True:
            self._wake.clear()
            try:
                await self.dispatch()
            except StoreError as exc:
                log.warning("worker %s: looking for work failed: %s", self.owner, exc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_interval):
                    await self._wake.wait()

    async def stop(self, drain: float = 0.0) -> None:
        """Let running turns finish for up to `drain` seconds, then cancel them (their turns
        close as interrupted)."""
        tasks = list(self._running.values())
        if tasks and drain > 0:
            await asyncio.wait(tasks, timeout=drain)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def dispatch(self) -> int:
        """Start a task for each runnable session there is room for; how many started."""
        free = self.concurrency - len(self._running)
        if free <= 0:
            return 0
        now = time.monotonic()
        started = 0
        for wakeup in await self.store.runnable(limit=free + len(self._running)):
            sid = wakeup.session_id
            if sid in self._running or self._retry_at.get(sid, (0.0, 0))[0] > now:
                continue
            task = asyncio.get_running_loop().create_task(self._take(wakeup), name=f"run-{sid}")
            self._running[sid] = task
            task.add_done_callback(functools.partial(self._done, sid))
            started += 1
            if started >= free:
                break
        return started

    def _done(self, session_id: str, _task: asyncio.Task[None]) -> None:
        self._running.pop(session_id, None)
        self._wake.set()  # a slot is free

    async def _take(self, wakeup: Wakeup) -> None:
        sid = wakeup.session_id
        try:
            await self._run_session(wakeup)
            self._retry_at.pop(sid, None)
        except (LeaseHeld, LeaseLost):
            return  # another worker runs it, or took it over: the mark is its business
        except asyncio.CancelledError:
            raise
        except Exception:
            # A store hiccup or a bug: try again later, less often each time.
            self.failures += 1
            _, attempts = self._retry_at.get(sid, (0.0, 0))
            delay = min(60.0, self.poll_interval * 2 ** (attempts + 1))
            self._retry_at[sid] = (time.monotonic() + delay, attempts + 1)
            log.exception(
                "worker %s: session %s failed; retrying in %.1f s", self.owner, sid, delay
            )

    async def _run_session(self, wakeup: Wakeup) -> None:
        sid = wakeup.session_id
        events = await self.store.read(sid)
        created = events[0].payload if events else None
        runner = Runner.from_created(created) if isinstance(created, SessionCreated) else None
        if runner is None:
            # Not a runtime session (or gone): nothing here can run it.
            await self.store.clear_runnable(wakeup)
            return
        try:
            agent = self._agent(runner)
        except UsageError as exc:
            await self._fail(sid, f"the worker cannot build this session's runner: {exc}")
            await self.store.clear_runnable(wakeup)
            return
        ended = False
        try:
            result = await agent.run(None, session_id=sid, end_session=runner.end_after_turn)
            self.turns_run += 1
            ended = result.state in TERMINAL_STATES
        except UsageError:
            pass  # the session has ended: nothing to run
        if runner.end_after_turn and not ended:
            await self._settle(sid)  # e.g. a turn closed by someone else: end it here
        await self.store.clear_runnable(wakeup)

    def _agent(self, runner: Runner) -> Agent:
        key = runner.key()
        agent = self._agents.get(key)
        if agent is not None:
            self._agents.move_to_end(key)
            return agent
        model, tools = build_runner(runner.model, runner.tools)
        agent = Agent(
            model,
            tools=tools,
            limits=runner.build_limits(),
            store=self.store,
            on_event=self.on_event,
            lease_ttl=self.lease_ttl,
            watch_interval=self.watch_interval,
        )
        self._agents[key] = agent
        while len(self._agents) > AGENTS:
            # An idle agent holds no task (its watcher stops with nothing to watch); one
            # still running a session keeps it until its run returns.
            self._agents.popitem(last=False)
        return agent

    async def _under_lease(self, session_id: str) -> SessionLog | None:
        try:
            lease = await self.store.claim(session_id, self.owner, self.lease_ttl)
        except LeaseHeld:
            return None
        session_log = await SessionLog.load(self.store, session_id, observers=self._observers())
        session_log.lease = lease
        return session_log

    def _observers(self) -> tuple[Callable[[Event], None], ...]:
        return (self.on_event,) if self.on_event else ()

    async def _settle(self, session_id: str) -> None:
        """End a session with `end_after_turn` whose turn stopped for good."""
        session_log = await self._under_lease(session_id)
        if session_log is None:
            return
        try:
            f = session_log.folder
            if f.terminal or f.turn_open or f.stop_reason in NOT_FINAL or f.stop_reason is None:
                return
            outcome = "failed" if f.stop_reason in FAILED_STOPS else "completed"
            await session_log.append(SessionEnded(outcome, f.stop_detail or f.stop_reason))
        finally:
            await self._release(session_log)

    async def _fail(self, session_id: str, detail: str) -> None:
        """End a session no worker can run, saying why, rather than retry it forever."""
        session_log = await self._under_lease(session_id)
        if session_log is None:
            return
        try:
            f = session_log.folder
            if f.terminal:
                return
            if f.turn_open:
                for call in f.view().open_calls:
                    await session_log.append(
                        ToolFinished(call.id, "canceled", f"The call never ran: {detail}")
                    )
                await session_log.append(TurnEnded("error", detail))
            await session_log.append(SessionEnded("failed", detail))
            log.warning("session %s failed: %s", session_id, detail)
        finally:
            await self._release(session_log)

    async def _release(self, session_log: SessionLog) -> None:
        if session_log.lease is not None:
            await asyncio.shield(self.store.release(session_log.lease))
            session_log.lease = None
