"""Model settings in a spec started over HTTP on a real `tether serve` with real `tether
worker` processes: the encoded setting is in the body a loopback provider receives, it is
recorded in `session.created`, and a worker that takes the session over after another was
killed (SIGKILL) sends it again. Bad settings are a 422 naming the key and the value."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import httpx

from providers.fake_servers import FakeServer, Received, Reply
from server.support import ACME, ACME_HEADERS, serve, start_worker, stop_worker
from tether import ModelSettings, Reasoning
from tether.runtime.base import SessionSpec
from tether.runtime.http import HttpRuntime

WAIT = 60.0


def chat_answer(text: str) -> Reply:
    body = {
        "id": "chatcmpl-1", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }  # fmt: skip
    return Reply(200, json.dumps(body).encode(), {"content-type": "application/json"})


async def _settled(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    async with asyncio.timeout(WAIT):
        while True:
            status = (await client.get(f"/v1/sessions/{session_id}")).json()
            if status["state"] in ("completed", "failed", "canceled"):
                return dict(status)
            await asyncio.sleep(0.05)


async def test_a_served_sessions_settings_reach_the_provider_and_survive_a_killed_worker(
    tmp_path: Path,
) -> None:
    asked = asyncio.Event()  # the first request has arrived (and is held, unanswered)
    release = asyncio.Event()

    def handle(received: Received) -> Reply:
        if not asked.is_set():
            asked.set()
            held = chat_answer("never sent whole")
            return Reply(200, b"", held.headers, chunks=[held.body], hold_at=0, resume=release)
        return chat_answer("thought hard")

    async with FakeServer(handle) as provider:
        allow = ("--allow-endpoint", f"{provider.url}/v1")
        with serve(tmp_path, "--workers", "0", *allow) as server:
            first = start_worker(server.store, "--lease-ttl", "1.5", *allow)
            second = None
            try:
                async with httpx.AsyncClient(
                    base_url=server.url, headers=ACME_HEADERS, timeout=WAIT
                ) as client:
                    started = await client.post("/v1/sessions", json={
                        "model": f"openai-compatible:m@{provider.url}/v1", "task": "think",
                        "end_after_turn": True, "settings": {"reasoning": {"effort": "high"}},
                    })  # fmt: skip
                    assert started.status_code == 201, started.text
                    session_id = started.json()["session_id"]
                    async with asyncio.timeout(WAIT):
                        await asked.wait()
                    first.send_signal(signal.SIGKILL)  # mid-call: its lease is left to expire
                    first.wait(timeout=WAIT)
                    second = start_worker(server.store, "--lease-ttl", "1.5", *allow)
                    status = await _settled(client, session_id)
                    events = (await client.get(f"/v1/sessions/{session_id}/events")).json()
            finally:
                release.set()
                stop_worker(first)
                if second is not None:
                    stop_worker(second)
    assert status["state"] == "completed" and status["last_output"] == "thought hard", status
    bodies = [r.json() for r in provider.requests]
    assert len(bodies) == 2, bodies  # the killed worker's request, and the taker's
    assert [b["reasoning_effort"] for b in bodies] == ["high", "high"]
    created = events["events"][0]
    assert created["type"] == "session.created"
    recorded = created["data"]["metadata"]["model_settings"]
    assert recorded["reasoning"] == {"effort": "high", "budget_tokens": None}


async def test_bad_settings_are_a_422_naming_the_key_and_the_value(tmp_path: Path) -> None:
    model = "scripted:demo"
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"settings": {"temperature": 5}}, "invalid_request", "settings.temperature"),
        ({"settings": {"temprature": 1}}, "invalid_request", "settings.temprature"),
        ({"settings": {"reasoning": {"effort": "extreme"}}}, "invalid_request",
         "settings.reasoning.effort"),
        ({"settings": {"reasoning": {}}}, "invalid_spec",
         "settings: Reasoning needs effort"),
        ({"settings": {"tool_choice": "nope"}}, "invalid_spec",
         "tool_choice names the tool 'nope'"),
        ({"settings": {"extra": {"model": "gpt-5"}}}, "invalid_spec",
         "spec.settings.extra may not set model"),
        ({"agents": {"helper": {"model": model, "settings": {"seed": "x"}}}}, "invalid_request",
         "agents.helper.settings.seed"),
        ({"model": "anthropic:claude-sonnet-4-5", "settings": {"seed": 3}}, "invalid_spec",
         "the Anthropic Messages API has no seed setting"),
    ]  # fmt: skip
    with serve(tmp_path, env={"ANTHROPIC_API_KEY": "sk-never-used"}) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=ACME_HEADERS) as client:
            for extra, code, named in cases:
                body = {"model": model, "task": "hi", **extra}
                answer = await client.post("/v1/sessions", json=body)
                assert answer.status_code == 422, (extra, answer.text)
                error = answer.json()["error"]
                assert error["code"] == code and named in error["message"], (extra, error)
            listed = (await client.get("/v1/sessions")).json()
            assert listed["sessions"] == []  # nothing was created by any of them
            # The Python client sends a spec's settings as the server reads them.
            rt = HttpRuntime(server.url, ACME)
            settings = ModelSettings(
                temperature=0.5, stop=["x"], reasoning=Reasoning("low", interleaved=True),
                extra={"metadata": {"k": 1}}, reset_tool_choice=False, cache=False,
            )  # fmt: skip
            try:
                ref = await rt.start(SessionSpec(model, "hi", settings=settings))
            finally:
                await rt.close()
            first = (await client.get(f"/v1/sessions/{ref.session_id}/events?limit=1")).json()
    recorded = first["events"][0]["data"]["metadata"]["model_settings"]
    assert ModelSettings.from_json(recorded) == settings
