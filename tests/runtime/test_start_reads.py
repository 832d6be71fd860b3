"""A start hands its fold to the runtime's views: the poll that answers a start (as `tether
serve` does) reads and decodes none of the events the start just wrote."""

from __future__ import annotations

from counting import CountingStore
from tether.fold import fold
from tether.runtime import LocalRuntime
from tether.testing.runtime_conformance import spec


async def test_a_poll_right_after_a_start_reads_nothing_the_start_wrote() -> None:
    store = CountingStore()
    async with LocalRuntime(store, workers=0) as rt:
        ref = await rt.start(spec("echo hi"))
        status = await rt.poll(ref)
        assert store.events_read == 0
        _, view = fold(await store.read(ref.session_id))
        assert status.view == view and status.view.last_seq == 2


async def test_an_idempotent_retry_folds_the_session_as_it_was_made() -> None:
    store = CountingStore()
    async with LocalRuntime(store, workers=0) as rt, LocalRuntime(store, workers=0) as other:
        first = await rt.start(spec("echo hi"), idempotency_key="k")
        again = await other.start(spec("echo hi"), idempotency_key="k")
        assert again == first
        assert (await other.poll(again)).view == (await rt.poll(first)).view
        assert store.events_read >= 2  # the retry's runtime read the session it did not make
