"""`tether.eager` runs coroutines inline until they suspend: a result or an error that comes
without suspending is the same as awaiting; one that suspends keeps the full asyncio
behaviour (a shield still shields, a cancel still reaches it)."""

from __future__ import annotations

import asyncio

import pytest

from tether import eager


async def answer(value: int) -> int:
    return value


async def fail() -> int:
    raise ValueError("bad")


async def test_a_coroutine_that_never_suspends_gives_its_result_inline() -> None:
    assert eager.start(answer(7)) == 7
    assert await eager.shielded(answer(8)) == 8
    with pytest.raises(ValueError, match="bad"):
        eager.start(fail())


async def test_a_suspending_coroutine_is_finished_by_awaiting_the_rest() -> None:
    seen: list[str] = []

    async def two_steps() -> str:
        seen.append("before")
        await asyncio.sleep(0.01)
        seen.append("after")
        return "done"

    begun = eager.start(two_steps())
    assert isinstance(begun, eager.Suspended)
    assert seen == ["before"]  # ran inline up to its first suspension
    assert await begun.rest() == "done"
    assert seen == ["before", "after"]


async def test_shielded_work_finishes_when_its_caller_is_cancelled() -> None:
    landed = asyncio.Event()

    async def commit() -> None:
        await asyncio.sleep(0.02)
        landed.set()

    caller = asyncio.create_task(eager.shielded(commit()))
    await asyncio.sleep(0.005)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.wait_for(landed.wait(), 1)  # the shielded commit went on and landed


async def test_a_cancel_reaches_a_started_coroutine_through_rest() -> None:
    cleaned = asyncio.Event()

    async def long() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cleaned.set()

    begun = eager.start(long())
    assert isinstance(begun, eager.Suspended)
    task = asyncio.create_task(begun.rest())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned.is_set()


async def test_a_timeout_around_rest_times_the_coroutine_out() -> None:
    begun = eager.start(asyncio.sleep(10))
    assert isinstance(begun, eager.Suspended)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await begun.rest()
