"""A fold from a snapshot plus the events after it is the full fold, attribute for attribute
and byte for byte, at every cut of every log; a snapshot of another version, or damaged, is
ignored (the log is folded, and that is said once); a fold kept by this process is used only
while it is a prefix of the stored log, and never by two runs at once."""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_fold import payloads
from tether import snapshot
from tether.bounded import ByteLRU
from tether.errors import Conflict
from tether.events import (
    Event,
    InputAnswered,
    InputRequested,
    ModelResponded,
    Payload,
    SamplingAnswered,
    SessionCreated,
    ThreadFinished,
    ThreadStarted,
    ToolFinished,
    TurnEnded,
    UserMessage,
)
from tether.fold import Folder
from tether.messages import Message, Text, Thinking, ToolCall, Usage, user
from tether.session import snapshots
from tether.session.log import SessionLog
from tether.store.base import Snapshot
from tether.store.memory import MemoryStore

GOLDEN = Path(__file__).parent / "golden"
THREADS = ("", "a-1", "a-1/b-1", "c-2")


def _read_log(path: Path) -> list[Event]:
    return [Event.from_json(json.loads(line)) for line in path.read_text().splitlines() if line]


def _events(items: list[tuple[Payload, str]]) -> list[Event]:
    return [
        Event("s", i, f"e{i}", f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}.000000Z", p, t)
        for i, (p, t) in enumerate(items, start=1)
    ]


def _assert_same(folder: Folder, full: Folder) -> None:
    assert vars(folder) == vars(full)
    assert folder.transcript().canonical() == full.transcript().canonical()
    assert json.dumps(folder.view().to_json()) == json.dumps(full.view().to_json())
    assert snapshot.encode(folder) == snapshot.encode(full)


def _assert_every_cut(events: list[Event], thread: str = "") -> None:
    full = Folder(thread).apply_all(events)
    for cut in range(len(events) + 1):
        data = snapshot.encode(Folder(thread).apply_all(events[:cut]))
        _assert_same(snapshot.decode(data).apply_all(events[cut:]), full)


# -- what the fold keeps beyond test_fold's payloads: inputs, sampling, threads, reasoning ----
call_ids = st.sampled_from(["c1", "c2", "c3"])
texts = st.text(max_size=8)
more = st.one_of(
    st.builds(InputRequested, call_ids, st.just("srv"), texts, st.just({"type": "object"}), texts),
    st.builds(
        InputAnswered, call_ids, st.sampled_from(["accept", "decline"]), st.just({"a": 1}), texts
    ),
    st.builds(
        lambda c, k, u, refused: SamplingAnswered(
            c, "srv", "m", "hi", usage=Usage(u, u), cost_usd=0.5, refused=refused, key=k
        ),
        call_ids,
        texts,
        st.integers(0, 9),
        st.none() | st.just("no"),
    ),
    st.builds(
        lambda t, c, h: ThreadStarted(
            t, "helper", c, "m", "sys", h, (user("earlier"),) if h else ()
        ),
        st.sampled_from(THREADS[1:]),
        st.none() | call_ids,
        st.booleans(),
    ),
    st.builds(ThreadFinished, st.sampled_from(THREADS[1:]), texts, st.just("end_turn")),
    st.builds(
        lambda t: ModelResponded(
            Message("assistant", (Thinking("hm", "anthropic", {"sig": "x"}), Text(t)))
        ),
        texts,
    ),
    st.builds(
        lambda c: ModelResponded(Message("assistant", (ToolCall(c, "t", {}, "{bad"),))), call_ids
    ),
    st.builds(lambda c: ToolFinished(c, "ok", "r"), call_ids),
)
logs = st.lists(
    st.tuples(st.one_of(payloads, more), st.sampled_from(("", "", "", *THREADS))), max_size=30
)


@settings(max_examples=150, deadline=None)
@given(logs, st.sampled_from(THREADS))
def test_a_snapshot_and_its_tail_fold_to_the_full_fold_at_every_cut(
    items: list[tuple[Payload, str]], thread: str
) -> None:
    _assert_every_cut(_events(items), thread)


