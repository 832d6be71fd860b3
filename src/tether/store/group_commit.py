"""Group commit for the SQLite store: every batch appended during one turn of the event loop
commits in one transaction.

A commit costs far more than the rows in it, so a thousand sessions stepping at once share a
handful of commits instead of paying for thousands. The first batch of a quiet loop turn
commits at once, so a lone session pays no extra loop turn per commit.

The contract that makes sharing safe: a body raises a `TetherError` (a conflict, a lost lease)
only before it writes anything, so a refused batch leaves nothing behind and the others still
commit. A database error fails the whole group, and every waiter hears of it.
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
        # After an immediate commit, the rest of the same loop turn groups (see `submit`).
        self._busy_last_turn = False

    async def submit(self, body: Body) -> None:
        """Run `body` in the next group transaction; return once it is committed. A caller
        cancelled meanwhile does not withdraw it: what was submitted lands or fails whole."""
        loop = asyncio.get_running_loop()
        pending = _Pending(body, loop.create_future())
        self._queue.append(pending)
        if not self._scheduled:
            if len(self._queue) == 1 and not self._busy_last_turn:
                # Nothing else is writing: commit at once rather than a loop turn later.
                self._flush()
                self._busy_last_turn = True
                loop.call_soon(self._cool_down)
            else:
                self._scheduled = True
                loop.call_soon(self._flush)
        await pending.done

    def _cool_down(self) -> None:
        self._busy_last_turn = False

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
        except Exception as exc:  # every waiter must hear how its batch ended, whatever broke
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
        try:
            body(conn)
        except TetherError as exc:
            return exc  # raised before it wrote anything: see the module's contract
        return None
