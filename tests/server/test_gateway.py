"""The model gateway behind `tether serve` and `tether worker`: a queued session's poll says
why it waits, a queued session cancels at once, `/metrics` carries the gateway's series, and
`tether worker` prints its gateway figures on SIGUSR1 and when it exits."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server.support import ACME, Server, serve, start_worker, stop_worker
from tether.runtime.http import HttpRuntime
from tether.testing.runtime_conformance import Observer, spec

BACKEND = "scripted:runtime"
OPERATOR = "operator-metrics-token-0123456789"  # /metrics names backends only to its bearer
HOLD = "note 1 30"  # the first model call answers after 30 s: it holds the only slot


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Four sessions at once, but one model request in flight at a time."""
    with serve(
        tmp_path_factory.mktemp("gateway"), "--workers", "4", "--max-concurrency", "1",
        "--metrics-token", OPERATOR,
    ) as running:  # fmt: skip
        yield running


def sample(metrics: str, series: str) -> float:
    found = re.search(rf"^{re.escape(series)} (\S+)$", metrics, re.MULTILINE)
    assert found is not None, f"{series} not in /metrics:\n{metrics}"
    return float(found.group(1))


async def test_a_queued_sessions_poll_says_why_it_waits_and_a_cancel_ends_it_at_once(
    server: Server,
) -> None:
    rt = HttpRuntime(server.url, ACME)
    try:
        first = Observer(rt, await rt.start(spec(HOLD, end_after_turn=True)))
        await first.until(
            "its call is out", lambda s: s.waiting is not None and s.waiting.kind == "sending"
        )
        second = Observer(rt, await rt.start(spec("echo hi", end_after_turn=True)))
        status = await second.until(
            "queued", lambda s: s.waiting is not None and s.waiting.kind == "queued"
        )
        assert status.state == "waiting_model"
        assert status.waiting_reason is not None and status.waiting_reason.startswith("queued")
        async with httpx.AsyncClient(base_url=server.url) as client:
            body = (
                await client.get(
                    f"/v1/sessions/{second.ref.session_id}",
                    headers={"Authorization": f"Bearer {ACME}"},
                )
            ).json()
        assert body["state"] == "waiting_model" and body["waiting"]["kind"] == "queued"
        assert body["waiting_reason"].startswith("queued"), body

        await rt.cancel(second.ref)
        ended = await second.until("canceled", lambda s: s.terminal)
        assert ended.state == "canceled" and ended.waiting is None
        # At once: the first session's 30 s call still holds the only slot.
        still = await first.poll()
        assert still.waiting is not None and still.waiting.kind == "sending"
        await rt.cancel(first.ref)
        assert (await first.until("canceled", lambda s: s.terminal)).state == "canceled"
    finally:
        await rt.close()


async def test_metrics_carry_the_gateway_series_after_a_session_ran(server: Server) -> None:
    rt = HttpRuntime(server.url, ACME)
    try:
        ref = await rt.start(spec("note 1", end_after_turn=True))
        done = await Observer(rt, ref).until("the end", lambda s: s.terminal)
        assert done.state == "completed"
    finally:
        await rt.close()
    async with httpx.AsyncClient(base_url=server.url) as client:
        operator = {"Authorization": f"Bearer {OPERATOR}"}
        metrics = (await client.get("/metrics", headers=operator)).text
    backend = f'backend="{BACKEND}"'
    assert sample(metrics, f"tether_gateway_requests_total{{{backend}}}") >= 2
    assert sample(metrics, f"tether_gateway_succeeded_total{{{backend}}}") >= 2
    assert sample(metrics, f"tether_gateway_rate_limited_total{{{backend}}}") == 0
    assert sample(metrics, f"tether_gateway_max_concurrency{{{backend}}}") == 1
    assert sample(metrics, f"tether_gateway_queue_depth{{{backend}}}") == 0
    waits = f'tether_gateway_queue_wait_seconds_count{{{backend},priority="interactive"}}'
    assert sample(metrics, waits) >= 2
    assert "# TYPE tether_gateway_utilisation gauge" in metrics


async def test_tether_worker_prints_its_gateway_figures_on_sigusr1_and_on_exit(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, "--workers", "0") as server:
        worker = start_worker(server.store, "--max-concurrency", "3")
        rt = HttpRuntime(server.url, ACME)
        try:
            ref = await rt.start(spec("echo hi", end_after_turn=True))
            done = await Observer(rt, ref).until("the end", lambda s: s.terminal)
            assert done.state == "completed"
            async with httpx.AsyncClient(base_url=server.url) as client:
                metrics = (await client.get("/metrics")).text
            # The server ran nothing: its gateways saw no call, and it shows none.
            assert "tether_gateway_" not in metrics
            worker.send_signal(signal.SIGUSR1)
        finally:
            await rt.close()
            stop_worker(worker)
        err = worker.stderr.read() if worker.stderr else ""
    assert worker.returncode == 0, err
    blocks = re.findall(rf"tether worker: gateway {re.escape(BACKEND)}: .*\n(?:  .*\n)+", err)
    assert len(blocks) == 2, err  # one on SIGUSR1, one on exit
    for block in blocks:
        assert "(max 3)" in block and "requests 1," in block and "429s 0" in block, block
        assert "retries 0" in block and "utilisation: concurrency" in block, block
