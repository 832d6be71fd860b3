"""The web surface of a real `tether serve`: bodies only as declared JSON, security headers on
every answer, a server without authentication kept to loopback (its `--host`, the `Host`
header, the `Origin` of a change), `/metrics` that names backends and tenants only to the operator,
`/healthz` and `/readyz` that tell the truth, `Allow` on a 405, and bounded bodies."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from server.support import ACME, TETHER, Server, serve
from tether.runtime.http import HttpRuntime
from tether.server.web import CSP
from tether.testing.runtime_conformance import Observer, spec

AUTH = {"Authorization": f"Bearer {ACME}"}
JSON = {"Content-Type": "application/json"}
MODEL = "python:tether.testing.runtime_fixtures:model"
OPERATOR = "operator-metrics-token-0123456789"
SECURITY = {
    "content-security-policy": CSP,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`--no-auth` on 127.0.0.1, the operator's metrics token from the environment."""
    directory: Path = tmp_path_factory.mktemp("open")
    with serve(
        directory, "--workers", "2", auth=False, env={"TETHER_METRICS_TOKEN": OPERATOR}
    ) as running:
        yield running


@pytest.fixture(scope="module")
def operated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """With tenants' tokens and `--metrics-token`."""
    directory: Path = tmp_path_factory.mktemp("operated")
    with serve(directory, "--workers", "2", "--metrics-token", OPERATOR) as running:
        yield running


@pytest.fixture
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as c:
        yield c


async def _session_ids(client: httpx.AsyncClient) -> list[str]:
    listed = await client.get("/v1/sessions", params={"limit": 500})
    assert listed.status_code == 200, listed.text
    return [s["session_id"] for s in listed.json()["sessions"]]


async def _settled_session(url: str, token: str | None = ACME) -> str:
    rt = HttpRuntime(url, token)
    try:
        ref = await rt.start(spec("echo ready"))
        await Observer(rt, ref).settled()
        return ref.session_id
    finally:
        await rt.close()


def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["status"] == status, error
    return str(error["message"])


