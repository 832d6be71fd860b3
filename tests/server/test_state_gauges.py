"""`/metrics` counts every session of the store by state (`tether_sessions`, from its
catalog), whichever process runs them: here a `tether worker` process runs them all, and the
server, which runs none (`--workers 0`), counts them; its own workers' census stays empty."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from server.support import ACME_HEADERS, serve, start_worker, stop_worker
from tether.testing.runtime_fixtures import MODEL


async def state_of(client: httpx.AsyncClient, sid: str, want: str) -> None:
    async with asyncio.timeout(30):
        while True:
            polled = await client.get(f"/v1/sessions/{sid}", headers=ACME_HEADERS)
            if polled.json()["state"] == want:
                return
            await asyncio.sleep(0.05)


def gauges(text: str, name: str) -> dict[str, float]:
    """The samples of family `name` by their `state` label."""
    out = {}
    for line in text.splitlines():
        if line.startswith(f'{name}{{state="'):
            labels, value = line.rsplit(" ", 1)
            out[labels.removeprefix(f'{name}{{state="').removesuffix('"}')] = float(value)
    return out


async def test_sessions_another_process_runs_are_counted_by_state(tmp_path: Path) -> None:
    await check_sessions_another_process_runs_are_counted(tmp_path)


async def check_sessions_another_process_runs_are_counted(
    tmp_path: Path, store: str | None = None
) -> None:
    with serve(tmp_path, "--workers", "0", store=store) as server:
        worker = start_worker(server.store)
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                empty = gauges((await client.get("/metrics")).text, "tether_sessions")
                made = {}
                for task, end, state in (
                    ("echo one", True, "completed"),
                    ("echo two", False, "idle"),
                    ("echo three", False, "idle"),
                    ("hang", False, "waiting_model"),
                ):
                    body = {"model": MODEL, "task": task, "end_after_turn": end}
                    answer = await client.post("/v1/sessions", headers=ACME_HEADERS, json=body)
                    made[answer.json()["session_id"]] = state
                for sid, state in made.items():
                    await state_of(client, sid, state)
                text = (await client.get("/metrics")).text
                hung = next(sid for sid, state in made.items() if state == "waiting_model")
                await client.post(f"/v1/sessions/{hung}/cancel", headers=ACME_HEADERS)
                await state_of(client, hung, "canceled")  # so the worker stops at once
        finally:
            stop_worker(worker)
    assert empty["idle"] == 0 and empty["waiting_model"] == 0  # every state, from the start
    counted = gauges(text, "tether_sessions")
    assert (counted["completed"], counted["idle"], counted["waiting_model"]) == (1, 2, 1)
    assert sum(counted.values()) == 4
    assert gauges(text, "tether_worker_sessions")["waiting_model"] == 0  # not this process's
    assert "tether_worker_running 0" in text
