"""Group commit for the SQLite store: every batch appended during one turn of the event loop
commits in one transaction, each inside a savepoint of its own.

A commit costs far more than the rows in it, so a thousand sessions stepping at once share a
handful of commits instead of paying for thousands. A batch that fails (a conflict, a lost
lease) is rolled back to its savepoint alone; the others still commit.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from tether.errors import StoreError, TetherError

Body = Callable[[sqlite3.Connection], None]


@dataclass(slots=True)
class _Pending:
    body: Body
    done: asyncio.Future[None]


class GroupCommit:
    def __init__(self, connection: Callable[[], sqlite3.Connection], name: str) -> None:
        self._connection = connection
        self._name = name
        self._queue: list[_Pending] = []
        self._scheduled = False

    async def submit(self, body: Body) -> None:
        """Run `body` in the next group transaction; return once it is committed. A caller
        cancelled meanwhile does not withdraw it: what was submitted lands or fails whole."""
        loop = asyncio.get_running_loop()
        pending = _Pending(body, loop.create_future())
        self._queue.append(pending)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        await pending.done

    def _flush(self) -> None:
        self._scheduled = False
        batch, self._queue = self._queue, []
        outcomes: list[BaseException | None] = []
        try:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                for pending in batch:
                    outcomes.append(self._one(conn, pending.body))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except (sqlite3.Error, TetherError) as exc:
            failure = (
                exc if isinstance(exc, TetherError) else StoreError(f"store {self._name}: {exc}")
            )
            outcomes = [failure] * len(batch)
        for pending, outcome in zip(batch, outcomes, strict=True):
            if pending.done.done():
                continue  # its caller was cancelled; the write landed or failed all the same
            if outcome is None:
                pending.done.set_result(None)
            else:
                pending.done.set_exception(outcome)

    @staticmethod
    def _one(conn: sqlite3.Connection, body: Body) -> BaseException | None:
        conn.execute("SAVEPOINT batch")
        try:
            body(conn)
        except TetherError as exc:
            conn.execute("ROLLBACK TO batch")
            conn.execute("RELEASE batch")
            return exc
        conn.execute("RELEASE batch")
        return None
