"""A PostgreSQL blip loses nothing a worker knew: its connections cut under it (as a restart
does), a leased commit is tried again on a new one and lands; a commit that landed though its
answer was lost is accepted once, by the database's own check of the batch's ids."""

from __future__ import annotations

import secrets

from blipping import Blipping
from tether.events import SessionCreated, UserMessage
from tether.messages import user
from tether.session.log import SessionLog
from tether.store.postgres import PostgresStore


async def _cut(control: PostgresStore, application_name: str) -> int:
    row = await control.fetch_one(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
        (application_name,),
    )
    return 0 if row is None else int(row[0])


async def test_a_leased_commit_survives_its_connections_being_cut(pg_url: str) -> None:
    name = f"tether-blip-{secrets.token_hex(4)}"
    store = PostgresStore(f"{pg_url}&application_name={name}")
    control = PostgresStore(pg_url)
    log = SessionLog(store, "s")
    log.lease = await store.claim("s", "w1", 30)
    await log.append(SessionCreated(model="scripted", system=None, tools={}))
    assert await _cut(control, name) >= 1  # the pooled connection is gone
    [event] = await log.append(UserMessage(user("after the blip")))
    stored = await control.read("s")
    assert [(e.seq, e.id) for e in stored][1:] == [(2, event.id)]
    await store.close()
    await control.close()


async def test_a_commit_that_landed_with_its_answer_lost_is_accepted_once(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    blipping = Blipping(store)  # type: ignore[arg-type]
    log = SessionLog(blipping, "s")  # type: ignore[arg-type]
    log.lease = await store.claim("s", "w1", 30)
    await log.append(SessionCreated(model="scripted", system=None, tools={}))
    blipping.fail_appends, blipping.land = 2, True
    [event] = await log.append(UserMessage(user("once")))
    stored = await store.read("s")
    assert [e.id for e in stored].count(event.id) == 1 and len(stored) == 2
    assert blipping.appends_tried == 4
    await store.close()
