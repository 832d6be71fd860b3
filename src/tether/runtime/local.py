"""`LocalRuntime`: the Runtime protocol in-process, over a store, with a pool of workers.

Owns the operations' checks (spec, capabilities, tenant, deadlines) and wiring the pieces:
creation and folds (`sessions`), running (`worker`), streams (`hub`), steering (`control`).
`tether serve` is this runtime behind HTTP; `for_tenant` scopes it to one tenant.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Unpack

from tether.bounded import ByteLRU
from tether.errors import Conflict, IdempotencyConflict, SessionNotFound, UsageError
from tether.events import FORK_KINDS, Event, ForkKind, SessionCreated, format_time
from tether.fold import Folder
from tether.messages import JSONObject
from tether.providers.base import Delta, Model
from tether.providers.endpoints import EndpointPolicy
from tether.published import Published
from tether.runtime.base import (
    AgentSpec,
    Capabilities,
    CapabilityRefused,
    InvalidForkPoint,
    ListOptions,
    SessionPage,
    SessionRef,
    SessionSpec,
    SessionStatus,
    SpecChanges,
    StateConflict,
    Waiting,
    events_only,
    validate_capabilities,
)
from tether.runtime.hub import EventHub, stream_events
from tether.runtime.listing import list_sessions
from tether.runtime.mcp_servers import McpServers
from tether.runtime.quotas import Admission, Quota, capped
from tether.runtime.sessions import (
    PAGE,
    Views,
    build_runner,
    create_session,
    created_event,
    fork_fingerprint,
    forked_again,
    forked_spec,
    session_id_for,
    subagent_tools,
)
from tether.runtime.worker import Worker
from tether.scheduler import GatewayConfig, GatewayFigures
from tether.session import control, snapshots
from tether.session.fork import ForkChanges, Forked, ForkPoint, OpenCalls, config_of, fork
from tether.session.tail import Tail
from tether.settings import check_settings
from tether.store.base import Store
from tether.store.open import open_store
from tether.tools.base import Tool, Toolbox

BUILT = 256  # resolved (model, tools) pairs kept for starting sessions


THREAD_FOLDS = 64  # sub-agent folds kept for transcripts, at most...
THREAD_FOLDS_BYTES = 16 << 20  # ...and about this many bytes of their transcripts


def _check_key(key: str | None) -> None:
    if key is not None and not key.strip():
        raise UsageError("an idempotency key must not be empty")


@dataclass(eq=False)
class _Core:
    """What every tenant's view of one runtime shares."""

    store: Store
    owns_store: bool
    hub: EventHub
    views: Views
    worker: Worker | None
    admission: Admission
    worker_task: asyncio.Task[None] | None = None
    built: OrderedDict[tuple[str, tuple[str, ...]], tuple[Model, list[Tool]]] = field(
        default_factory=OrderedDict
    )
    started: int = 0
    closed: bool = False
    code: Published | None = None
    endpoints: EndpointPolicy | None = None
    mcp: McpServers = field(default_factory=lambda: McpServers(()))
    # Sub-agent threads' folds read for their transcripts, by (session, thread): the next
    # page reads only the events since (`folded`).
    thread_folds: ByteLRU[tuple[str, str], Folder] = field(
        default_factory=lambda: ByteLRU(THREAD_FOLDS, THREAD_FOLDS_BYTES)
    )


