"""`LocalRuntime.sessions`: a tenant's pages of the catalog, and never another tenant's rows,
whatever cursor or filter it sends; an unscoped runtime lists every tenant's."""

from __future__ import annotations

from tether.runtime.local import LocalRuntime
from tether.store import Store
from tether.testing.runtime_conformance import spec


async def test_no_cursor_or_filter_of_one_tenant_reveals_anothers_sessions(store: Store) -> None:
    async with LocalRuntime(store, workers=0) as rt:
        acme, globex = rt.for_tenant("acme"), rt.for_tenant("globex")
        theirs = [
            (await acme.start(spec(f"hang acme secret {n}", metadata={"team": "red"}))).session_id
            for n in range(4)
        ]
        mine = [
            (await globex.start(spec(f"hang globex {n}", metadata={"team": "red"}))).session_id
            for n in range(3)
        ]
        acme_cursor = (await acme.sessions(1, sort="oldest")).next_cursor
        assert acme_cursor is not None
        everything = [
            {},
            {"cursor": acme_cursor, "sort": "oldest"},
            {"q": "acme secret"},
            {"q": theirs[0]},
            {"id_prefix": theirs[1]},
            {"metadata": {"team": "red"}},
            {"state": "pending"},
            {"model": "scripted:runtime"},
            {"sort": "tokens"},
        ]
        for options in everything:
            page = await globex.sessions(50, counts=True, **options)  # type: ignore[arg-type]
            listed = {s.session_id for s in page}
            assert listed <= set(mine) and not listed & set(theirs), options
            assert sum((page.counts or {}).values()) <= len(mine), (options, page.counts)
        # acme's cursor moves globex to acme's place in the order, and no further: globex's
        # own sessions after it, all newer than acme's oldest, are listed.
        after = await globex.sessions(50, cursor=acme_cursor, sort="oldest")
        assert [s.session_id for s in after] == mine
        # Unscoped (no authentication): every tenant's.
        assert {s.session_id for s in await rt.sessions(50)} == {*theirs, *mine}


def test_a_summary_is_its_catalog_row_as_described() -> None:
    from catalog_fill import session_events
    from tether.runtime.base import SessionSummary
    from tether.store import catalog

    row = catalog.row_for_log(session_events("ses_1", "acme", 1.78e9, 7))
    summary = SessionSummary.of(row)
    assert summary.to_json() == catalog.describe(row)
    assert SessionSummary.from_json(summary.to_json()) == summary
    assert (summary.task, summary.metadata, summary.state) == (
        "task 7 of acme",
        {"n": "7"},
        "pending",
    )
