"""Issue 35's must-show on every backend (memory, SQLite, PostgreSQL): a child forked at the
start of turn 2 of a 4-turn session sends, as its first request, exactly the request the
parent sent there (its request hash), and with changes the changed model and system prompt;
its log read by a fresh store object (the file reopened, a new PostgreSQL connection) is the
parent's transcript up to the fork point byte for byte; its take-up starts from the parent's
snapshot, carried to it, and reads only the events after it."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from postgres.conftest import BASE_URL as PG_URL
from postgres.conftest import HOW, with_schema
from tether import Agent, snapshot
from tether.events import Event, ModelRequested
from tether.fold import Folder
from tether.messages import canonical_json
from tether.providers.base import ModelRequest, ModelResponse
from tether.session import snapshots
from tether.session.fork import ForkChanges, ForkPoint, fork
from tether.store import MemoryStore, SQLiteStore, Store
from tether.store.base import Snapshot
from tether.testing.scripted import ScriptedModel

Opener = Callable[[], Awaitable[Store]]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens a store on one backend's data: each call a fresh store object over the same
    data (the memory store has only the one)."""
    opened: list[Store] = []
    if request.param == "memory":
        memory = MemoryStore()

        async def same() -> Store:
            return memory

        yield same
        await memory.close()
        return
    if request.param == "sqlite":

        async def reopen() -> Store:
            opened.append(SQLiteStore(tmp_path / "tether.db"))
            return opened[-1]

        yield reopen
    else:
        if not PG_URL:
            pytest.skip(f"TETHER_TEST_POSTGRES_URL is not set: {HOW}")
        from psycopg import AsyncConnection

        from tether.store.postgres import PostgresStore

        schema = f"test_{secrets.token_hex(6)}"
        async with await AsyncConnection.connect(PG_URL, autocommit=True) as conn:
            await conn.execute(f"CREATE SCHEMA {schema}")

        async def connect() -> Store:
            opened.append(PostgresStore(with_schema(PG_URL, schema)))
            return opened[-1]

        try:
            yield connect
        finally:
            for store in opened:
                await store.close()
            async with await AsyncConnection.connect(PG_URL, autocommit=True) as conn:
                await conn.execute(f"DROP SCHEMA {schema} CASCADE")
        return
    for store in opened:
        await store.close()


class Recording:
    """A scripted model that keeps every request it is sent."""

    def __init__(self, name: str = "scripted") -> None:
        self.inner = ScriptedModel(["one", "two", "three", "four"], name=name)
        self.requests: list[ModelRequest] = []
        self.transcripts: list[list[str]] = []  # as sent (the loop's list grows after)

    @property
    def name(self) -> str:
        return self.inner.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        self.transcripts.append([m.text for m in request.messages])
        return await self.inner.complete(request)


async def _four_turns(backend: Opener) -> str:
    agent = Agent(Recording(), system="Be brief.", store=await backend())
    first = await agent.run("turn 1")
    for n in (2, 3, 4):
        await agent.run(f"turn {n}", session_id=first.session_id)
    await agent.close()  # and its store: an agent closes the store it was given
    return first.session_id


def _hashes(events: list[Event]) -> list[str]:
    return [e.payload.request_hash for e in events if isinstance(e.payload, ModelRequested)]


async def test_a_child_forked_at_turn_2_repeats_the_parents_request_and_takes_changes(
    backend: Opener,
) -> None:
    parent = await _four_turns(backend)
    store = await backend()
    parent_hashes = _hashes(await store.read(parent))
    assert len(parent_hashes) == 4

    same = await fork(store, parent, ForkPoint(turn=2))
    changed = await fork(
        store, parent, ForkPoint(turn=2), changes=ForkChanges(model="other", system="Be long.")
    )
    model = Recording()
    agent = Agent(model, system="Be brief.", store=await backend())
    result = await agent.resume(same.session_id)
    await agent.close()
    assert result.output == "two"  # the parent's second answer, to the same transcript
    assert model.transcripts[0] == ["turn 1", "one", "turn 2"]
    other = Recording("other")
    agent = Agent(other, system="Be long.", store=await backend())
    await agent.resume(changed.session_id)
    await agent.close()
    asked = other.requests[0]
    assert (asked.model, asked.system) == ("other", "Be long.")
    assert other.transcripts[0] == ["turn 1", "one", "turn 2"]

    store = await backend()
    assert _hashes(await store.read(same.session_id, same.at))[0] == parent_hashes[1]
    assert _hashes(await store.read(changed.session_id, changed.at))[0] != parent_hashes[1]


async def test_a_childs_log_read_afresh_is_the_parents_transcript_and_starts_from_its_snapshot(
    backend: Opener,
) -> None:
    parent = await _four_turns(backend)
    store = await backend()
    events = await store.read(parent)
    # The parent's fold at the end of turn 1, kept as a running session keeps it.
    upto = next(e.seq for e in events if e.type == "turn.ended")
    folded = Folder().apply_all(events[:upto])
    await store.put_snapshot(Snapshot(parent, upto, snapshot.VERSION, snapshot.encode(folded)))
    forked = await fork(store, parent, ForkPoint(turn=2))
    assert forked.at > upto

    fresh = await backend()
    child = await fresh.read(forked.session_id)
    assert {e.session_id for e in child} == {forked.session_id}
    assert [e.id for e in child[: forked.at]] == [e.id for e in events[: forked.at]]
    expected = Folder().apply_all(events[: forked.at]).messages
    got = Folder().apply_all(child).messages
    assert [canonical_json(m.to_json()) for m in got] == [
        canonical_json(m.to_json()) for m in expected
    ]

    reads: list[int] = []
    read = fresh.read

    async def counted(session_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        reads.append(after_seq)
        return await read(session_id, after_seq, limit)

    fresh.read = counted  # type: ignore[method-assign]
    folder, since, tail = await snapshots.start(fresh, forked.session_id, kept=False)
    assert since == upto and reads == [upto]  # the carried snapshot, then its tail only
    assert [e.seq for e in tail] == list(range(upto + 1, forked.at + 2))
    assert folder.messages == Folder().apply_all(child).messages
    assert folder.forked is not None and folder.forked.parent == parent