# -- bodies --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "declared",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
async def test_a_body_not_declared_as_json_is_refused_415_and_nothing_is_created(
    client: httpx.AsyncClient, declared: str | None
) -> None:
    body = json.dumps({"model": MODEL, "task": "echo refused"}).encode()
    before = await _session_ids(client)
    headers = {} if declared is None else {"Content-Type": declared}
    refused = await client.post("/v1/sessions", content=body, headers=headers)
    message = _error(refused, 415, "unsupported_media_type")
    assert "application/json" in message
    assert await _session_ids(client) == before
    # The same bytes, declared as JSON (with a charset), start a session.
    taken = await client.post(
        "/v1/sessions", content=body, headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert taken.status_code == 201, taken.text


async def test_a_message_not_declared_as_json_is_not_sent_and_a_bodiless_cancel_is_taken(
    client: httpx.AsyncClient, server: Server
) -> None:
    sid = await _settled_session(server.url)
    path = f"/v1/sessions/{sid}"
    last_seq = (await client.get(path)).json()["last_seq"]
    refused = await client.post(f"{path}/messages", content=b'{"text": "echo sneaky"}')
    _error(refused, 415, "unsupported_media_type")
    assert (await client.get(path)).json()["last_seq"] == last_seq
    canceled = await client.post(f"{path}/cancel")  # no body, so nothing to declare
    assert canceled.status_code == 200, canceled.text
    assert (await client.get(path)).json()["state"] in ("canceling", "canceled")


@pytest.mark.parametrize(
    ("action", "body", "field"),
    [
        ("decisions", {"call_id": "call_1", "allow": True, "reason": "x" * 10_001}, "reason"),
        ("decisions", {"call_id": "c" * 201, "allow": False}, "call_id"),
        ("cancel", {"reason": "x" * 10_001}, "reason"),
        ("interrupt", {"reason": "x" * 10_001}, "reason"),
    ],
)
async def test_an_oversized_field_is_refused_by_name_and_nothing_is_appended(
    client: httpx.AsyncClient, server: Server, action: str, body: dict[str, object], field: str
) -> None:
    sid = await _settled_session(server.url)
    path = f"/v1/sessions/{sid}"
    last_seq = (await client.get(path)).json()["last_seq"]
    refused = await client.post(f"{path}/{action}", json=body)
    assert field in _error(refused, 422, "invalid_request")
    assert (await client.get(path)).json()["last_seq"] == last_seq


# -- headers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("GET", "/", {}, 302),
        ("GET", "/ui", {}, 200),
        ("GET", "/ui/app.js", {}, 200),
        ("GET", "/ui/app.css", {}, 200),
        ("GET", "/v1/sessions", AUTH, 200),
        ("GET", "/v1/sessions", {}, 401),
        ("POST", "/v1/sessions", {**AUTH, "Content-Type": "text/plain"}, 415),
        ("PUT", "/v1/sessions", AUTH, 405),
        ("GET", "/v1/nowhere", AUTH, 404),
        ("GET", "/healthz", {}, 200),
        ("GET", "/readyz", {}, 200),
        ("GET", "/metrics", {}, 200),
        ("GET", "/openapi.json", {}, 200),
    ],
)
async def test_every_answer_carries_the_security_headers(
    server: Server, method: str, path: str, headers: dict[str, str], status: int
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.request(method, path, headers=headers, content=b"{}")
    assert response.status_code == status, response.text
    assert {name: response.headers.get(name) for name in SECURITY} == SECURITY


async def test_the_root_leads_to_the_web_view(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, follow_redirects=True) as client:
        page = await client.get("/")
    assert [r.headers["location"] for r in page.history] == ["/ui"]
    assert page.status_code == 200 and page.url.path == "/ui"
    assert page.headers["content-type"].startswith("text/html")


async def test_the_web_view_has_no_inline_script_or_style_and_its_files_say_what_they_are(
    server: Server,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        page = await client.get("/ui")
        script = await client.get("/ui/app.js")
        timeline = await client.get("/ui/timeline.js")
        style = await client.get("/ui/app.css")
        others = [
            await client.get(f"/ui/{n}.js")
            for n in ("transcript", "lineage", "list", "start", "usage")
        ]
    html = page.text
    for other in others:  # every script the page loads is served as one
        assert other.status_code == 200 and other.headers["content-type"].startswith(
            "text/javascript"
        ), other.url
    assert page.headers["content-type"].startswith("text/html")
    assert script.headers["content-type"].startswith("text/javascript")
    assert timeline.headers["content-type"].startswith("text/javascript")
    assert style.headers["content-type"].startswith("text/css")
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", html, re.S)
    assert scripts == [
        (f' src="/ui/{name}.js"', "")
        for name in ("timeline", "app", "transcript", "lineage", "list", "start", "usage")
    ]
    assert '<link rel="stylesheet" href="/ui/app.css">' in html
    assert "<style" not in html and not re.search(r"\s(style|on[a-z]+)\s*=", html)
    assert "getElementById" in script.text and "font:" in style.text
    assert "class Timeline" in timeline.text


async def test_an_event_stream_passes_the_headers_unbuffered(
    client: httpx.AsyncClient, server: Server
) -> None:
    sid = await _settled_session(server.url)  # idle: its stream stays open
    async with client.stream(
        "GET", f"/v1/sessions/{sid}/stream", params={"timeout": 30}
    ) as response:
        assert {name: response.headers.get(name) for name in SECURITY} == SECURITY
        lines = response.aiter_lines()
        # Every event arrives while the stream is still open: nothing holds the body back.
        while "turn.ended" not in await anext(lines):
            pass
        assert not response.is_closed


# -- a server without authentication -------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7"])
def test_no_auth_refuses_to_listen_beyond_loopback(tmp_path: Path, host: str) -> None:
    store = tmp_path / "never.db"
    result = subprocess.run(
        [*TETHER, "serve", "--no-auth", "--host", host, "--port", "0", "--store",
         f"sqlite:///{store}"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--no-auth" in lines[0] and "loopback" in lines[0], lines
    assert "listening" not in result.stdout and not store.exists()


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example", "10.1.2.3:{port}",
             "localhost.evil.example:{port}", "[::2]:{port}"],
)  # fmt: skip
async def test_without_auth_a_host_other_than_loopback_is_refused(
    open_server: Server, host: str
) -> None:
    host = host.format(port=httpx.URL(open_server.url).port)
    async with httpx.AsyncClient(base_url=open_server.url) as client:
        before = await _session_ids(client)
        read = await client.get("/v1/sessions", headers={"Host": host})
        start = await client.post(
            "/v1/sessions", json={"model": MODEL, "task": "echo rebound"}, headers={"Host": host}
        )
        page = await client.get("/ui", headers={"Host": host})
        assert await _session_ids(client) == before
    for response in (read, start, page):
        _error(response, 403, "host_not_allowed")
        assert response.headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1", "[::1]", "LOCALHOST"])
async def test_without_auth_loopback_hosts_are_served(open_server: Server, name: str) -> None:
    host = f"{name}:{httpx.URL(open_server.url).port}"
    async with httpx.AsyncClient(base_url=open_server.url) as client:
        response = await client.get("/v1/sessions", headers={"Host": host})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "origin", ["http://evil.example", "http://127.0.0.1:1", "null", "https://{host}",
               "http://localhost:{port}"],
)  # fmt: skip
async def test_without_auth_a_change_from_another_origin_is_refused(
    open_server: Server, origin: str
) -> None:
    url = httpx.URL(open_server.url)
    origin = origin.format(host=url.netloc.decode(), port=url.port)
    sid = await _settled_session(open_server.url, None)
    async with httpx.AsyncClient(base_url=open_server.url) as client:
        before = await _session_ids(client)
        start = await client.post(
            "/v1/sessions", json={"model": MODEL, "task": "echo forged"}, headers={"Origin": origin}
        )
        cancel = await client.post(f"/v1/sessions/{sid}/cancel", headers={"Origin": origin})
        assert await _session_ids(client) == before
        state = (await client.get(f"/v1/sessions/{sid}", headers={"Origin": origin})).json()
    _error(start, 403, "cross_origin")
    _error(cancel, 403, "cross_origin")
    assert state["state"] == "idle"  # reading is no change; CORS keeps the answer from the page
    assert "access-control-allow-origin" not in start.headers


async def test_without_auth_changes_come_from_the_servers_own_pages_and_from_non_browsers(
    open_server: Server,
) -> None:
    own = open_server.url
    body = {"model": MODEL, "task": "echo mine"}
    async with httpx.AsyncClient(base_url=own) as client:
        from_page = await client.post("/v1/sessions", json=body, headers={"Origin": own})
        from_script = await client.post("/v1/sessions", json=body)
    assert (from_page.status_code, from_script.status_code) == (201, 201)


async def test_with_tokens_the_server_is_not_kept_to_loopback(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as client:
        listed = await client.get("/v1/sessions", headers={"Host": "tether.example.com"})
        started = await client.post(
            "/v1/sessions",
            json={"model": MODEL, "task": "echo from afar"},
            headers={"Origin": "https://app.example.com"},
        )
    assert (listed.status_code, started.status_code) == (200, 201)


# -- metrics -------------------------------------------------------------------------------


def _series(text: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


async def test_metrics_name_backends_and_tenants_only_to_the_operator(operated: Server) -> None:
    await _settled_session(operated.url)
    async with httpx.AsyncClient(base_url=operated.url) as client:
        anyone = (await client.get("/metrics")).text
        tenant = (await client.get("/metrics", headers=AUTH)).text
        wrong = (await client.get("/metrics", headers={"Authorization": "Bearer nope"})).text
        operator = await client.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR}"})
    for text in (anyone, tenant, wrong):  # no token, a tenant's, a wrong one: no names
        assert "backend=" not in text and "scripted" not in text and "acme" not in text, text
        assert "tenant=" not in text and "model=" not in text, text
        totals = _series(text)
        assert totals["tether_gateways_backends"] >= 1, text
        assert totals["tether_gateways_requests_total"] >= 1, text
    named = _series(operator.text)
    assert operator.status_code == 200 and 'backend="' in operator.text, operator.text
    per_backend = [v for k, v in named.items() if k.startswith("tether_gateway_requests_total{")]
    total = _series(anyone)["tether_gateways_requests_total"]
    assert per_backend and sum(per_backend) >= total, (per_backend, total, operator.text)
    # The operator sees what each tenant spent, by model.
    assert 'tether_tokens_total{tenant="acme",model="' in operator.text


async def test_session_series_name_models_and_tools_only_to_the_operator(
    operated: Server,
) -> None:
    await _settled_session(operated.url)
    async with httpx.AsyncClient(base_url=operated.url) as client:
        anyone = (await client.get("/metrics")).text
        operator = (
            await client.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR}"})
        ).text
    totals, named = _series(anyone), _series(operator)
    assert totals["tether_model_call_seconds_count"] >= 1, anyone
    assert totals['tether_turns_total{stop_reason="end_turn"}'] >= 1, anyone
    assert "model=" not in anyone and "tool=" not in anyone and "acme" not in anyone
    per_model = [v for k, v in named.items() if k.startswith("tether_model_call_seconds_count{")]
    assert per_model and sum(per_model) == totals["tether_model_call_seconds_count"]
    assert 'model="' in operator and 'tenant="acme"' in operator


async def test_worker_series_count_the_servers_slots_for_anyone(operated: Server) -> None:
    await _settled_session(operated.url)
    async with httpx.AsyncClient(base_url=operated.url) as client:
        # The worker clears the session's mark just after its end is visible: a moment.
        for _ in range(50):
            totals = _series((await client.get("/metrics")).text)
            if totals['tether_worker_slots{slot="used"}'] == 0:
                break
            await asyncio.sleep(0.1)
    # `--workers 2`: two slots, none busy once the session settled; nothing held.
    slots = totals['tether_worker_slots{slot="used"}'] + totals['tether_worker_slots{slot="free"}']
    assert slots == 2 and totals['tether_worker_slots{slot="used"}'] == 0, totals
    assert totals["tether_worker_leases_held"] == 0
    assert totals['tether_worker_sessions{state="waiting_model"}'] == 0


async def test_the_metrics_token_may_come_from_the_environment(open_server: Server) -> None:
    await _settled_session(open_server.url, None)
    async with httpx.AsyncClient(base_url=open_server.url) as client:
        anyone = (await client.get("/metrics")).text
        operator = await client.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR}"})
    assert "backend=" not in anyone and 'backend="' in operator.text


