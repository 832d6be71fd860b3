"""`tether worker --metrics-port`: a bare `GET /metrics` on a worker process, names only for
the bearer of the operator's token, anything else a 404; and a real worker process that
ends a poisoned session counts the takeover and the park for Prometheus."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tether.cli.main import main
from tether.events import ModelResponded, SessionCreated, ToolStarted, UserMessage
from tether.fold import Folder
from tether.messages import Message, ToolCall, user
from tether.server.scrape import listen
from tether.session.log import SessionLog
from tether.store import SQLiteStore
from tether.testing.runtime_conformance import WAIT

OPERATOR = "operator-metrics-token-0123456789"


@pytest.fixture
async def url() -> AsyncIterator[str]:
    server = await listen("127.0.0.1", 0, lambda names: f"named {names}\n", OPERATOR)
    host, port = server.sockets[0].getsockname()[:2]
    yield f"http://{host}:{port}"
    server.close()
    await server.wait_closed()


async def test_names_go_only_to_the_bearer_of_the_operators_token(url: str) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        anyone = await client.get("/metrics")
        wrong = await client.get("/metrics", headers={"Authorization": "Bearer not-the-token"})
        operator = await client.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR}"})
        other = await client.get("/v1/sessions")
        posted = await client.post("/metrics", content=b"{}")
    assert (anyone.status_code, anyone.text) == (200, "named False\n")
    assert anyone.headers["content-type"] == "text/plain; version=0.0.4"
    assert wrong.text == "named False\n" and operator.text == "named True\n"
    assert other.status_code == posted.status_code == 404


async def test_an_oversized_request_head_is_dropped_unanswered(url: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /metrics HTTP/1.1\r\nX-Filler: " + b"x" * 10_000 + b"\r\n\r\n")
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing said
    writer.close()


def test_a_short_metrics_token_stops_the_worker(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'w.db'}"
    assert main(["worker", "--store", store, "--metrics-port", "0", "--metrics-token", "x"]) == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_a_worker_process_serves_its_takeovers_and_parks(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    store = SQLiteStore(str(path))
    log = SessionLog(store, "s")
    await log.append(SessionCreated(model="scripted", system=None, tools={}))
    answer = Message("assistant", (ToolCall("c1", "write", {}),))
    await log.append(UserMessage(user("go")), ModelResponded(answer, stop="tool_calls"))
    await log.append(ToolStarted("c1", "write"))
    await store.mark_runnable("s")
    await store.claim_runnable("dead", ttl=0.1, limit=1)  # a worker died with c1 in flight
    await asyncio.sleep(0.2)
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether", "worker", "--store", f"sqlite:///{path}",
        "--poison-after", "1", "--poll-interval", "0.05", "--concurrency", "3",
        "--metrics-port", str(port),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(WAIT):
            while True:
                if Folder().apply_all(await store.read("s")).terminal:
                    break
                await asyncio.sleep(0.05)
        # The listener is up before the worker takes work: it has been serving all along.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            text = (await client.get("/metrics")).text
    finally:
        proc.terminate()
        stdout, stderr = await proc.communicate()
        await store.close()
    assert f"metrics on http://127.0.0.1:{port}/metrics" in stdout.decode(), stderr.decode()
    assert 'tether_takeovers_total{verdict="poisoned"} 1' in text, text
    assert 'tether_parks_total{reason="poisoned"} 1' in text
    assert 'tether_worker_slots{slot="free"} 3' in text
    assert "tether_gateways_backends 0" in text  # no model was called
