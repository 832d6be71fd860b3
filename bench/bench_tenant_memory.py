"""What one tenant's large inputs cost a real `tether serve` (SQLite, `--workers 0`, two
tenants with tokens), and what the other tenant sees meanwhile: issue 32's reproduction.

1. Default limits: 40 starts of about 1 MiB of metadata each (`tenant_input.oversized`, six
   shapes) are refused, each naming its limit; then 40 starts just under the limits
   (`near_limits`: metadata of 64 keys and ~16 KiB, a ~256 KiB task).
2. The operator lifts the metadata limits (`--limit`): 40 starts of about 1 MiB of metadata
   are taken, so only the caches' byte budgets hold the server's memory.

For each: the server's RSS (psutil) before and after, then the other tenant's first page of
`GET /v1/sessions` and `GET /healthz`, timed from the client (the first request, then the
median of 20). Before issue 32 the same 40 starts took the server from 55 to 655 MiB and the
other tenant's listing took 10.3 s, `/healthz` 3.2 s. It never fails on time.

    .venv/bin/python bench/bench_tenant_memory.py
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from serving import spawn_serve
from tether.testing.runtime_fixtures import MODEL
from tether.testing.tenant_input import near_limits, oversized

TOKENS = {"acme": ["acme-token-0123456789"], "globex": ["globex-token-0123456789"]}
ACME = {"authorization": f"Bearer {TOKENS['acme'][0]}"}
GLOBEX = {"authorization": f"Bearer {TOKENS['globex'][0]}"}
LIFTED = [
    "--limit", "metadata_value_bytes=2000000", "--limit", "metadata_bytes=2000000",
]  # fmt: skip
MIB = 1 << 20


def start_server(directory: Path, extra: list[str]) -> tuple[subprocess.Popen[str], str]:
    tokens = directory / "tokens.json"
    tokens.write_text(json.dumps({"tenants": TOKENS}))
    return spawn_serve(
        "--tokens", str(tokens), "--store", f"sqlite:///{directory / 'serve.db'}",
        "--workers", "0", "--allow-code", "tether.testing.runtime_fixtures:*", *extra,
    )  # fmt: skip


async def timed(client: httpx.AsyncClient, path: str, headers: dict[str, str]) -> float:
    t0 = time.perf_counter()
    answer = await client.get(path, headers=headers)
    took = (time.perf_counter() - t0) * 1000
    assert answer.status_code == 200, answer.text[:200]
    return took


async def latencies(client: httpx.AsyncClient) -> str:
    parts = []
    for name, path, headers in (
        ("other tenant's first page", "/v1/sessions?limit=50", GLOBEX),
        ("/healthz", "/healthz", {}),
    ):
        first = await timed(client, path, headers)
        rest = [await timed(client, path, headers) for _ in range(20)]
        parts.append(f"{name} {first:.1f} ms (then median {statistics.median(rest):.1f} ms)")
    return "; ".join(parts)


async def scenario(title: str, extra: list[str], bodies: list[dict[str, object]]) -> None:
    directory = Path(tempfile.mkdtemp())
    server, url = start_server(directory, extra)
    rss = psutil.Process(server.pid).memory_info
    try:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            warm = await client.post("/v1/sessions", headers=ACME, json=near_limits(0, MODEL))
            assert warm.status_code == 201, warm.text[:200]
            await client.get("/v1/sessions", headers=GLOBEX)
            before = rss().rss
            statuses: dict[str, int] = {}
            t0 = time.perf_counter()
            for body in bodies:
                answer = await client.post("/v1/sessions", headers=ACME, json=body)
                found = re.search(r"\((\w+)\)$", answer.json().get("error", {}).get("message", ""))
                key = f"{answer.status_code} {found.group(1) if found else ''}".strip()
                statuses[key] = statuses.get(key, 0) + 1
            took = time.perf_counter() - t0
            after = rss().rss
            timing = await latencies(client)
            listed = rss().rss
    finally:
        server.terminate()
        server.wait(timeout=60)
    print(f"{title}:")
    print(f"  {len(bodies)} starts in {took:.1f} s: {statuses}")
    print(
        f"  server RSS {before / MIB:.0f} -> {after / MIB:.0f} MiB "
        f"(+{(after - before) / MIB:.1f}), after the listings {listed / MIB:.0f} MiB"
    )
    print(f"  {timing}")


async def main() -> None:
    await scenario(
        "default limits, 40 starts of ~1 MiB metadata",
        [],
        [oversized(i, MODEL)[0] for i in range(40)],
    )
    await scenario(
        "default limits, 40 starts just under them (~16 KiB metadata, ~256 KiB task)",
        [],
        [near_limits(i, MODEL) for i in range(1, 41)],
    )
    await scenario(
        "metadata limits lifted by the operator, 40 starts of ~1 MiB metadata (one value)",
        LIFTED,
        [oversized(6 * i, MODEL)[0] for i in range(40)],
    )


if __name__ == "__main__":
    asyncio.run(main())
