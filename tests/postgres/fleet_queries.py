"""What the fleet tests ask of the database while their workers run: who holds work, and how
many sessions have ended. Shared by the chaos, kill and outage tests."""

from __future__ import annotations

from tether.store.postgres import PostgresStore


async def holders(store: PostgresStore) -> set[int]:
    """The pids of the workers holding an unexpired lease (an owner is host:pid:random)."""
    rows = await store.fetch_all(
        "SELECT DISTINCT owner FROM tether_leases WHERE expires > extract(epoch FROM now())", ()
    )
    return {int(str(o).rsplit(":", 2)[1]) for (o,) in rows if str(o).count(":") >= 2}


async def ended(store: PostgresStore, ids: list[str]) -> int:
    """How many of the sessions have a `session.ended` as their last event."""
    rows = await store.fetch_all(
        "SELECT count(*) FROM tether_sessions WHERE session_id = ANY(%s) "
        "AND last_type = 'session.ended'",
        (ids,),
    )
    return int(rows[0][0])