class LocalRuntime:
    """`LocalRuntime(store, workers=8)`: `store` is a `Store` or a store URL; `workers` is
    how many sessions this process runs at once (0: none, `tether worker` processes run
    them). `lease_ttl`: how soon another worker takes over a session whose worker died.
    `allow_code`: fnmatch patterns of the `MODULE:NAME` a spec may name (a `python:` model,
    tools), for callers that are not trusted to import code: then only what the operator
    published loads (`tether.published`); None allows all. `allow_check`: the patterns of
    the experiment checks a server may run (only with `allow_code`). `gateway`:
    the limits of the model gateway each backend gets in this process (default
    `GatewayConfig()`: 16 requests at once, rates learned from the backend's headers).
    `park_after`: a session whose model call would wait that many seconds or more for a
    spent budget or an open circuit is parked rather than held in its slot (`Worker`).
    `endpoints`: the model URLs a spec may make this process call (`EndpointPolicy`), for
    callers that are not trusted to choose them; None allows any. `quotas`: each tenant's
    `Quota`, for what no request of the tenant brings (its sub-agent threads, its spending,
    counted for the sessions this process's workers run); None: the quota of the tenant's
    last `for_tenant`. `mcp`: the operator's MCP servers a spec may name (`spec.mcp`), run
    by this process's workers (None: a spec may name none)."""

    def __init__(
        self,
        store: Store | str,
        *,
        workers: int = 8,
        poll_interval: float = 0.1,
        lease_ttl: float = 30.0,
        watch_interval: float = 0.2,
        views: int = 1_000,
        allow_code: Sequence[str] | None = None,
        allow_check: Sequence[str] = (),
        gateway: GatewayConfig | None = None,
        park_after: float | None = 10.0,
        endpoints: EndpointPolicy | None = None,
        quotas: Callable[[str], Quota] | None = None,
        mcp: McpServers | None = None,
    ) -> None:
        owns = isinstance(store, str)
        the_store = open_store(store) if isinstance(store, str) else store
        # One tail of the store for the process: the hub's streams and the worker's runs
        # (lease renewals, cancels from elsewhere) follow it, one `last_seqs` per round.
        tail = Tail(the_store)
        hub = EventHub(the_store, interval=poll_interval, tail=tail)
        code = None if allow_code is None else Published(tuple(allow_code), tuple(allow_check))
        folds = Views(the_store, views)
        admission = Admission(the_store, quotas=quotas)
        worker = None
        if workers > 0:
            worker = Worker(
                the_store,
                concurrency=workers,
                poll_interval=poll_interval,
                lease_ttl=lease_ttl,
                watch_interval=watch_interval,
                on_event=hub.committed,
                gateway=gateway,
                park_after=park_after,
                on_delta=hub.publish_delta,
                endpoints=endpoints,
                code=code,
                tail=tail,
                quotas=admission,
                mcp=mcp,
            )
        self._core = _Core(the_store, owns, hub, folds, worker, admission)
        self._core.code = code
        self._core.endpoints = endpoints
        self._core.mcp = mcp or McpServers(())
        self.tenant: str | None = None
        self.quota = Quota()

    def for_tenant(self, tenant: str, quota: Quota | None = None) -> LocalRuntime:
        """The same runtime, seeing and touching only `tenant`'s sessions, within `quota`
        (counted across every view of this runtime for that tenant)."""
        scoped = object.__new__(LocalRuntime)
        scoped._core = self._core
        scoped.tenant = tenant
        scoped.quota = quota or Quota()
        self._core.admission.quotas[tenant] = scoped.quota
        return scoped

    @property
    def store(self) -> Store:
        return self._core.store

    @property
    def code(self) -> Published | None:
        """What a spec may name here (None: any code, for a library's own callers)."""
        return self._core.code

    @property
    def mcp_names(self) -> list[str]:
        """The MCP servers a spec of this tenant may name here."""
        return self._core.mcp.names(self.tenant)

    @property
    def endpoints(self) -> EndpointPolicy | None:
        """The model URLs a spec may make this process call (None: any)."""
        return self._core.endpoints

    @property
    def worker(self) -> Worker | None:
        return self._core.worker

    @property
    def hub(self) -> EventHub:
        return self._core.hub

    async def __aenter__(self) -> LocalRuntime:
        self._ensure_running()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _ensure_running(self) -> None:
        core = self._core
        if core.closed:
            raise UsageError("this runtime is closed")
        if core.worker is not None and (core.worker_task is None or core.worker_task.done()):
            core.worker_task = asyncio.get_running_loop().create_task(
                core.worker.run(), name="tether-worker"
            )

    async def capabilities(self, *, timeout: float | None = None) -> Capabilities:
        return Capabilities(
            resume_after_restart=not self._core.store.url.startswith("memory:"),
            cancel=True,
            interrupt=True,
            approvals=True,
            inputs=True,
            event_stream=True,
            live_deltas=self._core.worker is not None,
            tenants=True,
            fork=True,
        )

    async def start(
        self,
        spec: SessionSpec,
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> SessionRef:
        _check_key(idempotency_key)
        self._ensure_running()
        spec, created = await self._prepare(spec, self.tenant, idempotency_key)
        async with (
            asyncio.timeout(timeout),
            self._core.admission.start(self.tenant, self.quota) as admit,
        ):
            sid = await create_session(
                self._core.store,
                spec,
                created,
                self.tenant,
                idempotency_key,
                time.time(),
                views=self._core.views,
                admit=admit,
            )
        self._core.started += 1
        if self._core.worker is not None:
            self._core.worker.wake()
        return SessionRef(sid)

    async def _prepare(
        self, spec: SessionSpec, tenant: str | None, key: str | None
    ) -> tuple[SessionSpec, SessionCreated]:
        """Check `spec` as every session this runtime makes is checked (a start's, a
        fork's), and say what its first event records: the spec within the tenant's quota's
        caps, and its `session.created`."""
        spec.check()
        validate_capabilities(await self.capabilities(), spec.requires)
        self._check_code(spec)
        self._core.mcp.check(spec.mcp, self.tenant)  # names only: the servers start in a worker
        spec = capped(spec, self.quota)
        model, tools = self._build(spec.model, spec.tools)
        self._check_endpoint(spec.model, model)
        # Every sub-agent's model is resolved and checked as the main one is, here and
        # again by the worker; the tree is built once to refuse what could not run.
        offered = subagent_tools(spec.agents, self._build_agent, spec.settings)
        # Two tools of one name, or settings the model cannot honour, are refused now.
        check_settings(spec.settings, model, Toolbox([*tools, *offered]).specs)
        return spec, created_event(spec, model, [*tools, *offered], tenant, key)

    async def fork(
        self,
        ref: SessionRef,
        *,
        at: ForkPoint | None = None,
        changes: SpecChanges | None = None,
        message: str | None = None,
        kind: ForkKind = "fork",
        open_calls: OpenCalls = "refuse",
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Forked:
        """`Runtime.fork` over `session.fork.fork`: the child's spec is the parent's recorded
        one with `changes` (`forked_spec`), checked as a start's is; its `metadata.runner`
        lets any worker run it. A child with a turn to run counts against the tenant's
        running sessions (`Admission.fork`) and is marked runnable."""
        changes = changes or SpecChanges()
        point = at or ForkPoint()
        if message is not None and not message.strip():
            raise UsageError("a fork's message must not be empty (leave it out for none)")
        if kind not in FORK_KINDS or open_calls not in ("refuse", "cancel"):
            raise UsageError(
                f"kind must be one of {', '.join(FORK_KINDS)} and open_calls refuse or cancel, "
                f"not {kind!r} and {open_calls!r}"
            )
        _check_key(idempotency_key)
        self._ensure_running()
        store = self._core.store
        async with asyncio.timeout(timeout):
            row = await store.catalog_row(ref.session_id)
            if row is None or (self.tenant is not None and row.tenant != self.tenant):
                raise SessionNotFound(ref.session_id)
            digest = fork_fingerprint(ref.session_id, point, changes, message, kind, open_calls)
            child = (
                None if idempotency_key is None else session_id_for(self.tenant, idempotency_key)
            )
            if child is not None and idempotency_key is not None and await store.last_seq(child):
                # A retry: the same child, whatever the parent has done since.
                forked = await forked_again(store, child, idempotency_key, digest)
            else:
                forked = await self._fork(ref, row.task, point, changes, message, kind,
                                          open_calls, child, idempotency_key, digest)  # fmt: skip
            if forked.state != "idle":
                await store.mark_runnable(forked.session_id)
        if forked.state != "idle" and self._core.worker is not None:
            self._core.worker.wake()
        return forked

    async def _fork(
        self,
        ref: SessionRef,
        task: str,
        point: ForkPoint,
        changes: SpecChanges,
        message: str | None,
        kind: ForkKind,
        open_calls: OpenCalls,
        child: str | None,
        key: str | None,
        digest: str,
    ) -> Forked:
        """The fork itself: the child's spec checked, its configuration, the store's fork."""
        store = self._core.store
        config = await config_of(store, ref.session_id)
        spec = forked_spec(ref.session_id, config, changes, message or task or "(fork)")
        tenant = config.metadata.get("tenant")  # the parent's, the child's too
        _, created = await self._prepare(spec, tenant if isinstance(tenant, str) else None, None)
        # The child's metadata is what its spec records: a key of the parent's it lacks goes.
        metadata: JSONObject = {k: None for k in config.metadata if k not in created.metadata}
        metadata.update(created.metadata)
        if key is not None:
            metadata["idempotency"] = {"key": key, "fingerprint": digest}

        async def admit(state: str) -> None:
            if state != "idle":  # born with a turn to run: one more running session
                await self._core.admission.fork(self.tenant, self.quota)

        try:
            return await fork(
                store,
                ref.session_id,
                point,
                changes=ForkChanges(
                    created.model, created.system, created.tools, created.limits, metadata
                ),
                message=message,
                kind=kind,
                open_calls=open_calls,
                tenant=self.tenant,
                session_id=child,
                admit=admit,
            )
        except SessionNotFound:
            raise SessionNotFound(ref.session_id) from None
        except Conflict:
            if child is None or key is None:
                raise
            return await forked_again(store, child, key, digest)  # the same fork, just made
        except UsageError as exc:  # the point is not one the parent has, or not a commit point
            raise InvalidForkPoint(str(exc)) from None

    def _check_code(self, spec: SessionSpec) -> None:
        """Refuse, before importing any, a `python:` model or tools, the session's or any
        sub-agent's, that the operator did not allow."""
        if self._core.code is not None:
            self._core.code.check_names(
                [spec.model, *(a.model for a in spec.agents.values())],
                [*spec.tools, *(t for a in spec.agents.values() for t in a.tools)],
            )

    def _check_endpoint(self, model_spec: str, model: Model) -> None:
        """Refuse a model that would call a URL the operator did not allow."""
        policy = self._core.endpoints
        if policy is None:
            return
        try:
            policy.check_model(model)
        except UsageError as exc:
            raise CapabilityRefused(f"model {model_spec[:200]!r}: {exc}") from None

    def _build(self, model: str, tools: tuple[str, ...]) -> tuple[Model, list[Tool]]:
        key = (model, tools)
        built = self._core.built.get(key)
        if built is None:
            built = build_runner(model, tools, code=self._core.code)
            self._core.built[key] = built
            while len(self._core.built) > BUILT:
                self._core.built.popitem(last=False)
        return built

    def _build_agent(self, name: str, agent: AgentSpec) -> tuple[Model, list[Tool]]:
        """A sub-agent's model and tools, its model checked exactly as the session's is."""
        model, tools = self._build(agent.model, agent.tools)
        self._check_endpoint(agent.model, model)  # `subagent_tools` names the sub-agent
        return model, tools

    async def _folder(self, ref: SessionRef) -> Folder:
        """The session's current fold, if it exists and belongs to this tenant."""
        folder = await self._core.views.get(ref.session_id)
        if folder.last_seq == 0 or (
            self.tenant is not None and folder.metadata.get("tenant") != self.tenant
        ):
            raise SessionNotFound(ref.session_id)
        return folder

    async def folded(self, ref: SessionRef, thread: str = "") -> Folder | None:
        """The fold of one thread of the tenant's session (`SessionNotFound` for another
        tenant's): the main thread's is the one polls keep (read it, never change it); a
        sub-agent's is kept between reads, first taken from the main snapshot when the thread
        started after it (`snapshots.thread_start`, as a worker's `load_branch` does), then
        brought up to date page by page. None: no such thread."""
        main = await self._folder(ref)
        if not thread:
            return main
        if thread not in main.thread_nodes:
            return None
        key = (ref.session_id, thread)
        folder = (
            self._core.thread_folds.get(key)
            or await snapshots.thread_start(self._core.store, ref.session_id, thread)
            or Folder(thread)
        )
        while True:
            events = await self._core.store.read(ref.session_id, folder.last_seq, limit=PAGE)
            for event in events:
                if event.seq == folder.last_seq + 1:  # a concurrent read may have applied it
                    folder.apply(event)
            if len(events) < PAGE:
                break
        self._core.thread_folds.put(key, folder, folder.transcript_chars + 1_024)
        return folder

    def _known(self, ref: SessionRef) -> control.Known | None:
        """The fold `_folder` just brought up to date, so steering reads no log itself."""
        return self._core.views.known(ref.session_id)

    async def sessions(
        self, limit: int = 50, *, timeout: float | None = None, **options: Unpack[ListOptions]
    ) -> SessionPage:
        """`Runtime.sessions`: a page of this tenant's sessions (every tenant's in a runtime
        not scoped by `for_tenant`), read from the store's catalog."""
        async with asyncio.timeout(timeout):
            return await list_sessions(self._core.store, self.tenant, limit, options)

    async def poll(self, ref: SessionRef, *, timeout: float | None = None) -> SessionStatus:
        async with asyncio.timeout(timeout):
            view = (await self._folder(ref)).view()
            waiting = None
            if view.state == "waiting_model":
                waiting = self._waiting(ref.session_id) or await self._parked(ref.session_id)
        return SessionStatus(view, waiting)

    async def _parked(self, session_id: str) -> Waiting | None:
        """A session parked by a worker's gateway (any process's): until when."""
        queued = await self._core.store.queued(session_id)
        if queued is None or queued.reason != "parked":
            return None
        until = format_time(queued.not_before)
        return Waiting(
            "parked", f"parked: the model's backend cannot take the call until {until}", until
        )

    def _waiting(self, session_id: str) -> Waiting | None:
        """What the session waits for at a gateway of this process (None when another
        process runs it, or its call is not at a gateway yet)."""
        worker = self._core.worker
        status = None if worker is None else worker.gateways.status(session_id)
        if status is None:
            return None
        until = (
            None if status.until is None else format_time(time.time() + status.until - status.now)
        )
        return Waiting(status.kind, status.reason, until, status.attempt, status.error)

    def figures(self) -> list[GatewayFigures]:
        """The figures of this process's model gateways, one per backend used so far."""
        worker = self._core.worker
        return [] if worker is None else worker.gateways.figures()

    async def cancel(self, ref: SessionRef, *, timeout: float | None = None) -> None:
        await self.stop(ref, "session", timeout=timeout)

    async def interrupt(self, ref: SessionRef, *, timeout: float | None = None) -> None:
        await self.stop(ref, "turn", timeout=timeout)

    async def stop(
        self,
        ref: SessionRef,
        scope: str,
        reason: str | None = None,
        *,
        timeout: float | None = None,
    ) -> str:
        """`cancel` (scope "session") or `interrupt` (scope "turn") with a reason recorded
        in `cancel.requested`; says what was done."""
        async with asyncio.timeout(timeout):
            await self._folder(ref)
            done = await control.request_stop(
                self._core.store, ref.session_id, scope, reason, known=self._known(ref)
            )
        self._core.hub.poke(ref.session_id)
        return done

    async def send(
        self,
        ref: SessionRef,
        message: str,
        *,
        timeout: float | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        await self.deliver(ref, message, timeout=timeout, idempotency_key=idempotency_key)

    async def deliver(
        self,
        ref: SessionRef,
        message: str,
        *,
        timeout: float | None = None,
        idempotency_key: str | None = None,
    ) -> bool:
        """`send`, saying whether the message was added (False: its idempotency key had
        sent it already)."""
        if not message.strip():
            raise UsageError("a message must not be empty")
        async with asyncio.timeout(timeout):
            folder = await self._folder(ref)
            admit = await self._core.admission.turn(self.tenant, self.quota, folder)
            try:
                sent = await control.send_message(
                    self._core.store,
                    ref.session_id,
                    message,
                    idempotency_key,
                    known=self._known(ref),
                    admit=admit,
                )
            except IdempotencyConflict:
                raise
            except UsageError as exc:  # the session has ended
                raise StateConflict(str(exc)) from exc
        self._woken(ref)
        return sent

    async def decide(
        self,
        ref: SessionRef,
        call_id: str,
        allow: bool,
        reason: str | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        async with asyncio.timeout(timeout):
            folder = await self._folder(ref)
            if folder.terminal:
                raise StateConflict(f"session {ref.session_id} has ended ({folder.state})")
            try:
                await control.decide(
                    self._core.store,
                    ref.session_id,
                    call_id,
                    allow,
                    reason,
                    known=self._known(ref),
                )
            except UsageError as exc:  # no such call waits for a decision
                raise StateConflict(str(exc)) from exc
        self._woken(ref)

    async def answer(
        self,
        ref: SessionRef,
        call_id: str,
        data: JSONObject | None = None,
        action: str = "accept",
        *,
        timeout: float | None = None,
    ) -> None:
        async with asyncio.timeout(timeout):
            folder = await self._folder(ref)
            if folder.terminal:
                raise StateConflict(f"session {ref.session_id} has ended ({folder.state})")
            try:
                await control.answer(
                    self._core.store, ref.session_id, call_id, data, action, known=self._known(ref)
                )
            except UsageError as exc:  # no such call waits, or the data does not fit
                raise StateConflict(str(exc)) from exc
        self._woken(ref)

    def _woken(self, ref: SessionRef) -> None:
        self._core.hub.poke(ref.session_id)
        if self._core.worker is not None:
            self._core.worker.wake()

    def events(
        self, ref: SessionRef, after_seq: int = 0, *, timeout: float | None = None
    ) -> AsyncIterator[Event]:
        return events_only(self._stream(ref, after_seq, timeout, deltas=False))

    def live(
        self, ref: SessionRef, after_seq: int = 0, *, timeout: float | None = None
    ) -> AsyncIterator[Event | Delta]:
        """`events`, and between them the model's streamed output (`Delta`) as the workers
        of this process produce it: live only, never stored or replayed, so a subscriber
        sees the deltas produced while it listens."""
        return self._stream(ref, after_seq, timeout, deltas=True)

    async def _stream(
        self, ref: SessionRef, after_seq: int, timeout: float | None, *, deltas: bool
    ) -> AsyncGenerator[Event | Delta, None]:
        if after_seq < 0:
            raise UsageError(f"after_seq must be 0 or more, not {after_seq}")
        # The deadline bounds the waits inside the stream, never the caller's own work
        # between events (a timeout scope must not span a yield).
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        async with asyncio.timeout_at(deadline):
            await self._folder(ref)

        async def is_terminal() -> tuple[bool, int]:
            folder = await self._folder(ref)
            return folder.terminal, folder.last_seq

        stream: AsyncGenerator[Event | Delta, None] = stream_events(
            self._core.hub, ref.session_id, after_seq, is_terminal, deltas=deltas
        )
        try:
            while True:
                async with asyncio.timeout_at(deadline):
                    try:
                        event = await anext(stream)
                    except StopAsyncIteration:
                        return
                yield event
        finally:
            await stream.aclose()

    async def close(self) -> None:
        """Stop the workers of this process and the streams, and close the store if this
        runtime opened it. A running turn is handed over, not closed: it stays open, and
        whoever runs the session next (another process, or this one started again on the
        same store) goes on with it."""
        core = self._core
        if core.closed:
            return
        core.closed = True
        if core.worker_task is not None:
            core.worker_task.cancel()
            await asyncio.gather(core.worker_task, return_exceptions=True)
        if core.worker is not None:
            await core.worker.stop(drain=0.0)
            await core.worker.gateways.aclose()
        await core.hub.close()
        await core.hub.tail.close()  # the worker's runs and the hub have stopped following
        if core.owns_store:
            await core.store.close()
