"""`GET /v1/sessions` searched, filtered and sorted over a real `tether serve`: a thousand
sessions paged to their end under each sort and with filters on, each seen exactly once;
search by id, task and metadata; filters by state, stop reason, model, creation time and
metadata; counts per state; tokens and cost per row; and never another tenant's session,
whatever the query names."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from server.support import ACME, GLOBEX, serve
from server.test_listing import pages
from tether.runtime.base import SessionSpec
from tether.runtime.http import HttpRuntime
from tether.testing.runtime_conformance import Observer, spec

TWIN = "python:tether.testing.runtime_fixtures:twin_a"


def ids(got: list[dict[str, Any]]) -> list[str]:
    return [s["session_id"] for p in got for s in p["sessions"]]


async def start_all(rt: HttpRuntime, specs: list[SessionSpec]) -> list[str]:
    started: list[str] = []
    for first in range(0, len(specs), 25):
        refs = await asyncio.gather(*(rt.start(s) for s in specs[first : first + 25]))
        started += [ref.session_id for ref in refs]
    return started


async def test_a_thousand_sessions_page_to_their_end_under_each_sort_and_filter(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, "--workers", "0") as server:
        acme, globex = HttpRuntime(server.url, ACME), HttpRuntime(server.url, GLOBEX)
        try:
            teams = ["blue" if n % 4 == 0 else "red" for n in range(1_000)]
            specs = [
                spec(f"echo task {n:04d}", metadata={"team": team, "n": n})
                for n, team in enumerate(teams)
            ]
            mine = await start_all(acme, specs)
            theirs = await start_all(globex, [spec("echo task 0001", metadata={"team": "blue"})])
            blue = {sid for sid, team in zip(mine, teams, strict=True) if team == "blue"}
            async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
                begun = time.perf_counter()
                got = await pages(client, ACME, limit=100)
                first_pass = time.perf_counter() - begun
                assert len(got) == 10 and len(ids(got)) == 1_000 and set(ids(got)) == set(mine)
                begun = time.perf_counter()
                for sort in ("updated", "newest", "oldest", "tokens", "cost"):
                    listed = ids(await pages(client, ACME, limit=100, sort=sort))
                    assert len(listed) == 1_000 and set(listed) == set(mine), sort
                warm = (time.perf_counter() - begun) / 50
                newest = ids(await pages(client, ACME, limit=250, sort="newest"))
                assert newest == list(reversed(ids(await pages(client, ACME, sort="oldest"))))

                # A filter on: each of its 250 sessions once, with counts on every page.
                filtered = await pages(
                    client, ACME, limit=30, metadata="team=blue", sort="oldest", counts="true"
                )
                assert len(ids(filtered)) == 250 and set(ids(filtered)) == blue
                assert ids(filtered) == [s for s in newest[::-1] if s in blue]
                assert all(p["counts"] == {"pending": 250} for p in filtered)
                assert not set(ids(filtered)) & set(theirs)
                # Search and a filter together, paged a row at a time.
                hits = ids(await pages(client, ACME, limit=1, q="TASK 01", metadata="team=red"))
                wanted = {mine[n] for n in range(100, 200) if teams[n] == "red"}
                assert len(hits) == len(wanted) == 75 and set(hits) == wanted
                # A number in the metadata is matched as its JSON.
                assert ids(await pages(client, ACME, metadata="n=7")) == [mine[7]]
                print(
                    f"\n1,000 sessions: first listing {first_pass:.2f} s for 10 pages of 100 "
                    f"(from the catalog); then {1000 * warm:.0f} ms a page"
                )
                assert warm < 5.0  # a gross regression only: never a timing test
        finally:
            await acme.close()
            await globex.close()


async def test_search_filters_sorts_and_counts_and_never_reach_another_tenant(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, "--workers", "2") as server:
        acme, globex = HttpRuntime(server.url, ACME), HttpRuntime(server.url, GLOBEX)
        try:
            short = await acme.start(spec("echo pelican", metadata={"team": "birds"}))
            long = await acme.start(spec("note 3", metadata={"team": "birds", "rank": 2}))
            failed = await acme.start(spec("fail"))
            twin = await acme.start(replace(spec("zebra crossing"), model=TWIN))
            waiting = await acme.start(spec("guarded launch the rocket"))
            for ref in (short, long, failed, twin):
                await Observer(acme, ref).settled()
            await Observer(acme, waiting).until(
                "its call", lambda s: bool(s.view.pending_approvals)
            )
            theirs = await globex.start(spec("echo secret-marmot", metadata={"vault": "k7"}))
            await Observer(globex, theirs).settled()
            auth = {"Authorization": f"Bearer {ACME}"}
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:

                async def rows(token: str = ACME, **query: Any) -> list[dict[str, Any]]:
                    return [s for p in await pages(client, token, **query) for s in p["sessions"]]

                async def found(token: str = ACME, **query: Any) -> set[str]:
                    return {s["session_id"] for s in await rows(token, **query)}

                every = {r.session_id for r in (short, long, failed, twin, waiting)}
                assert await found() == every
                # Search: the task, case-insensitive; the id; a metadata value.
                assert await found(q="PELICAN") == {short.session_id}
                assert await found(q=twin.session_id[-10:]) == {twin.session_id}
                assert await found(q="birds") == {short.session_id, long.session_id}
                assert await found(metadata="team=birds") == {short.session_id, long.session_id}
                assert await found(metadata=["team=birds", "rank=2"]) == {long.session_id}
                assert await found(metadata="team=fish") == set()
                # Another tenant's text, id and metadata match nothing of it, for either side.
                assert await found(q="secret-marmot") == set()
                assert await found(q=theirs.session_id) == set()
                assert await found(metadata="vault=k7") == set()
                assert await found(id_prefix=theirs.session_id) == set()
                assert await found(GLOBEX, q="pelican") == set()
                assert await found(GLOBEX, metadata="team=birds") == set()
                assert await found(GLOBEX, q="secret-marmot") == {theirs.session_id}

                assert await found(stop_reason="error") == {failed.session_id}
                assert await found(stop_reason="end_turn,error") == every - {waiting.session_id}
                models = {s["session_id"]: s["model"] for s in await rows()}
                assert models[twin.session_id] != models[short.session_id]
                assert await found(model=models[twin.session_id]) == {twin.session_id}
                created = {s["session_id"]: s["created"] for s in await rows()}
                cut = created[failed.session_id]
                assert await found(created_after=cut) == {
                    failed.session_id, twin.session_id, waiting.session_id
                }  # fmt: skip
                assert await found(created_before=cut) == {short.session_id, long.session_id}
                assert await found(created_after="2999-01-01T00:00:00+01:00") == set()

                # Tokens and cost per row, and the sorts by them.
                by_tokens = await rows(sort="tokens")
                tokens = [s["tokens"] for s in by_tokens]
                assert tokens == sorted(tokens, reverse=True) and tokens[0] > 0
                assert by_tokens[0]["session_id"] == long.session_id  # four answers
                by_cost = await rows(sort="cost", limit=2)
                costs = [s["cost_usd"] for s in by_cost if s["cost_usd"] is not None]
                assert costs == sorted(costs, reverse=True) and costs[0] > 0
                row = next(s for s in by_tokens if s["session_id"] == short.session_id)
                assert row["task"] == "echo pelican" and row["metadata"]["team"] == "birds"
                assert "tenant" not in row["metadata"] and "runner" not in row["metadata"]

                counted = (await client.get("/v1/sessions?counts=true", headers=auth)).json()
                assert counted["counts"] == {"idle": 4, "waiting_approval": 1}
                narrowed = (
                    await client.get(
                        "/v1/sessions",
                        params={"counts": "true", "state": "idle", "q": "birds"},
                        headers=auth,
                    )
                ).json()
                assert narrowed["counts"] == {"idle": 2}  # every filter but the state's
                assert "counts" not in (await client.get("/v1/sessions", headers=auth)).json()
        finally:
            await acme.close()
            await globex.close()