# -- health --------------------------------------------------------------------------------


async def test_healthz_and_readyz_answer_for_a_working_server(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})


def test_readyz_says_503_with_the_reason_once_the_sqlite_file_is_gone(tmp_path: Path) -> None:
    with serve(tmp_path, "--workers", "0") as server, httpx.Client(base_url=server.url) as client:
        assert client.get("/readyz").status_code == 200
        for path in tmp_path.glob("serve.db*"):
            path.unlink()
        ready = client.get("/readyz")
        health = client.get("/healthz")
    message = _error(ready, 503, "store_unavailable")
    assert "not ready" in message and len(message) > 25, message
    assert health.status_code == 200  # the process itself is alive


# -- methods -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/v1/sessions", {"GET", "HEAD", "POST"}),
        ("DELETE", "/v1/sessions/ses_x", {"GET", "HEAD"}),
        ("GET", "/v1/sessions/ses_x/cancel", {"POST"}),
        ("PATCH", "/v1/sessions/ses_x/messages", {"POST"}),
        ("POST", "/healthz", {"GET", "HEAD"}),
        ("POST", "/ui", {"GET", "HEAD"}),
    ],
)
async def test_a_405_names_the_methods_the_route_takes(
    client: httpx.AsyncClient, method: str, path: str, allow: set[str]
) -> None:
    response = await client.request(method, path)
    _error(response, 405, "method_not_allowed")
    assert {m.strip() for m in response.headers["allow"].split(",")} == allow
