"""Event summaries and single events over a real `tether serve`: `?summary=true` on the events
page and the stream sends each event cut short (with its whole size and whether it was cut),
`GET /v1/sessions/{id}/events/{seq}` sends one whole event, scoped to the tenant exactly as the
other event routes are."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from server.support import ACME, GLOBEX, Server, check_documented, serve, sse_frames
from tether.runtime.http import HttpRuntime
from tether.server.summary import TEXT
from tether.testing.runtime_conformance import Observer, spec

LONG = "x" * 5000


def auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def started(server: Server, task: str) -> str:
    rt = HttpRuntime(server.url, ACME)
    try:
        ref = await rt.start(spec(task, end_after_turn=True))
        await Observer(rt, ref).until("the end", lambda s: s.terminal)
        return ref.session_id
    finally:
        await rt.close()


async def test_a_summary_page_cuts_long_text_and_says_how_large_the_whole_event_is(
    tmp_path: Path,
) -> None:
    with serve(tmp_path) as server:
        sid = await started(server, f"echo {LONG}")
        async with httpx.AsyncClient(base_url=server.url, headers=auth(ACME)) as client:
            path = f"/v1/sessions/{sid}/events"
            whole = (await client.get(path)).json()
            brief = (await client.get(path, params={"summary": "true"})).json()
            check_documented(brief, "EventPage")
            assert [e["seq"] for e in brief["events"]] == [e["seq"] for e in whole["events"]]
            responded = next(e for e in brief["events"] if e["type"] == "model.responded")
            text = responded["data"]["message"]["parts"][0]["text"]
            assert len(text) == TEXT and text.endswith("…") and responded["clipped"]
            full = next(e for e in whole["events"] if e["seq"] == responded["seq"])
            assert responded["size"] == len(json.dumps(full, separators=(",", ":")).encode())
            short = next(e for e in brief["events"] if e["type"] == "turn.ended")
            same = next(e for e in whole["events"] if e["seq"] == short["seq"])
            assert not short["clipped"] and short["data"] == same["data"]
            assert len(json.dumps(brief)) < len(json.dumps(whole)) / 5

            # The whole event, by its seq: what the summary cut.
            one = await client.get(f"{path}/{responded['seq']}")
            assert one.status_code == 200 and one.json() == full
            check_documented(one.json(), "EventModel")

            # The stream sends the same summaries when asked, and whole events otherwise.
            stream = f"/v1/sessions/{sid}/stream"
            for flag, clipped in (("true", True), ("false", False)):
                answer = await client.get(stream, params={"summary": flag})
                frames = sse_frames(answer.text.split("\n"))
                data = json.loads(next(d for k, _, d in frames if k == "model.responded"))
                assert ("clipped" in data) is clipped
                assert (LONG in answer.text) is not clipped


async def test_one_event_is_refused_to_another_tenant_and_for_a_seq_the_log_lacks(
    tmp_path: Path,
) -> None:
    with serve(tmp_path) as server:
        sid = await started(server, "echo mine")
        path = f"/v1/sessions/{sid}/events"
        async with httpx.AsyncClient(base_url=server.url) as client:
            assert (await client.get(f"{path}/1", headers=auth(ACME))).status_code == 200
            # Another tenant's session is not found, as on the page and the stream.
            for route in (f"{path}/1", path, f"/v1/sessions/{sid}/stream"):
                theirs = await client.get(route, headers=auth(GLOBEX))
                assert theirs.status_code == 404, route
                assert theirs.json()["error"]["code"] == "session_not_found"
            refused = await client.get(f"{path}/1")
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "unauthorized"
            missing = await client.get(f"{path}/999", headers=auth(ACME))
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "event_not_found"
            for bad in ("0", "-1", "x", "1.5", "9" * 16):
                answer = await client.get(f"{path}/{bad}", headers=auth(ACME))
                assert answer.status_code == 422, bad
            nobody = await client.get("/v1/sessions/no-such/events/1", headers=auth(ACME))
            assert nobody.status_code == 404
