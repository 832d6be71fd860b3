"""One experiment id in one process at a time on PostgreSQL: the claim, a lease of the store on
a reserved key, refuses while another holds it and is taken once it runs out by the
database's clock, and is renewed while the experiment runs."""

from __future__ import annotations

from experiment.test_claim import refused_until_it_runs_out, renewed_then_let_go
from tether.store.postgres import PostgresStore


async def test_a_claim_held_elsewhere_refuses_until_it_runs_out(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        await refused_until_it_runs_out(store)
    finally:
        await store.close()


async def test_the_claim_is_renewed_while_it_runs_and_let_go_when_it_is_cancelled(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url)
    try:
        await renewed_then_let_go(store)
    finally:
        await store.close()
