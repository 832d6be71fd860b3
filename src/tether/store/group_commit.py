"""Group commit for the SQLite store: every batch appended during one turn of the event loop
commits in one transaction.

A commit costs far more than the rows in it, so a thousand sessions stepping at once share a
handful of commits instead of paying for thousands. The first batch of a quiet loop turn
commits at once, and so do the next ones from the same task in that turn, so a lone session
pays no loop turn per commit; a batch from another task in that turn waits for the group.

The contract that makes sharing safe: a body raises a `TetherError` (a conflict, a lost lease)
only before it writes anything, so a refused batch leaves nothing behind and the others still
commit. A database error fails the whole group, and every waiter hears of it; so does a
refusal by `on_commit`, which runs after COMMIT and before any waiter hears anything.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from tether.errors import StoreError, TetherError

T = TypeVar("T")
Body = Callable[[sqlite3.Connection], Any]


@dataclass(slots=True)
class _Pending:
    body: Body
    done: asyncio.Future[Any]


def _nothing(*_: object) -> None:
    return None


class GroupCommit:
    """`on_begin` runs first in every group transaction, under the write lock; `on_commit`
    after its COMMIT, and may still refuse to acknowledge it (by raising); `on_rollback`
    runs after any group is rolled back or refused, so the store can forget what it learned
    in it."""

    def __init__(
        self,
        connection: Callable[[], sqlite3.Connection],
        name: str,
        *,
        on_begin: Callable[[sqlite3.Connection], None] = _nothing,
        on_commit: Callable[[sqlite3.Connection], None] = _nothing,
        on_rollback: Callable[[], None] = _nothing,
    ) -> None:
        self._connection = connection
        self._name = name
        self._on_begin = on_begin
        self._on_commit = on_commit
        self._on_rollback = on_rollback
        self._queue: list[_Pending] = []
        self._scheduled = False
        # The task that committed at once in this loop turn, if one did (see `submit`).
        self._immediate: asyncio.Task[Any] | None = None

    def submit(self, body: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Run `body` in the next group transaction: the future is what it returned, once that
        is committed. A caller cancelled meanwhile does not withdraw it: what was submitted
        lands or fails whole. (A plain function returning a future, not a coroutine: with a
        thousand appends waiting, every coroutine object in the chain counts towards GC.)"""
        loop = asyncio.get_running_loop()
        pending = _Pending(body, loop.create_future())
        self._queue.append(pending)
        if not self._scheduled:
            task = asyncio.current_task()
            if len(self._queue) == 1 and self._immediate in (None, task):
                # Nothing else is writing: commit at once rather than a loop turn later.
                self._flush()
                if self._immediate is None:
                    loop.call_soon(self._cool_down)
                self._immediate = task
            else:
                self._scheduled = True
                loop.call_soon(self._flush)
        return cast("asyncio.Future[T]", pending.done)

    def _cool_down(self) -> None:
        self._immediate = None

    def _flush(self) -> None:
        self._scheduled = False
        batch, self._queue = self._queue, []
        outcomes: list[tuple[bool, Any]] = []  # (refused, the exception or the result)
        try:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._on_begin(conn)
                for pending in batch:
                    outcomes.append(self._one(conn, pending.body))
                conn.execute("COMMIT")
                self._on_commit(conn)
            except BaseException:
                try:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                finally:
                    self._on_rollback()
                raise
        except Exception as exc:  # every waiter must hear how its batch ended, whatever broke
            failure = (
                exc if isinstance(exc, TetherError) else StoreError(f"store {self._name}: {exc}")
            )
            outcomes = [(True, failure)] * len(batch)
        for pending, (refused, outcome) in zip(batch, outcomes, strict=True):
            if pending.done.done():
                continue  # its caller was cancelled; the write landed or failed all the same
            if refused:
                pending.done.set_exception(outcome)
            else:
                pending.done.set_result(outcome)

    @staticmethod
    def _one(conn: sqlite3.Connection, body: Body) -> tuple[bool, Any]:
        try:
            return False, body(conn)
        except TetherError as exc:
            return True, exc  # raised before it wrote anything: see the module's contract
