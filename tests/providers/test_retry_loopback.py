"""Retries by default, over real HTTP: a loopback Anthropic that answers 429 with
`retry-after: 1` twice and then 200. A plain `Agent` and the real `tether run` command both
complete, wait as told between attempts, and log each retry; a 401 is sent exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from tether import Agent
from tether.events import ModelFailed, ModelResponded
from tether.providers.registry import model_from_string
from tether.store import SQLiteStore

from .conftest import wire_bytes
from .fake_servers import FakeServer, Received, Reply
from .toy_dialects import ToyModel, anthropic_handler

MODEL = "anthropic:claude-sonnet-4-5"
UNAUTHORIZED = json.dumps(
    {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
).encode()


class Limited:
    """429 with `retry-after: 1` for the first `refusals` requests, then the answer; keeps
    when each request arrived."""

    def __init__(self, refusals: int = 2) -> None:
        self.refusals = refusals
        self.arrivals: list[float] = []

    def __call__(self, request: Received) -> Reply:
        self.arrivals.append(time.monotonic())
        if len(self.arrivals) <= self.refusals:
            body = wire_bytes("anthropic-error-429-rate-limit.json")
            return Reply(429, body, {"retry-after": "1", "content-type": "application/json"})
        if request.json().get("stream"):  # `tether run` streams, unless --json
            return anthropic_handler(ToyModel([]))(request)
        body = wire_bytes("anthropic-response-end-turn.json")
        return Reply(200, body, {"content-type": "application/json"})


async def run_cli(*args: str, base_url: str, cwd: Path) -> tuple[int, str, str]:
    """`tether ARGS` as a subprocess, its Anthropic pointed at `base_url`."""
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    env |= {"ANTHROPIC_API_KEY": "sk-loopback", "ANTHROPIC_BASE_URL": base_url}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tether",
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(120):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def assert_waited_as_told(arrivals: list[float]) -> None:
    assert len(arrivals) == 3
    assert arrivals[1] - arrivals[0] >= 1.0
    assert arrivals[2] - arrivals[1] >= 1.0


def assert_retries_logged(failed: list[ModelFailed]) -> None:
    assert [(f.error_class, f.status, f.attempt) for f in failed] == [
        ("rate_limited", 429, 1),
        ("rate_limited", 429, 2),
    ]
    assert all(f.retrying_in is not None and f.retrying_in >= 1.0 for f in failed)


async def test_a_plain_agent_rides_out_two_429s() -> None:
    server_model = Limited()
    async with FakeServer(server_model) as server:
        model = model_from_string(MODEL, api_key="sk-loopback", base_url=server.url)
        agent = Agent(model, store="memory:")
        result = await agent.run("weather?")
        events = await agent.store.read(result.session_id)
        await agent.close()
    assert result.stop_reason == "end_turn"
    assert result.output.startswith("San Francisco is 15 °C")
    assert_waited_as_told(server_model.arrivals)
    assert_retries_logged([e.payload for e in events if isinstance(e.payload, ModelFailed)])


async def test_tether_run_rides_out_two_429s_and_logs_them(tmp_path: Path) -> None:
    server_model = Limited()
    db = tmp_path / "t.db"
    async with FakeServer(server_model) as server:
        code, out, err = await run_cli(
            "run", "weather?", "--model", MODEL, "--store", f"sqlite:///{db}", "--json",
            base_url=server.url, cwd=tmp_path,
        )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["stop_reason"] == "end_turn"
    assert_waited_as_told(server_model.arrivals)
    store = SQLiteStore(str(db))
    try:
        events = await store.read(result["session_id"])
    finally:
        await store.close()
    assert_retries_logged([e.payload for e in events if isinstance(e.payload, ModelFailed)])
    assert sum(isinstance(e.payload, ModelResponded) for e in events) == 1


async def test_the_output_and_the_timeline_show_each_retry(tmp_path: Path) -> None:
    async with FakeServer(Limited(refusals=1)) as server:
        code, out, err = await run_cli(
            "run", "weather?", "--model", MODEL, "--store", f"sqlite:///{tmp_path / 't.db'}",
            base_url=server.url, cwd=tmp_path,
        )  # fmt: skip
    assert code == 0, err
    assert "rate_limited (429)" in out and "attempt 1, retrying in" in out
    async with FakeServer(Limited(refusals=1)) as server:
        code, out, err = await run_cli(
            "run", "weather?", "--model", MODEL, "--store", f"sqlite:///{tmp_path / 't.db'}",
            "--timeline", base_url=server.url, cwd=tmp_path,
        )  # fmt: skip
    assert code == 0, err
    assert "model.failed" in out and "retrying in" in out


async def test_a_401_is_sent_exactly_once(tmp_path: Path) -> None:
    async with FakeServer(lambda _: Reply(401, UNAUTHORIZED)) as server:
        model = model_from_string(MODEL, api_key="sk-wrong", base_url=server.url)
        agent = Agent(model, store="memory:")
        result = await agent.run("weather?")
        await agent.close()
        assert len(server.requests) == 1
        code, out, err = await run_cli(
            "run", "weather?", "--model", MODEL, "--store", f"sqlite:///{tmp_path / 't.db'}",
            "--json", base_url=server.url, cwd=tmp_path,
        )  # fmt: skip
        assert len(server.requests) == 2
    assert result.stop_reason == "error" and "authentication" in (result.stop_detail or "")
    assert json.loads(out)["stop_reason"] == "error", err
    assert code == 1  # an error


async def test_no_server_at_all_is_an_error_exit_1(tmp_path: Path) -> None:
    async with FakeServer(lambda _: Reply()) as server:
        url = server.url  # a port that was just free: nothing listens there once closed
    code, out, err = await run_cli(
        "run", "weather?", "--model", MODEL, "--store", f"sqlite:///{tmp_path / 't.db'}",
        "--json", "--retries", "0", base_url=url, cwd=tmp_path,
    )  # fmt: skip
    result = json.loads(out)
    assert (code, result["stop_reason"]) == (1, "error"), err
    assert "connection_failed" in result["stop_detail"]


async def test_retries_zero_makes_one_attempt(tmp_path: Path) -> None:
    server_model = Limited()
    async with FakeServer(server_model) as server:
        code, out, err = await run_cli(
            "run", "weather?", "--model", MODEL, "--store", f"sqlite:///{tmp_path / 't.db'}",
            "--json", "--retries", "0", base_url=server.url, cwd=tmp_path,
        )  # fmt: skip
    assert len(server_model.arrivals) == 1
    assert json.loads(out)["stop_reason"] == "error", err
    assert code == 1
