"""A tenant cannot make the server call where the operator did not allow: specs whose model
would call such a URL are refused where they are validated, before anything is created.

The server-level tests run `tether serve` with no workers, and name only literal addresses
(or localhost), so nothing here can open a connection to a non-loopback address even if the
code under test is wrong. The in-process tests stub the resolver."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from providers.fake_servers import FakeServer
from server.support import ACME, serve
from server.test_tenancy import chat_answer
from tether.providers.endpoints import EndpointPolicy
from tether.runtime.base import CapabilityRefused, SessionSpec
from tether.runtime.local import LocalRuntime
from tether.runtime.worker import Worker
from tether.store.memory import MemoryStore
from tether.testing.runtime_conformance import Observer

ADDRESS_CLASSES = {
    "loopback": "127.0.0.1",
    "loopback, another": "127.1.2.3",
    "loopback IPv6": "[::1]",
    "private 10/8": "10.0.0.1",
    "private 172.16/12": "172.16.5.4",
    "private 192.168/16": "192.168.0.1",
    "metadata": "169.254.169.254",
    "link-local IPv6": "[fe80::1]",
    "unique local IPv6": "[fd00:ec2::254]",
    "shared 100.64/10": "100.64.0.1",
    "unspecified": "0.0.0.0",
    "IPv4-mapped loopback": "[::ffff:127.0.0.1]",
    "localhost by name": "localhost",
}


def auth() -> dict[str, str]:
    return {"authorization": f"Bearer {ACME}"}


async def refused(client: httpx.AsyncClient, model: str) -> str:
    response = await client.post(
        "/v1/sessions", headers=auth(), json={"model": model, "task": "secret"}
    )
    assert response.status_code == 422, (model, response.text)
    error = response.json()["error"]
    assert error["code"] == "capability_refused", error
    return str(error["message"])


async def test_every_non_public_address_class_is_refused_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    # Any host on port 80 or 443 is allowed by prefix: only the address class refuses.
    allow = ("--allow-endpoint", "http://*", "--allow-endpoint", "https://*")
    with serve(tmp_path, "--workers", "0", *allow) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            for name, host in ADDRESS_CLASSES.items():
                message = await refused(client, f"openai-compatible:m@http://{host}/v1")
                assert "not a public address" in message, (name, message)
                await refused(client, f"openai-compatible:m@https://{host}/v1")
            listed = await client.get("/v1/sessions", headers=auth())
    assert listed.json()["sessions"] == []


async def test_urls_and_hosts_the_operator_did_not_configure_are_refused(tmp_path: Path) -> None:
    with serve(tmp_path, "--workers", "0") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            for model in (
                "openai-compatible:m@http://127.0.0.1:9/v1",
                "openai-compatible:m@https://203.0.113.7/v1",
                "vllm:m",  # vLLM's default, localhost:8000, which nobody configured
                "ollama:m",  # likewise localhost:11434
            ):
                message = await refused(client, model)
                assert "not an endpoint this server allows" in message, message
            listed = await client.get("/v1/sessions", headers=auth())
    assert listed.json()["sessions"] == []


def stub(address: str) -> object:
    def resolve(host: str, port: int) -> Sequence[str]:
        return [address]

    return resolve


async def test_a_name_that_resolves_inside_is_refused_by_the_runtime() -> None:
    policy = EndpointPolicy(("https://*",), resolve=stub("169.254.169.254"))  # type: ignore[arg-type]
    store = MemoryStore()
    async with LocalRuntime(store, workers=0, endpoints=policy) as rt:
        spec = SessionSpec(model="openai-compatible:m@https://metadata.internal/v1", task="x")
        with pytest.raises(CapabilityRefused, match=r"169\.254\.169\.254"):
            await rt.start(spec)
    assert await store.sessions() == []


async def test_a_worker_refuses_a_stored_session_whose_model_it_may_not_call() -> None:
    """A session written by a laxer process (no policy) is failed by a worker with one, and
    its backend hears nothing."""
    async with FakeServer(lambda r: chat_answer("never")) as backend:
        store = MemoryStore()
        async with LocalRuntime(store, workers=0) as lax:
            ref = await lax.start(
                SessionSpec(model=f"openai-compatible:m@{backend.url}/v1", task="x")
            )
        worker = Worker(store, poll_interval=0.02, endpoints=EndpointPolicy())
        running = asyncio.create_task(worker.run())
        try:
            async with LocalRuntime(store, workers=0) as rt:
                status = await Observer(rt, ref).until("the end", lambda s: s.terminal)
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await worker.stop()
    assert status.state == "failed"
    assert "not an endpoint this server allows" in (status.view.stop_detail or "")
    assert backend.requests == []
