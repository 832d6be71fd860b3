"""MCP servers in served sessions, against real processes: `tether serve --mcp FILE` (and
`tether worker --mcp FILE`) with the reference server-everything over stdio. A session
started over HTTP names the operator's server and calls its tool; a spec that gives a
command, a URL or an unknown name is refused with 422 naming the field; a worker that takes
a session over loads its servers from what `session.created` recorded; and no server
process outlives the worker that started it."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from server.support import (
    ACME,
    ACME_HEADERS,
    Server,
    check_documented,
    serve,
    settled,
    start_worker,
    stop_worker,
)
from server.test_web_view import WAIT_MS, browser, give_token
from tether.testing.runtime_fixtures import MODEL
from tools.mcp_servers.harness import wait_until
from tools.mcp_servers.reference import everything

TASK = 'call echo {"message": "hello from acme"}'
__all__ = ["browser"]  # the fixture, shared with the sessions' browser tests


def _mcp_file(directory: Path) -> Path:
    server = everything()
    path = directory / "mcp.json"
    config = {"command": server.node, "args": [server.entry, "stdio"]}
    theirs = {**config, "tenants": ["globex"]}  # offered to globex alone
    path.write_text(json.dumps({"mcpServers": {"everything": config, "globex-only": theirs}}))
    return path


def _servers_under(pid: int) -> list[psutil.Process]:
    """The server-everything processes started under the process `pid`."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "server-everything" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def _gone(processes: list[psutil.Process]) -> bool:
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


@pytest.fixture
def mcp_file(tmp_path: Path) -> Path:
    return _mcp_file(tmp_path)


@pytest.fixture
def server(tmp_path: Path, mcp_file: Path) -> Iterator[Server]:
    with serve(tmp_path, "--workers", "2", "--mcp", str(mcp_file)) as running:
        yield running


def _start(mcp: object, task: str = TASK, end: bool = True) -> dict[str, object]:
    body = {"model": MODEL, "task": task, "mcp": mcp, "end_after_turn": end}
    return body


async def _events(client: httpx.AsyncClient, session_id: str) -> list[dict[str, object]]:
    page = await client.get(f"/v1/sessions/{session_id}/events", headers=ACME_HEADERS)
    assert page.status_code == 200, page.text
    events: list[dict[str, object]] = page.json()["events"]
    return events


async def test_a_session_started_over_http_calls_a_tool_of_the_operators_mcp_server(
    server: Server,
) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        started = await client.post(
            "/v1/sessions", json=_start(["everything"]), headers=ACME_HEADERS
        )
        assert started.status_code == 201, started.text
        sid = started.json()["session_id"]
        status = await settled(client, sid)
        events = await _events(client, sid)
    assert status["state"] == "completed", status
    assert status["last_output"] == "echo said: Echo: hello from acme"
    asked = [e["data"] for e in events if e["type"] == "model.responded"]
    finished = [e["data"] for e in events if e["type"] == "tool.finished"]
    assert "echo" in json.dumps(asked[0])  # the scripted model asked for the server's tool
    assert [(f["outcome"], f["content"]) for f in finished] == [("ok", "Echo: hello from acme")]
    created = events[0]["data"]
    assert created["metadata"]["runner"]["mcp"] == ["everything"]  # type: ignore[index]
    assert "node" not in json.dumps(created)  # names only: never the operator's command
    # The server's process runs under the serve process, and stops with it.
    processes = _servers_under(server.process.pid)
    assert len(processes) == 1
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=30)
    assert wait_until(lambda: _gone(processes)), processes


@pytest.mark.parametrize(
    ("mcp", "said"),
    [
        ([{"command": "npx", "args": ["-y", "some-server"]}], "spec.mcp[0] is a server's config"),
        (["npx -y some-server"], "spec.mcp[0] 'npx -y some-server' is not an MCP server's name"),
        (["https://tools.example.com/mcp"], "is not an MCP server's name"),
        ({"everything": {"command": "sh"}}, "spec.mcp must be a list of MCP server names"),
    ],
)
async def test_a_spec_that_gives_a_command_or_url_is_refused_naming_the_field(
    server: Server, mcp: object, said: str
) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        refused = await client.post("/v1/sessions", json=_start(mcp), headers=ACME_HEADERS)
        listed = await client.get("/v1/sessions", headers=ACME_HEADERS)
    assert refused.status_code == 422, refused.text
    message = refused.json()["error"]["message"]
    assert message.startswith("mcp: ") and said in message, message
    assert listed.json()["sessions"] == []  # nothing was created
    assert _servers_under(server.process.pid) == []  # nothing was started


