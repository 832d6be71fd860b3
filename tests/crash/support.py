"""What the crash tests share: running worker and `tether` subprocesses, reading what they
left in the SQLite file, and the checks a session must pass after any number of crashes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.events import Event, ToolFinished, ToolStarted
from tether.fold import Folder, Transcript
from tether.recovery import UNKNOWN_EFFECT
from tether.store.open import open_store

from . import kit

HERE = Path(__file__).parent
WORKER = HERE / "worker.py"
TIMEOUT = 60


@dataclass
class Proc:
    """One finished worker process and the JSON facts it printed."""

    args: list[str]
    returncode: int
    facts: list[dict[str, Any]]
    stderr: str

    @property
    def prefix(self) -> str:
        return str(self.facts[0]["prefix"])

    @property
    def committed(self) -> list[tuple[int, str]]:
        return [(f["seq"], f["committed"]) for f in self.facts if "committed" in f]

    def last(self, key: str) -> Any:
        found = [f for f in self.facts if key in f]
        assert found, f"worker {self.args} printed no {key!r}: rc {self.returncode}\n{self.stderr}"
        return found[-1]


@dataclass
class Outcome:
    """A session run by one or more workers until its turn ended, and what its tools did."""

    procs: list[Proc]
    events: list[Event]
    effects: dict[str, list[list[str]]] = field(default_factory=dict)

    def transcript(self) -> Transcript:
        return Folder().apply_all(self.events).transcript()

    def folder(self) -> Folder:
        return Folder().apply_all(self.events)


def env_for(effects: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CRASH_", "TETHER_"))}
    # `crash.kit` importable in the subprocess, for the workers and `--model python:...`.
    path = os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))
    return {**base, kit.EFFECTS_ENV: str(effects), "PYTHONPATH": path, **(extra or {})}


def parse_facts(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def run_worker(
    db: Path | str,
    script: str,
    command: str,
    session_id: str | None = None,
    env: dict[str, str] | None = None,
    effects: Path | None = None,
) -> Proc:
    """`db`: a SQLite file, or a store's URL with `effects` the directory of the ledger (by
    default the file's)."""
    args = [str(db), script, command, *([session_id] if session_id else [])]
    out = subprocess.run(
        [sys.executable, str(WORKER), *args],
        env=env_for(effects or Path(db).parent, env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return Proc(args, out.returncode, parse_facts(out.stdout), out.stderr)


def tether(*args: str, cwd: Path, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """The `tether` command, run for real, with `crash.kit` importable for --model and --tools."""
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        env=env_for(cwd),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


async def _read(db: Path | str, session_id: str | None) -> tuple[str, list[Event]]:
    store = open_store(str(db))
    try:
        if session_id is None:
            infos = await store.sessions()
            assert len(infos) == 1, f"{db} holds {len(infos)} sessions"
            session_id = infos[0].session_id
        return session_id, await store.read(session_id)
    finally:
        await store.close()


async def _session_ids(db: Path) -> list[str]:
    store = open_store(str(db))
    try:
        return [info.session_id for info in await store.sessions()]
    finally:
        await store.close()


def session_ids(db: Path) -> list[str]:
    """The sessions in `db`, none if it is not there yet."""
    return asyncio.run(_session_ids(db)) if db.exists() else []


def read_session(db: Path | str, session_id: str | None = None) -> tuple[str, list[Event]]:
    """The one session in `db` (a SQLite file or a store's URL), or the one named, and its
    events."""
    return asyncio.run(_read(db, session_id))


def effects(directory: Path) -> dict[str, list[list[str]]]:
    return {kind: kit.read_records(directory, kind) for kind in ("read", "idempotent", "write")}


def run_until_turn_ends(
    directory: Path,
    script: str,
    first_env: dict[str, str],
    resume_env: dict[str, str] | None = None,
    max_procs: int = 60,
) -> Outcome:
    """Start a session with `first_env`, then resume it in fresh processes (with
    `resume_env`) until its turn has ended."""
    directory.mkdir(parents=True)
    db = directory / "tether.db"
    procs = [run_worker(db, script, "start", env=first_env)]
    session_id, events = read_session(db)
    while Folder().apply_all(events).turn_open:
        assert len(procs) < max_procs, f"the turn is still open after {max_procs} processes"
        procs.append(run_worker(db, script, "resume", session_id, env=resume_env))
        _, events = read_session(db, session_id)
    return Outcome(procs, events, effects(directory))


# -- checks --------------------------------------------------------------------------------


def by_prefix(event: Event) -> str:
    return event.id.split("_")[1]


def assert_nothing_lost(outcome: Outcome) -> None:
    """Every event a worker saw committed is in the log at the seq it had, and every event
    in the log was written by one of the workers."""
    at = {e.seq: e.id for e in outcome.events}
    for proc in outcome.procs:
        for seq, event_id in proc.committed:
            assert at.get(seq) == event_id, (
                f"{event_id} was committed at seq {seq}, the log has {at.get(seq)}"
            )
    writers = {p.prefix for p in outcome.procs}
    strangers = [e.seq for e in outcome.events if by_prefix(e) not in writers]
    assert not strangers, f"events at seqs {strangers} come from no worker"


def crashed_write_calls(events: Sequence[Event]) -> set[str]:
    """Write calls started by a worker that died before it answered them."""
    started = {
        p.call_id: (by_prefix(e), p.effect)
        for e in events
        if isinstance(p := e.payload, ToolStarted)
    }
    finished = {p.call_id: by_prefix(e) for e in events if isinstance(p := e.payload, ToolFinished)}
    return {
        c for c, (who, effect) in started.items() if effect == "write" and finished.get(c) != who
    }


def assert_outcomes(events: Sequence[Event]) -> None:
    """A write call that a dead worker started is answered `unknown_effect`; everything
    else in the crash script is answered `ok`."""
    crashed = crashed_write_calls(events)
    for e in events:
        p = e.payload
        if isinstance(p, ToolFinished):
            expected = "unknown_effect" if p.call_id in crashed else "ok"
            assert p.outcome == expected, f"{p.call_id} finished {p.outcome}, expected {expected}"


def assert_effects(outcome: Outcome) -> None:
    """Each write happened at most once (exactly once when answered ok); every idempotent
    run carried its call id as the idempotency key."""
    finished = {
        p.call_id: p.outcome for e in outcome.events if isinstance(p := e.payload, ToolFinished)
    }
    write_calls = {
        p.call_id
        for e in outcome.events
        if isinstance(p := e.payload, ToolStarted) and p.effect == "write"
    }
    writes = Counter(line[0] for line in outcome.effects["write"])
    for call_id, n in writes.items():
        assert n <= 1, f"write {call_id} happened {n} times"
    for call_id in write_calls:
        if finished[call_id] == "ok":
            assert writes[call_id] == 1, (
                f"write {call_id} was answered ok but happened {writes[call_id]} times"
            )
    for call_id, key, _ in outcome.effects["idempotent"]:
        assert key == call_id, f"idempotent {call_id} ran with key {key}"


def assert_transcript_matches(reference: Transcript, got: Transcript, unknown: set[str]) -> None:
    """Message by message, the same as the crash-free run, except the results of the write
    calls in `unknown`, which say their effect is unknown."""
    assert len(got.messages) == len(reference.messages), (
        f"{len(got.messages)} messages, the crash-free run has {len(reference.messages)}"
    )
    for i, (ref, msg) in enumerate(zip(reference.messages, got.messages, strict=True)):
        if ref.role != "tool":
            assert msg == ref, f"message {i} differs:\n{msg}\n{ref}"
            continue
        assert [r.call_id for r in msg.tool_results] == [r.call_id for r in ref.tool_results]
        for want, have in zip(ref.tool_results, msg.tool_results, strict=True):
            if have.call_id in unknown:
                assert (have.content, have.is_error) == (UNKNOWN_EFFECT, True), have
            else:
                assert have == want, f"message {i}: {have} != {want}"
