"""A worker process for the shared rate-limit test: sends `--calls` model calls to a
loopback backend through its own gateway, spending from budgets shared in PostgreSQL.

Run as `python -m tests.postgres.rate_worker PG_URL BASE_URL --rpm N --calls N [--headroom S]`;
prints one JSON line: calls answered, calls failed, seconds taken.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from tether.errors import ProviderError
from tether.messages import user
from tether.providers.base import ModelRequest
from tether.providers.registry import model_from_string
from tether.scheduler.gateway import Gateway, GatewayConfig
from tether.scheduler.shared_limits import SharedLimits
from tether.store.postgres import PostgresStore


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("pg_url")
    parser.add_argument("base_url")
    parser.add_argument("--rpm", type=float, required=True)
    parser.add_argument("--calls", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--headroom", type=float, default=1.0)
    args = parser.parse_args()

    store = PostgresStore(args.pg_url)
    codec = model_from_string(f"openai-compatible:sim@{args.base_url}")
    # The gateway knows no limit of its own here: only the shared budget holds it back.
    gateway = Gateway(
        SharedLimits(
            codec,
            store,
            backend="loopback",
            requests_per_minute=args.rpm,
            headroom=args.headroom,
        ),
        GatewayConfig(max_concurrency=args.concurrency, learn_from_headers=False),
    )
    request = ModelRequest("sim", None, [user("hello")], max_output_tokens=16)
    answered = failed = 0
    started = time.monotonic()

    async def one() -> None:
        nonlocal answered, failed
        try:
            await gateway.complete(request)
            answered += 1
        except ProviderError:
            failed += 1

    await asyncio.gather(*(one() for _ in range(args.calls)))
    print(
        json.dumps({"answered": answered, "failed": failed, "seconds": time.monotonic() - started})
    )
    await gateway.aclose()
    await store.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