async def test_an_unknown_server_name_is_refused_listing_only_the_names_offered(
    server: Server, mcp_file: Path
) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        refused = await client.post(
            "/v1/sessions", json=_start(["everything", "globex-only"]), headers=ACME_HEADERS
        )
        options = await client.get("/v1/start-options", headers=ACME_HEADERS)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["code"] == "invalid_spec"
    assert error["message"] == (
        "spec.mcp names 'globex-only', which this server does not offer (it offers: everything)"
    )
    assert everything().entry not in refused.text and "node" not in refused.text
    # The start form is offered the names, and only the names.
    assert options.status_code == 200
    check_documented(options.json(), "StartOptions")
    assert options.json()["mcp"] == ["everything"]
    assert "node" not in options.text and "stdio" not in options.text


async def test_a_worker_that_takes_a_session_over_loads_the_servers_it_recorded(
    tmp_path: Path, mcp_file: Path
) -> None:
    with serve(tmp_path, "--workers", "0", "--mcp", str(mcp_file)) as server:
        first = start_worker(server.store, "--mcp", str(mcp_file), "--lease-ttl", "1")
        second = None
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                started = await client.post(
                    "/v1/sessions", json=_start(["everything"], end=False), headers=ACME_HEADERS
                )
                assert started.status_code == 201, started.text
                sid = started.json()["session_id"]
                await _idle(client, sid, answers=1)
                processes = _servers_under(first.pid)
                assert len(processes) == 1
                first.send_signal(signal.SIGKILL)  # no chance to stop its server
                first.wait(timeout=30)
                # Its server reads end-of-file on stdin and exits: nothing is left behind.
                assert wait_until(lambda: _gone(processes)), processes
                second = start_worker(server.store, "--mcp", str(mcp_file), "--lease-ttl", "1")
                sent = await client.post(
                    f"/v1/sessions/{sid}/messages",
                    json={"text": 'call echo {"message": "second turn"}'},
                    headers=ACME_HEADERS,
                )
                assert sent.status_code in (200, 202), sent.text
                status = await _idle(client, sid, answers=2)
                assert status["last_output"] == "echo said: Echo: second turn"
                assert len(_servers_under(second.pid)) == 1
            later = _servers_under(second.pid)
            stop_worker(second)  # SIGTERM: the worker stops its servers as it ends
            assert wait_until(lambda: _gone(later)), later
        finally:
            stop_worker(first)
            if second is not None:
                stop_worker(second)


async def _idle(client: httpx.AsyncClient, sid: str, *, answers: int) -> dict[str, object]:
    """The session's status once it is idle after its `answers`-th turn."""
    async with asyncio.timeout(30):
        while True:
            polled = (await client.get(f"/v1/sessions/{sid}", headers=ACME_HEADERS)).json()
            if polled["state"] == "idle" and polled["turns"] >= answers:
                return dict(polled)
            assert polled["state"] not in ("failed", "canceled", "completed"), polled
            await asyncio.sleep(0.05)


async def test_the_start_form_offers_the_tenants_mcp_servers_and_its_session_calls_one(
    server: Server, browser: object
) -> None:
    """The web view's start form lists the servers offered to the caller's tenant (never
    another tenant's), and a session started with one ticked calls its tool."""
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    page = await browser.new_page()
    await page.goto(f"{server.url}/ui")
    await give_token(page, ACME)
    await page.click("#to-start")
    offered = page.locator("#start-mcp input[type=checkbox]")
    await expect(offered).to_have_count(1, timeout=WAIT_MS)
    assert await offered.first.get_attribute("value") == "everything"  # not globex-only
    await expect(page.locator("#start-mcp-none")).to_be_hidden()
    await offered.first.check()
    await page.fill("#start-model", MODEL)
    await page.fill("#start-task", TASK)
    await page.check("#start-end")
    await page.click("#start-submit")
    await expect(page).to_have_url(re.compile(r"#/s/ses_"), timeout=WAIT_MS)
    session_id = page.url.split("#/s/")[1]
    await page.close()
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        status = await settled(client, session_id)
        events = await _events(client, session_id)
    assert status["last_output"] == "echo said: Echo: hello from acme", status
    assert events[0]["data"]["metadata"]["runner"]["mcp"] == ["everything"]  # type: ignore[index]
