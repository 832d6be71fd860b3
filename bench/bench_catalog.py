"""Reads across sessions at a million sessions (issue 33): one store filled with sessions of
three tenants and grown 10k -> 100k -> 1M, measured at each size, each figure printed beside
the first size's (10k) and its target.

The fill: `acme`, the older tenant, owns the oldest 20 % of the sessions (`globex` the rest),
and the growth keeps it so (each tenant's sessions have times of their own range). Each
session is one finished turn of six events: `session.created` with metadata (a team of 50,
a ticket unique to it), the user's task, the model's answer with usage and a cost. Among
acme's oldest, 40 runs of one experiment (2 variants x 2 tasks x 10 repeats). Before the
others, `initech` has 3 sessions left open (a turn started, no answer), and its quota is
`max_running` 3. Rows are written with their logs: with `--fill append` (always on the
memory store) through `Store.append(..., row=catalog.row_for_log(events))`, many at once;
with `--fill bulk` (the default; SQLite, PostgreSQL) by the backend's own writes
(`sqlite_catalog.write`, `tether_append`) in large transactions on connections of the
bench's own. Either way a sample of rows is then checked with `catalog_row` against
`row_for_log` of the log read back.

Measured at each size, through a real `tether serve --workers 0` on loopback (the three
tenants' tokens, initech's quota) and a `LocalRuntime` in this process (the memory store:
only the latter):
- acme's page-through, every page of `GET /v1/sessions?limit=500` and of
  `LocalRuntime.for_tenant("acme").sessions`: sessions seen / owned, each exactly once;
- acme's first page of 50 (warm), with `counts=true`, with `q=` (one ticket's words, and a
  team's), with a metadata filter (one ticket; a team, 1 in 50): the median and p90 of 20;
- a freshly started server's first `GET /v1/sessions?counts=true`, timed from the moment it
  listens (its start-up before that, and on SQLite the `quick_check` it runs first, beside);
- the experiment's report over HTTP (runs found) and `tether experiment report` (a CLI
  subprocess; a bare `python -c "import tether.cli.main"` beside it);
- globex's usage over 30 days (`GET /v1/usage`), every one of its sessions in the window;
- initech's 4th start with 3 open: refused (429) or not.
It never fails on time; it fails when a page-through misses or repeats a session.

    source /tmp/svc_env.sh    # PostgreSQL: TETHER_TEST_POSTGRES_URL
    .venv/bin/python bench/bench_catalog.py --store sqlite --sizes 10000,100000,1000000
    .venv/bin/python bench/bench_catalog.py --store postgres --sizes 10000,100000
    --keep (with --dir DIR or --database NAME): keep the store; a later run on it measures it
    again and grows it from its size.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from serving import spawn_serve
from tether.events import Event, format_time
from tether.experiment.plan import Plan, PlannedTask
from tether.messages import JSONObject
from tether.store import catalog, open_store
from tether.store.base import Store
from tether.store.catalog import CatalogRow

ACME, GLOBEX, INITECH = "acme", "globex", "initech"
TOKENS = {
    ACME: "acme-token-0123456789",
    GLOBEX: "globex-token-0123456789",
    INITECH: "initech-token-0123456789",
}
HEAD = {tenant: {"authorization": f"Bearer {token}"} for tenant, token in TOKENS.items()}
MAX_RUNNING = 3
OLDER = 0.2  # acme's share, the oldest
TEAMS = 50
EXPERIMENT = "exp-catalog"
PLAN = Plan(("a", "b"), (PlannedTask("triage", None, 1.0), PlannedTask("reply", None, 1.0)), 10)
RUNS = len(PLAN.cells())  # 40
# The j-th experiment run is acme's session 11 + 47 j: all 40 among its first 2,000.
EXPERIMENT_EVERY = 47
# Each tenant's sessions begin at its own time and follow one another, so growing the store
# adds acme sessions still older than every globex one.
EPOCH = {INITECH: 1_735_000_000.0, ACME: 1_735_689_600.0, GLOBEX: 1_738_368_000.0}
STEP = {ACME: 1.0, GLOBEX: 0.25, INITECH: 1.0}
PAGE, FIRST_PAGE, REPEAT, FRESH = 500, 50, 20, 3
TARGETS = {  # issue 33's "Must show", in ms
    "first page, warm": 20,
    "counts=true": 50,
    "q= one ticket": 100,
    "q= a team": 100,
    "metadata= one ticket": 50,
    "metadata= a team": 50,
    "fresh server, first list": 200,
    "experiment report, HTTP": 300,
    "experiment report, CLI": 300,
}


# -- the sessions ----------------------------------------------------------------------------
def session_id(tenant: str, k: int) -> str:
    return f"ses_{tenant[0]}{k:015x}"


def experiment_cell(k: int) -> JSONObject | None:
    """The experiment tag of acme's k-th session, if it is one of the 40 runs."""
    j, rest = divmod(k - 11, EXPERIMENT_EVERY)
    if rest or not 0 <= j < RUNS:
        return None
    cell = PLAN.cells()[j]
    return {
        "id": EXPERIMENT,
        "plan": PLAN.to_json(),
        "variant": cell.variant,
        "task": cell.task,
        "repeat": cell.repeat,
    }


