"""The catalog conformance suite: what every store's session catalog must answer, held to the
reference answers of `tether.store.catalog` (which the memory store applies directly).

Each check takes a fresh, empty store and raises AssertionError on a violation; a backend's
tests run them all (`@pytest.mark.parametrize("check", CATALOG_CHECKS)`). The sessions are
generated from a fixed seed: several tenants (and none), tasks and metadata with unicode,
long values, values that are not strings and keys that look like SQL or LIKE patterns,
models, states, costs (some unknown), experiment tags, and times that tie, so a sort's
cursor must break ties by id.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Awaitable, Callable, Sequence

from tether.errors import QuotaExceeded
from tether.events import (
    Event,
    ModelResponded,
    Payload,
    SessionCreated,
    SessionEnded,
    SessionForked,
    TurnEnded,
    UserMessage,
)
from tether.fold import Folder
from tether.messages import JSONObject, JSONValue, Message, Text, Usage, user
from tether.store import catalog
from tether.store.base import ForkLink, SessionInfo, Snapshot, Store
from tether.store.catalog import Admit, CatalogQuery, CatalogRow

Check = Callable[[Store], Awaitable[None]]

TENANTS = ("acme", "beta", "")  # "": sessions started without a tenant
MODELS = ("m-small", "m-large", "Modèle ✓")
WORDS = ("alpha", "Beta", "ünïcode", "snow ☃", "x'; DROP TABLE catalog;--", "50%_off", "a\nb")
# Metadata keys that a careless SQL store would splice into a query or a LIKE pattern.
KEYS = ("team", "x'); --", "100%", "_", "Ключ", "nested.key")
VALUES: tuple[JSONValue, ...] = (
    "red",
    "Red",
    "blue ☃",
    "",
    7,
    2.5,
    True,
    None,
    [1, "two"],
    {"b": 1, "a": [None]},
    "%",
    "o'clock",
)


def _time(minute: int, second: int) -> str:
    return f"2026-02-01T10:{minute:02d}:{second:02d}.000000Z"


@dataclasses.dataclass
class Generated:
    """A session's whole log, and the batches it is appended in."""

    session_id: str
    events: list[Event]
    cuts: list[int]  # batch boundaries: the seq each batch ends at


def _metadata(rng: random.Random, tenant: str, index: int) -> JSONObject:
    meta: JSONObject = {}
    if tenant:
        meta["tenant"] = tenant
    for key in rng.sample(KEYS, rng.randrange(0, 4)):
        meta[key] = rng.choice(VALUES)
    if rng.random() < 0.15:
        meta["long"] = "ü" * rng.choice((10, 2_500, 5_000))  # past `catalog.TEXT`: cut
    if rng.random() < 0.3:
        meta["experiment"] = {
            "id": f"exp-{rng.randrange(3)}",
            "variant": rng.choice(("a", "b")),
            "task": f"task-{rng.randrange(2)}",
            "repeat": index % 3,
        }
    return meta


