"""Where a session's fold starts when it is taken up, so no turn re-reads its whole log:
the fold this process kept when it last ran the session (`KEPT`), else the store's snapshot
(`tether.snapshot`) and the events after it, else the whole log.

A snapshot is written after a commit, when enough events came since the last one
(`due`): in a task, off the commit's path, encoded on a thread from a copy of the fold; a
failure is logged, never raised. A snapshot is a cache of the log and never its truth: one
of another `VERSION`, damaged, or ahead of the log is ignored, and the log folded.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import weakref
from collections.abc import Sequence

from tether import snapshot
from tether.bounded import ByteLRU, approx_size
from tether.events import Event, TurnEnded
from tether.fold import Folder
from tether.store.base import Snapshot, Store

_log = logging.getLogger("tether.store")

# A snapshot is due once this many events came since the last one, or a share of the log
# (1/SHARE) when that is more: each write costs the whole fold's encoding, so spacing writes
# by a share of the log keeps their cost per event constant, and the tail a take-up reads
# at most a share of the log (bench/bench_resume.py measures both).
MIN_EVENTS = 512
SHARE = 32
# At a turn's end (where a session is most often taken up next) a smaller tail is enough.
MIN_AT_TURN_END = 128
SHARE_AT_TURN_END = 64

# The folds this process kept of sessions it ran, for the next run of the same session
# here. Charged about what a fold holds; a fold past half the budget is not kept.
KEPT_BYTES = 128 << 20
# Keyed by the store too: two stores of one process may hold sessions of the same id.
KEPT: ByteLRU[tuple[int, str], tuple[weakref.ref[Store], Folder, int]] = ByteLRU(
    1_000, KEPT_BYTES, KEPT_BYTES // 2
)


def due(seq: int, since: int, batch: Sequence[Event]) -> bool:
    """Whether a snapshot at `seq` is due, the last one being at `since`, after `batch`."""
    if seq - since >= max(MIN_EVENTS, seq // SHARE):
        return True
    ended = bool(batch) and isinstance(batch[-1].payload, TurnEnded)
    return ended and seq - since >= max(MIN_AT_TURN_END, seq // SHARE_AT_TURN_END)


def fold_size(folder: Folder) -> int:
    """About the bytes a fold holds: its transcript (counted twice: the objects beside the
    text) and what it keeps from session.created."""
    return (
        2 * folder.transcript_chars
        + 256 * len(folder.messages)
        + len(folder.system or "")
        + approx_size(folder.metadata)
        + approx_size(folder.tools)
    )


def private(folder: Folder) -> Folder:
    """A copy of a fold that changes independently of it. A fold changes its lists, dicts
    and sets in place and replaces everything else whole (messages and payloads are
    immutable), so copying those containers one level deep is enough."""
    twin = copy.copy(folder)
    for name, value in vars(folder).items():
        if isinstance(value, list | dict | set):
            setattr(twin, name, copy.copy(value))
    return twin


def keep(store: Store, folder: Folder, since: int) -> None:
    """Keep a copy of a session's main-thread fold for its next run in this process, with
    the seq of its newest snapshot. Only a fold of committed events: the caller's log holds
    none uncommitted."""
    if folder.thread or not folder.last_seq:
        return
    key = (id(store), folder.session_id)

    def gone(ref: weakref.ref[Store]) -> None:  # the store is gone: so is what was kept for it
        held = KEPT.peek(key)
        if held is not None and held[0] is ref:
            KEPT.pop(key)

    try:
        ref = weakref.ref(store, gone)
    except TypeError:  # a store that cannot be named weakly is not kept for
        return
    KEPT.put(key, (ref, private(folder), since), fold_size(folder))


def _take(store: Store, session_id: str) -> tuple[Folder, int] | None:
    held = KEPT.pop((id(store), session_id))
    if held is None or held[0]() is not store:  # another store, at a reused address
        return None
    return held[1], held[2]


# Snapshots that could not be used, each logged once: (session, seq) of the damaged ones,
# and the versions of other tethers met.
_SAID: ByteLRU[tuple[str, int] | str, bool] = ByteLRU(1_000, 1 << 20)


def _say_once(key: tuple[str, int] | str, message: str, *args: object) -> None:
    if _SAID.get(key) is None:
        _SAID.put(key, True, 1)
        _log.warning(message, *args)


async def start(
    store: Store, session_id: str, *, kept: bool = True
) -> tuple[Folder, int, list[Event]]:
    """The session's main-thread fold as the store holds it now, the seq of the newest
    snapshot known (0: none), and the events read after where the fold started. From the
    fold kept here (`kept`: handed over, so two runs never share one) when the log has not
    lost what it holds, else from the snapshot, else from the whole log."""
    held = _take(store, session_id) if kept else None
    if held is not None:
        folder, since = held
        tail = await _tail(store, folder)
        if tail is not None:
            return folder.apply_all(tail), since, tail
    found = await _from_snapshot(store, session_id)
    if found is not None:
        return found
    events = await store.read(session_id)
    return Folder().apply_all(events), 0, events


async def _tail(store: Store, folder: Folder) -> list[Event] | None:
    """The events after `folder`; None when the log ends before it (the store was replaced,
    or restored from an older copy): the fold is of another log."""
    tail = await store.read(folder.session_id, after_seq=folder.last_seq)
    if not tail and await store.last_seq(folder.session_id) != folder.last_seq:
        return None
    return tail


async def stored(store: Store, session_id: str) -> Folder | None:
    """The fold of the session's snapshot, without the events after it; None when there is
    none this code can use (of another version, damaged, of another fold), or it cannot be
    read (it is a cache: the log is there to fold)."""
    try:
        found = await store.get_snapshot(session_id)
    except Exception as exc:
        _say_once(session_id, "session %s: its snapshot could not be read: %s", session_id, exc)
        return None
    if found is None:
        return None
    if found.version != snapshot.VERSION:
        _say_once(
            found.version,
            "fold snapshots of another tether (version %s) are ignored: sessions are folded "
            "from their logs, and snapshotted again",
            found.version,
        )
        return None
    try:
        folder = snapshot.decode(found.data)
    except snapshot.DamagedSnapshot as exc:
        _say_once(
            (session_id, found.seq),
            "session %s: its snapshot at seq %d is damaged (%s); folding its log",
            session_id,
            found.seq,
            exc,
        )
        return None
    if folder.session_id != session_id and await _inherited(store, session_id, folder):
        folder.session_id = session_id  # a parent's, carried to its fork: the same events
    if folder.session_id != session_id or folder.thread or folder.last_seq != found.seq:
        _say_once(
            (session_id, found.seq),
            "session %s: its snapshot at seq %d is of another fold; folding its log",
            session_id,
            found.seq,
        )
        return None
    return folder


async def _inherited(store: Store, session_id: str, folder: Folder) -> bool:
    """Whether `folder` is of an ancestor of the fork `session_id` at or before the point
    where their logs part (`Store.fork` carries the parent's snapshot so)."""
    link = await store.fork_link(session_id)
    while link is not None and folder.last_seq <= link.at:
        if link.parent == folder.session_id:
            return True
        link = await store.fork_link(link.parent)
    return False


async def _from_snapshot(store: Store, session_id: str) -> tuple[Folder, int, list[Event]] | None:
    folder = await stored(store, session_id)
    if folder is None:
        return None
    since = folder.last_seq
    tail = await _tail(store, folder)
    return None if tail is None else (folder.apply_all(tail), since, tail)


async def thread_start(store: Store, session_id: str, thread: str) -> Folder | None:
    """A sub-agent thread's fold from the main snapshot and the events after it, when the
    thread started after the snapshot: a thread's first event is its `thread.started`, and
    until then its fold holds only the session's id, its first and last event times and its
    last seq, which the main fold holds too. None when the thread (or one below it) started
    before the snapshot, or there is no snapshot to use: the caller reads the whole log."""
    main = await stored(store, session_id)
    if main is None or started_before(main, thread):
        return None
    tail = await _tail(store, main)
    return None if tail is None else thread_after(main, thread).apply_all(tail)


def started_before(main: Folder, thread: str) -> bool:
    """Whether `thread` or a thread below it may have events folded into `main` (the main
    fold records every thread's start until it is terminal)."""
    below = f"{thread}/"
    return main.terminal or any(t == thread or t.startswith(below) for t in main.thread_nodes)


def thread_after(main: Folder, thread: str) -> Folder:
    """The fold of a thread that had not started by `main`'s last seq, as of that seq."""
    folder = Folder(thread)
    folder.session_id, folder.created = main.session_id, main.created
    folder.last_seq, folder.updated = main.last_seq, main.updated
    return folder


class Writer:
    """Writes one session's snapshots after its commits, one at a time: a write due while
    one is under way waits for the next commit."""

    def __init__(self, store: Store, since: int = 0) -> None:
        self.store = store
        self.since = since  # the seq of the newest snapshot written or read
        self._task: asyncio.Task[None] | None = None

    def committed(self, folder: Folder, batch: Sequence[Event]) -> None:
        """After a commit of `batch`, with `folder` holding exactly the committed events."""
        if folder.thread or (self._task is not None and not self._task.done()):
            return
        if not due(folder.last_seq, self.since, batch):
            return
        self.since = folder.last_seq
        self._task = asyncio.get_running_loop().create_task(self._write(private(folder)))

    async def _write(self, folder: Folder) -> None:
        sid, seq = folder.session_id, folder.last_seq
        try:
            data = await asyncio.to_thread(snapshot.encode, folder)
            await self.store.put_snapshot(Snapshot(sid, seq, snapshot.VERSION, data))
        except Exception as exc:  # a cache: the next due write tries again
            _log.warning("session %s: a snapshot at seq %d was not written: %s", sid, seq, exc)

    async def settle(self) -> None:
        """Wait for a write under way (a test, a process about to close its store)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
