"""Chaos on PostgreSQL: four `tether worker` processes run 200 sessions whose `write` tools
count their effects, while workers are SIGKILLed and SIGSTOPped into zombies (then
SIGCONTed), and two poisoned sessions kill every worker that runs them.

Every session must complete or be parked with a reason, no `write` effect may happen
twice, and no append may land unless its writer held the session's current lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import IO

from psycopg import AsyncConnection

from invariants import assert_log_invariants
from postgres.chaos_fixtures import EFFECTS, MODEL, TOOLS
from postgres.fleet_queries import ended, holders
from tether.events import ToolFinished, ToolStarted
from tether.fold import Folder
from tether.runtime import LocalRuntime
from tether.runtime.base import SessionSpec
from tether.store.postgres import PostgresStore

TESTS = Path(__file__).resolve().parents[1]
WORKERS = 4
SESSIONS = 200
POISONED = 2
TTL = 1.5
KILLS, STOPS = 6, 5  # one of them every CHAOS_EVERY seconds, from the start
CHAOS_EVERY = 0.6
DEADLINE = 180.0  # generous: the run takes ~25 s here
WRITER = "chaos-worker-"  # each worker's application_name: WRITER + its number

# Every event row, with the connection that wrote it and the lease the store held as it
# was written (`tether_append` holds that row FOR SHARE until its commit, so this is the
# lease the append was fenced by). A zombie's append that landed would show its own
# connection beside another process's lease, or a released one.
AUDIT = """
CREATE TABLE chaos_audit (
    session_id text, seq bigint, writer text, owner text, generation bigint
);
CREATE FUNCTION chaos_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_audit
        SELECT NEW.session_id, NEW.seq, current_setting('application_name'), l.owner,
               l.generation
        FROM (SELECT 1) AS one
        LEFT JOIN tether_leases l ON l.session_id = NEW.session_id;
    RETURN NEW;
END $$;
CREATE TRIGGER chaos_audit AFTER INSERT ON tether_events
    FOR EACH ROW EXECUTE FUNCTION chaos_audit();
"""


def _signal(pid: int, signum: int) -> None:
    """Signal a worker that may have just died by its own hand (a poisoned session kills its
    worker at its model call): a pid already gone is no error."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


