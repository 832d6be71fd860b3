"""The virtual-time loop: ordinary asyncio code, time that jumps instead of passing."""

from __future__ import annotations

import asyncio
import time

import pytest

from tether.scheduler.clock import LoopClock, VirtualDeadlock, run_virtual


def test_a_virtual_hour_of_sleeping_takes_no_real_time() -> None:
    async def main() -> float:
        await asyncio.sleep(3600)
        return asyncio.get_running_loop().time()

    started = time.perf_counter()
    assert run_virtual(main()) == 3600.0
    assert time.perf_counter() - started < 5  # generous: it is CPU work only


def test_timers_fire_in_time_order_at_their_own_times() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[str, float]] = []

        async def after(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            fired.append((name, loop.time()))

        await asyncio.gather(after("late", 30), after("early", 2.5), after("middle", 10))
        return fired

    assert run_virtual(main()) == [("early", 2.5), ("middle", 10.0), ("late", 30.0)]


def test_timeouts_run_on_virtual_time() -> None:
    async def main() -> float:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(90):
                await asyncio.Event().wait()
        return asyncio.get_running_loop().time()

    assert run_virtual(main(), start=100.0) == 190.0


def test_the_loop_clock_reads_virtual_time_and_sets_virtual_timers() -> None:
    async def main() -> tuple[float, float]:
        clock = LoopClock()
        woke: list[float] = []
        clock.call_at(clock.now() + 7, lambda: woke.append(clock.now()))
        await clock.sleep_until(clock.now() + 10)
        return woke[0], clock.now()

    assert run_virtual(main()) == (7.0, 10.0)


def test_a_program_where_everything_waits_forever_is_a_deadlock_not_a_hang() -> None:
    async def main() -> None:
        await asyncio.Event().wait()

    with pytest.raises(VirtualDeadlock):
        run_virtual(main())
