"""An experiment of 40 runs among 3,000 newer sessions of the same tenant, over a real
`tether serve` and the real `tether experiment report`: its runs are found by their tag in the
catalog, all 40, where a window of the newest sessions found none (a 404)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import httpx

from experiment.fixtures import agent_pair, fill, said_ok
from experiment.test_cli import env
from server.support import ACME_HEADERS, TETHER, serve
from tether.experiment import Task, run_matrix
from tether.store import SQLiteStore

FETCH = Task("Fetch the answer.", check=said_ok, name="fetch")


async def test_an_experiment_of_40_runs_is_reported_whole_among_3000_newer_sessions(
    tmp_path: Path,
) -> None:
    path = tmp_path / "serve.db"
    store = SQLiteStore(str(path))
    try:
        variants = agent_pair(store, (0.9, 0.5), (1, 2))
        for agent in variants.values():
            agent.metadata = {"tenant": "acme"}
        ran = await run_matrix(variants, [FETCH], 20, experiment_id="needle", seed=3)
        await fill(store, 3_000, "acme")
    finally:
        await store.close()
    expected = {r.session_id for r in ran.runs}

    with serve(tmp_path, "--workers", "0") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            listed = (await client.get("/v1/experiments", headers=ACME_HEADERS)).json()
            report = await client.get("/v1/experiments/needle", headers=ACME_HEADERS)
    [entry] = listed["experiments"]
    assert (entry["experiment_id"], entry["runs"], entry["variants"]) == ("needle", 40, ["a", "b"])
    assert report.status_code == 200, report.text
    body = report.json()
    assert {r["session_id"] for r in body["runs"]} == expected
    assert body["bounds"]["runs"] == 40 and body["bounds"]["complete"] is True

    command = [*TETHER, "experiment", "report", "needle", "--json", "--store", f"sqlite:///{path}"]
    out = await asyncio.to_thread(
        subprocess.run, command, env=env(), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert {r["session_id"] for r in json.loads(out.stdout)["runs"]} == expected
