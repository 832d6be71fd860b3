"""A parked session keeps its place in the gateway's queue wherever it is taken up: a worker
in another process (here, another runtime with gateways of its own, on the same SQLite
file) sends its open request before the calls that queued after that request was first
asked, as its log records. Before, only the gateway it parked in remembered its place."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from tether.events import ModelRequested
from tether.messages import Message
from tether.runtime import LocalRuntime
from tether.runtime.base import SessionSpec, SessionStatus
from tether.scheduler import GatewayConfig
from tether.session.log import SessionLog
from tether.store import SQLiteStore
from tether.testing import Hang, ScriptedModel
from tether.testing.runtime_conformance import Observer
from tether.testing.scripted import Reply

MODEL = "python:runtime.test_places:recording"
SENT: list[str] = []  # the tasks of the calls the backend was sent, in order


def recording() -> ScriptedModel:
    """A backend that records which session's call it was sent; `hang` never answers."""

    def reply(messages: Sequence[Message]) -> Reply:
        task = messages[0].text
        if task == "hang":
            return Hang()
        SENT.append(task)
        return f"done: {task}"

    return ScriptedModel([reply], repeat_last=True, name="scripted:recording")


def at_gateway(kind: str) -> Callable[[SessionStatus], bool]:
    return lambda s: s.waiting is not None and s.waiting.kind == kind


async def test_a_parked_session_taken_by_another_process_keeps_its_place(tmp_path: Path) -> None:
    SENT.clear()
    url = str(tmp_path / "places.db")
    elsewhere, here = SQLiteStore(url), SQLiteStore(url)
    # Another process asked the session's model and parked it: the request is open in the
    # log, and that process still holds the lease while it lets the session go.
    async with LocalRuntime(elsewhere, workers=0) as other:
        parked = await other.start(SessionSpec(MODEL, "parked", end_after_turn=True))
        lease = await elsewhere.claim(parked.session_id, "elsewhere", ttl=30.0)
        log = await SessionLog.load(elsewhere, parked.session_id)
        log.lease = lease
        await log.append(ModelRequested("scripted:recording", "asked", 0))
        # This process: one call at a time to the backend, held by a call that hangs; two
        # sessions that start after the parked one asked queue behind it.
        config = GatewayConfig(max_concurrency=1)
        async with LocalRuntime(here, gateway=config, poll_interval=0.05) as rt:
            blocker = Observer(rt, await rt.start(SessionSpec(MODEL, "hang")))
            await blocker.until("the backend busy", at_gateway("sending"))
            later = [
                Observer(rt, await rt.start(SessionSpec(MODEL, task, end_after_turn=True)))
                for task in ("later 1", "later 2")
            ]
            for observer in later:
                await observer.until("queued", at_gateway("queued"))
            await elsewhere.release(lease)  # parked: this process's worker takes it up
            taken = Observer(rt, parked)
            await taken.until("queued", at_gateway("queued"))
            await rt.interrupt(blocker.ref)  # the backend is free: the queue goes in order
            for observer in (taken, *later):
                assert (await observer.settled()).state == "completed"
    await elsewhere.close()
    await here.close()
    assert SENT == ["parked", "later 1", "later 2"]
