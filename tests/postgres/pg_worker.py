"""A bare worker process for the PostgreSQL benchmark (`bench/bench_postgres.py`): claims
runnable sessions (`take_work`: SKIP LOCKED, poisoned ones parked) and runs each turn with
`run_session(lease=)`, as the worker does, without the runtime's runner metadata. The chaos test runs the real
`tether worker` instead.

Run as `python -m tests.postgres.pg_worker URL JOURNAL [--concurrency N] [--ttl S]`. Its model
is scripted (two `write` calls, then an answer); a session whose task says "poison" kills
its worker at every model call. Every accepted leased append and every refused one is
journalled (`ok SID GEN FIRST LAST`, `refused SID GEN`), for looking into a run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
from collections.abc import Sequence
from typing import Any

from tether.context import make_context
from tether.errors import LeaseHeld, LeaseLost, UsageError
from tether.events import Event, SessionCreated, UserMessage
from tether.fold import Folder
from tether.limits import Limits
from tether.loop import Engine
from tether.messages import Message, user
from tether.runtime.claims import take_work
from tether.session.lease import worker_id
from tether.session.log import SessionLog, new_session_id
from tether.session.run import Runs, run_session
from tether.store.base import SUSPECT_CLAIMS, Lease
from tether.store.postgres import Claimed, PostgresStore
from tether.testing import Delay, ScriptedModel, call
from tether.tools import Toolbox, ToolContext, tool


class JournalledStore(PostgresStore):
    """Writes down the outcome of every append made under a lease."""

    def __init__(self, url: str, journal: str) -> None:
        super().__init__(url, pool_size=8)
        self._journal = open(journal, "a", buffering=1)  # noqa: SIM115  (lives with the process)

    async def append(
        self,
        session_id: str,
        events: Sequence[Event],
        expected_seq: int,
        lease: Lease | None = None,
        **catalog: Any,  # the row and the admission, passed on as they came
    ) -> None:
        # Shielded, so the outcome is journalled even when the caller is cancelled (as a
        # zombie's turn is, the moment it finds its lease lost).
        task = asyncio.ensure_future(
            super().append(session_id, events, expected_seq, lease, **catalog)
        )
        if lease is not None:
            first, last = events[0].seq, events[-1].seq
            task.add_done_callback(
                lambda t: self._note(t, f"{session_id} {lease.generation} {first} {last}")
            )
        await asyncio.shield(task)

    def _note(self, task: asyncio.Future[None], what: str) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            self._journal.write(f"ok {what}\n")
        elif isinstance(error, LeaseLost):
            self._journal.write(f"refused {what}\n")


def make_tools(effects_path: str, slow: bool = True) -> list[object]:
    @tool(effect="write")
    async def write(n: int, ctx: ToolContext) -> str:
        """Write one record somewhere outside the log (an effect that must not repeat)."""
        if slow:  # the chaos test wants calls in flight when a worker is killed
            await asyncio.sleep(random.uniform(0.05, 0.4))
        fd = os.open(effects_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{ctx.session_id} {ctx.call_id} {n} {os.getpid()}\n".encode())
        finally:
            os.close(fd)
        return f"wrote {n}"

    return [write]


def first_reply(messages: Sequence[Message]) -> object:
    if messages and "poison" in messages[0].text:
        os.kill(os.getpid(), signal.SIGKILL)  # this session kills whoever runs it
    return call("write", n=1)


async def create_sessions(store: PostgresStore, tasks: Sequence[str]) -> list[str]:
    """Start one session per task as a control-plane writer would (no lease), marked
    runnable for the workers."""
    toolbox = Toolbox(make_tools(os.devnull))
    created = SessionCreated(
        model="scripted",
        system=None,
        tools={t.name: t.schema_hash for t in toolbox},
        limits=Limits().to_json(),
    )
    ids: list[str] = []
    for task in tasks:
        log = SessionLog(store, new_session_id())
        await log.append(created, UserMessage(user(task)))
        await store.mark_runnable(log.session_id)
        ids.append(log.session_id)
    return ids


async def run_one(runs: Runs, engine: Engine, store: PostgresStore, item: Claimed) -> None:
    sid = item.lease.session_id
    try:
        folder = Folder().apply_all(await store.read(sid))
        if folder.terminal or not folder.turn_open:
            # The turn was finished by a worker that died before clearing the mark.
            await store.clear_runnable(item.wakeup)
            await store.release(item.lease)
            return
        log = await SessionLog.load(store, sid)
        await run_session(runs, engine, log, lease=item.lease)
        await store.clear_runnable(item.wakeup)
    except (LeaseLost, LeaseHeld, UsageError):
        pass  # taken over (we were a zombie), or ended meanwhile


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("journal")
    parser.add_argument("--effects", default=os.devnull)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument("--max-claims", type=int, default=3)
    parser.add_argument("--exit-when-idle", type=float, default=0.0)
    parser.add_argument("--fast", action="store_true", help="no delays: for the benchmark")
    args = parser.parse_args(argv)

    store = JournalledStore(args.url, args.journal)
    second = call("write", n=2) if args.fast else Delay(0.02, call("write", n=2))
    model = ScriptedModel([first_reply, second, "done"])  # type: ignore[list-item]
    tools = Toolbox(make_tools(args.effects, slow=not args.fast))
    engine = Engine(model, tools, Limits(), context=make_context(True, model))
    runs = Runs(store, lease_ttl=args.ttl, watch_interval=0.2)
    owner = worker_id()
    news = store.subscribe()
    running: set[asyncio.Task[None]] = set()
    suspects: set[asyncio.Task[None]] = set()  # one at a time, as `Worker` runs them
    idle_since = asyncio.get_running_loop().time()
    try:
        while True:
            free = args.concurrency - len(running)
            got = []
            if free > 0:
                got = await take_work(
                    store,
                    owner,
                    ttl=args.ttl,
                    limit=free,
                    alone=not suspects,
                    max_claims=args.max_claims,
                )
            for item in got:
                task = asyncio.create_task(run_one(runs, engine, store, item))
                running.add(task)
                task.add_done_callback(running.discard)
                if item.claims > SUSPECT_CLAIMS:
                    suspects.add(task)
                    task.add_done_callback(suspects.discard)
            now = asyncio.get_running_loop().time()
            if got or running:
                idle_since = now
            elif args.exit_when_idle and now - idle_since > args.exit_when_idle:
                return 0
            if not got:
                await news.wait(0.1 if running else 0.5)
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        news.close()
        await runs.close()
        await store.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