def generate(seed: int = 7, count: int = 48) -> list[Generated]:
    """Sessions over every tenant, their ids interleaved across tenants."""
    rng = random.Random(seed)
    out: list[Generated] = []
    for index in range(count):
        tenant = TENANTS[index % len(TENANTS)]
        session_id = f"s{rng.randrange(100):02d}-{index:03d}"
        created_minute = rng.randrange(4)  # few distinct times: ties in every time sort
        payloads: list[Payload] = [
            SessionCreated(model=rng.choice(MODELS), metadata=_metadata(rng, tenant, index))
        ]
        if rng.random() < 0.9:
            words = rng.sample(WORDS, rng.randrange(1, 4))
            payloads.append(UserMessage(user(" ".join(words) + f" #{index}")))
        stage = rng.randrange(5)
        if stage >= 1:
            tokens = rng.choice((0, 10, 10, 250))  # repeated: ties in the tokens sort
            cost = rng.choice((None, 0.0, 0.5, 0.5, 1.25))
            payloads.append(
                ModelResponded(
                    Message("assistant", (Text(f"done {rng.choice(WORDS)}"),)),
                    usage=Usage(tokens, tokens // 2, 1, 0),
                    cost_usd=cost,
                )
            )
        if stage >= 2:
            payloads.append(TurnEnded(rng.choice(("end_turn", "max_steps", "error"))))
        if stage >= 3:
            payloads.append(SessionEnded(rng.choice(("completed", "failed", "canceled"))))
        events = [
            Event(
                session_id,
                seq,
                f"{session_id}-e{seq}",
                _time(created_minute + (seq > 1) * rng.randrange(3), 0),
                p,
            )
            for seq, p in enumerate(payloads, start=1)
        ]
        cuts = sorted({rng.randrange(1, len(events) + 1) for _ in range(2)} | {len(events)})
        out.append(Generated(session_id, events, cuts))
    return out


async def fill(store: Store, sessions: Sequence[Generated], *, rows: bool) -> None:
    """Append every session batch by batch; with `rows`, each batch with the row of the fold
    so far (as a `SessionLog` hands it in), else none (the store folds the log)."""
    for g in sessions:
        folder = Folder()
        done = 0
        for cut in g.cuts:
            batch = g.events[done:cut]
            row = catalog.row_of(folder.apply_all(batch)) if rows else None
            await store.append(g.session_id, batch, done, row=row)
            done = cut


def reference(sessions: Sequence[Generated]) -> list[CatalogRow]:
    return [catalog.row_for_log(g.events) for g in sessions]


async def _filled(store: Store, *, rows: bool = True) -> list[CatalogRow]:
    sessions = generate()
    await fill(store, sessions[::2], rows=rows)
    await fill(store, sessions[1::2], rows=not rows)
    return reference(sessions)


async def rows_written_by_appends_equal_the_fold_of_the_log(store: Store) -> None:
    # Half the sessions appended with the rows of their folds, half without (and of each
    # half, half the other way round from `_filled`'s point of view: every batch alike).
    for row in await _filled(store):
        assert await store.catalog_row(row.session_id) == row, row.session_id
    assert await store.catalog_row("nobody") is None


async def an_append_with_a_row_writes_that_row(store: Store) -> None:
    # The store trusts the row it is handed (it does not fold the log again).
    g = generate(count=1)[0]
    row = dataclasses.replace(catalog.row_for_log(g.events), task="as handed in")
    await store.append(g.session_id, g.events, 0, row=row)
    assert await store.catalog_row(g.session_id) == row


def _queries(rng: random.Random, rows: Sequence[CatalogRow], count: int) -> list[CatalogQuery]:
    states = sorted({r.state for r in rows})
    reasons = sorted({r.stop_reason or "" for r in rows})
    times = sorted({r.created for r in rows} | {r.updated for r in rows})
    pairs = sorted({p for r in rows for p in r.metadata})
    experiments = sorted({r.experiment for r in rows if r.experiment})
    out: list[CatalogQuery] = []
    for _ in range(count):
        sort = rng.choice(catalog.SORTS)
        pick = rng.choice(rows)
        text = ""
        if rng.random() < 0.3:
            hay = rng.choice(rows).haystack
            start = rng.randrange(len(hay))
            text = hay[start : start + rng.choice((1, 2, 3, 5, 12))]
        query = CatalogQuery(
            tenant=rng.choice((None, *TENANTS, "nobody")),
            states=frozenset(rng.sample(states, rng.randrange(3)) if rng.random() < 0.4 else ()),
            stop_reasons=frozenset(rng.sample(reasons, 1) if rng.random() < 0.2 else ()),
            models=frozenset(rng.sample(MODELS, rng.randrange(1, 3)) if rng.random() < 0.2 else ()),
            id_prefix=pick.session_id[: rng.choice((0, 0, 1, 2, 3))],
            text=text,
            created_after=rng.choice(times) if rng.random() < 0.2 else None,
            created_before=rng.choice(times) if rng.random() < 0.2 else None,
            metadata=(
                tuple(rng.sample(pairs, rng.randrange(1, 3)))
                if rng.random() < 0.25
                else ((("team", "no such value"),) if rng.random() < 0.05 else ())
            ),
            experiment=rng.choice((None, None, None, "exp-none", *experiments)),
            sort=sort,
            after=catalog.sort_key(rng.choice(rows), sort) if rng.random() < 0.5 else None,
            limit=rng.choice((1, 3, 10, 100)),
        )
        out.append(query)
    return out


async def pages_and_counts_equal_the_reference_for_every_filter_and_sort(store: Store) -> None:
    rows = await _filled(store)
    rng = random.Random(11)
    for query in _queries(rng, rows, 400):
        got = await store.catalog(query)
        assert got == catalog.page_of(rows, query), query
        counts = await store.catalog_counts(query)
        assert counts == catalog.counts_of(rows, query), query


async def every_filter_alone_agrees_with_the_reference(store: Store) -> None:
    rows = await _filled(store)
    one = rows[5]
    for query in (
        CatalogQuery(tenant="acme", limit=1000),
        CatalogQuery(tenant="", limit=1000),
        CatalogQuery(states=frozenset({one.state}), limit=1000),
        CatalogQuery(stop_reasons=frozenset({""}), limit=1000),
        CatalogQuery(stop_reasons=frozenset({"end_turn", "error"}), limit=1000),
        CatalogQuery(models=frozenset({"Modèle ✓"}), limit=1000),
        CatalogQuery(id_prefix=one.session_id[:2], limit=1000),
        CatalogQuery(id_prefix="%", limit=1000),
        CatalogQuery(id_prefix="_", limit=1000),
        CatalogQuery(text="ünï", limit=1000),
        CatalogQuery(text="drop table", limit=1000),
        CatalogQuery(text="%", limit=1000),
        CatalogQuery(text="_", limit=1000),
        CatalogQuery(text="a", limit=1000),
        CatalogQuery(text='"', limit=1000),
        CatalogQuery(text='"alpha', limit=1000),
        CatalogQuery(text="\n", limit=1000),
        CatalogQuery(created_after=one.created, limit=1000),
        CatalogQuery(created_before=one.created, limit=1000),
        CatalogQuery(metadata=(("team", "red"),), limit=1000),
        CatalogQuery(metadata=(("x'); --", "7"),), limit=1000),
        CatalogQuery(metadata=(("100%", "true"),), limit=1000),
        CatalogQuery(metadata=(("_", "null"),), limit=1000),
        CatalogQuery(metadata=(("long", "ü" * catalog.TEXT),), limit=1000),
        CatalogQuery(experiment="exp-1", limit=1000),
        CatalogQuery(experiment="", limit=1000),
    ):
        assert await store.catalog(query) == catalog.page_of(rows, query), query
        assert await store.catalog_counts(query) == catalog.counts_of(rows, query), query


async def paging_with_cursors_sees_every_session_once(store: Store) -> None:
    rows = await _filled(store)
    for tenant in (*TENANTS, None):
        owned = [r for r in rows if tenant is None or r.tenant == tenant]
        for sort in catalog.SORTS:
            seen: list[CatalogRow] = []
            cursor = None
            while True:
                page = await store.catalog(
                    CatalogQuery(tenant=tenant, sort=sort, after=cursor, limit=4)
                )
                if not page:
                    break
                seen.extend(page)
                cursor = catalog.sort_key(page[-1], sort)
            ids = [r.session_id for r in seen]
            assert sorted(ids) == sorted(r.session_id for r in owned), (tenant, sort)
            assert seen == catalog.page_of(
                rows, CatalogQuery(tenant=tenant, sort=sort, limit=10_000)
            ), (tenant, sort)


async def experiments_equal_the_reference(store: Store) -> None:
    rows = await _filled(store)
    for tenant in (*TENANTS, None, "nobody"):
        for limit in (1, 2, 100):
            got = await store.catalog_experiments(tenant, limit)
            assert got == catalog.experiments_of(rows, tenant, limit), (tenant, limit)


async def usage_equals_the_reference_by_day_and_model(store: Store) -> None:
    """Sessions over three UTC days, each dated by its last event: windows that start and
    end inside a day, every tenant's and one's, and limits that cut the groups."""
    rng = random.Random(11)
    rows: list[CatalogRow] = []
    for index in range(60):
        session_id = f"u{index:03d}"
        day, hour = 1 + rng.randrange(3), rng.randrange(24)
        cost = rng.choice((None, 0.1, 0.5, 1.25))
        tokens = rng.choice((0, 7, 300))
        payloads: list[Payload] = [
            SessionCreated(
                model=rng.choice(MODELS), metadata={"tenant": TENANTS[index % len(TENANTS)]}
            ),
            UserMessage(user("go")),
            ModelResponded(
                Message("assistant", (Text("done"),)),
                usage=Usage(tokens, tokens // 3, tokens // 5, rng.randrange(3)),
                cost_usd=cost,
            ),
        ]
        # Created the day before: only the last event's day counts.
        before = "2026-01-31" if day == 1 else f"2026-02-0{day - 1}"
        then = f"2026-02-0{day}T{hour:02d}:30:00.000000Z"
        times = (f"{before}T23:59:59.000000Z", then, then)
        events = [
            Event(session_id, seq, f"{session_id}-{seq}", times[seq - 1], p)
            for seq, p in enumerate(payloads, start=1)
        ]
        folder = Folder().apply_all(events)
        await store.append(session_id, events, 0, row=catalog.row_of(folder))
        rows.append(catalog.row_of(folder))
    windows = (
        ("2026-01-01T00:00:00.000000Z", "2026-03-01T00:00:00.000000Z"),
        ("2026-02-02T00:00:00.000000Z", "2026-02-03T00:00:00.000000Z"),
        ("2026-02-01T12:00:00.000000Z", "2026-02-03T12:00:00.000000Z"),
        ("2026-02-04T00:00:00.000000Z", "2026-02-05T00:00:00.000000Z"),
    )
    for tenant in (*TENANTS, None, "nobody"):
        for since, until in windows:
            for limit in (1, 4, 10_000):
                got = await store.catalog_usage(tenant, since, until, limit)
                want = catalog.usage_of(rows, tenant, since, until, limit)
                where = (tenant, since, until, limit)
                assert [dataclasses.replace(e, cost_usd=0.0) for e in got] == [
                    dataclasses.replace(e, cost_usd=0.0) for e in want
                ], where
                # Sums of floats in another order: equal to the last few bits.
                for g, w in zip(got, want, strict=True):
                    assert math.isclose(g.cost_usd, w.cost_usd, rel_tol=1e-9, abs_tol=1e-12), where


def _start(session_id: str, tenant: str, minute: int = 0) -> list[Event]:
    payloads: list[Payload] = [
        SessionCreated(model="m", metadata={"tenant": tenant}),
        UserMessage(user("go")),
    ]
    return [
        Event(session_id, seq, f"{session_id}-{seq}", _time(minute, seq), p)
        for seq, p in enumerate(payloads, start=1)
    ]


async def _row(store: Store, session_id: str) -> CatalogRow:
    row = await store.catalog_row(session_id)
    assert row is not None, f"no catalog row for {session_id}"
    return row


async def admit_refuses_a_start_past_max_running_and_writes_nothing(store: Store) -> None:
    limit = Admit("acme", 2)
    for sid in ("r1", "r2"):
        await store.append(sid, _start(sid, "acme"), 0, admit=limit)
    assert (await _row(store, "r1")).running and (await _row(store, "r2")).running
    try:
        await store.append("r3", _start("r3", "acme"), 0, admit=limit)
    except QuotaExceeded as exc:
        assert "max_running" in str(exc)
    else:
        raise AssertionError("a third running session of acme was admitted")
    assert await store.read("r3") == []
    assert await store.last_seq("r3") == 0
    assert await store.catalog_row("r3") is None
    assert "r3" not in await store.session_ids()
    # Another tenant's sessions are not counted; nor is the session appending itself.
    await store.append("b1", _start("b1", "beta"), 0, admit=Admit("beta", 1))
    more = [Event("r1", 3, "r1-3", _time(1, 0), UserMessage(user("more")))]
    await store.append("r1", more, 2, admit=limit)
    # A session that comes to rest frees its place.
    rest = [Event("r2", 3, "r2-3", _time(1, 1), TurnEnded("end_turn"))]
    await store.append("r2", rest, 2)
    assert not (await _row(store, "r2")).running
    await store.append("r3", _start("r3", "acme"), 0, admit=limit)
    assert (await _row(store, "r3")).running
    try:
        await store.append("z", _start("z", "acme"), 0, admit=Admit("acme", 0))
    except QuotaExceeded:
        pass
    else:
        raise AssertionError("max_running 0 admitted a start")
    assert await store.read("z") == []


async def put_catalog_row_writes_only_at_the_logs_last_seq(store: Store) -> None:
    events = _start("p1", "acme")
    await store.append("p1", events, 0)
    written = await _row(store, "p1")
    assert written == catalog.row_for_log(events)
    stale = dataclasses.replace(catalog.row_for_log(events[:1]), task="stale")
    assert await store.put_catalog_row(stale) is False
    ahead = dataclasses.replace(written, last_seq=3, task="ahead")
    assert await store.put_catalog_row(ahead) is False
    assert await store.catalog_row("p1") == written
    current = dataclasses.replace(written, task="rebuilt")
    assert await store.put_catalog_row(current) is True
    assert await store.catalog_row("p1") == current
    assert await store.catalog(CatalogQuery(text="rebuilt")) == [current]
    nobody = dataclasses.replace(current, session_id="nobody", last_seq=1)
    assert await store.put_catalog_row(nobody) is False
    assert await store.catalog_row("nobody") is None


async def session_ids_and_count_walk_every_session(store: Store) -> None:
    assert await store.session_ids() == []
    assert await store.count_sessions() == 0
    sessions = generate(count=30)
    await fill(store, sessions, rows=True)
    ids = sorted(g.session_id for g in sessions)
    assert await store.count_sessions() == len(ids)
    assert await store.session_ids() == ids
    assert await store.session_ids(limit=5) == ids[:5]
    assert await store.session_ids(ids[4], 5) == ids[5:10]
    assert await store.session_ids(ids[-1]) == []
    walked: list[str] = []
    while page := await store.session_ids(walked[-1] if walked else "", 7):
        walked.extend(page)
    assert walked == ids


async def sessions_are_listed_from_the_catalog(store: Store) -> None:
    rows = await _filled(store)
    for limit in (1, 10, 1000):
        newest = catalog.page_of(rows, CatalogQuery(limit=limit))
        expected = [SessionInfo(r.session_id, r.last_seq, r.created, r.updated) for r in newest]
        assert await store.sessions(limit) == expected


async def a_rebuild_leaves_the_catalog_as_appends_wrote_it(store: Store) -> None:
    expected = await _filled(store)
    for row in expected[::3]:  # damage some rows the way a bug or an old version might
        wrong = dataclasses.replace(row, task="wrong", state="running", tenant="beta")
        assert await store.put_catalog_row(wrong)
    seen: list[tuple[int, int]] = []
    total = await catalog.rebuild(store, lambda done, all_: seen.append((done, all_)), batch=7)
    assert total == len(expected)
    assert seen and seen[-1] == (len(expected), len(expected))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    for row in expected:
        assert await store.catalog_row(row.session_id) == row
    query = CatalogQuery(tenant="beta", limit=1000)
    assert await store.catalog(query) == catalog.page_of(expected, query)


async def a_snapshot_is_kept_unless_an_older_one_would_replace_it(store: Store) -> None:
    assert await store.get_snapshot("s1") is None
    five = Snapshot("s1", 5, "v1", b"\x00five\xff")
    await store.put_snapshot(five)
    assert await store.get_snapshot("s1") == five
    await store.put_snapshot(Snapshot("s1", 3, "v1", b"three"))
    assert await store.get_snapshot("s1") == five
    seven = Snapshot("s1", 7, "v2", b"seven" * 10_000)
    await store.put_snapshot(seven)
    assert await store.get_snapshot("s1") == seven
    other = Snapshot("s2", 1, "v1", b"")
    await store.put_snapshot(other)
    assert await store.get_snapshot("s2") == other
    assert await store.get_snapshot("s1") == seven


async def forks_are_listed_by_parent_with_cursors_and_tenants(store: Store) -> None:
    sessions = generate()
    await fill(store, sessions, rows=True)
    rows = reference(sessions)
    rng = random.Random(11)
    parents = sessions[:15]
    for index, g in enumerate(parents):
        for k in range(index % 4):  # none to three forks each, over every tenant
            open_ = [e for e in g.events if not isinstance(e.payload, SessionEnded)]
            at = rng.randrange(1, len(open_) + 1)  # never at `session.ended` (fork.py refuses)
            created = g.events[0].payload
            assert isinstance(created, SessionCreated)
            child = f"{g.session_id}-fork{k}"
            forked = SessionForked(
                g.session_id, at, g.events[at - 1].id, "digest", model=created.model,
                metadata=created.metadata,
            )  # fmt: skip
            own = [
                Event(child, at + 1, f"{child}-e1", _time(5, k), forked),
                Event(child, at + 2, f"{child}-e2", _time(6, index % 3), UserMessage(user("go"))),
            ]
            prefix = [dataclasses.replace(e, session_id=child) for e in g.events[:at]]
            row = catalog.row_for_log([*prefix, *own])
            await store.fork(child, ForkLink(g.session_id, at), own, row=row)
            rows.append(row)
    assert sum(1 for r in rows if r.parent) == sum(i % 4 for i in range(len(parents)))
    for parent in (*(g.session_id for g in parents[:5]), "", "nobody"):
        for tenant in (*TENANTS, None):
            every = CatalogQuery(tenant=tenant, parent=parent)
            assert await store.catalog_counts(every) == catalog.counts_of(rows, every)
            for sort in catalog.SORTS:
                seen: list[CatalogRow] = []
                cursor = None
                while page := await store.catalog(
                    dataclasses.replace(every, sort=sort, after=cursor, limit=2)
                ):
                    seen.extend(page)
                    cursor = catalog.sort_key(page[-1], sort)
                whole = dataclasses.replace(every, sort=sort, limit=10_000)
                assert seen == catalog.page_of(rows, whole), (parent, tenant, sort)


CATALOG_CHECKS: list[Check] = [
    rows_written_by_appends_equal_the_fold_of_the_log,
    an_append_with_a_row_writes_that_row,
    pages_and_counts_equal_the_reference_for_every_filter_and_sort,
    every_filter_alone_agrees_with_the_reference,
    paging_with_cursors_sees_every_session_once,
    experiments_equal_the_reference,
    usage_equals_the_reference_by_day_and_model,
    admit_refuses_a_start_past_max_running_and_writes_nothing,
    put_catalog_row_writes_only_at_the_logs_last_seq,
    session_ids_and_count_walk_every_session,
    sessions_are_listed_from_the_catalog,
    a_rebuild_leaves_the_catalog_as_appends_wrote_it,
    a_snapshot_is_kept_unless_an_older_one_would_replace_it,
    forks_are_listed_by_parent_with_cursors_and_tenants,
]
