"""Sub-agents over HTTP: a start body with `agents` runs them as threads of the session in
the server's workers, and each sub-agent's model is held to the server's endpoint policy
and code allowance exactly as the session's own model is: refused before anything exists."""

from __future__ import annotations

from pathlib import Path

import httpx

from server.support import ACME, serve, settled
from tether.testing.runtime_fixtures import MODEL, TOOLS

TESTS = str(Path(__file__).resolve().parents[1])  # where `runtime.subagent_models` lives
PARENT = "python:runtime.subagent_models:parent"
HEADERS = {"authorization": f"Bearer {ACME}"}


async def start(client: httpx.AsyncClient, agents: object, task: str = "x") -> httpx.Response:
    body = {"model": PARENT, "task": task, "agents": agents, "end_after_turn": True}
    return await client.post("/v1/sessions", headers=HEADERS, json=body)


async def test_a_start_with_sub_agents_runs_them_and_refuses_what_the_policy_forbids(
    tmp_path: Path,
) -> None:
    allow = ("--allow-code", "runtime.subagent_models:*", "--workers", "2")
    with serve(tmp_path, *allow, env={"PYTHONPATH": TESTS}) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            helper = {"model": MODEL, "tools": list(TOOLS), "description": "Notes things."}
            tree = {"researcher": {"model": PARENT, "agents": ["helper"]}, "helper": helper}
            response = await start(client, tree, "ask researcher ask helper note 1")
            assert response.status_code == 201, response.text
            sid = response.json()["session_id"]
            status = await settled(client, sid)
            assert status["state"] == "completed", status
            assert status["last_output"] == "researcher said: helper said: noted 1"
            page = (await client.get(f"/v1/sessions/{sid}/events", headers=HEADERS)).json()
            opened = [e["thread"] for e in page["events"] if e["type"] == "thread.started"]
            assert opened == ["researcher-1", "researcher-1/helper-1"]

            # A sub-agent's model that calls where the operator did not allow, at any depth.
            spy = {"model": "openai-compatible:m@http://127.0.0.1:9/v1"}
            for agents in ({"spy": spy}, {"a": {"model": MODEL, "agents": ["spy"]}, "spy": spy}):
                refused = await start(client, agents)
                assert refused.status_code == 422, refused.text
                error = refused.json()["error"]
                assert error["code"] == "capability_refused", error
                assert "sub-agent spy" in error["message"]
                assert "not an endpoint this server allows" in error["message"]
            # Code the operator did not allow, as a sub-agent's model or tools.
            for sub in ({"model": "python:os:getcwd"}, {"model": MODEL, "tools": ["os:system"]}):
                refused = await start(client, {"a": sub})
                assert refused.json()["error"]["code"] == "invalid_spec", refused.text
                assert "not code this runtime may load" in refused.json()["error"]["message"]
            # A cycle, and more sub-agents than the server takes.
            loop = {"a": {"model": MODEL, "agents": ["b"]}, "b": {"model": MODEL, "agents": ["a"]}}
            refused = await start(client, loop)
            assert refused.json()["error"]["code"] == "invalid_spec", refused.text
            assert "cycle: a -> b -> a" in refused.json()["error"]["message"]
            many = {f"a{i}": {"model": MODEL} for i in range(17)}
            refused = await start(client, many)
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["code"] == "invalid_request"

            listed = (await client.get("/v1/sessions", headers=HEADERS)).json()["sessions"]
    assert [s["session_id"] for s in listed] == [sid]