@pytest.mark.parametrize(
    "log", sorted(GOLDEN.glob("*.events.jsonl")), ids=lambda p: p.name.split(".")[0]
)
def test_golden_logs_fold_the_same_from_a_snapshot_at_every_cut(log: Path) -> None:
    events = _read_log(log)
    for thread in sorted({e.thread for e in events}):
        _assert_every_cut(events, thread)


def test_the_codec_has_an_entry_for_every_attribute_of_a_fold() -> None:
    assert list(snapshot._FIELDS) == list(vars(Folder()))


def test_a_fold_with_an_attribute_the_codec_does_not_know_is_refused() -> None:
    folder = Folder()
    folder.novel = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"Folder\.novel"):
        snapshot.encode(folder)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x80\x81",
        b"[]",
        b'{"thread": ""}',
        b"not json",
        # every attribute there, one of the wrong type
        json.dumps({**json.loads(snapshot.encode(Folder())), "last_seq": "7"}).encode(),
        json.dumps({**json.loads(snapshot.encode(Folder())), "decisions": [["c", 5]]}).encode(),
        json.dumps({**json.loads(snapshot.encode(Folder())), "started": [1]}).encode(),
    ],
)
def test_bytes_that_are_not_a_snapshot_are_damaged(data: bytes) -> None:
    with pytest.raises(snapshot.DamagedSnapshot):
        snapshot.decode(data)


def test_the_version_names_the_codec_and_the_fold_code() -> None:
    package, codec, digest = snapshot.VERSION.split("+")
    assert codec == snapshot.CODEC and len(digest) == 16 and package


# -- SessionLog.load: kept fold, snapshot, log ------------------------------------------------
async def _session(store: MemoryStore, turns: int) -> SessionLog:
    log = SessionLog(store, "ses_x")
    await log.append(SessionCreated("m", "sys"))
    for i in range(turns):
        await log.append(UserMessage(user(f"q{i}")))
        await log.append(
            ModelResponded(Message("assistant", (Text(f"a{i}"),))), TurnEnded("end_turn")
        )
    return log


async def _full(store: MemoryStore) -> Folder:
    return Folder().apply_all(await store.read("ses_x"))


@pytest.fixture(autouse=True)
def _nothing_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshots, "KEPT", ByteLRU(1_000, snapshots.KEPT_BYTES))
    monkeypatch.setattr(snapshots, "_SAID", ByteLRU(1_000, 1 << 20))


