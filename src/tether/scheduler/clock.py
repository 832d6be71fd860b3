"""Time for the scheduler: the `Clock` protocol the gateway reads and sets timers on, the clock
of the running asyncio loop, and a virtual-time event loop for tests and simulations.

The virtual loop runs ordinary asyncio code (sleeps, timeouts, timers); when every task waits,
it jumps to the next timer instead of sleeping, so an hour of traffic costs only its CPU work.
It does no real I/O: sockets and threads belong on the ordinary loop.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Monotonic seconds, and timers on the same scale."""

    def now(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer: ...

    async def sleep_until(self, when: float) -> None: ...


class LoopClock:
    """The running loop's own clock: real time on an ordinary loop, virtual time on
    `VirtualTimeLoop`. The default clock of the gateway."""

    def now(self) -> float:
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:
            # Read outside any loop (figures printed after a run): the ordinary loop's clock.
            return time.monotonic()

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        return asyncio.get_running_loop().call_at(when, callback)

    async def sleep_until(self, when: float) -> None:
        await asyncio.sleep(max(0.0, when - self.now()))


class VirtualDeadlock(RuntimeError):
    """Every task waits and no timer is set: the simulated program can never go on."""


class _VirtualTime:
    def __init__(self, start: float) -> None:
        self.now = start


class _VirtualSelector(selectors.BaseSelector):
    """Keeps the loop's registrations but never blocks: a wait of `timeout` seconds moves
    the virtual time forward by exactly that much and reports no I/O."""

    def __init__(self, virtual: _VirtualTime) -> None:
        self._time = virtual
        self._keys: dict[int, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys.pop(fd)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise VirtualDeadlock(
                "every task is waiting and no timer is set: the simulation cannot go on"
            )
        self._time.now += max(0.0, timeout)
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._keys

    def close(self) -> None:
        self._keys.clear()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose clock only moves when every task waits for a timer."""

    def __init__(self, start: float = 0.0) -> None:
        self._virtual = _VirtualTime(start)
        super().__init__(_VirtualSelector(self._virtual))
        # Timers due within this slack run together; it absorbs float rounding of `when`.
        self._clock_resolution = 1e-6

    def time(self) -> float:
        return self._virtual.now


def run_virtual(main: Coroutine[Any, Any, T], *, start: float = 0.0) -> T:
    """Run `main` to completion on a fresh `VirtualTimeLoop`."""
    with asyncio.Runner(loop_factory=lambda: VirtualTimeLoop(start)) as runner:
        return runner.run(main)
