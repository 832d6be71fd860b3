"""Two tenants on one real `tether serve` and a real `tether worker`: a session's model calls
reach only the backend its own spec names, even when another tenant's model has the same
name (two loopback endpoints; two `python:` models), on SQLite here and on PostgreSQL in `tests/postgres/test_tenancy.py`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from providers.fake_servers import FakeServer, Received, Reply
from server.support import ACME, GLOBEX, serve, start_worker, stop_worker

DEADLINE = 60.0


def chat_answer(text: str) -> Reply:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }
    return Reply(200, json.dumps(body).encode(), {"content-type": "application/json"})


def asked(server: FakeServer) -> list[str]:
    """The user texts of every request a backend received."""
    texts: list[str] = []
    for received in server.requests:
        for message in received.json()["messages"]:
            if message["role"] == "user":
                texts.append(str(message["content"]))
    return texts


async def finished(client: httpx.AsyncClient, token: str, session_id: str) -> dict[str, object]:
    async with asyncio.timeout(DEADLINE):
        while True:
            status = (await client.get(f"/v1/sessions/{session_id}", headers=auth(token))).json()
            if status["state"] in ("completed", "failed", "canceled"):
                return dict(status)
            await asyncio.sleep(0.05)


def auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def start(client: httpx.AsyncClient, token: str, model: str, task: str) -> str:
    response = await client.post(
        "/v1/sessions",
        headers=auth(token),
        json={"model": model, "task": task, "end_after_turn": True},
    )
    assert response.status_code == 201, response.text
    return str(response.json()["session_id"])


async def check_one_name_two_endpoints(tmp_path: Path, store_url: str) -> None:
    """Tenant acme's model at host a runs first (so a worker keyed by name would keep it),
    then globex's model of the same name at host b: each host hears only its own task."""
    async with (
        FakeServer(lambda r: chat_answer("from host a")) as host_a,
        FakeServer(lambda r: chat_answer("from host b")) as host_b,
    ):
        allow = ["--allow-endpoint", f"{host_a.url}/v1", "--allow-endpoint", f"{host_b.url}/v1"]
        with serve(tmp_path, "--workers", "0", *allow, store=store_url) as server:
            worker = start_worker(store_url, *allow)
            try:
                async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                    first = await start(
                        client, ACME, f"openai-compatible:m@{host_a.url}/v1", "acme question"
                    )
                    done_a = await finished(client, ACME, first)
                    second = await start(
                        client, GLOBEX, f"openai-compatible:m@{host_b.url}/v1", "globex secret"
                    )
                    done_b = await finished(client, GLOBEX, second)
            finally:
                stop_worker(worker)
    assert done_a["state"] == done_b["state"] == "completed"
    assert done_a["last_output"] == "from host a"
    assert done_b["last_output"] == "from host b"
    assert asked(host_a) == ["acme question"]
    assert asked(host_b) == ["globex secret"]


async def check_two_python_models_one_name(tmp_path: Path, store_url: str) -> None:
    with serve(tmp_path, "--workers", "0", store=store_url) as server:
        worker = start_worker(store_url)
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                model = "python:tether.testing.runtime_fixtures:twin_{}"
                first = await start(client, ACME, model.format("a"), "acme question")
                done_a = await finished(client, ACME, first)
                second = await start(client, GLOBEX, model.format("b"), "globex secret")
                done_b = await finished(client, GLOBEX, second)
        finally:
            stop_worker(worker)
    assert done_a["last_output"] == "twin a: acme question"
    assert done_b["last_output"] == "twin b: globex secret"


async def test_one_model_name_on_two_endpoints_reaches_only_each_sessions_own(
    tmp_path: Path,
) -> None:
    await check_one_name_two_endpoints(tmp_path, f"sqlite:///{tmp_path / 'tenancy.db'}")


async def test_two_python_models_with_one_name_each_run_their_own_sessions(
    tmp_path: Path,
) -> None:
    await check_two_python_models_one_name(tmp_path, f"sqlite:///{tmp_path / 'tenancy.db'}")


async def test_a_redirect_never_leads_to_another_endpoint(tmp_path: Path) -> None:
    """The allowed backend answers 302 to another loopback server: it is not followed, the
    session fails with the backend's status, and the other server hears nothing."""
    async with FakeServer(lambda r: chat_answer("never")) as elsewhere:

        def redirect(received: Received) -> Reply:
            return Reply(302, b"", {"location": f"{elsewhere.url}/v1/chat/completions"})

        async with FakeServer(redirect) as allowed:
            model = f"openai-compatible:m@{allowed.url}/v1"
            with serve(
                tmp_path, "--workers", "1", "--allow-endpoint", f"{allowed.url}/v1"
            ) as server:
                async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                    done = await finished(client, ACME, await start(client, ACME, model, "hi"))
    assert len(allowed.requests) >= 1
    assert elsewhere.requests == []
    assert done["state"] == "failed"
    assert done["stop_reason"] == "error"
