"""The worker loop: find sessions with work, run each turn (`session.run.run_session`) with
an `Engine` rebuilt from what `session.created` recorded, and settle what the turn left.

Used in-process by `LocalRuntime` and on its own by `tether worker`, so serving and running
scale apart. Every store hands out work the same way (`Store.claim_runnable`): a session
that is marked, unleased and not deferred, claimed with its lease. Leases keep two workers
off one session; a worker that dies leaves its mark, and another takes the session over once
the lease expires (the recovery rules: `tether.recovery`, docs/architecture.md). A store that
pushes news (PostgreSQL's NOTIFY) wakes the worker at once; polling is the fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from tether.agent import SessionDeltaObserver
from tether.bounded import ByteLRU
from tether.context import make_context
from tether.errors import (
    HandedOver,
    LeaseHeld,
    LeaseLost,
    Parked,
    SessionNotFound,
    StoreError,
    UsageError,
)
from tether.events import Event, parse_time
from tether.fold import Folder
from tether.loop import Engine
from tether.providers.base import Caller, Model
from tether.providers.endpoints import EndpointPolicy
from tether.published import Published
from tether.recovery import closing, threads_of
from tether.runtime.claims import DEFAULT_MAX_CLAIMS, Probation, take_work
from tether.runtime.gateways import Gateways, SessionRouted
from tether.runtime.mcp_servers import McpServers
from tether.runtime.quotas import Admission
from tether.runtime.sessions import Runner, build_runner, subagent_tools
from tether.scheduler import GatewayConfig
from tether.session import blips, control
from tether.session.fork import config_of
from tether.session.lease import holding, worker_id
from tether.session.log import SessionLog
from tether.session.run import Runs, run_session
from tether.session.tail import Tail
from tether.settings import check_settings
from tether.state import TERMINAL_STATES
from tether.store.base import SUSPECT_CLAIMS, Claimed, DeferReason, Lease, News, Store, Wakeup
from tether.telemetry import metrics
from tether.tools.base import Tool, Toolbox

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("tether.worker")

ENGINES = 64  # built engines kept, by model, tools and limits
# ... and the bytes they hold at most, each charged its key twice (the key holds every
# sub-agent's system prompt, which the engine holds again).
ENGINE_BYTES = 32 << 20
# How long one wait on the store's news lasts; it ends early as soon as news comes.
NEWS_SPAN = 5.0
# How long a stopping worker waits for handed-over runs to let their leases go.
HAND_OVER_GRACE = 5.0


class Worker:
    """`concurrency`: sessions run at once. `poll_interval`: how often to look for work
    when nobody said there is some (this process's `wake`, or the store's news). `lease_ttl`:
    how long a session whose worker died waits before another takes it over. `max_claims`:
    how many workers in a row may die while a tool call of a session runs before it is
    ended `failed` as poisoned (`tether worker --poison-after`; None:
    `runtime.claims.DEFAULT_MAX_CLAIMS`). `gateway`: the limits of the
    model gateway each backend gets here (`gateways`); every model call passes it.
    `park_after`: a model call that would wait this long or longer for a spent budget or an
    open circuit is parked: the run stops, the session's slot and lease are let go, and it
    is held off the queue until the wait is over (None: it waits in its slot). `on_delta`:
    the streamed output of the model calls it makes, with their sessions (never stored);
    with it, each session's own model calls stream whenever the model can (`Engine.live`),
    so a watcher attaching mid-call sees the rest of the answer; without it (`tether
    worker`: no watcher can reach the process), they ask for whole answers, which costs
    the worker far less CPU per call (`bench/bench_streaming.py`). A retried call streams
    again after its `model.failed`.
    `endpoints`: the model URLs it may call; a session whose model would call another is
    failed, never run (None: any). `code`: what a session's spec may name (the operator's
    `--allow-code`; a session naming anything else is failed, never run; None: any code).
    `tail`: the process's tail of `store`, shared with its event hub (None: the worker's runs
    make their own). `quotas`: the tenants' quotas of the runtime it runs for, which admit its
    sub-agent threads and count its spending (None: none). `mcp`: the operator's MCP
    servers a session may name (`McpServers`; None: none), stopped when the worker stops."""

    def __init__(
        self,
        store: Store,
        *,
        concurrency: int = 16,
        poll_interval: float = 0.2,
        lease_ttl: float = 30.0,
        watch_interval: float = 0.2,
        on_event: Callable[[Event], None] | None = None,
        max_claims: int | None = None,
        gateway: GatewayConfig | None = None,
        park_after: float | None = 10.0,
        on_delta: SessionDeltaObserver | None = None,
        endpoints: EndpointPolicy | None = None,
        code: Published | None = None,
        tail: Tail | None = None,
        quotas: Admission | None = None,
        mcp: McpServers | None = None,
    ) -> None:
        if concurrency < 1:
            raise UsageError(f"a worker needs concurrency of at least 1, not {concurrency}")
        if max_claims is not None and max_claims < 1:
            raise UsageError(f"max_claims must be at least 1, not {max_claims}")
        if park_after is not None and not park_after > 0:
            raise UsageError(f"park_after must be a positive number of seconds, not {park_after}")
        self.store = store
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self.lease_ttl = lease_ttl
        self.watch_interval = watch_interval
        self.on_event = on_event
        self.on_delta = on_delta
        self.max_claims = max_claims
        self.owner = worker_id()
        self.park_after = park_after
        self.endpoints = endpoints
        self.code = code
        self.quotas = quotas
        self.mcp = mcp
        self._http: httpx.AsyncClient | None = None  # guarded, made at the first model
        self.turns_run = 0
        self.failures = 0
        self.parked = 0
        self._wake = asyncio.Event()
        self._running: dict[str, asyncio.Task[None]] = {}
        self.runs = Runs(store, lease_ttl=lease_ttl, watch_interval=watch_interval, tail=tail)
        self._engines: ByteLRU[str, Engine] = ByteLRU(ENGINES, ENGINE_BYTES)
        self.gateways = Gateways(gateway, park_after=park_after)
        self._attempts: dict[str, int] = {}  # failed runs in a row, by session
        self._suspect: str | None = None  # the suspect running here: one at a time
        self._chores: set[asyncio.Task[None]] = set()  # acquittals under way
        metrics.watch(self)  # its slots, leases and sessions' states, read at a scrape

    @property
    def running(self) -> int:
        return len(self._running)

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Take work until cancelled. The turns it started go on running: `stop` ends them."""
        news = self.store.subscribe()
        async with asyncio.TaskGroup() as group:
            if news is not None:
                group.create_task(self._listen(news), name="tether-worker-news")
            while True:
                self._wake.clear()
                try:
                    await self.dispatch()
                except StoreError as exc:
                    log.warning("worker %s: looking for work failed: %s", self.owner, exc)
                # Polling stays the fallback even with news: a lost notification, or a lease
                # that ran out (which nobody announces), only waits for the next look.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll_interval):
                        await self._wake.wait()

    async def _listen(self, news: News) -> None:
        try:
            while True:
                if await news.wait(NEWS_SPAN):
                    self._wake.set()
        finally:
            news.close()

    async def stop(self, drain: float = 0.0, *, hand_over: bool = True) -> None:
        """Let running turns finish for up to `drain` seconds, then hand the rest over:
        each run stops writing and lets its lease go, its turn left open and its session
        marked, so another worker (or this process, started again) goes on with it (the
        recovery rules of `tether.recovery` settle the calls that were running). With
        `hand_over=False`, their turns close as interrupted instead."""
        tasks = list(self._running.values())
        if tasks and drain > 0:
            await asyncio.wait(tasks, timeout=drain)
        if hand_over:
            await asyncio.gather(
                *(self.runs.stop(sid, "handed_over") for sid in self.runs), return_exceptions=True
            )
            left = [t for t in tasks if not t.done()]
            if left:  # a handed-over run still lets its lease go: give it a moment
                await asyncio.wait(left, timeout=HAND_OVER_GRACE)
        for task in tasks:
            task.cancel()  # what was not in a run yet, or is not handed over
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*self._chores, return_exceptions=True)
        await self.runs.close()
        if self.mcp is not None:
            await self.mcp.aclose()  # after every run: no call is cut off by it
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def dispatch(self) -> int:
        """Claim a session for each free slot and start its run; how many started. The store
        hands out what is marked, unleased and not deferred; those that took down too many
        workers are ended here (`take_work`). A suspect comes by itself, to any worker with
        a free slot that runs no other suspect."""
        free = self.concurrency - len(self._running)
        if free <= 0:
            return 0
        claimed = await take_work(
            self.store,
            self.owner,
            ttl=self.lease_ttl,
            limit=free,
            alone=self._suspect is None,
            max_claims=self.max_claims or DEFAULT_MAX_CLAIMS,
        )
        started = 0
        for item in claimed:
            sid = item.lease.session_id
            if sid in self._running:
                # Our own run of it outlived its lease (this process was paused): that run
                # finds its lease lost and stops; the session waits for the next look.
                await self.store.release(item.lease)
                continue
            if item.claims > SUSPECT_CLAIMS:  # handed out as a suspect, and not forgiven
                self._suspect = sid
            self._start(sid, self._take(item))
            started += 1
        return started

    def _start(self, session_id: str, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work, name=f"run-{session_id}")
        self._running[session_id] = task
        task.add_done_callback(functools.partial(self._done, session_id))

    def _done(self, session_id: str, task: asyncio.Task[None]) -> None:
        self._running.pop(session_id, None)
        if self._suspect == session_id:
            self._suspect = None
        self._wake.set()  # a slot is free
        # `_take` handles what a run raises; anything that still gets out is logged here,
        # once, rather than left for "Task exception was never retrieved".
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("worker %s: session %s: %r", self.owner, session_id, exc, exc_info=exc)

    async def _take(self, item: Claimed) -> None:
        """Run the claimed session's turn. Afterwards its lease is let go; a run the gateway
        parked, or one that failed, is deferred on the queue for its wait or its backoff, so
        no worker takes it sooner."""
        sid = item.lease.session_id
        defer: tuple[float, DeferReason] | None = None
        try:
            watch = (Probation(item.lease, self._acquit),) if item.claims > 1 else ()
            await self._run_session(item.wakeup, item.lease, watch)
            self._attempts.pop(sid, None)
        except Parked as parked:
            self.parked += 1
            log.info("worker %s: session %s %s", self.owner, sid, parked)
            defer = (parked.seconds, "parked")
        except (LeaseHeld, LeaseLost, HandedOver):
            pass  # another worker took it over: the mark is its business
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            defer = (self._failed(sid, exc), "backoff")
        finally:
            # `run_session` releases the lease it is given; this covers the paths that never
            # got there. A second release is harmless: it matches only its own generation.
            await blips.shielded(blips.release(self.store, item.lease), f"session {sid}: a release")
        if defer is not None:
            # The open model request (or the failed step) is asked again, as after a crash,
            # by whichever worker takes the session once the time is up.
            with contextlib.suppress(StoreError):
                await self.store.defer(sid, *defer)
                metrics.parked(defer[1])

    def _failed(self, session_id: str, exc: Exception) -> float:
        """Note a failed run (a store hiccup or a bug); the delay before the next try, longer
        each time. A store that cannot be reached is said in a line; a bug with its trace."""
        self.failures += 1
        attempts = self._attempts.get(session_id, 0)
        delay = min(60.0, self.poll_interval * 2.0 ** (attempts + 1))
        self._attempts[session_id] = attempts + 1
        if isinstance(exc, StoreError):
            log.warning(
                "worker %s: session %s failed: %s; retrying in %.1f s",
                self.owner,
                session_id,
                exc,
                delay,
            )
        else:
            log.error(
                "worker %s: session %s failed; retrying in %.1f s",
                self.owner,
                session_id,
                delay,
                exc_info=exc,
            )
        return delay

    def _acquit(self, lease: Lease) -> None:
        """Forgive a struck session's strikes, in a task the worker owns (`stop` awaits it)."""
        task = asyncio.get_running_loop().create_task(self.store.acquit(lease))
        self._chores.add(task)
        task.add_done_callback(functools.partial(self._chore_done, lease.session_id))

    def _chore_done(self, session_id: str, task: asyncio.Task[None]) -> None:
        self._chores.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning(
                "worker %s: session %s: forgiving it failed: %s", self.owner, session_id, exc
            )

    async def _run_session(
        self,
        wakeup: Wakeup,
        lease: Lease | None = None,
        watch: tuple[Callable[[Event], None], ...] = (),
    ) -> None:
        """Run the session's turn; with `lease`, under that lease (claimed with the wakeup);
        `watch`: more observers of its events."""
        sid = wakeup.session_id
        try:  # session.created (a fork's own session.forked): what to run
            created = await config_of(self.store, sid)
        except SessionNotFound:
            created = None
        runner = None if created is None else Runner.from_created(created)
        if runner is None:
            # Not a runtime session (or gone): nothing here can run it.
            await self.store.clear_runnable(wakeup)
            return
        async with contextlib.AsyncExitStack() as held:  # the MCP servers the run borrows
            try:
                engine = (
                    await self._mcp_engine(runner, held) if runner.mcp else self._engine(runner)
                )
            except UsageError as exc:
                detail = f"the worker cannot build this session's runner: {exc}"
                await self._fail(sid, detail, lease)
                await self.store.clear_runnable(wakeup)
                return
            await self._run_engine(wakeup, lease, watch, runner, engine)

    async def _run_engine(
        self,
        wakeup: Wakeup,
        lease: Lease | None,
        watch: tuple[Callable[[Event], None], ...],
        runner: Runner,
        engine: Engine,
    ) -> None:
        sid = wakeup.session_id
        spends: tuple[Callable[[Event], None], ...] = ()
        quotas, tenant = self.quotas, runner.tenant
        if quotas is not None and tenant is not None and quotas.quota_of(tenant).counts_spend:
            spends = (functools.partial(quotas.observe, tenant),)
        session_log = await SessionLog.load(
            self.store, sid, observers=self._observers() + watch + spends
        )
        if session_log.folder.terminal:
            await self.store.clear_runnable(wakeup)
            return
        await self._resume_place(engine.model, session_log.folder)

        async def settled() -> None:
            # The turn is counted and the mark goes while the lease still holds the session:
            # cleared after the release, the mark stood free for a moment, and another worker
            # claimed the finished session and loaded its log for nothing. A mark made during
            # the run has a newer token and stays; a failure from here on defers the session,
            # which marks it again.
            self.turns_run += 1
            await self.store.clear_runnable(wakeup)

        view = await run_session(
            self.runs,
            engine,
            session_log,
            lease=lease,
            end_session=runner.end_after_turn,
            caller=Caller(sid, runner.tenant or "default", runner.priority),
            on_delta=None if self.on_delta is None else functools.partial(self.on_delta, sid),
            settled=settled,
        )
        if runner.end_after_turn and view.state not in TERMINAL_STATES:
            await self._settle(sid)  # e.g. a turn closed by someone else: end it here

    async def _resume_place(self, model: Model, folder: Folder) -> None:
        """A session whose request is still open (it parked, or its runner stopped, in this
        process or another) keeps its place in its gateway's queue from when that request
        was first asked, as its log says."""
        if not folder.model_request_open or not isinstance(model, SessionRouted):
            return
        asked = await self.store.read(folder.session_id, folder.asked_seq - 1, limit=1)
        if asked:
            model.gateway.resume(folder.session_id, parse_time(asked[0].time))

    def _engine(self, runner: Runner) -> Engine:
        """The engine of a session without MCP servers, kept for the next run of the same
        runner."""
        key = runner.key()
        engine = self._engines.get(key)
        if engine is None:
            engine = self._make_engine(runner, self._runner_tools(runner))
            self._engines.put(key, engine, 2 * len(key) + 4_096)
        return engine

    async def _mcp_engine(self, runner: Runner, held: contextlib.AsyncExitStack) -> Engine:
        """The engine of a session that names MCP servers, built for this run: its MCP
        tools are borrowed (until `held` closes) from its tenant's servers in this worker."""
        if self.mcp is None:
            raise UsageError(
                f"it names the MCP servers {', '.join(runner.mcp)}, and this worker has none "
                "(start it with --mcp FILE, as the server)"
            )
        model, tools = self._runner_tools(runner)
        borrowing = self.mcp.tools(runner.tenant, runner.mcp, taken=[t.name for t in tools])
        mcp_tools = await held.enter_async_context(borrowing)
        return self._make_engine(runner, (model, [*tools, *mcp_tools]))

    def _runner_tools(self, runner: Runner) -> tuple[Model, list[Tool]]:
        """The runner's model and its tools: Python tools and the sub-agents it offers."""
        agents = runner.sub_agents()
        model, tools = self._build(runner.model, runner.tools)
        offered = subagent_tools(
            agents,
            lambda _, agent: self._build(agent.model, agent.tools),
            runner.model_settings(),
        )
        return model, [*tools, *offered]

    def _make_engine(self, runner: Runner, built: tuple[Model, list[Tool]]) -> Engine:
        """The engine of a run, its settings checked against the model and every tool it
        is offered (an MCP server's too: a forced `tool_choice` may name one)."""
        model, tools = built
        settings = runner.model_settings()
        toolbox = Toolbox(tools)
        check_settings(settings, model, toolbox.specs)
        return Engine(
            model,
            toolbox,
            runner.build_limits(),
            context=make_context(True, model),
            max_depth=runner.max_depth,
            max_threads=runner.max_threads,
            thread_gate=self.quotas,
            settings=settings,
            live=self.on_delta is not None,
        )

    def _build(self, model_spec: str, tool_specs: tuple[str, ...]) -> tuple[Model, list[Tool]]:
        """A model string (the session's, or a sub-agent's: each is checked alike) resolved
        with this worker's guarded client, checked against the endpoint policy, and routed
        through its gateway; and its tools."""
        model, tools = build_runner(model_spec, tool_specs, self._model_client(), self.code)
        if self.endpoints is not None:
            self.endpoints.check_model(model)  # a session written by an older or laxer server
        return self.gateways.route(model, model_spec), tools

    def _model_client(self) -> httpx.AsyncClient | None:
        """Under an endpoint policy, one client for every provider model here, whose every
        connection the policy allows (`tether.providers.guard`)."""
        if self.endpoints is None:
            return None
        if self._http is None:
            from tether.providers.guard import guarded_client

            self._http = guarded_client(self.endpoints)
        return self._http

    def _observers(self) -> tuple[Callable[[Event], None], ...]:
        return (self.on_event,) if self.on_event else ()

    async def _settle(self, session_id: str) -> None:
        """End a session with `end_after_turn` whose turn stopped for good."""
        await control.settle(
            self.store, session_id, self.owner, self.lease_ttl, observers=self._observers()
        )

    async def _fail(self, session_id: str, detail: str, lease: Lease | None = None) -> None:
        """End a session no worker can run, saying why, rather than retry it forever."""
        session_log = await SessionLog.load(self.store, session_id, observers=self._observers())
        with contextlib.suppress(LeaseHeld):  # another worker has it: it fails it in turn
            async with holding(session_log, self.owner, self.lease_ttl, lease=lease):
                batch = closing(
                    session_log.folder, "error", detail, calls="abandoned", end="failed"
                )
                if batch:
                    await session_log.append(*batch, threads=threads_of(batch, session_log.thread))
                    log.warning("session %s failed: %s", session_id, detail)