def ticket(tenant: str, k: int) -> str:
    return f"T{tenant[0].upper()}-{k:07d}"


def session_events(tenant: str, k: int) -> list[Event]:
    """The log of `tenant`'s k-th session: six events of one turn, or, for initech, a turn
    started and not answered (the session runs)."""
    sid = session_id(tenant, k)
    start = EPOCH[tenant] + k * STEP[tenant]
    team = f"team-{k % TEAMS:02d}"
    meta: JSONObject = {"tenant": tenant, "team": team, "ticket": ticket(tenant, k)}
    tag = experiment_cell(k) if tenant == ACME else None
    if tag is not None:
        meta["experiment"] = tag
    task = f"Triage ticket {ticket(tenant, k)} for {team}: the export to CSV times out"
    inp, out = 200 + k % 800, 20 + k % 180
    datas: list[tuple[str, JSONObject]] = [
        ("session.created", {
            "model": "scripted", "system": None, "tools": {}, "metadata": meta,
            "limits": {"max_steps": 50, "max_tokens": None, "max_cost_usd": None,
                       "max_seconds": None, "max_output_tokens": None},
            "schema_version": 3,
        }),
        ("user.message", {"message": {"role": "user", "parts": [{"type": "text", "text": task}]}}),
        ("model.requested", {"model": "scripted", "request_hash": f"{k:064x}",
                             "input_tokens_estimate": inp}),
    ]  # fmt: skip
    if tenant != INITECH:
        datas += [
            ("model.responded", {
                "message": {"role": "assistant",
                            "parts": [{"type": "text", "text": f"Ticket {ticket(tenant, k)}: "
                                       "raise the export timeout; a fix is queued."}]},
                "stop": "end_turn", "raw_stop_reason": "end_turn",
                "usage": {"input_tokens": inp, "output_tokens": out, "cache_read_tokens": 0,
                          "cache_write_tokens": 0, "reasoning_tokens": 0},
                "cost_usd": (inp * 3 + out * 15) / 1e6, "latency_ms": 812.0,
                "incomplete": False, "response_hash": None,
            }),
            ("turn.ended", {"stop_reason": "end_turn", "detail": None}),
            ("session.ended", {"outcome": "completed", "detail": "end_turn"}),
        ]  # fmt: skip
    return [
        Event.from_json(
            {
                "session_id": sid,
                "seq": seq,
                "id": f"evt_{tenant[0]}{k:013x}{seq:02x}",
                "time": format_time(start + seq * 0.001),
                "thread": "",
                "type": kind,
                "data": data,
            }
        )
        for seq, (kind, data) in enumerate(datas, 1)
    ]


@dataclass(frozen=True, slots=True)
class Counts:
    """How many sessions of each tenant a store of `size` sessions holds."""

    size: int

    @property
    def acme(self) -> int:
        return int(self.size * OLDER)

    @property
    def globex(self) -> int:
        return self.size - self.acme - MAX_RUNNING

    def of(self, tenant: str) -> int:
        return {ACME: self.acme, GLOBEX: self.globex, INITECH: MAX_RUNNING}[tenant]


