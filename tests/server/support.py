"""Real `tether serve` and `tether worker` processes on loopback for the server tests."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from tether.server.schemas import openapi

TOKENS = {"acme": ["acme-token-0123456789"], "globex": ["globex-token-0123456789"]}
ACME, GLOBEX = TOKENS["acme"][0], TOKENS["globex"][0]
ACME_HEADERS = {"authorization": f"Bearer {ACME}"}
TETHER = [sys.executable, "-m", "tether"]


@dataclass
class Server:
    url: str
    store: str
    process: subprocess.Popen[str]


def check_documented(data: object, name: str) -> None:
    """Raise unless `data` is what the OpenAPI document's schema `name` says."""
    components: dict[str, Any] = openapi()["components"]
    schema = {"$ref": f"#/components/schemas/{name}", "components": components}
    jsonschema.Draft202012Validator(schema).validate(data)


async def settled(client: httpx.AsyncClient, session_id: str) -> dict[str, object]:
    """The session's status once it has ended, polled as acme (at most 30 s)."""
    async with asyncio.timeout(30):
        while True:
            polled = await client.get(f"/v1/sessions/{session_id}", headers=ACME_HEADERS)
            status = polled.json()
            if status["state"] in ("completed", "failed", "canceled"):
                return dict(status)
            await asyncio.sleep(0.05)


def write_tokens(directory: Path) -> Path:
    path = directory / "tokens.json"
    path.write_text(json.dumps({"tenants": TOKENS}))
    return path


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TETHER_TOKENS", None)
    env.pop("TETHER_METRICS_TOKEN", None)
    env["PYTHONUNBUFFERED"] = "1"
    return {**env, **(extra or {})}


def _stop(process: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextmanager
def serve(
    directory: Path,
    *args: str,
    store: str | None = None,
    auth: bool = True,
    env: dict[str, str] | None = None,
) -> Iterator[Server]:
    """`tether serve` on 127.0.0.1 and a free port, with the test tokens (`auth=False`:
    `--no-auth`)."""
    store = store or f"sqlite:///{directory / 'serve.db'}"
    tokens = ["--tokens", str(write_tokens(directory))] if auth else ["--no-auth"]
    command = [
        *TETHER, "serve", "--host", "127.0.0.1", "--port", "0", "--store", store, *tokens,
        "--poll-interval", "0.05", "--allow-code", "tether.testing.runtime_fixtures:*", *args,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(env)
    )
    try:
        line = process.stdout.readline() if process.stdout else ""
        found = re.search(r"listening on (http://\S+)", line)
        if found is None:
            _stop(process)
            raise AssertionError(
                f"tether serve did not start: {line!r} {process.stderr.read() if process.stderr else ''}"
            )
        yield Server(found.group(1), store, process)
    finally:
        _stop(process)


def start_worker(
    store: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [*TETHER, "worker", "--store", store, "--poll-interval", "0.05",
         "--allow-code", "tether.testing.runtime_fixtures:*", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(env),
    )  # fmt: skip
    line = process.stdout.readline() if process.stdout else ""
    assert "running sessions" in line, line
    return process


def stop_worker(process: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    _stop(process, sig)


def sse_frames(lines: Sequence[str]) -> list[tuple[str, str, str]]:
    """(event, id, data) of each frame in raw SSE lines."""
    frames: list[tuple[str, str, str]] = []
    kind, ident, data = "message", "", list[str]()
    for line in lines:
        if not line:
            if data:
                frames.append((kind, ident, "\n".join(data)))
            kind, ident, data = "message", "", []
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                kind = value
            elif name == "id":
                ident = value
            elif name == "data":
                data.append(value)
    return frames