class Fleet:
    """The `tether worker` processes, with the chaos done to them."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url, self.tmp = url, tmp
        self.effects = tmp / "effects.txt"
        self.procs: list[asyncio.subprocess.Process] = []
        self.pids: dict[str, int] = {}  # application_name -> pid
        self.stopped: dict[int, float] = {}  # pid -> when to SIGCONT
        self.kills = self.stops = self.deaths = 0
        self._logs: list[IO[bytes]] = []

    async def start(self) -> None:
        name = f"{WRITER}{len(self.pids) + 1}"
        path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
        # libpq names each worker's connections by PGAPPNAME: the audit sees who wrote.
        env = {**os.environ, "PGAPPNAME": name, "PYTHONPATH": path, EFFECTS: str(self.effects)}
        # A local file, opened once per worker: blocking here costs nothing. Closed by close().
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115, ASYNC230
        self._logs.append(log)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tether", "worker", "--store", self.url,
            "--concurrency", "8", "--lease-ttl", str(TTL), "--poll-interval", "0.1",
            "--drain", "0", "--allow-code", "postgres.chaos_fixtures:*", "--log-level", "error",
            env=env, stdout=log, stderr=log,
        )  # fmt: skip
        self.pids[name] = proc.pid
        self.procs.append(proc)

    async def tend(self, rng: random.Random, chaos: bool, busy: set[int]) -> None:
        """Replace dead workers, wake zombies whose time is up, and maybe do harm: only to a
        worker that holds sessions (`busy`: their pids), so that every blow forces takeovers
        however slowly a loaded machine starts its workers."""
        now = time.monotonic()
        for proc in list(self.procs):
            if proc.returncode is not None:
                self.procs.remove(proc)
                self.deaths += 1
                await self.start()
        for pid, until in list(self.stopped.items()):
            if until <= now:
                _signal(pid, signal.SIGCONT)
                del self.stopped[pid]
        live = [p for p in self.procs if p.returncode is None and p.pid not in self.stopped]
        if not chaos or not live:
            return
        holding = [p for p in live if p.pid in busy]
        if not holding:
            return  # a blow to a worker that runs nothing (still starting) proves nothing
        victim = rng.choice(holding)
        if self.kills <= self.stops and self.kills < KILLS:
            victim.kill()
            self.kills += 1
        elif self.stops < STOPS:
            # Long enough for its leases to expire and be taken over: a zombie on waking.
            _signal(victim.pid, signal.SIGSTOP)
            self.stopped[victim.pid] = now + TTL * 2 + rng.uniform(0.5, 1.5)
            self.stops += 1

    async def close(self) -> None:
        for pid in self.stopped:
            _signal(pid, signal.SIGCONT)
        for proc in self.procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        for log in self._logs:
            log.close()


async def _start_sessions(store: PostgresStore, tasks: list[str]) -> list[str]:
    """Start them as `tether serve` would: a runtime that runs nothing itself."""
    async with LocalRuntime(store, workers=0) as runtime:
        refs = [
            await runtime.start(SessionSpec(MODEL, task, TOOLS, end_after_turn=True))
            for task in tasks
        ]
    return [ref.session_id for ref in refs]


async def test_workers_killed_and_stopped_at_random_lose_and_repeat_nothing(
    pg_url: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_url)
    await store.execute("SELECT 1", ())  # brings the schema up, for the audit trigger
    async with await AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute(AUDIT.encode())  # several statements: no parameters
    rng = random.Random(9)
    fleet = Fleet(f"{pg_url}&pool_size=8", tmp_path)
    try:
        for _ in range(WORKERS):
            await fleet.start()
        tasks = ["poison: this one kills its worker"] * POISONED + ["write twice"] * SESSIONS
        ids = await _start_sessions(store, tasks)
        poisoned, normal = set(ids[:POISONED]), ids[POISONED:]
        started = time.monotonic()
        while await ended(store, ids) < len(ids):
            assert time.monotonic() - started < DEADLINE, "sessions did not settle in time"
            await fleet.tend(rng, chaos=True, busy=await holders(store))
            await asyncio.sleep(CHAOS_EVERY)
    finally:
        await fleet.close()
    took = time.monotonic() - started
    assert (fleet.kills, fleet.stops) == (KILLS, STOPS), "the sessions settled before the chaos"

    # Every session completed, or was parked failed with the reason; the poisoned ones
    # were parked, and their logs still keep every invariant.
    outcomes: Counter[str] = Counter()
    started_calls: dict[tuple[str, str], str] = {}
    for sid in ids:
        events = await store.read(sid)
        assert_log_invariants(events)
        view = Folder().apply_all(events).view()
        assert sid not in poisoned or view.state == "failed", (sid, view.state)
        if view.state == "failed":
            assert view.stop_detail and view.stop_detail.startswith("poisoned"), view
            outcomes["parked"] += 1
        else:
            assert (view.state, view.stop_reason, view.last_output) == (
                "completed",
                "end_turn",
                "done",
            ), view
            outcomes["completed"] += 1
        for e in events:
            if isinstance(e.payload, ToolStarted):
                started_calls[(sid, e.payload.call_id)] = "started"
            if isinstance(e.payload, ToolFinished):
                started_calls[(sid, e.payload.call_id)] = e.payload.outcome
    assert outcomes["completed"] >= len(normal) - 10, outcomes  # innocents killed 4x are rare

    # No write effect happened twice; every call answered `ok` had its effect exactly once,
    # and an effect happened only for a call that was started.
    effects = Counter(
        tuple(line.split()[:2]) for line in fleet.effects.read_text().splitlines() if line
    )
    assert max(effects.values()) == 1, [k for k, n in effects.items() if n > 1]
    for key, outcome in started_calls.items():
        if outcome == "ok":
            assert effects[key] == 1, key
    assert set(effects) <= set(started_calls)

    # No zombie append landed: every event a worker wrote, it wrote holding the session's
    # current lease (a lease names its worker's pid: host:pid:random), and along each log
    # the lease generations never go down. Takeovers did happen (else this proves nothing).
    rows = await store.fetch_all(
        "SELECT session_id, seq, writer, owner, generation FROM chaos_audit "
        "WHERE writer LIKE %s ORDER BY session_id, seq",
        (f"{WRITER}%",),
    )
    assert len(rows) > 10 * SESSIONS, len(rows)  # the workers wrote the turns
    generations: dict[str, list[int]] = defaultdict(list)
    for sid, seq, writer, owner, generation in rows:
        holder = int(owner.rsplit(":", 2)[1]) if owner and owner.count(":") >= 2 else None
        assert holder == fleet.pids[writer], (sid, seq, writer, owner, generation)
        generations[sid].append(int(generation))
    assert all(gens == sorted(gens) for gens in generations.values())
    taken_over = sum(len(set(gens)) > 1 for gens in generations.values())
    assert taken_over >= 5, taken_over
    print(
        f"\nchaos: {took:.1f} s, {fleet.kills} kills, {fleet.stops} zombies, {fleet.deaths} "
        f"deaths, {dict(outcomes)}, {taken_over} sessions taken over, "
        f"{sum(effects.values())} effects"
    )
    await store.close()
