"""`Agent`: the library face. Creates or continues a session, runs its turn, and reports.

Owns choosing the store, starting sessions, and in-process interrupt and cancel. The loop
itself is `loop.run_turn`; what a session is doing is always read from its fold.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tether.errors import SessionNotFound, UsageError
from tether.events import CancelRequested, SessionCreated, UserMessage
from tether.limits import Limits, StopCondition
from tether.loop import TurnContext, close_canceled_turn, run_turn
from tether.messages import Message, Usage, user
from tether.providers.base import DeltaObserver, Model
from tether.session_log import Clock, EventObserver, SessionLog, new_session_id
from tether.state import SessionView
from tether.store.base import DEFAULT_STORE_URL, Store, open_store
from tether.tools.base import Tool, Toolbox


@dataclass(frozen=True, slots=True)
class RunResult:
    session_id: str
    output: str
    stop_reason: str
    stop_detail: str | None
    state: str
    usage: Usage
    cost_usd: float | None
    steps: int

    @staticmethod
    def from_view(view: SessionView) -> RunResult:
        return RunResult(
            session_id=view.session_id,
            output=view.last_output,
            stop_reason=view.stop_reason or "",
            stop_detail=view.stop_detail,
            state=view.state,
            usage=view.usage,
            cost_usd=view.cost_usd,
            steps=view.turn_steps,
        )


def resolve_model(model: Model | str) -> Model:
    if not isinstance(model, str):
        return model
    if model.startswith("scripted:"):
        from tether.demo import demo_model

        if model == "scripted:demo":
            return demo_model()
        raise UsageError(f"unknown scripted model {model!r}: the only named one is scripted:demo")
    try:
        from tether.providers.registry import model_from_string
    except ImportError as exc:
        raise UsageError(f"unknown model {model!r}: no provider registry is installed") from exc
    return model_from_string(model)


class Agent:
    """`Agent(model, tools=..., system=..., limits=..., store=..., stop_when=...)`.

    `store` is a `Store` or a store URL; by default `TETHER_STORE` or `sqlite:///tether.db`
    in the working directory, opened at the first run."""

    def __init__(
        self,
        model: Model | str,
        *,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        system: str | None = None,
        limits: Limits | None = None,
        store: Store | str | None = None,
        stop_when: StopCondition | None = None,
        on_event: EventObserver | None = None,
        on_delta: DeltaObserver | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.model = resolve_model(model)
        self.toolbox = Toolbox(tools)
        self.system = system
        self.limits = limits or Limits()
        self._store_arg = store
        self._store: Store | None = (
            store if store is not None and not isinstance(store, str) else None
        )
        self.stop_when = stop_when
        self.on_event = on_event
        self.on_delta = on_delta
        self.clock = clock
        self._running: dict[str, tuple[asyncio.Task[None], TurnContext]] = {}

    @property
    def store(self) -> Store:
        if self._store is None:
            url = self._store_arg if isinstance(self._store_arg, str) else None
            self._store = open_store(url or os.environ.get("TETHER_STORE") or DEFAULT_STORE_URL)
        return self._store

    async def _open_log(self, session_id: str | None) -> SessionLog:
        observers = (self.on_event,) if self.on_event else ()
        if session_id is None:
            log = SessionLog(self.store, new_session_id(), clock=self.clock, observers=observers)
            await log.append(
                SessionCreated(
                    model=self.model.name,
                    system=self.system,
                    tools={t.name: t.schema_hash for t in self.toolbox},
                    limits=self.limits.to_json(),
                )
            )
            return log
        log = await SessionLog.load(self.store, session_id, clock=self.clock, observers=observers)
        if log.folder.last_seq == 0:
            raise SessionNotFound(session_id)
        return log

    async def run(self, task: str | Message | None, *, session_id: str | None = None) -> RunResult:
        """Run one turn: a new session for `task`, or `task` sent to session `session_id`.
        With `task=None`, continue the session's open turn (after an approval or a crash)."""
        if session_id in self._running:
            raise UsageError(f"session {session_id} is already running in this agent")
        log = await self._open_log(session_id)
        if log.folder.terminal:
            raise UsageError(
                f"session {log.session_id} has ended ({log.folder.state}); start a new one"
            )
        if task is not None:
            await log.append(UserMessage(task if isinstance(task, Message) else user(task)))
        ctx = TurnContext(
            log,
            self.model,
            self.toolbox,
            self.limits,
            self.stop_when,
            self.on_delta,
            started_at=time.monotonic(),
        )
        inner = asyncio.create_task(run_turn(ctx))
        self._running[log.session_id] = (inner, ctx)
        try:
            await self._await_turn(inner, ctx)
        finally:
            self._running.pop(log.session_id, None)
        return RunResult.from_view(log.folder.view())

    async def _await_turn(self, inner: asyncio.Task[None], ctx: TurnContext) -> None:
        deadline = self.limits.max_seconds
        try:
            done, _ = await asyncio.wait({inner}, timeout=deadline)
        except asyncio.CancelledError:
            # Our caller was cancelled: let the turn close itself, then propagate.
            inner.cancel()
            await asyncio.gather(inner, return_exceptions=True)
            raise
        if not done:
            ctx.stop_cause = "time_limit"
            inner.cancel()
        try:
            await inner
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            # Cancelled by interrupt(), cancel() or the time limit: the turn is closed.

    def run_sync(self, task: str | Message | None, *, session_id: str | None = None) -> RunResult:
        return asyncio.run(self.run(task, session_id=session_id))

    async def interrupt(self, session_id: str) -> None:
        """End the running turn `interrupted`; the session stays usable."""
        await self._stop(session_id, "turn")

    async def cancel(self, session_id: str) -> None:
        """End the session `canceled` (terminal). Cancelling an ended session is a no-op."""
        await self._stop(session_id, "session")

    async def _stop(self, session_id: str, scope: str) -> None:
        running = self._running.get(session_id)
        if running is not None:
            inner, ctx = running
            await ctx.log.append(CancelRequested(scope))
            ctx.stop_cause = "interrupted"
            inner.cancel()
            await asyncio.gather(inner, return_exceptions=True)
            return
        log = await self._open_log(session_id)
        if log.folder.terminal or (scope == "turn" and not log.folder.turn_open):
            return
        await log.append(CancelRequested(scope))
        await close_canceled_turn(log, "interrupted", end_session=scope == "session")

    async def view(self, session_id: str) -> SessionView:
        log = await self._open_log(session_id)
        return log.folder.view()

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
