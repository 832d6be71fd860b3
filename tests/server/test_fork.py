"""Forking over HTTP, on a real `tether serve` on loopback: the runtime conformance suite's
fork checks through `HttpRuntime`, the route's answers and errors as documented, the poll's
`forked`, `GET /v1/sessions?parent=`, and another tenant's attempts: a 404 on every route."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.support import ACME, GLOBEX, Server, check_documented, serve
from tether.runtime.base import SessionRef, SpecChanges
from tether.runtime.http import HttpRuntime
from tether.session.fork import ForkPoint
from tether.testing import FORK_CHECKS
from tether.testing.runtime_conformance import Observer, spec, turns
from tether.testing.runtime_fixtures import MODEL, TOOLS

TWIN_B = "python:tether.testing.runtime_fixtures:twin_b"
FORK_STORES = ["memory", "sqlite"]


@pytest.fixture(scope="module", params=FORK_STORES)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    directory: Path = tmp_path_factory.mktemp("serve")
    store = "memory:" if request.param == "memory" else None
    with serve(directory, "--workers", "4", store=store) as running:
        yield running


@pytest.fixture
async def acme(served: Server) -> AsyncIterator[HttpRuntime]:
    rt = HttpRuntime(served.url, ACME)
    yield rt
    await rt.close()


@pytest.fixture
async def client(served: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=served.url, headers=auth(ACME)) as made:
        yield made


def auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.mark.parametrize("check", FORK_CHECKS, ids=lambda c: c.__name__)
async def test_http_runtime_fork_conformance(acme: HttpRuntime, check) -> None:  # type: ignore[no-untyped-def]
    await check(acme)


async def requested(client: httpx.AsyncClient, session_id: str, after: int) -> list[dict[str, Any]]:
    """The `model.requested` events of a session after seq `after`."""
    page = (
        await client.get(f"/v1/sessions/{session_id}/events", params={"after_seq": after})
    ).json()
    return [e["data"] for e in page["events"] if e["type"] == "model.requested"]


async def test_a_fork_at_turn_2_of_a_served_session_runs_to_its_end_from_the_parents_transcript(
    acme: HttpRuntime, client: httpx.AsyncClient
) -> None:
    parent, _ = await turns(acme, "echo one", "note 2", "echo three", "echo four")
    answer = await client.post(f"/v1/sessions/{parent.session_id}/fork", json={"at": {"turn": 2}})
    assert answer.status_code == 201, answer.text
    body = answer.json()
    check_documented(body, "Forked")
    assert answer.headers["location"] == f"/v1/sessions/{body['session_id']}"
    child = body["session_id"]
    assert body["parent"] == parent.session_id and body["state"] == "pending"
    status = await Observer(acme, SessionRef(child)).settled()
    assert status.last_output == "noted 2" and status.view.turns == 1
    polled = (await client.get(f"/v1/sessions/{child}")).json()
    check_documented(polled, "SessionStatus")
    assert polled["forked"] == {
        "parent": parent.session_id,
        "parent_seq": body["at"],
        "kind": "fork",
    }
    assert (await client.get(f"/v1/sessions/{parent.session_id}")).json()["forked"] is None
    # The child's transcript up to the point is the parent's, message for message.
    theirs, ours = [
        (await client.get(f"/v1/sessions/{sid}/transcript", params={"limit": 200})).json()
        for sid in (parent.session_id, child)
    ]
    shared = [m for m in theirs["messages"] if m["seq"] <= body["at"]]
    assert shared and ours["messages"][: len(shared)] == shared
    assert [m["parts"] for m in ours["messages"][len(shared) :]] == [
        m["parts"] for m in theirs["messages"] if m["seq"] > body["at"]
    ][: len(ours["messages"]) - len(shared)]
    # Its first request is the parent's at that point, byte for byte (the same hash).
    parents = await requested(client, parent.session_id, 0)
    mine = await requested(client, child, body["at"])
    assert mine[0]["request_hash"] == parents[1]["request_hash"]
    listed = (await client.get("/v1/sessions", params={"parent": parent.session_id})).json()
    check_documented(listed, "SessionList")
    assert [s["session_id"] for s in listed["sessions"]] == [child]
    assert listed["sessions"][0]["parent"] == parent.session_id


async def test_a_changed_model_and_system_prompt_reach_the_childs_requests(
    acme: HttpRuntime, client: httpx.AsyncClient
) -> None:
    parent, _ = await turns(acme, "echo one", "echo two", "echo three", "echo four")
    forked = await acme.fork(
        parent,
        at=ForkPoint(turn=2),
        changes=SpecChanges(model=TWIN_B, system="Answer in one word."),
    )
    status = await Observer(acme, SessionRef(forked.session_id)).settled()
    assert status.last_output == "twin b: echo two" and status.view.model == "scripted:twin"
    parents = await requested(client, parent.session_id, 0)
    mine = await requested(client, forked.session_id, forked.at)
    assert mine[0]["model"] == "scripted:twin"
    assert mine[0]["request_hash"] != parents[1]["request_hash"]
    own = (await client.get(f"/v1/sessions/{forked.session_id}/events/{forked.at + 1}")).json()
    assert own["type"] == "session.forked" and own["data"]["system"] == "Answer in one word."
    # The system prompt alone changes the request too.
    system_only = await acme.fork(
        parent, at=ForkPoint(turn=2), changes=SpecChanges(system="Be brief.")
    )
    await Observer(acme, SessionRef(system_only.session_id)).settled()
    again = await requested(client, system_only.session_id, system_only.at)
    assert again[0]["model"] == parents[1]["model"]
    assert again[0]["request_hash"] not in {r["request_hash"] for r in parents}


async def test_another_tenants_fork_attempt_is_a_404_on_every_route(
    acme: HttpRuntime, served: Server
) -> None:
    parent, _ = await turns(acme, "echo one")
    child = await acme.fork(parent, message="echo mine")
    await Observer(acme, SessionRef(child.session_id)).settled()
    async with httpx.AsyncClient(base_url=served.url, headers=auth(GLOBEX)) as globex:
        for sid in (parent.session_id, child.session_id):
            refused = await globex.post(f"/v1/sessions/{sid}/fork", json={"message": "echo x"})
            assert refused.status_code == 404, refused.text
            assert refused.json()["error"]["code"] == "session_not_found"
        for path in ("", "/events", "/events/1", "/transcript", "/stream"):
            refused = await globex.get(f"/v1/sessions/{child.session_id}{path}")
            assert refused.status_code == 404, (path, refused.text)
            assert refused.json()["error"]["code"] == "session_not_found"
        listed = (await globex.get("/v1/sessions", params={"parent": parent.session_id})).json()
        assert listed["sessions"] == []
    # Nothing was made for globex: acme's session has its one fork.
    assert [s.session_id for s in await acme.sessions(parent=parent.session_id)] == [
        child.session_id
    ]


async def test_a_point_with_an_open_call_is_a_422_naming_it(
    acme: HttpRuntime, client: httpx.AsyncClient
) -> None:
    parent = await acme.start(spec("guarded launch"))
    status = await Observer(acme, parent).until(
        "the approval", lambda s: s.state == "waiting_approval"
    )
    [call_id] = status.view.pending_approvals
    refused = await client.post(f"/v1/sessions/{parent.session_id}/fork", json={})
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["code"] == "invalid_fork_point"
    assert call_id in error["message"] and "guarded" in error["message"]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"at": {"seq": 0}}, "at.seq"),
        ({"at": {"seq": 2, "turn": 1}}, "at"),
        ({"kind": "replay"}, "kind"),
        ({"open_calls": "run"}, "open_calls"),
        ({"message": ""}, "message"),
        ({"tools": "x:y"}, "tools"),
        ({"colour": "red"}, "colour"),
    ],
)
async def test_a_bad_fork_body_is_a_422_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, Any], named: str
) -> None:
    started = await client.post(
        "/v1/sessions", json={"model": MODEL, "task": "echo one", "tools": list(TOOLS)}
    )
    sid = started.json()["session_id"]
    refused = await client.post(f"/v1/sessions/{sid}/fork", json=body)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["code"] == "invalid_request" and error["message"].startswith(named), error
    assert (await client.get("/v1/sessions", params={"parent": sid})).json()["sessions"] == []


async def test_a_spec_change_is_checked_as_a_start_is(
    acme: HttpRuntime, client: httpx.AsyncClient
) -> None:
    parent, _ = await turns(acme, "echo one")
    for body, code, words in (
        ({"model": "python:os:getcwd"}, "invalid_spec", "os:getcwd"),
        ({"tools": ["os:path"]}, "invalid_spec", "os:path"),
        ({"metadata": {"tenant": "globex"}}, "invalid_spec", "tenant"),
        ({"settings": {"extra": {"model": "x"}}}, "invalid_spec", "model"),
    ):
        refused = await client.post(f"/v1/sessions/{parent.session_id}/fork", json=body)
        assert refused.status_code == 422, (body, refused.text)
        error = refused.json()["error"]
        assert error["code"] == code and words in error["message"], (body, error)
    listed = await acme.sessions(parent=parent.session_id)
    assert len(listed) == 0


async def test_a_retried_fork_with_its_idempotency_key_is_the_same_child(
    acme: HttpRuntime, client: httpx.AsyncClient
) -> None:
    parent, _ = await turns(acme, "echo one")
    path = f"/v1/sessions/{parent.session_id}/fork"
    body = {"message": "echo again", "at": {"after_turn": 1}}
    answers = await asyncio.gather(
        *(client.post(path, json=body, headers={"Idempotency-Key": "retry-1"}) for _ in range(4))
    )
    assert {a.status_code for a in answers} == {201}, [a.text for a in answers]
    assert len({a.json()["session_id"] for a in answers}) == 1
    other = await client.post(
        path, json={**body, "message": "echo else"}, headers={"Idempotency-Key": "retry-1"}
    )
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_conflict"
    assert len(await acme.sessions(parent=parent.session_id)) == 1
