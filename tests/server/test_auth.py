"""Bearer tokens per tenant: no token and a wrong token are 401 with the envelope; another
tenant's session is a 404 for every operation, exactly like one that does not exist."""

from __future__ import annotations

import httpx
import pytest

from server.support import ACME, GLOBEX, Server
from tether.errors import SessionNotFound
from tether.runtime.http import HttpRuntime, Unauthorized
from tether.testing.runtime_conformance import Observer, spec

BODY = {"model": "python:tether.testing.runtime_fixtures:model", "task": "echo hi"}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        _bearer("not-a-token-of-anyone-at-all"),
        {"Authorization": f"Basic {ACME}"},
        {"Authorization": "Bearer"},
    ],
    ids=["no token", "wrong token", "wrong scheme", "empty token"],
)
async def test_a_request_without_a_valid_token_is_401_and_creates_nothing(
    server: Server, headers: dict[str, str]
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        before = (await client.get("/v1/capabilities", headers=_bearer(ACME))).status_code
        response = await client.post(
            "/v1/sessions", json=BODY, headers={**headers, "Idempotency-Key": "k-auth"}
        )
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        error = response.json()["error"]
        assert error["code"] == "unauthorized" and "Bearer" in error["message"]
        for path in ("/v1/capabilities", "/v1/sessions/ses_x", "/v1/sessions/ses_x/stream"):
            assert (await client.get(path, headers=headers)).status_code == 401
        # The refused request used the key for nothing: acme's own request with it creates.
        made = await client.post(
            "/v1/sessions", json=BODY, headers={**_bearer(ACME), "Idempotency-Key": "k-auth"}
        )
        assert before == 200 and made.status_code == 201


async def test_health_metrics_and_the_openapi_document_need_no_token(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert "tether_http_requests_total" in (await client.get("/metrics")).text
        assert (await client.get("/openapi.json")).json()["openapi"].startswith("3.1")


async def test_the_http_runtime_raises_unauthorized_for_a_wrong_token(server: Server) -> None:
    rt = HttpRuntime(server.url, "not-a-token-of-anyone-at-all")
    try:
        with pytest.raises(Unauthorized, match="token"):
            await rt.capabilities()
    finally:
        await rt.close()


async def test_another_tenants_session_is_not_found_for_every_operation(server: Server) -> None:
    acme, globex = HttpRuntime(server.url, ACME), HttpRuntime(server.url, GLOBEX)
    try:
        ref = await acme.start(spec("guarded launch"))
        # Wait for the turn to close (turn.ended), not only for approval.requested: the log
        # must be still before we check that globex's attempts changed nothing.
        status = await Observer(acme, ref).until(
            "an approval",
            lambda s: s.state == "waiting_approval" and s.stop_reason == "awaiting_approval",
        )
        (call_id,) = status.view.pending_approvals
        attempts = [
            globex.poll(ref), globex.cancel(ref), globex.interrupt(ref), globex.send(ref, "echo x"),
            globex.decide(ref, call_id, True), anext(globex.events(ref, 0, timeout=5)),
        ]  # fmt: skip
        for attempt in attempts:
            with pytest.raises(SessionNotFound):
                await attempt
        async with httpx.AsyncClient(base_url=server.url, headers=_bearer(GLOBEX)) as client:
            page = await client.get(f"/v1/sessions/{ref.session_id}/events")
            assert page.status_code == 404 and page.json()["error"]["code"] == "session_not_found"
        # Nothing globex tried reached acme's session: it still waits for acme's decision.
        after = await acme.poll(ref)
        assert after.state == "waiting_approval" and after.last_seq == status.last_seq
        # The same idempotency key names a different session per tenant.
        mine = await acme.start(spec("echo a"), idempotency_key="shared-key")
        theirs = await globex.start(spec("echo b"), idempotency_key="shared-key")
        assert mine != theirs
    finally:
        await acme.close()
        await globex.close()


async def test_a_spec_naming_code_the_server_does_not_allow_is_refused(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=_bearer(ACME)) as client:
        for body in (
            {"model": "python:os:getpid", "task": "echo hi"},
            {**BODY, "tools": ["tether.demo:tools"]},
        ):
            response = await client.post("/v1/sessions", json=body)
            assert response.status_code == 422, response.text
            assert "--allow-code" in response.json()["error"]["message"]
