"""A worker process for the crash tests: starts or resumes one scripted session on a SQLite
file (or a store's URL), and can SIGKILL itself at a chosen commit point.

    python worker.py DB SCRIPT start            # a new session (SCRIPT: a key of SCRIPTS)
    python worker.py DB SCRIPT resume SESSION   # continue it, waiting out a dead lease
    python worker.py DB runtime work SESSION    # a runtime's worker (`runtime.worker`):
        # claims what is runnable, rebuilds each runner from what its log recorded
        # (`metadata.runner`), and exits once it has ended a turn of SESSION
    python worker.py DB runtime fork SESSION    # fork SESSION through the runtime at the end
        # of turn FORK_AFTER_TURN, with kit.FORK_MESSAGE and idempotency key FORK_KEY

Env: CRASH_AT_SEQ=N dies right after this process commits the event with seq N;
CRASH_AFTER_APPENDS=K as its K-th append returns from the store (committed, but not yet
folded in or observed); CRASH_ON_CLAIM=1 as soon as it has claimed a session (leased to it,
nothing of it run yet); CRASH_AFTER_FORK=1 as soon as a fork it made is stored (not yet
marked runnable); CRASH_CALL (see kit) inside a tool.
WORKER_TTL is the lease ttl (default 1.0 s). It prints JSON lines: {"prefix"} first (its
event-id prefix), {"committed"} for each event it appends, then {"result"} (exit 0) or
{"lease_lost"} (exit 3), both with the appends it tried and the ones refused; `work` prints
{"claimed"} before it dies on a claim, and {"worked"} (exit 0) or {"gave_up"} (exit 4: no
turn of SESSION ended in WORK_TIMEOUT seconds) at the end; `fork` prints {"forked"} with the
child's id.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, cast

from crash import kit
from tether import Agent, Event
from tether.errors import LeaseLost
from tether.events import TurnEnded
from tether.runtime import LocalRuntime
from tether.runtime.base import SessionRef
from tether.runtime.worker import Worker
from tether.session.fork import ForkPoint
from tether.session.log import _ID_PREFIX
from tether.store.base import CatalogRow, Claimed, ForkLink, Lease, Store
from tether.store.open import open_store
from tether.testing import ScriptedModel
from tether.tools import Tool

SCRIPTS: dict[str, tuple[Callable[[], ScriptedModel], list[Tool]]] = {
    "crash": (kit.crash_model, kit.CRASH_TOOLS),
    "fan_out": (kit.fan_out_model, kit.fan_out_tools()),
    "zombie_thread": (kit.zombie_model, [kit.hold_write_thread]),
    "zombie_blocking": (kit.zombie_model, [kit.hold_write_blocking]),
    "zombie_fenced": (kit.zombie_model, [kit.hold_write_fenced]),
    "zombie_fenced_thread": (kit.zombie_model, [kit.hold_write_fenced_thread]),
}
TASK = "Read the notes, set the flags, and journal hello and world."
OWN = f"ev_{_ID_PREFIX}_"
WORK_TIMEOUT = 45.0  # within the test's own timeout for the process, so the failure says so


def say(**fact: Any) -> None:
    print(json.dumps(fact), flush=True)


class CountingStore:
    """The real store, counting the appends this process tries and those refused."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.tried = 0
        self.refused = 0
        self.die_after = int(os.environ.get("CRASH_AFTER_APPENDS", "0"))
        self.die_on_claim = os.environ.get("CRASH_ON_CLAIM") == "1"
        self.die_after_fork = os.environ.get("CRASH_AFTER_FORK") == "1"

    async def append(
        self,
        session_id: str,
        events: Sequence[Event],
        expected_seq: int,
        lease: Lease | None = None,
        **catalog: Any,  # the row and the admission, passed on as they came
    ) -> None:
        self.tried += 1
        try:
            await self.inner.append(session_id, events, expected_seq, lease, **catalog)
        except LeaseLost:
            self.refused += 1
            raise
        if self.tried == self.die_after:
            kit.die()

    async def claim_runnable(
        self, owner: str, ttl: float, limit: int = 1, *, alone: bool = True
    ) -> list[Claimed]:
        claimed = await self.inner.claim_runnable(owner, ttl, limit, alone=alone)
        if claimed and self.die_on_claim:
            say(claimed=[c.lease.session_id for c in claimed])
            kit.die()
        return claimed

    async def fork(
        self, session_id: str, link: ForkLink, events: Sequence[Event], *, row: CatalogRow
    ) -> None:
        await self.inner.fork(session_id, link, events, row=row)
        if self.die_after_fork:
            say(forked=session_id)
            kit.die()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def observer() -> Callable[[Event], None]:
    at_seq = int(os.environ.get("CRASH_AT_SEQ", "0"))

    def on_event(event: Event) -> None:
        if not event.id.startswith(OWN):
            return  # folded in from another process
        say(committed=event.id, seq=event.seq, type=event.type)
        if event.seq == at_seq:
            kit.die()

    return on_event


