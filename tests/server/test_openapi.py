"""The OpenAPI document that a real `tether serve` hands out matches what it serves: the same
paths, the same methods on each, the same query parameters on each, both ways; and the
bounds it states are the server's bounds."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.routing import Route

from server.support import ACME, Server, check_documented
from tether.runtime.base import SessionRef
from tether.runtime.http import HttpRuntime
from tether.runtime.listing import encode_cursor
from tether.runtime.local import LocalRuntime
from tether.server.app import WEB_VIEW, create_app
from tether.server.schemas import MAX_SEQ, openapi
from tether.testing.runtime_conformance import Observer, spec

AUTH = {"Authorization": f"Bearer {ACME}"}
# A valid value for each query parameter the API takes.
VALID = {
    "after_seq": "0",
    "limit": "1",
    "timeout": "0.5",
    "deltas": "false",
    "summary": "true",
    "cursor": encode_cursor("updated", ("9999-12-31T00:00:00Z", "ses_z")),
    "state": "idle,failed",
    "id_prefix": "ses_",
    "q": "echo",
    "stop_reason": "end_turn",
    "model": "scripted:demo",
    "parent": "ses_0123456789abcdef",
    "created_after": "2026-01-01T00:00:00Z",
    "created_before": "2126-01-01T00:00:00+02:00",
    "metadata": "team=blue",
    "sort": "updated",
    "counts": "true",
    "metric": "steps",
    "from": "2026-01-01",
    "to": "2026-01-01",
    "after": "0",
    "clip": "0",
    "thread": "",
}


def served_operations() -> dict[tuple[str, str], set[str]]:
    """(path, method) -> the query parameters its handler takes, from the app's own routes.
    The web view's files are pages, not API operations."""
    app = create_app(LocalRuntime("memory:", workers=0), None)
    queries: dict[str, tuple[str, ...]] = app.state.api.queries
    served: dict[tuple[str, str], set[str]] = {}
    for route in app.routes:
        assert isinstance(route, Route) and route.methods, route
        if route.path in WEB_VIEW:
            continue
        for method in route.methods - {"HEAD"}:
            served[(route.path, method.lower())] = set(queries[route.name])
    return served


