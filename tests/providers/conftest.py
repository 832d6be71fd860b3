"""Shared fixtures of the codec tests: the reference wire files (`wire/`, beside this file) and
an in-process transport."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

WIRE = Path(__file__).parent / "wire"


def wire_bytes(name: str) -> bytes:
    return (WIRE / name).read_bytes()


def wire_json(name: str) -> Any:
    return json.loads(wire_bytes(name))


class Recorder:
    """An httpx MockTransport that answers from a queue and keeps what it was sent."""

    def __init__(self) -> None:
        self.replies: list[httpx.Response] = []
        self.requests: list[httpx.Request] = []

    def reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.replies.append(httpx.Response(status, content=body, headers=headers or {}))

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.replies.pop(0)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handler))

    def sent(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()