def ttl() -> float:
    return float(os.environ.get("WORKER_TTL", "1.0"))


async def work(store: CountingStore, session_id: str) -> int:
    """Run a runtime's worker until it has ended a turn of `session_id` (and let it go)."""
    say(prefix=_ID_PREFIX, pid=os.getpid())
    observe = observer()
    ended = asyncio.Event()

    def on_event(event: Event) -> None:
        observe(event)
        mine = event.id.startswith(OWN) and event.session_id == session_id
        if mine and not event.thread and isinstance(event.payload, TurnEnded):
            ended.set()

    worker = Worker(
        cast(Store, store),  # the real store, counted
        concurrency=1,
        poll_interval=0.05,
        lease_ttl=ttl(),
        watch_interval=0.1,
        on_event=on_event,
    )
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(ended.wait(), WORK_TIMEOUT)
    except TimeoutError:
        say(gave_up=session_id, failures=worker.failures, turns_run=worker.turns_run)
        return 4
    finally:
        running.cancel()  # takes no more work; the turn's run settles and lets its lease go
        await asyncio.gather(running, return_exceptions=True)
        await worker.stop(drain=30)
        await store.close()
    say(worked=session_id, tried=store.tried, refused=store.refused)
    return 0


async def fork(store: CountingStore, parent: str) -> int:
    """Fork `parent` as a runtime's caller does (`LocalRuntime.fork`, no workers here)."""
    async with LocalRuntime(cast(Store, store), workers=0) as runtime:
        forked = await runtime.fork(
            SessionRef(parent),
            at=ForkPoint(after_turn=int(os.environ["FORK_AFTER_TURN"])),
            message=kit.FORK_MESSAGE,
            idempotency_key=os.environ["FORK_KEY"],
        )
    await store.close()
    say(forked=forked.session_id)
    return 0


async def main(db: str, script: str, command: str, session_id: str | None) -> int:
    store = CountingStore(open_store(db))
    if command in ("work", "fork"):
        assert session_id is not None
        return await (work if command == "work" else fork)(store, session_id)
    model, tools = SCRIPTS[script]
    agent = Agent(
        model(),
        tools=tools,
        store=cast(Store, store),  # the real store, counted
        lease_ttl=ttl(),
        watch_interval=0.1,
        on_event=observer(),
    )
    say(prefix=_ID_PREFIX, pid=os.getpid())
    try:
        if command == "start":
            result = await agent.run(TASK)
        else:
            assert session_id is not None
            result = await agent.resume(session_id, lease_wait=30)
    except LeaseLost as exc:
        say(lease_lost=str(exc), tried=store.tried, refused=store.refused)
        return 3
    finally:
        await agent.close()
    say(
        result={
            "session_id": result.session_id,
            "state": result.state,
            "stop_reason": result.stop_reason,
            "output": result.output,
        },
        tried=store.tried,
        refused=store.refused,
    )
    return 0


if __name__ == "__main__":
    db_path, script_name, cmd = sys.argv[1:4]
    sys.exit(
        asyncio.run(main(db_path, script_name, cmd, sys.argv[4] if len(sys.argv) > 4 else None))
    )