def missing(have: Counts, want: Counts) -> list[tuple[str, int]]:
    """The (tenant, k) of the sessions a store of `have` needs to become one of `want`."""
    return [
        (tenant, k) for tenant in (INITECH, ACME, GLOBEX)
        for k in range(have.of(tenant) if have.size else 0, want.of(tenant))
    ]  # fmt: skip


# -- filling ---------------------------------------------------------------------------------
Writer = Callable[[list[list[Event]]], Awaitable[None]]


def append_writer(store: Store, at_once: int = 256) -> Writer:
    """Through the store's public append, the row handed in as a `SessionLog` would."""

    async def write(logs: list[list[Event]]) -> None:
        for i in range(0, len(logs), at_once):
            await asyncio.gather(
                *(
                    store.append(log[0].session_id, log, 0, row=catalog.row_for_log(log))
                    for log in logs[i : i + at_once]
                )
            )

    return write


def postgres_writer(url: str) -> Writer:
    """Through the store's own `tether_append` (what `PostgresStore.append` calls: the log,
    the catalog row, its metadata, search text and counts in one statement), thousands per
    transaction on a connection of the bench's own, pipelined and with `synchronous_commit`
    off: a load, not a workload. One connection: two such transactions would lock the
    tenant's count rows in different orders and deadlock. A batch is sent while the next is
    made (`write` returns once the batch before it is committed; an empty one flushes)."""
    import psycopg

    from tether.store.base import payload_data
    from tether.store.pg_catalog import row_param
    from tether.store.postgres import parse_url

    conninfo, _ = parse_url(url)
    call = "SELECT * FROM tether_append(%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s)"
    conn = psycopg.connect(conninfo, autocommit=True)
    conn.execute("SET synchronous_commit = off")
    sending: list[asyncio.Future[None]] = []

    def params(log: list[Event]) -> tuple[object, ...]:
        return (
            log[0].session_id, 0, None, [e.id for e in log], [e.time for e in log],
            [e.thread for e in log], [e.type for e in log],
            [payload_data(e.payload) for e in log], row_param(catalog.row_for_log(log)),
            None, None,
        )  # fmt: skip

    def send(batch: list[tuple[object, ...]]) -> None:
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(call, batch)

    async def write(logs: list[list[Event]]) -> None:
        batch = [params(log) for log in logs]
        if sending:
            await sending.pop()
        if batch:
            sending.append(asyncio.ensure_future(asyncio.to_thread(send, batch)))

    return write


def sqlite_writer(path: Path) -> Writer:
    """The rows `SQLiteStore.append` writes (the events, the session, `sqlite_catalog.write`'s
    catalog row, metadata and search text), thousands per transaction on a connection of the
    bench's own: a load, not a workload."""
    import sqlite3

    from tether.store import sqlite_catalog
    from tether.store.base import event_to_row

    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 60000")

    def write_all(logs: list[list[Event]]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "INSERT INTO events (session_id, seq, id, time, thread, type, data) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [event_to_row(e) for log in logs for e in log],
            )
            conn.executemany(
                "INSERT INTO sessions VALUES (?, ?)",
                [(log[0].session_id, log[0].time) for log in logs],
            )
            for log in logs:
                sqlite_catalog.write(conn, catalog.row_for_log(log))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    async def write(logs: list[list[Event]]) -> None:
        await asyncio.to_thread(write_all, logs)

    return write


async def fill(store: Store, writer: Writer, have: Counts, want: Counts) -> float:
    todo = missing(have, want)
    t0 = time.perf_counter()
    chunk = 5_000
    for i in range(0, len(todo), chunk):
        await writer([session_events(tenant, k) for tenant, k in todo[i : i + chunk]])
        done = min(i + chunk, len(todo))
        if done == len(todo):
            await writer([])  # the last batch, committed
        if done % 50_000 < chunk or done == len(todo):
            rate = done / (time.perf_counter() - t0)
            print(f"    filled {have.size + done:,} ({rate:,.0f} sessions/s)", flush=True)
    return time.perf_counter() - t0


