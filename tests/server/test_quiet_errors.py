"""What a real `tether serve` tells a tenant, or anyone, when something is wrong: no more
than they may know. An id no session can have is a 404 naming nothing of the store (on
PostgreSQL too: `tests/postgres/test_quiet_errors.py`); `/metrics` without the operator's
token names no route or tenant; a provider key the server lacks is "not available", while
the operator's log names the variable."""

from __future__ import annotations

from pathlib import Path

import httpx

from server.support import ACME, Server, serve

HEADERS = {"authorization": f"Bearer {ACME}"}
METRICS_TOKEN = "operator-metrics-token-0123"
# Ids no session can have: a NUL (PostgreSQL refuses it in text), other control
# characters, one longer than the document allows.
INVALID_IDS = ("%00", "ses_%00abc", "a%01b", "x%7f", "y" * 201)


async def check_invalid_ids(server: Server, store_words: tuple[str, ...]) -> None:
    """Each invalid id, on every route that takes one, is the 404 an unknown id gets, with
    none of `store_words` (what would name the database) in the body."""
    async with httpx.AsyncClient(base_url=server.url, headers=HEADERS, timeout=30) as client:
        for raw in INVALID_IDS:
            for method, path in (
                ("GET", f"/v1/sessions/{raw}"),
                ("GET", f"/v1/sessions/{raw}/events"),
                ("GET", f"/v1/sessions/{raw}/events/1"),
                ("POST", f"/v1/sessions/{raw}/cancel"),
            ):
                answer = await client.request(method, path, json={} if method == "POST" else None)
                assert answer.status_code == 404, (path, answer.text)
                assert answer.json()["error"]["code"] == "session_not_found", answer.text
                for word in store_words:
                    assert word not in answer.text.lower(), (word, answer.text)


async def test_an_invalid_session_id_is_a_404_that_names_nothing_of_the_store(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, "--workers", "0") as server:
        await check_invalid_ids(server, ("sqlite", str(tmp_path).lower(), "serve.db", "store"))


async def test_metrics_without_the_operators_token_name_no_route_and_no_tenant(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, "--workers", "1", "--metrics-token", METRICS_TOKEN) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            body = {"model": "scripted:demo", "task": "go", "end_after_turn": True}
            started = await client.post("/v1/sessions", headers=HEADERS, json=body)
            assert started.status_code == 201, started.text
            await client.get("/v1/sessions", headers=HEADERS)
            anyone = (await client.get("/metrics")).text
            tenant = (await client.get("/metrics", headers=HEADERS)).text
            operator = (
                await client.get("/metrics", headers={"authorization": f"Bearer {METRICS_TOKEN}"})
            ).text
    for text in (anyone, tenant):
        assert 'tether_http_requests_total{status="201"} 1' in text, text
        for label in ('route="', 'tenant="', 'model="', "acme"):
            assert label not in text, label
    assert 'tether_http_requests_total{route="start",status="201"} 1' in operator
    assert 'tether_http_requests_total{route="list",status="200"} 1' in operator


async def test_a_provider_key_the_server_lacks_is_not_named_to_the_tenant(
    tmp_path: Path,
) -> None:
    unset = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "OPENROUTER_API_KEY": ""}
    with serve(tmp_path, "--workers", "0", env=unset) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=HEADERS, timeout=30) as client:
            for model in ("openai:gpt-4o-mini", "anthropic:claude-3-5-haiku-latest"):
                body = {"model": model, "task": "go"}
                refused = await client.post("/v1/sessions", json=body)
                assert refused.status_code == 422, refused.text
                message = refused.json()["error"]["message"]
                assert message == f"model {model!r}: this model is not available on this server"
            # A sub-agent's model alike.
            agents = {"helper": {"model": "openrouter:some/model"}}
            body = {"model": "scripted:demo", "task": "go", "agents": agents}
            refused = await client.post("/v1/sessions", json=body)
            assert refused.status_code == 422, refused.text
            assert "this model is not available on this server" in refused.text
            assert "API_KEY" not in refused.text and "key" not in refused.text.lower()
    # The operator's log says which key is missing.
    log = server.process.stderr.read() if server.process.stderr else ""
    assert "needs an API key: set OPENAI_API_KEY" in log, log
