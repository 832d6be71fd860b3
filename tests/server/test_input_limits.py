"""What one request may hold, over a real `tether serve`: a start's metadata (keys, key
length, value size, total, nesting, items) and its texts, a message, an answer's data; each
refused with the limit named and nothing created; the operator's `--limit` moves them; and
40 starts just under the limits cost the server little memory (the latency figures of the
same run: `bench/bench_tenant_memory.py`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import psutil
import pytest

from server.support import ACME, GLOBEX, TETHER, serve
from tether.server.bounds import InputLimits
from tether.testing.runtime_fixtures import MODEL
from tether.testing.tenant_input import SHAPES, near_limits, oversized

HEADERS = {"authorization": f"Bearer {ACME}"}
MIB = 1 << 20


async def sessions_of(client: httpx.AsyncClient, token: str) -> int:
    listed = await client.get(
        "/v1/sessions?limit=500", headers={"authorization": f"Bearer {token}"}
    )
    return len(listed.json()["sessions"])


def rss(server: subprocess.Popen[str]) -> int:
    return int(psutil.Process(server.pid).memory_info().rss)


async def test_forty_starts_of_a_mebibyte_of_metadata_are_refused_naming_the_limit(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, "--workers", "0") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            refused: list[tuple[int, str, str]] = []
            for i in range(40):
                body, limit = oversized(i, MODEL)
                answer = await client.post("/v1/sessions", headers=HEADERS, json=body)
                refused.append((answer.status_code, answer.json()["error"]["message"], limit))
            made = await sessions_of(client, ACME)
    for status, message, limit in refused:
        assert status in (413, 422), message
        assert f"({limit})" in message, (limit, message)
    assert {limit for _, _, limit in refused} == set(SHAPES)
    assert made == 0  # nothing was created


async def test_forty_starts_just_under_the_limits_grow_the_server_by_at_most_50_mib(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, "--workers", "0") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            # Warm: the first start, listing and poll import and build what they use.
            warm = await client.post("/v1/sessions", headers=HEADERS, json=near_limits(0, MODEL))
            assert warm.status_code == 201, warm.text
            assert await sessions_of(client, GLOBEX) == 0
            before = rss(server.process)
            for i in range(1, 41):
                body = near_limits(i, MODEL)
                answer = await client.post("/v1/sessions", headers=HEADERS, json=body)
                assert answer.status_code == 201, answer.text[:300]
            assert await sessions_of(client, GLOBEX) == 0  # another tenant's first page
            assert await sessions_of(client, ACME) == 41
            grown = rss(server.process) - before
    assert grown <= 50 * MIB, f"the server grew by {grown / MIB:.1f} MiB"


async def test_texts_past_text_bytes_are_refused_and_the_body_past_body_bytes(
    tmp_path: Path,
) -> None:
    limit = InputLimits().text_bytes
    with serve(tmp_path, "--workers", "0") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            long_task = await client.post(
                "/v1/sessions", headers=HEADERS, json={"model": MODEL, "task": "é" * limit}
            )
            long_system = await client.post(
                "/v1/sessions",
                headers=HEADERS,
                json={"model": MODEL, "task": "hang", "system": "s" * (limit + 1)},
            )
            started = await client.post(
                "/v1/sessions", headers=HEADERS, json={"model": MODEL, "task": "hang"}
            )
            sid = started.json()["session_id"]
            long_message = await client.post(
                f"/v1/sessions/{sid}/messages", headers=HEADERS, json={"text": "m" * (limit + 1)}
            )
            too_big = await client.post(
                "/v1/sessions", headers=HEADERS, json={"model": MODEL, "task": "x" * (MIB + 1)}
            )
            events = (await client.get(f"/v1/sessions/{sid}/events", headers=HEADERS)).json()
    assert long_task.status_code == 413, long_task.text[:300]
    assert f"task has {2 * limit} bytes; the limit is {limit} (text_bytes)" in long_task.text
    assert long_system.status_code == 413 and "system has" in long_system.text
    assert long_message.status_code == 413 and "(text_bytes)" in long_message.text
    assert too_big.status_code == 413 and "(body_bytes)" in too_big.text
    assert len(events["events"]) == 2  # the refused message added nothing


async def test_the_operator_moves_a_limit_with_limit(
    tmp_path: Path,
) -> None:
    many_keys = {"model": MODEL, "task": "hang", "metadata": {f"k{n}": n for n in range(100)}}
    with serve(tmp_path, "--workers", "0", "--limit", "metadata_keys=100") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            allowed = await client.post("/v1/sessions", headers=HEADERS, json=many_keys)
            many_keys["metadata"] = {f"k{n}": n for n in range(101)}
            refused = await client.post("/v1/sessions", headers=HEADERS, json=many_keys)
    assert allowed.status_code == 201, allowed.text
    assert refused.status_code == 422
    assert "metadata has 101 keys; the limit is 100 (metadata_keys)" in refused.text


def test_a_bad_limit_stops_the_server_before_it_listens() -> None:
    for bad, problem in (("metadata_kyes=5", "NAME one of"), ("text_bytes=0", "positive")):
        run = subprocess.run(
            [*TETHER, "serve", "--no-auth", "--port", "0", "--limit", bad],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 2 and problem in run.stderr, run.stderr


def test_input_limits_parse_names_and_values() -> None:
    limits = InputLimits.parse(["metadata-keys=10", "text_bytes=1024"])
    assert (limits.metadata_keys, limits.text_bytes) == (10, 1024)
    with pytest.raises(ValueError, match="metadata_bytes"):
        InputLimits.parse(["metadata_bytes=lots"])