async def check_sample(store: Store, want: Counts, n: int = 200) -> None:
    """A sample of rows as the store answers them, against a fold of their logs read back."""
    sample = [(ACME, k) for k in range(0, want.acme, max(1, want.acme // n))]
    sample += [(GLOBEX, k) for k in range(0, want.globex, max(1, want.globex // n))]
    sample += [(INITECH, k) for k in range(MAX_RUNNING)]
    reordered = 0
    for tenant, k in sample:
        sid = session_id(tenant, k)
        row = await store.catalog_row(sid)
        expected = catalog.row_for_log(await store.read(sid))
        if row is not None and row != expected and by_key(row) == by_key(expected):
            reordered += 1
        elif row != expected:
            raise SystemExit(f"catalog row of {sid} differs from its log's:\n{row}\n{expected}")
    print(
        f"    {len(sample)} rows checked against their logs"
        + (f" ({reordered} with their metadata in another order)" if reordered else "")
    )


def by_key(row: CatalogRow) -> CatalogRow:
    return dataclasses.replace(row, metadata=tuple(sorted(row.metadata)))


# -- timing ----------------------------------------------------------------------------------
@dataclass(slots=True)
class Figures:
    """One size's figures: name -> (value, unit, text shown)."""

    size: int
    values: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def summary(samples: Sequence[float]) -> tuple[float, str]:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    median = statistics.median(ordered)
    return median, f"median {median:7.1f} ms  p90 {p90:7.1f} ms"


async def repeated(times: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    out = []
    for _ in range(times):
        t0 = time.perf_counter()
        await call()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}"


# -- the server ------------------------------------------------------------------------------
def tokens_file(directory: Path) -> Path:
    path = directory / "tokens.json"
    tenants: dict[str, Any] = {t: [token] for t, token in TOKENS.items()}
    tenants[INITECH] = {"tokens": [TOKENS[INITECH]], "max_running": MAX_RUNNING}
    path.write_text(json.dumps({"tenants": tenants}))
    return path


@dataclass
class Server:
    process: subprocess.Popen[str]
    url: str
    startup_ms: float  # spawn to listening

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(store_url: str, tokens: Path) -> Server:
    t0 = time.perf_counter()
    process, url = spawn_serve(
        "--tokens", str(tokens), "--store", store_url, "--workers", "0", "--log-level",
        "warning", "--allow-code", "tether.testing.runtime_fixtures:*",
    )  # fmt: skip
    return Server(process, url, (time.perf_counter() - t0) * 1000)


def quick_check(path: Path) -> float:
    """Milliseconds of SQLite's `PRAGMA quick_check` of the file, which a server runs at start
    (`Store.check_integrity`) before it answers."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        t0 = time.perf_counter()
        conn.execute("PRAGMA quick_check").fetchall()
        return (time.perf_counter() - t0) * 1000
    finally:
        conn.close()


async def get_json(
    client: httpx.AsyncClient, path: str, tenant: str, params: dict[str, Any] | None = None
) -> Any:
    answer = await client.get(path, headers=HEAD[tenant], params=params)
    if answer.status_code != 200:
        raise SystemExit(f"GET {path}: {answer.status_code} {answer.text[:300]}")
    return answer.json()


async def http_page_through(client: httpx.AsyncClient) -> tuple[list[str], int, float]:
    """Every page of acme's list: the ids seen, the pages, the seconds it took."""
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    t0 = time.perf_counter()
    while True:
        params: dict[str, Any] = {"limit": PAGE} | ({"cursor": cursor} if cursor else {})
        body = await get_json(client, "/v1/sessions", ACME, params)
        pages += 1
        seen += [s["session_id"] for s in body["sessions"]]
        cursor = body.get("next_cursor")
        if not cursor:
            return seen, pages, time.perf_counter() - t0


async def local_page_through(store: Store) -> tuple[list[str], int, float]:
    """Every page of `LocalRuntime.for_tenant(acme).sessions`, as a library user pages."""
    from tether.runtime.local import LocalRuntime

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    async with LocalRuntime(store, workers=0) as runtime:
        rt = runtime.for_tenant(ACME)
        t0 = time.perf_counter()
        while True:
            page = await rt.sessions(limit=PAGE, cursor=cursor)
            pages += 1
            seen += [s.session_id for s in page.sessions]
            cursor = page.next_cursor
            if not cursor:
                return seen, pages, time.perf_counter() - t0


def owned_check(name: str, seen: list[str], owned: int, figures: Figures) -> None:
    unique = len(set(seen))
    ok = unique == len(seen) == owned and all(s.startswith("ses_a") for s in seen)
    figures.notes[name] = f"{unique:,} / {owned:,}" + ("" if ok else "  ** WRONG **")
    if len(seen) != unique:
        figures.notes[name] += f" ({len(seen) - unique:,} repeated)"
    if not ok:
        figures.values["failed"] = 1


async def measure(
    store: Store, store_url: str, directory: Path, size: Counts, *, http: bool
) -> Figures:
    """Every figure of one size; with `http` False (the memory store, which no other process
    sees), only those in this process."""
    figures = Figures(size.size)
    if http:
        await measure_http(figures, store_url, directory, size)
    await measure_local(figures, store, store_url, size, cli=http)
    figures.notes["load"] = load()
    return figures


async def measure_http(figures: Figures, store_url: str, directory: Path, size: Counts) -> None:
    tokens = tokens_file(directory)
    fresh: list[float] = []
    starts: list[float] = []
    for _ in range(FRESH):
        server = start_server(store_url, tokens)
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
                t0 = time.perf_counter()
                await get_json(
                    client, "/v1/sessions", ACME, {"limit": FIRST_PAGE, "counts": "true"}
                )
                fresh.append((time.perf_counter() - t0) * 1000)
                starts.append(server.startup_ms)
        finally:
            server.stop()
    figures.values["fresh server, first list"] = statistics.median(fresh)
    figures.notes["fresh server, first list"] = (
        f"{', '.join(f'{f:.0f}' for f in fresh)} ms; spawn to listening "
        f"{statistics.median(starts):.0f} ms"
    )
    if store_url.startswith("sqlite:///"):  # what the server does before its first answer
        took = await asyncio.to_thread(quick_check, Path(store_url.removeprefix("sqlite:///")))
        figures.notes["fresh server, first list"] += f"; PRAGMA quick_check alone {took:.0f} ms"

    server = start_server(store_url, tokens)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
            seen, pages, took = await http_page_through(client)
            owned_check("HTTP page-through, seen / owned", seen, size.acme, figures)
            figures.notes["HTTP page-through, seen / owned"] += (
                f"  ({pages} pages of {PAGE}, {took:.1f} s)"
            )
            old = ticket(ACME, 7)  # acme's 8th session: among the oldest of the store
            team = "team-07"
            queries: tuple[tuple[str, dict[str, Any]], ...] = (
                ("first page, warm", {}),
                ("counts=true", {"counts": "true"}),
                ("q= one ticket", {"q": old.lower()}),
                ("q= a team", {"q": team}),
                ("metadata= one ticket", {"metadata": f"ticket={old}"}),
                ("metadata= a team", {"metadata": f"team={team}"}),
            )
            for name, query in queries:
                params = {"limit": FIRST_PAGE, **query}
                body = await get_json(client, "/v1/sessions", ACME, params)  # the first: warms
                in_team = len(range(7, size.acme, TEAMS))
                expect = {"q= one ticket": 1, "metadata= one ticket": 1}.get(
                    name, min(FIRST_PAGE, in_team if "team" in name else size.acme)
                )
                got = len(body["sessions"])
                ask = functools.partial(get_json, client, "/v1/sessions", ACME, params)
                samples = await repeated(REPEAT, ask)
                figures.values[name], figures.notes[name] = summary(samples)
                if got != expect:
                    figures.notes[name] += f"  ** {got} rows, not {expect} **"
                    figures.values["failed"] = 1

            report_path = f"/v1/experiments/{EXPERIMENT}"
            answer = await client.get(report_path, headers=HEAD[ACME])
            if answer.status_code == 200:
                runs = len(answer.json().get("runs", []))
                samples = await repeated(5, lambda: get_json(client, report_path, ACME))
                figures.values["experiment report, HTTP"], text = summary(samples)
                figures.notes["experiment report, HTTP"] = f"{text}  {runs}/{RUNS} runs"
            else:
                figures.notes["experiment report, HTTP"] = f"** {answer.status_code} **"

            # globex's usage over a 30-day window holding all its sessions (the worst case:
            # the aggregate reads every row of the window; no per-day rollup is kept).
            window = {"from": "2025-01-20", "to": "2025-02-18"}
            body = await get_json(client, "/v1/usage", GLOBEX, window)
            counted = sum(int(e["sessions"]) for e in body["usage"])
            ask = functools.partial(get_json, client, "/v1/usage", GLOBEX, window)
            samples = await repeated(5, ask)
            name = "usage, 30 days of globex"
            figures.values[name], figures.notes[name] = summary(samples)
            figures.notes[name] += f"  {counted:,}/{size.globex:,} sessions"
            if counted != size.globex:
                figures.notes[name] += "  ** sessions missed or counted twice **"
                figures.values["failed"] = 1

            refused = await client.post(
                "/v1/sessions", headers=HEAD[INITECH],
                json={"model": "python:tether.testing.runtime_fixtures:model", "task": "one more"},
            )  # fmt: skip
            figures.notes["max_running 3, 3 open: a 4th start"] = f"{refused.status_code}" + (
                "" if refused.status_code == 429 else "  ** admitted or failed **"
            )
    finally:
        server.stop()


async def measure_local(
    figures: Figures, store: Store, store_url: str, size: Counts, *, cli: bool
) -> None:
    seen, pages, took = await local_page_through(store)
    owned_check("LocalRuntime page-through, seen / owned", seen, size.acme, figures)
    figures.notes["LocalRuntime page-through, seen / owned"] += (
        f"  ({pages} pages of {PAGE}, {took:.1f} s)"
    )
    if not cli:
        return
    cli_ms: list[float] = []
    found = ""
    for _ in range(3):
        t0 = time.perf_counter()
        code, out, err = await run(
            "-m", "tether", "experiment", "report", EXPERIMENT, "--store", store_url, "--json"
        )
        cli_ms.append((time.perf_counter() - t0) * 1000)
        if code != 0:
            found = f"** exit {code}: {err.strip()[-200:]} **"
        else:
            found = f"{len(json.loads(out).get('runs', []))}/{RUNS} runs"
    t0 = time.perf_counter()
    await run("-c", "import tether.cli.main")
    bare = (time.perf_counter() - t0) * 1000
    figures.values["experiment report, CLI"] = statistics.median(cli_ms)
    figures.notes["experiment report, CLI"] = (
        f"median of 3 {statistics.median(cli_ms):7.1f} ms  {found}  "
        f"(python -c 'import tether.cli.main': {bare:.0f} ms)"
    )


async def run(*args: str) -> tuple[int, str, str]:
    """A Python subprocess to its end: its exit code, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await process.communicate()
    return process.returncode or 0, out.decode(), err.decode()


# -- the table -------------------------------------------------------------------------------
ROWS = (
    "HTTP page-through, seen / owned",
    "LocalRuntime page-through, seen / owned",
    "first page, warm",
    "counts=true",
    "q= one ticket",
    "q= a team",
    "metadata= one ticket",
    "metadata= a team",
    "fresh server, first list",
    "experiment report, HTTP",
    "experiment report, CLI",
    "usage, 30 days of globex",
    "max_running 3, 3 open: a 4th start",
    "load",
)


def print_size(figures: Figures, base: Figures | None) -> None:
    print(f"  {figures.size:,} sessions:")
    for name in ROWS:
        value = figures.values.get(name)
        text = figures.notes.get(name)
        if text is None:
            continue
        extra = []
        if value is not None and name in TARGETS:
            target = TARGETS[name]
            extra.append(f"target <= {target} ms" + ("" if value <= target else " OVER"))
            if base is not None and name in base.values and base is not figures:
                ratio = value / base.values[name] if base.values[name] else float("inf")
                extra.append(
                    f"{ratio:.1f}x of {base.size // 1000}k ({base.values[name]:.1f} ms)"
                    + ("" if ratio <= 2 else " OVER")
                )
        print(f"    {name:<40} {text}" + (f"   [{'; '.join(extra)}]" if extra else ""))


# -- main ------------------------------------------------------------------------------------
def store_url(args: argparse.Namespace, directory: Path) -> str:
    if args.store == "memory":
        return "memory:"
    if args.store == "sqlite":
        return f"sqlite:///{directory / 'catalog.db'}"
    base = os.environ.get("TETHER_TEST_POSTGRES_URL")
    if not base:
        raise SystemExit("--store postgres needs TETHER_TEST_POSTGRES_URL (source /tmp/svc_env.sh)")
    if not args.database:  # a database of the bench's own, never the tests'
        args.database = f"tether_bench_catalog_{os.getpid()}"
        database(base, args.database, create=True)
    else:
        database(base, args.database, create=True, keep=True)
    head, _, tail = base.rpartition("/")
    query = tail.partition("?")[2]
    return f"{head}/{args.database}" + (f"?{query}" if query else "")


def database(base: str, name: str, *, create: bool, keep: bool = False) -> None:
    """Create (or drop) the database `name` on the server of `base`; with `keep`, one that
    exists already is left as it is."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(base, autocommit=True) as conn:
        ident = sql.Identifier(name)
        if (
            keep
            and conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        ):
            return
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))


async def main(args: argparse.Namespace, directory: Path) -> None:
    url = store_url(args, directory)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    store = open_store(url)
    await store.count_sessions()  # opened: the schema is there for a bulk writer
    bulk = args.fill == "bulk" and args.store != "memory"
    writer = (
        append_writer(store) if not bulk
        else postgres_writer(url) if args.store == "postgres"
        else sqlite_writer(directory / "catalog.db")
    )  # fmt: skip
    print(
        f"bench_catalog: {args.store} store, fill {'bulk' if bulk else 'append'}, sizes {', '.join(f'{s:,}' for s in sizes)}; "
        f"acme owns the oldest {OLDER:.0%}; {os.cpu_count()} cores; {load()}",
        flush=True,
    )
    # A store kept by an earlier run (--keep) is measured again, and grown, from its size.
    have = Counts(await store.count_sessions())
    if have.size:
        print(f"  reusing a store of {have.size:,} sessions", flush=True)
    results: list[Figures] = []
    try:
        for size in (s for s in sizes if s >= have.size):
            want = Counts(size)
            took = await fill(store, writer, have, want)
            await check_sample(store, want)
            have = want
            print(f"  filled to {size:,} in {took:.0f} s; {load()}", flush=True)
            figures = await measure(store, url, directory, want, http=args.store != "memory")
            results.append(figures)
            print_size(figures, results[0])
    finally:
        await store.close()
        if args.store == "postgres" and not args.keep:
            database(os.environ["TETHER_TEST_POSTGRES_URL"], args.database, create=False)
        if args.store == "sqlite" and not args.keep and not args.dir:
            shutil.rmtree(directory)
    if results:
        print(f"bench_catalog, {args.store}, each figure beside the first size's and its target:")
        for figures in results:
            print_size(figures, results[0])
    if any("failed" in f.values for f in results):
        raise SystemExit("a page-through or a search missed sessions (marked ** above)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("sqlite", "postgres", "memory"), default="sqlite")
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--dir", help="where the SQLite file goes (default: a new temp dir)")
    parser.add_argument("--fill", choices=("bulk", "append"), default="bulk")
    parser.add_argument("--database", help="PostgreSQL: this database (kept by --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the store (database or file)")
    args = parser.parse_args()
    directory = Path(args.dir or tempfile.mkdtemp(prefix="bench-catalog-"))
    directory.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(args, directory))
