"""The process killed in the backfill test: `python -m tests.postgres.backfill_worker URL`
migrates the store (batches of 5 sessions), printing each batch it commits."""

from __future__ import annotations

import asyncio
import sys

from tether.store import pg_schema
from tether.store.pg_conn import connect


async def main(url: str) -> None:
    conn = await connect(f"{url}&application_name=tether-backfill-test")
    await pg_schema.migrate(
        conn, backfill_batch=5, progress=lambda done, total: print(done, total, flush=True)
    )
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
