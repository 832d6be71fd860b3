"""Workers killed from outside every second for 30 s, as issue 20 asks: three `tether worker`
processes (`--poison-after 3`) run a steady stream of sessions of `write` calls on PostgreSQL
while one of the busy ones is SIGKILLed each second and replaced; one poisoned session kills
every worker that runs its tool.

What must hold: no innocent session is parked `failed` (a worker that was killed from outside
is no evidence against the sessions it ran); the poisoned one is parked, naming its call,
after at most 3 deaths of its own doing; no `write` effect happens twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import IO

from invariants import assert_log_invariants
from postgres.chaos_fixtures import EFFECTS, MODEL, TOOLS
from postgres.fleet_queries import ended, holders
from tether.fold import Folder
from tether.runtime import LocalRuntime
from tether.runtime.base import SessionSpec
from tether.store.postgres import PostgresStore

TESTS = Path(__file__).resolve().parents[1]
WORKERS = 3
POISON_AFTER = 3
TTL = 1.5
CHAOS_SECONDS = 30.0
KILL_EVERY = 1.0
BACKLOG = 40  # sessions kept waiting or running while the chaos lasts
DEADLINE = 150.0


class Fleet:
    """The worker processes; a dead one is replaced at the next look."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url, self.tmp = url, tmp
        self.effects = tmp / "effects.txt"
        self.procs: list[asyncio.subprocess.Process] = []
        self.kills = self.deaths = 0
        self._logs: list[IO[bytes]] = []

    async def start(self) -> None:
        path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": path, EFFECTS: str(self.effects)}
        log = open(self.tmp / f"worker-{len(self._logs)}.log", "wb")  # noqa: SIM115, ASYNC230
        self._logs.append(log)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tether", "worker", "--store", self.url,
            "--concurrency", "8", "--lease-ttl", str(TTL), "--poll-interval", "0.1",
            "--poison-after", str(POISON_AFTER), "--drain", "0",
            "--allow-code", "postgres.chaos_fixtures:*", "--log-level", "error",
            env=env, stdout=log, stderr=log,
        )  # fmt: skip
        self.procs.append(proc)

    async def replace_dead(self) -> None:
        for proc in list(self.procs):
            if proc.returncode is not None:
                self.procs.remove(proc)
                self.deaths += 1
                await self.start()

    def kill_one(self, rng: random.Random, busy: set[int]) -> bool:
        """SIGKILL a worker that holds sessions; False when none does yet (a blow to a
        worker that runs nothing proves nothing)."""
        holding = [p for p in self.procs if p.returncode is None and p.pid in busy]
        if not holding:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(rng.choice(holding).pid, signal.SIGKILL)
        self.kills += 1
        return True

    async def close(self) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        for log in self._logs:
            log.close()


async def test_workers_killed_every_second_for_30_s_condemn_only_the_guilty(
    pg_url: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_url)
    rng = random.Random(20)
    fleet = Fleet(f"{pg_url}&pool_size=6", tmp_path)
    ids: list[str] = []
    async with LocalRuntime(store, workers=0) as runtime:  # starts sessions as a server would

        async def start(task: str, count: int) -> None:
            for _ in range(count):
                spec = SessionSpec(MODEL, task, TOOLS, end_after_turn=True)
                ids.append((await runtime.start(spec)).session_id)

        await start("poison: this one kills its worker", 1)
        poisoned = ids[0]
        await start("write twice", BACKLOG)
        try:
            for _ in range(WORKERS):
                await fleet.start()
            began = time.monotonic()
            next_kill = began + KILL_EVERY
            while time.monotonic() - began < CHAOS_SECONDS:
                await fleet.replace_dead()
                await start("write twice", max(0, BACKLOG - len(ids) + await ended(store, ids)))
                # Due and nobody holds work yet (workers still starting): try at the next look.
                if time.monotonic() >= next_kill and fleet.kill_one(rng, await holders(store)):
                    next_kill = max(next_kill + KILL_EVERY, time.monotonic() + KILL_EVERY / 2)
                await asyncio.sleep(0.1)
            while await ended(store, ids) < len(ids):
                assert time.monotonic() - began < DEADLINE, "sessions did not end in time"
                await fleet.replace_dead()
                await asyncio.sleep(0.2)
        finally:
            await fleet.close()
    # One a second while a worker holds work; a loaded machine starts replacements slowly.
    assert fleet.kills >= CHAOS_SECONDS / KILL_EVERY / 2, fleet.kills

    # The poisoned session was parked, naming its call; no innocent one was.
    outcomes: Counter[str] = Counter()
    for sid in ids:
        events = await store.read(sid)
        assert_log_invariants(events)
        view = Folder().apply_all(events).view()
        if sid == poisoned:
            assert view.state == "failed", view
            assert view.stop_detail and "crash" in view.stop_detail, view.stop_detail
        else:
            assert (view.state, view.stop_reason) == ("completed", "end_turn"), (
                sid,
                view.stop_detail,
                [(e.seq, e.type, e.time[11:23]) for e in events],
            )
        outcomes[view.state] += 1
    # Deaths nobody here caused are the poisoned session's doing: at most POISON_AFTER.
    assert fleet.deaths - fleet.kills <= POISON_AFTER, (fleet.deaths, fleet.kills)

    effects = Counter(
        tuple(line.split()[:2]) for line in fleet.effects.read_text().splitlines() if line
    )
    assert max(effects.values()) == 1, [k for k, n in effects.items() if n > 1]
    print(
        f"\nkills: {fleet.kills} kills in {CHAOS_SECONDS:.0f} s, {fleet.deaths} deaths, "
        f"{len(ids)} sessions {dict(outcomes)}, {sum(effects.values())} effects"
    )
    await store.close()
