"""One process of the admission test: `python -m tests.postgres.admit_worker URL PREFIX N`
opens its own store, says `ready`, waits for a line on stdin, then appends the first batch
of N new sessions of tenant `acme` at once, each admitted under `max_running` 3, and prints
the ids admitted as JSON."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import sys

from tests.postgres.catalog_support import crafted_row

from tether.errors import QuotaExceeded
from tether.store.catalog import Admit
from tether.store.postgres import PostgresStore
from tether.testing.store_conformance import _sample, make_events

ADMIT = Admit("acme", 3)


async def main(url: str, prefix: str, count: int) -> None:
    store = PostgresStore(f"{url}&pool_size={count}")
    await asyncio.gather(*(store.now() for _ in range(count)))  # every connection open
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    async def start(i: int) -> str | None:
        session_id = f"{prefix}{i:02d}"
        row = dataclasses.replace(
            crafted_row(i, random.Random(i)), session_id=session_id, tenant="acme", state="running"
        )
        try:
            await store.append(
                session_id, make_events(session_id, 1, _sample(1)), 0, row=row, admit=ADMIT
            )
        except QuotaExceeded:
            return None
        return session_id

    admitted = [s for s in await asyncio.gather(*(start(i) for i in range(count))) if s]
    print(json.dumps(admitted), flush=True)
    await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