async def test_a_long_session_is_snapshotted_and_loaded_from_its_snapshot_and_tail() -> None:
    store = MemoryStore()
    log = await _session(store, 400)  # 1,201 events
    assert log._snapshots is not None
    await log._snapshots.settle()
    found = await store.get_snapshot("ses_x")
    assert found is not None and found.version == snapshot.VERSION
    assert snapshots.MIN_AT_TURN_END <= found.seq < 1201
    reads: list[int] = []
    read = store.read

    async def counted(session_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        reads.append(after_seq)
        return await read(session_id, after_seq, limit)

    store.read = counted  # type: ignore[method-assign]
    loaded = await SessionLog.load(store, "ses_x")
    assert reads == [found.seq]  # the tail only
    _assert_same(loaded.folder, await _full(store))


async def test_a_snapshot_of_another_version_is_ignored_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    await _session(store, 3)
    good = snapshot.encode(await _full(store))
    await store.put_snapshot(Snapshot("ses_x", 10, "0.0.1+1+0000000000000000", good))
    with caplog.at_level(logging.WARNING, "tether.store"):
        for _ in range(3):
            loaded = await SessionLog.load(store, "ses_x")
            _assert_same(loaded.folder, await _full(store))
    assert sum("another tether" in r.message for r in caplog.records) == 1


async def test_a_damaged_snapshot_is_ignored_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    await _session(store, 3)
    good = snapshot.encode(await _full(store))
    await store.put_snapshot(Snapshot("ses_x", 10, snapshot.VERSION, good[: len(good) // 2]))
    with caplog.at_level(logging.WARNING, "tether.store"):
        for _ in range(3):
            loaded = await SessionLog.load(store, "ses_x")
            _assert_same(loaded.folder, await _full(store))
    assert sum("is damaged" in r.message for r in caplog.records) == 1


async def test_a_snapshot_ahead_of_the_log_or_of_another_session_is_ignored() -> None:
    store = MemoryStore()
    await _session(store, 3)
    other = Folder().apply_all(
        [Event("ses_y", 1, "e", "2026-01-01T00:00:00.000000Z", SessionCreated("m"))]
    )
    await store.put_snapshot(Snapshot("ses_x", 1, snapshot.VERSION, snapshot.encode(other)))
    _assert_same((await SessionLog.load(store, "ses_x")).folder, await _full(store))
    ahead = Folder().apply_all(await store.read("ses_x"))
    ahead.last_seq = 99  # a log restored from an older copy than its snapshot
    await store.put_snapshot(Snapshot("ses_x", 99, snapshot.VERSION, snapshot.encode(ahead)))
    _assert_same((await SessionLog.load(store, "ses_x")).folder, await _full(store))


async def test_a_kept_fold_takes_in_what_another_process_appended_since() -> None:
    store = MemoryStore()
    log = await _session(store, 3)
    log.keep()
    other = await SessionLog.load(MemoryStoreView(store), "ses_x")  # another process: no kept fold
    await other.append(UserMessage(user("from elsewhere")))
    loaded = await SessionLog.load(store, "ses_x")
    assert loaded.folder.messages[-1].text == "from elsewhere"
    _assert_same(loaded.folder, await _full(store))


async def test_a_kept_fold_is_handed_to_one_run_and_is_not_the_keepers() -> None:
    store = MemoryStore()
    log = await _session(store, 3)
    log.keep()
    first = await SessionLog.load(store, "ses_x")
    second = await SessionLog.load(store, "ses_x")
    assert first.folder is not log.folder and second.folder is not first.folder
    await first.append(UserMessage(user("first's")))
    assert second.folder.last_seq == log.folder.last_seq == first.folder.last_seq - 1
    assert first.folder.messages is not log.folder.messages


async def test_a_kept_fold_of_a_longer_log_than_the_store_holds_is_not_used() -> None:
    store = MemoryStore()
    log = await _session(store, 3)
    log.keep()
    # The same store object, its session replaced by a shorter log (a restore).
    store._logs["ses_x"] = store._logs["ses_x"][:4]
    _assert_same((await SessionLog.load(store, "ses_x")).folder, await _full(store))


async def test_a_kept_fold_is_of_its_own_store_only() -> None:
    store, twin = MemoryStore(), MemoryStore()
    (await _session(store, 3)).keep()
    await _session(twin, 5)
    _assert_same((await SessionLog.load(twin, "ses_x")).folder, await _full(twin))


class MemoryStoreView:
    """The same stored data, reached as another process would: no fold kept for it here."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def test_what_was_kept_for_a_store_goes_with_it() -> None:
    store = MemoryStore()
    created = Event("ses_x", 1, "e1", "2026-01-01T00:00:00.000000Z", SessionCreated("m"))
    snapshots.keep(store, Folder().apply_all([created]), 0)
    assert len(snapshots.KEPT) == 1
    del store
    gc.collect()
    assert len(snapshots.KEPT) == 0


@pytest.mark.parametrize("snapshot_after_conflict", [False, True])
async def test_a_refused_commit_folds_again_from_the_snapshot_and_tells_observers_the_rest(
    snapshot_after_conflict: bool,
) -> None:
    store = MemoryStore()
    writer = await _session(store, 50)
    assert writer._snapshots is not None
    await writer._snapshots.settle()
    assert await store.get_snapshot("ses_x") is not None
    seen: list[Event] = []
    log = await SessionLog.load(store, "ses_x", observers=(seen.append,))
    other = await SessionLog.load(MemoryStoreView(store), "ses_x")  # another process
    for i in range(3):
        await other.append(UserMessage(user(f"elsewhere {i}")))
    if snapshot_after_conflict:  # a snapshot newer than anything `log` has heard of
        newest = await _full(store)
        await store.put_snapshot(
            Snapshot("ses_x", newest.last_seq, snapshot.VERSION, snapshot.encode(newest))
        )
    with pytest.raises(Conflict):
        await log.append(UserMessage(user("mine")))
    _assert_same(log.folder, await _full(store))
    assert [e.payload for e in seen] == [e.payload for e in (await store.read("ses_x"))[-3:]]


# -- a sub-agent thread taken up from the main snapshot ---------------------------------------
def _threaded(items: list[tuple[Payload, str]]) -> list[Event]:
    """A log as the runtime writes one: a thread's first event is its thread.started, made
    on that thread once its parent has started; every other event goes on a started thread
    (the main one otherwise)."""
    started = {""}
    kept: list[tuple[Payload, str]] = []
    for payload, thread in items:
        if isinstance(payload, ThreadStarted):
            name = payload.thread
            if name in started or name.rpartition("/")[0] not in started:
                continue
            started.add(name)
            kept.append((payload, name))
        else:
            kept.append((payload, thread if thread in started else ""))
    return _events(kept)


def _assert_threads_from_the_main_snapshot(events: list[Event]) -> None:
    threads = {e.payload.thread for e in events if isinstance(e.payload, ThreadStarted)}
    for cut in range(len(events) + 1):
        main = snapshot.decode(snapshot.encode(Folder().apply_all(events[:cut])))
        for thread in threads:
            if not snapshots.started_before(main, thread):
                folder = snapshots.thread_after(main, thread).apply_all(events[cut:])
                _assert_same(folder, Folder(thread).apply_all(events))


@settings(max_examples=150, deadline=None)
@given(logs)
def test_a_thread_started_after_the_snapshot_folds_from_its_tail(
    items: list[tuple[Payload, str]],
) -> None:
    _assert_threads_from_the_main_snapshot(_threaded(items))


def test_the_golden_sub_agent_log_folds_its_threads_from_the_main_snapshot() -> None:
    events = _read_log(GOLDEN / "subagents.events.jsonl")
    assert any(isinstance(e.payload, ThreadStarted) for e in events)
    _assert_threads_from_the_main_snapshot(events)


async def _thread_after_snapshot() -> tuple[MemoryStore, int, list[int], Callable[..., Any]]:
    """A snapshotted session whose thread `a-1` began after its snapshot; the store, the
    snapshot's seq, the `after_seq` of each read from now on, and the store's own read."""
    store = MemoryStore()
    log = await _session(store, 50)
    assert log._snapshots is not None
    await log._snapshots.settle()
    since = (await store.get_snapshot("ses_x")).seq  # type: ignore[union-attr]
    await log.append(
        ThreadStarted("a-1", "helper"), UserMessage(user("sub task")), threads=("a-1", "a-1")
    )
    reads: list[int] = []
    read = store.read

    async def counted(session_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        reads.append(after_seq)
        return await read(session_id, after_seq, limit)

    store.read = counted  # type: ignore[method-assign]
    return store, since, reads, read


async def test_load_branch_reads_the_tail_for_a_thread_begun_after_the_snapshot() -> None:
    store, since, reads, read = await _thread_after_snapshot()
    branch = await (await SessionLog.load(store, "ses_x")).load_branch("a-1")
    assert reads == [since, since]  # the main fold's tail, then the branch's: no whole log
    _assert_same(branch.folder, Folder("a-1").apply_all(await read("ses_x")))


async def test_a_threads_transcript_fold_reads_the_tail_for_a_thread_begun_after_the_snapshot() -> (
    None
):
    """`LocalRuntime.folded` (the transcript route's fold of a sub-agent thread) starts from
    the main snapshot as `load_branch` does: no read of the log from its start."""
    from tether.runtime import LocalRuntime, SessionRef

    store, since, reads, read = await _thread_after_snapshot()
    runtime = LocalRuntime(store, workers=0)
    try:
        folder = await runtime.folded(SessionRef("ses_x"), "a-1")
    finally:
        await runtime.close()
    assert folder is not None and reads and min(reads) >= since, reads
    _assert_same(folder, Folder("a-1").apply_all(await read("ses_x")))
