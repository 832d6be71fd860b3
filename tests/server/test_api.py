"""The HTTP API's own behaviour: SSE resuming from Last-Event-ID, the error envelope for
bad requests, idempotency keys, event pages, metrics."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import httpx
import pytest

from server.support import ACME, GLOBEX, Server, serve, sse_frames
from tether.errors import IdempotencyConflict
from tether.runtime.http import HttpRuntime
from tether.testing.runtime_conformance import Observer, first_events, spec

AUTH = {"Authorization": f"Bearer {ACME}"}
JSON = {"Content-Type": "application/json"}
MODEL = "python:tether.testing.runtime_fixtures:model"


async def _finished_session(server: Server, task: str = "note 3") -> tuple[str, int]:
    rt = HttpRuntime(server.url, ACME)
    try:
        ref = await rt.start(spec(task, end_after_turn=True))
        status = await Observer(rt, ref).until("the end", lambda s: s.terminal)
        return ref.session_id, status.last_seq
    finally:
        await rt.close()


async def _stream(
    client: httpx.AsyncClient, sid: str, headers: dict[str, str], stop_after: int | None = None
) -> list[tuple[str, str, str]]:
    lines: list[str] = []
    async with client.stream(
        "GET", f"/v1/sessions/{sid}/stream", headers={**AUTH, **headers}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            lines.append(line)
            if (
                stop_after is not None
                and len([f for f in sse_frames(lines) if f[0] != "end"]) >= stop_after
            ):
                break  # the client goes away mid-stream
    return sse_frames(lines)


async def test_an_sse_stream_resumes_from_last_event_id_without_gaps_or_duplicates(
    server: Server,
) -> None:
    sid, last_seq = await _finished_session(server)
    async with httpx.AsyncClient(base_url=server.url) as client:
        first = await _stream(client, sid, {}, stop_after=5)
        resumed = await _stream(client, sid, {"Last-Event-ID": first[-1][1]})
        from_query = await _stream(client, sid, {}, stop_after=None)
    ids = [int(i) for kind, i, _ in first + resumed if kind != "end"]
    assert ids == list(range(1, last_seq + 1)), ids
    assert resumed[-1][0] == "end" and json.loads(resumed[-1][2]) == {"reason": "session_ended"}
    assert [f for f in from_query if f[0] != "end"] == [f for f in first + resumed if f[0] != "end"]
    for kind, ident, data in from_query[:-1]:
        event = json.loads(data)
        assert event["type"] == kind and str(event["seq"]) == ident


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        ("POST", "/v1/sessions", {"content": b"{not json", "headers": JSON}, 400, "invalid_json"),
        ("POST", "/v1/sessions", {"content": b'{"model": NaN}', "headers": JSON}, 400, "invalid_json"),
        ("POST", "/v1/sessions", {"json": {"model": MODEL}}, 422, "invalid_request"),
        ("POST", "/v1/sessions", {"json": {"model": MODEL, "task": "x", "colour": 1}}, 422, "invalid_request"),
        ("POST", "/v1/sessions", {"json": {"model": MODEL, "task": "x", "limits": {"max_steps": "5"}}}, 422, "invalid_request"),
        ("POST", "/v1/sessions", {"json": {"model": "nobody:model", "task": "x"}}, 422, "invalid_spec"),
        ("POST", "/v1/sessions", {"json": {"model": MODEL, "task": "x", "requires": ["telepathy"]}}, 422, "invalid_request"),
        ("POST", "/v1/sessions", {"content": b"{}", "headers": {"Content-Type": "text/plain"}}, 415, "unsupported_media_type"),
        ("POST", "/v1/sessions", {"content": b'{"model": "scripted:demo", "task": "x"}'}, 415, "unsupported_media_type"),
        ("POST", "/v1/sessions", {"content": b" " * (2 << 20)}, 413, "payload_too_large"),
        ("PUT", "/v1/sessions", {}, 405, "method_not_allowed"),
        ("GET", "/v1/sessions?limit=0", {}, 422, "invalid_request"),
        ("GET", "/v1/nowhere", {}, 404, "not_found"),
        ("GET", "/v1/sessions/ses_none/events?after_seq=-1", {}, 422, "invalid_request"),
        ("GET", "/v1/sessions/ses_none/stream", {"headers": {"Last-Event-ID": "abc"}}, 422, "invalid_request"),
        ("GET", "/v1/sessions/ses_none/stream?deltas=maybe", {}, 422, "invalid_request"),
        ("GET", "/v1/sessions/ses_none", {}, 404, "session_not_found"),
    ],
)  # fmt: skip
async def test_a_bad_request_gets_the_error_envelope_with_a_stable_code(
    server: Server, method: str, path: str, kwargs: dict[str, object], status: int, code: str
) -> None:
    headers = {**AUTH, **kwargs.pop("headers", {})}  # type: ignore[dict-item]
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.request(method, path, headers=headers, **kwargs)  # type: ignore[arg-type]
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["status"] == status and len(error["message"]) > 10


async def test_a_retried_message_with_its_idempotency_key_is_sent_once(server: Server) -> None:
    rt = HttpRuntime(server.url, ACME)
    try:
        ref = await rt.start(spec("echo one"))
        watch = Observer(rt, ref)
        await watch.settled()
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as client:
            path = f"/v1/sessions/{ref.session_id}/messages"
            answers = [
                await client.post(
                    path, json={"text": "echo two"}, headers={"Idempotency-Key": "m1"}
                )
                for _ in range(3)
            ]
            other = await client.post(
                path, json={"text": "echo three"}, headers={"Idempotency-Key": "m1"}
            )
        assert [a.status_code for a in answers] == [202, 202, 202]
        assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_conflict"
        status = await watch.until("the second turn", lambda s: s.view.turns == 2 and s.settled)
        await watch.poll()
        assert status.view.turns == 2 and status.last_output == "echo: two"
    finally:
        await rt.close()


async def test_a_message_retried_against_another_server_process_is_sent_once(
    tmp_path: Path,
) -> None:
    # Two `tether serve` processes on one store, as behind a load balancer: the retry of a
    # message whose answer was lost lands on the other one, which must know it was sent.
    with (
        serve(tmp_path, "--workers", "2") as one,
        serve(tmp_path, "--workers", "0", store=one.store) as two,
    ):
        first, second = HttpRuntime(one.url, ACME), HttpRuntime(two.url, ACME)
        try:
            ref = await first.start(spec("echo one"))
            watch = Observer(first, ref)
            await watch.settled()
            await first.send(ref, "echo two", idempotency_key="m1")
            await second.send(ref, "echo two", idempotency_key="m1")
            with pytest.raises(IdempotencyConflict):
                await second.send(ref, "echo three", idempotency_key="m1")
            status = await watch.until("the second turn", lambda s: s.view.turns == 2 and s.settled)
            events = await first_events(second, ref, status.view.last_seq)
        finally:
            await first.close()
            await second.close()
    assert status.last_output == "echo: two"
    assert [e.type for e in events].count("user.message") == 2


async def test_the_session_list_is_the_tenants_own_newest_first(server: Server) -> None:
    acme, globex = HttpRuntime(server.url, ACME), HttpRuntime(server.url, GLOBEX)
    try:
        older = await acme.start(spec("echo older"))
        await Observer(acme, older).settled()
        theirs = await globex.start(spec("echo theirs"))
        newer = await acme.start(spec("echo newer"))
        await Observer(acme, newer).settled()
    finally:
        await acme.close()
        await globex.close()
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as client:
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        one = (await client.get("/v1/sessions", params={"limit": 1})).json()["sessions"]
    ids = [s["session_id"] for s in listed]
    assert theirs.session_id not in ids
    assert ids.index(newer.session_id) < ids.index(older.session_id)
    mine = next(s for s in listed if s["session_id"] == newer.session_id)
    assert (mine["state"], mine["last_output"], mine["turns"]) == ("idle", "echo: newer", 1)
    assert [s["session_id"] for s in one] == [ids[0]]


async def test_event_pages_and_metrics_report_what_happened(server: Server) -> None:
    sid, last_seq = await _finished_session(server, "note 2")
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as client:
        page = (
            await client.get(f"/v1/sessions/{sid}/events", params={"after_seq": 2, "limit": 3})
        ).json()
        rest = (await client.get(f"/v1/sessions/{sid}/events", params={"after_seq": 5})).json()
        metrics = (await client.get("/metrics")).text
    assert [e["seq"] for e in page["events"]] == [3, 4, 5] and page["more"] is True
    assert [e["seq"] for e in rest["events"]] == list(range(6, last_seq + 1)) and rest[
        "more"
    ] is False
    assert page["last_seq"] == last_seq
    assert 'tether_http_requests_total{status="201"}' in metrics and 'route="' not in metrics
    assert "tether_worker_turns_total" in metrics


async def test_sigterm_ends_the_server_and_its_open_event_streams_without_a_traceback(
    tmp_path: Path,
) -> None:
    # An event stream of an idle session never ends by itself: shutdown must not wait on it,
    # and must not cancel it either (uvicorn logs a traceback per cancelled stream).
    with serve(tmp_path, "--workers", "1") as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            ref = await rt.start(spec("echo still here"))
            await Observer(rt, ref).settled()
            headers = {**AUTH, "Accept": "text/event-stream"}
            path = f"/v1/sessions/{ref.session_id}/stream"
            async with (
                httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(60.0)) as client,
                client.stream("GET", path, headers=headers) as plain,
                client.stream("GET", path, headers=headers, params={"deltas": "true"}) as live,
            ):
                streams = [plain.aiter_lines(), live.aiter_lines()]
                for lines in streams:
                    while "turn.ended" not in await anext(lines):
                        pass  # the stream is open and idle now
                server.process.send_signal(signal.SIGTERM)
                # Each stream closes without an `end` frame (its client reconnects elsewhere).
                rest = [[line async for line in lines] for lines in streams]
                # Within the grace (3 s) and the hand-over, far inside this bound. (uvicorn
                # raises the signal again once it has shut down: the exit says SIGTERM.)
                code = await asyncio.to_thread(server.process.wait, 15)
                assert code in (0, -signal.SIGTERM), code
        finally:
            await rt.close()
        errors = server.process.stderr.read() if server.process.stderr else ""
    assert all("event: end" not in lines for lines in rest), rest
    assert "Traceback" not in errors and "ERROR" not in errors, errors


async def test_an_event_page_ending_at_the_last_event_says_there_is_no_more(
    server: Server,
) -> None:
    sid, last_seq = await _finished_session(server, "note 2")
    pages = []
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as client:
        for after, limit in ((last_seq - 3, 3), (last_seq - 3, 2), (last_seq, 5), (0, last_seq)):
            params = {"after_seq": after, "limit": limit}
            pages.append((await client.get(f"/v1/sessions/{sid}/events", params=params)).json())
    assert [[e["seq"] for e in p["events"]] for p in pages] == [
        [last_seq - 2, last_seq - 1, last_seq],
        [last_seq - 2, last_seq - 1],
        [],
        list(range(1, last_seq + 1)),
    ]
    assert [p["more"] for p in pages] == [False, True, False, False]
