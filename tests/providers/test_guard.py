"""The guarded model client connects only where the endpoint policy allows at the moment of
connecting: a name that passed the spec's check and is repointed at loopback afterwards (DNS
rebinding) is refused, and the server there hears nothing.

The system resolver is replaced for these tests: it knows one name (rebind.test, loopback)
and numeric addresses, so even a broken guard could reach only the loopback server."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

import pytest

from providers.fake_servers import FakeServer, Reply
from tether.errors import EndpointBlocked
from tether.messages import user
from tether.providers.base import ModelRequest
from tether.providers.endpoints import EndpointPolicy
from tether.providers.guard import guarded_client
from tether.providers.registry import model_from_string

REAL_GETADDRINFO = socket.getaddrinfo


def loopback_only(
    host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
) -> Any:
    if host in ("rebind.test", b"rebind.test"):
        host = "127.0.0.1"
    # AI_NUMERICHOST: never a look-up that could leave the machine
    return REAL_GETADDRINFO(host, port, family, type, proto, flags | socket.AI_NUMERICHOST)


@pytest.fixture(autouse=True)
def no_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)


def answer(text: str) -> Reply:
    body = (
        '{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,'
        f'"message":{{"role":"assistant","content":"{text}"}},"finish_reason":"stop"}}],'
        '"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}'
    )
    return Reply(200, body.encode(), {"content-type": "application/json"})


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def test_a_name_repointed_at_loopback_after_its_check_is_refused_at_connect() -> None:
    answers = [["93.184.216.34"]]  # public when the spec is checked

    def resolve(host: str, port: int) -> Sequence[str]:
        return answers[-1]

    async with FakeServer(lambda r: answer("inside")) as inside:
        base = f"http://rebind.test:{port_of(inside.url)}/v1"
        policy = EndpointPolicy((base,), resolve=resolve)
        policy.check(base + "/chat/completions")  # what start and the worker check
        answers.append(["127.0.0.1"])  # the name now points inside
        async with guarded_client(policy) as client:
            model = model_from_string(f"openai-compatible:m@{base}", http_client=client)
            with pytest.raises(EndpointBlocked, match=r"127\.0\.0\.1"):
                await model.complete(ModelRequest("m", None, (user("secret"),)))
    assert inside.requests == []


async def test_a_host_the_operator_named_is_connected_to_as_named() -> None:
    async with FakeServer(lambda r: answer("hello")) as server:
        base = f"{server.url}/v1"
        policy = EndpointPolicy((base,), resolve=lambda host, port: ["203.0.113.1"])
        async with guarded_client(policy) as client:
            model = model_from_string(f"openai-compatible:m@{base}", http_client=client)
            response = await model.complete(ModelRequest("m", None, (user("hi"),)))
    assert response.message.text == "hello"
    assert len(server.requests) == 1
