"""Chaos on PostgreSQL: four worker processes run 200 sessions whose `write` tools count
their effects, while workers are SIGKILLed and SIGSTOPped into zombies (then SIGCONTed),
and two poisoned sessions kill every worker that runs them.

Every session must complete or be parked with a reason, no `write` effect may happen
twice, and no append made under an old lease may land after one made under a newer lease.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from invariants import assert_log_invariants
from postgres.pg_worker import create_sessions
from tether.events import ToolFinished, ToolStarted
from tether.fold import Folder
from tether.store.postgres import PostgresStore

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 4
SESSIONS = 200
POISONED = 2
TTL = 1.5
MAX_CLAIMS = 3
KILLS, STOPS = 6, 5  # one of them every CHAOS_EVERY seconds, from the start
CHAOS_EVERY = 0.6
DEADLINE = 240.0  # generous: the run takes ~30 s here


class Fleet:
    """The worker processes, with the chaos done to them."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url, self.tmp = url, tmp
        self.effects = tmp / "effects.txt"
        self.procs: list[asyncio.subprocess.Process] = []
        self.stopped: dict[int, float] = {}  # pid -> when to SIGCONT
        self.kills = self.stops = self.deaths = 0
        self._n = 0

    async def start(self) -> None:
        self._n += 1
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.postgres.pg_worker",
            self.url,
            str(self.tmp / f"journal-{self._n}.txt"),
            "--effects",
            str(self.effects),
            "--ttl",
            str(TTL),
            "--max-claims",
            str(MAX_CLAIMS),
            "--concurrency",
            "8",
            cwd=ROOT,
            stderr=asyncio.subprocess.DEVNULL,
        )
        self.procs.append(proc)

    async def tend(self, rng: random.Random, chaos: bool) -> None:
        """Replace dead workers, wake zombies whose time is up, and maybe do harm."""
        now = time.monotonic()
        for proc in list(self.procs):
            if proc.returncode is not None:
                self.procs.remove(proc)
                self.deaths += 1
                await self.start()
        for pid, until in list(self.stopped.items()):
            if until <= now:
                os.kill(pid, signal.SIGCONT)
                del self.stopped[pid]
        live = [p for p in self.procs if p.returncode is None and p.pid not in self.stopped]
        if not chaos or not live:
            return
        victim = rng.choice(live)
        if self.kills <= self.stops and self.kills < KILLS:
            victim.kill()
            self.kills += 1
        elif self.stops < STOPS:
            # Long enough for its leases to expire and be taken over: a zombie on waking.
            os.kill(victim.pid, signal.SIGSTOP)
            self.stopped[victim.pid] = now + TTL * 2 + rng.uniform(0.5, 1.5)
            self.stops += 1

    async def close(self) -> None:
        for pid in self.stopped:
            os.kill(pid, signal.SIGCONT)
        for proc in self.procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()

    def journal(self) -> list[list[str]]:
        lines: list[list[str]] = []
        for path in self.tmp.glob("journal-*.txt"):
            lines += [line.split() for line in path.read_text().splitlines() if line]
        return lines


async def _settled(store: PostgresStore, ids: list[str]) -> bool:
    rows = await store.fetch_all(
        "SELECT count(*) FROM tether_sessions WHERE session_id = ANY(%s) "
        "AND last_type IN ('turn.ended', 'session.ended')",
        (ids,),
    )
    return int(rows[0][0]) == len(ids)


async def test_workers_killed_and_stopped_at_random_lose_and_repeat_nothing(
    pg_url: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_url)
    rng = random.Random(9)
    tasks = ["poison: this one kills its worker"] * POISONED + ["write twice"] * SESSIONS
    ids = await create_sessions(store, tasks)
    poisoned, normal = set(ids[:POISONED]), ids[POISONED:]
    fleet = Fleet(pg_url, tmp_path)
    try:
        for _ in range(WORKERS):
            await fleet.start()
        started = time.monotonic()
        while not await _settled(store, ids):
            assert time.monotonic() - started < DEADLINE, "sessions did not settle in time"
            await fleet.tend(rng, chaos=True)
            await asyncio.sleep(CHAOS_EVERY)
    finally:
        await fleet.close()
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
            assert (view.state, view.stop_reason, view.last_output) == ("idle", "end_turn", "done")
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

    # No zombie append landed: along each log, the lease generation of accepted appends
    # never goes down. Takeovers did happen (else this proves nothing).
    by_session: dict[str, list[tuple[int, int]]] = defaultdict(list)
    refused = 0
    for fields in fleet.journal():
        if fields[0] == "ok":
            by_session[fields[1]].append((int(fields[3]), int(fields[2])))
        else:
            refused += 1
    taken_over = 0
    for sid, appends in by_session.items():
        generations = [gen for _, gen in sorted(appends)]
        assert generations == sorted(generations), (sid, sorted(appends))
        taken_over += len(set(generations)) > 1
    assert taken_over >= 5, taken_over
    print(
        f"\nchaos: {fleet.kills} kills, {fleet.stops} zombies, {fleet.deaths} deaths, "
        f"{outcomes}, {taken_over} sessions taken over, {refused} zombie appends refused, "
        f"{sum(effects.values())} effects"
    )
    await store.close()
