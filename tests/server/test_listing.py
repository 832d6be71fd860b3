"""`GET /v1/sessions` a page at a time over a real `tether serve`: cursors to the end (null on
the last page), only the tenant's own sessions, filters by state and id prefix, and refusals of
what the server did not write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.support import ACME, GLOBEX, check_documented, serve
from tether.errors import UsageError
from tether.runtime.base import SessionRef
from tether.runtime.http import HttpRuntime
from tether.runtime.listing import decode_cursor, encode_cursor
from tether.testing.runtime_conformance import Observer, spec


async def start_many(rt: HttpRuntime, count: int, task: str = "echo hi") -> list[str]:
    """Start `count` sessions, a few at a time; their ids in the order started."""
    ids: list[str] = []
    for first in range(0, count, 20):
        refs = await asyncio.gather(
            *(rt.start(spec(task)) for _ in range(first, min(count, first + 20)))
        )
        ids += [ref.session_id for ref in refs]
    return ids


async def pages(client: httpx.AsyncClient, token: str, **query: Any) -> list[dict[str, Any]]:
    """Every page of the list, following `next_cursor` to its end."""
    got: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params = {**query, **({"cursor": cursor} if cursor else {})}
        answer = await client.get(
            "/v1/sessions", params=params, headers={"Authorization": f"Bearer {token}"}
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        check_documented(body, "SessionList")
        got.append(body)
        cursor = body["next_cursor"]
        if cursor is None:
            return got
        assert len(got) < 100, "the cursor never ran out"


async def test_three_hundred_sessions_page_to_their_end(tmp_path: Path) -> None:
    with serve(tmp_path, "--workers", "0") as server:
        acme, globex = HttpRuntime(server.url, ACME), HttpRuntime(server.url, GLOBEX)
        try:
            mine = await start_many(acme, 300)
            theirs = await start_many(globex, 25)
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
                got = await pages(client, ACME, limit=50)
                assert [len(p["sessions"]) for p in got] == [50] * 6
                listed = [s["session_id"] for p in got for s in p["sessions"]]
                assert sorted(listed) == sorted(mine)  # each once, none of globex's
                keys = [(s["updated"], s["session_id"]) for p in got for s in p["sessions"]]
                assert keys == sorted(keys, reverse=True)  # newest first, across pages

                # A page size that does not divide the count: the last page is short.
                assert [len(p["sessions"]) for p in await pages(client, ACME, limit=70)] == [
                    70, 70, 70, 70, 20,
                ]  # fmt: skip
                # The other tenant pages through its own only.
                theirs_listed = await pages(client, GLOBEX, limit=10)
                assert sorted(
                    s["session_id"] for p in theirs_listed for s in p["sessions"]
                ) == sorted(theirs)

                # Without a cursor the answer is the first page, as before (plus next_cursor).
                first = (await client.get(
                    "/v1/sessions", headers={"Authorization": f"Bearer {ACME}"}
                )).json()  # fmt: skip
                assert len(first["sessions"]) == 50 and first["next_cursor"] is not None
                assert len(await acme.sessions(limit=500)) == 300

                # A session updated after a page was read moves to the top, and a client
                # paging on from its cursor does not see it twice.
                page_one = got[0]
                oldest = listed[-1]
                await acme.cancel(SessionRef(oldest))
                rest = await pages(client, ACME, limit=50, cursor=page_one["next_cursor"])
                later = [s["session_id"] for p in rest for s in p["sessions"]]
                assert oldest not in later and len(later) == 249
        finally:
            await acme.close()
            await globex.close()


async def test_the_list_filters_by_state_and_id_prefix(tmp_path: Path) -> None:
    with serve(tmp_path, "--workers", "2") as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            idle = [await rt.start(spec(f"echo {n}")) for n in range(3)]
            waiting = [await rt.start(spec(f"guarded {n}")) for n in range(2)]
            for ref in idle:
                await Observer(rt, ref).settled()
            for ref in waiting:
                await Observer(rt, ref).until(
                    "its call to wait", lambda s: bool(s.view.pending_approvals)
                )
            auth = {"Authorization": f"Bearer {ACME}"}
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:

                async def ids(**query: Any) -> set[str]:
                    return {s["session_id"] for p in await pages(client, ACME, **query)
                            for s in p["sessions"]}  # fmt: skip

                assert await ids(state="waiting_approval") == {r.session_id for r in waiting}
                assert await ids(state="idle", limit=1) == {r.session_id for r in idle}
                assert await ids(state="idle,waiting_approval") == {
                    r.session_id for r in [*idle, *waiting]
                }
                assert await ids(state="failed") == set()
                target = idle[1].session_id
                assert await ids(id_prefix=target) == {target}
                assert await ids(id_prefix=target[:-4]) >= {target}
                assert await ids(id_prefix="no-such-") == set()

                for query, says in [
                    ({"state": "sleeping"}, "unknown state 'sleeping'"),
                    ({"cursor": "not a cursor"}, "is not one this server gave"),
                    ({"cursor": encode_cursor("updated", ("x", "y"))[:-3]}, "is not one"),
                    ({"cursor": encode_cursor("tokens", (5.0, "y"))}, "is for sort=tokens"),
                    ({"id_prefix": "x" * 201}, "id_prefix is longer than 200"),
                    ({"q": "x" * 201}, "q is longer than 200"),
                    ({"sort": "id"}, "sort must be one of updated, newest, oldest"),
                    ({"created_after": "yesterday"}, "created_after must be an ISO 8601"),
                    ({"created_before": "2026-13-01"}, "created_before must be an ISO 8601"),
                    ({"metadata": "team"}, "metadata must be KEY=VALUE"),
                    ({"model": ",".join(["m"] * 3 + [f"m{n}" for n in range(21)])}, "model"),
                    ({"counts": "yes"}, "counts must be true or false"),
                    ({"order": "asc"}, "unknown query parameter 'order'"),
                ]:
                    answer = await client.get("/v1/sessions", params=query, headers=auth)
                    assert answer.status_code == 422, (query, answer.text)
                    assert says in answer.json()["error"]["message"], answer.text
        finally:
            await rt.close()


def test_a_cursor_carries_its_sort_and_row_and_nothing_else_decodes() -> None:
    key = ("2026-01-02T03:04:05.678Z", "ses_0123")
    assert decode_cursor(encode_cursor("newest", key), "newest") == key
    assert "=" not in encode_cursor("newest", key)
    assert decode_cursor(encode_cursor("cost", (0.25, "ses_1")), "cost") == (0.25, "ses_1")
    for wrong in (encode_cursor("tokens", ("text", "ses_1")), encode_cursor("nope", key)):
        with pytest.raises(UsageError, match="is not one this server gave"):
            decode_cursor(wrong, "tokens")


def test_a_metadata_value_is_cut_as_it_is_written_never_encoded_whole() -> None:
    from tether.messages import canonical_json
    from tether.store.catalog import TEXT, as_text

    value = {"b": list(range(100_000)), "a": "x" * 10}
    assert as_text(value) == canonical_json(value)[:TEXT]
    # What lies past the cut is never reached: encoding it whole would raise.
    assert as_text(["y" * (2 * TEXT), object()]) == '["' + "y" * (TEXT - 2)  # type: ignore[list-item]


async def test_a_row_carries_twenty_metadata_keys_of_three_hundred_characters() -> None:
    from tether.runtime.local import LocalRuntime
    from tether.store.memory import MemoryStore

    async with LocalRuntime(MemoryStore(), workers=0) as rt:
        acme = rt.for_tenant("acme")
        for n in range(30):
            metadata = {f"k{k}": f"{n}-{k}".ljust(5_000, "v") for k in range(40)}
            await acme.start(spec("hang", metadata=metadata))
        page = await acme.sessions(50, counts=True)
    assert len(page) == 30 and page.counts == {"pending": 30} and page.next_cursor is None
    row = page[0].to_json()["metadata"]
    assert isinstance(row, dict) and len(row) == 20 and all(len(v) == 300 for v in row.values())