def documented_operations(document: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    return {
        (path, method): {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
        for path, operations in document["paths"].items()
        for method, op in operations.items()
    }


@pytest.fixture(scope="module")
def document(server: Server) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/openapi.json")
    assert response.status_code == 200
    served: dict[str, Any] = response.json()
    return served


async def test_the_document_names_every_route_method_and_query_parameter_and_no_other(
    document: dict[str, Any],
) -> None:
    assert document == openapi()
    served, documented = served_operations(), documented_operations(document)
    assert set(served) - set(documented) == set(), "served but not documented"
    assert set(documented) - set(served) == set(), "documented but not served"
    assert served == documented
    assert ("/readyz", "get") in documented and ("/healthz", "get") in documented


async def test_each_answer_carrying_a_runtime_shape_is_what_the_document_says(
    server: Server,
) -> None:
    # A call waiting for approval (an open call, a pending approval), then decided (a
    # decision), so every part of a status is there to check.
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as client:
        started = await client.post("/v1/sessions", json=spec("guarded launch").to_json())
        assert started.status_code == 201, started.text
        check_documented(started.json(), "StartedModel")
        rt = HttpRuntime(server.url, ACME)
        try:
            ref = SessionRef(started.json()["session_id"])
            watch = Observer(rt, ref)
            waiting = await watch.until("an approval", lambda s: s.state == "waiting_approval")
            path = f"/v1/sessions/{ref.session_id}"
            check_documented((await client.get(path)).json(), "SessionStatus")
            (call_id,) = waiting.view.pending_approvals
            await rt.decide(ref, call_id, False, "not today")
            await watch.until("the answer", lambda s: s.state == "idle")
        finally:
            await rt.close()
        status = (await client.get(path)).json()
        assert status["decisions"] == {call_id: {"allow": False, "reason": "not today"}}
        check_documented(status, "SessionStatus")
        check_documented((await client.get("/v1/sessions")).json(), "SessionList")
        check_documented((await client.get("/v1/capabilities")).json(), "Capabilities")


async def test_the_server_takes_each_documented_query_parameter_and_refuses_others(
    server: Server, document: dict[str, Any]
) -> None:
    rt = HttpRuntime(server.url, ACME)
    try:
        ref = await rt.start(spec("note 1", end_after_turn=True))
        await Observer(rt, ref).until("the end", lambda s: s.terminal)
    finally:
        await rt.close()
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as client:
        for (path, method), names in documented_operations(document).items():
            if method != "get":
                continue
            url = path.replace("{session_id}", ref.session_id).replace("{seq}", "1")
            for name in names:
                taken = await client.get(url, params={name: VALID[name]})
                # No experiment here: its chart's parameter is checked first (a refused one is
                # a 422), so a 404 for the experiment says the parameter was taken.
                missing = "{experiment_id}" in path and taken.status_code == 404
                assert taken.status_code == 200 or missing, (path, name, taken.text)
            refused = await client.get(url, params={"colour": "1"})
            assert refused.status_code == 422, (path, refused.text)
            assert "unknown query parameter" in refused.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/sessions/{sid}/events", "/v1/sessions/{sid}/stream"])
async def test_after_seq_takes_what_the_document_says_and_nothing_more(
    server: Server, document: dict[str, Any], path: str
) -> None:
    op = document["paths"][path.replace("{sid}", "{session_id}")]["get"]
    schema = next(p["schema"] for p in op["parameters"] if p["name"] == "after_seq")
    assert (schema["type"], schema["minimum"], schema["maximum"]) == ("integer", 0, MAX_SEQ)
    rt = HttpRuntime(server.url, ACME)
    try:
        ref = await rt.start(spec("note 1", end_after_turn=True))
        await Observer(rt, ref).until("the end", lambda s: s.terminal)
    finally:
        await rt.close()
    url = path.format(sid=ref.session_id)
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as client:
        top = await client.get(url, params={"after_seq": str(MAX_SEQ), "timeout": "0.5"}
                               if "stream" in url else {"after_seq": str(MAX_SEQ)})  # fmt: skip
        assert top.status_code == 200, top.text
        for bad in (str(MAX_SEQ + 1), "-1", "1.5", "²", "٣", " 3"):
            refused = await client.get(url, params={"after_seq": bad})
            assert refused.status_code == 422, (bad, refused.text)
        if "stream" in url:
            for bad in ("²".encode("latin-1"), b"1" * 16, b"x"):
                refused = await client.get(url, headers={"Last-Event-ID": bad})
                assert refused.status_code == 422, (bad, refused.text)


async def test_a_streams_timeout_takes_the_numbers_the_document_allows_and_nothing_more(
    server: Server, document: dict[str, Any]
) -> None:
    op = document["paths"]["/v1/sessions/{session_id}/stream"]["get"]
    schema = next(p["schema"] for p in op["parameters"] if p["name"] == "timeout")
    assert (schema["type"], schema["exclusiveMinimum"], schema["maximum"]) == ("number", 0, 3600)
    rt = HttpRuntime(server.url, ACME)
    try:
        ref = await rt.start(spec("note 1", end_after_turn=True))
        await Observer(rt, ref).until("the end", lambda s: s.terminal)
    finally:
        await rt.close()
    url = f"/v1/sessions/{ref.session_id}/stream"
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as client:
        for good in ("0.5", "5e-1", "3600", "3600.0"):
            taken = await client.get(url, params={"timeout": good})
            assert taken.status_code == 200, (good, taken.text)
        for bad in ("0", "-1", "3600.5", " 5", "1_0", "nan", "inf", "1e400", "0x10", "٣"):
            refused = await client.get(url, params={"timeout": bad})
            assert refused.status_code == 422, (bad, refused.text)
