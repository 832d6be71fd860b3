"""Running a coroutine inline until it first suspends, and paying for asyncio's machinery
(a task, a timer) only if it does.

Most appends to an in-memory or uncontended store, and many tools, finish without ever
suspending. A shield costs a task (~10 µs here) and a timeout a timer (~4 µs); on a step that
does a few microseconds of real work, those were most of its cost. Nothing can cancel or time
out a coroutine while it runs without suspending, so for those the machinery buys nothing.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


class Suspended:
    """A coroutine that was started and is waiting on `first`: await `rest()` to finish it."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self.coro = coro
        self.first = first

    async def rest(self) -> Any:
        return await _resume(self.coro, self.first)


def start(coro: Coroutine[Any, Any, T]) -> T | Suspended:
    """Run `coro` up to its first suspension: its result if it finished, else a `Suspended`
    to await. What it raises before suspending propagates from here."""
    try:
        first = coro.send(None)
    except StopIteration as done:
        value: T = done.value
        return value
    return Suspended(coro, first)


async def shielded(coro: Coroutine[Any, Any, T]) -> T:
    """`await asyncio.shield(coro)`, without the task when `coro` never suspends."""
    started = start(coro)
    if not isinstance(started, Suspended):
        return started
    result: T = await asyncio.shield(started.rest())
    return result


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], yielded: Any) -> Generator[Any, Any, Any]:
    """Go on driving a started coroutine from inside the awaiting task: what it yields goes
    to the event loop, and what the loop sends or throws (a result, a cancel) goes back."""
    while True:
        try:
            sent = yield yielded
        except BaseException as exc:  # a cancel or timeout of the awaiting task: pass it on
            try:
                yielded = coro.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as done:
                return done.value
