"""Record real exchanges to a cassette, then replay them offline byte for byte, streams too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.messages import ToolResult, tool_results, user
from tether.providers.base import Delta, ModelRequest
from tether.providers.replay import Cassette, CassetteMismatch, ReplayModel

from .fake_servers import FakeServer, Received, Reply
from .test_loopback import ADD, MODEL_NAMES, PLAN
from .toy_dialects import HANDLERS, ToyModel

SECRET = "sk-very-secret-key-0123456789"


async def _conversation(model: ReplayModel, seen: list[Delta]) -> list[object]:
    first = await model.complete(
        ModelRequest(model.name, "sys", (user("add twice"),), (ADD,), None, seen.append)
    )
    results = tool_results([ToolResult(c.id, "ok") for c in first.message.tool_calls])
    second = await model.complete(
        ModelRequest(
            model.name,
            "sys",
            (user("add twice"), first.message, results),
            (ADD,),
            None,
            seen.append,
        )
    )
    return [first, second]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("dialect", ["anthropic", "openai", "openai-responses", "ollama"])
async def test_a_recorded_session_replays_offline_identically(
    tmp_path: Path, dialect: str, stream: bool
) -> None:
    cassette = tmp_path / "session.json"
    spec = f"{dialect}:{MODEL_NAMES[dialect]}"
    handler = HANDLERS[dialect](ToyModel(PLAN))

    def leaky(request: Received) -> Reply:
        reply = handler(request)
        reply.headers["x-echo-key"] = SECRET  # a server that echoes the key must not leak it
        reply.headers["set-cookie"] = "session=abc"
        return reply

    recorded_deltas: list[Delta] = []
    async with FakeServer(leaky) as server:
        base = server.url + "/v1" if dialect.startswith("openai") else server.url
        recorder = ReplayModel(
            spec, cassette, mode="record", stream=stream, api_key=SECRET, base_url=base
        )
        recorded = await _conversation(recorder, recorded_deltas)
        await recorder.aclose()

    text = cassette.read_text()
    assert SECRET not in text and "set-cookie" not in text
    assert len(Cassette.load(cassette).exchanges) == 2

    replay_deltas: list[Delta] = []
    player = ReplayModel(spec, cassette, stream=stream)  # auto: the cassette exists; no key
    assert player.replaying
    replayed = await _conversation(player, replay_deltas)
    assert replayed == recorded
    assert replay_deltas == recorded_deltas


async def test_a_request_the_cassette_does_not_hold_is_refused(tmp_path: Path) -> None:
    cassette = tmp_path / "c.json"
    async with FakeServer(HANDLERS["openai"](ToyModel(PLAN))) as server:
        recorder = ReplayModel(
            "openai:gpt-4.1", cassette, mode="record", api_key=SECRET, base_url=server.url + "/v1"
        )
        await recorder.complete(ModelRequest("m", None, (user("one"),)))
        await recorder.aclose()
    player = ReplayModel("openai:gpt-4.1", cassette, mode="replay")
    with pytest.raises(CassetteMismatch, match="differs from the recording"):
        await player.complete(ModelRequest("m", None, (user("two"),)))
    player = ReplayModel("openai:gpt-4.1", cassette, mode="replay")
    await player.complete(ModelRequest("m", None, (user("one"),)))
    with pytest.raises(CassetteMismatch, match="not recorded"):
        await player.complete(ModelRequest("m", None, (user("one"),)))


async def test_recorded_errors_replay_as_the_same_error(tmp_path: Path) -> None:
    from tether import errors

    cassette = tmp_path / "c.json"
    body = json.dumps(
        {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}
    ).encode()
    async with FakeServer(lambda _: Reply(429, body, {"retry-after": "3"})) as server:
        recorder = ReplayModel(
            "openai:gpt-4.1", cassette, mode="record", api_key=SECRET, base_url=server.url
        )
        with pytest.raises(errors.RateLimited):
            await recorder.complete(ModelRequest("m", None, (user("x"),)))
        await recorder.aclose()
    player = ReplayModel("openai:gpt-4.1", cassette)
    with pytest.raises(errors.RateLimited) as caught:
        await player.complete(ModelRequest("m", None, (user("x"),)))
    assert caught.value.retry_after == 3.0


def test_a_file_that_is_not_a_cassette_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"version": 99}')
    with pytest.raises(CassetteMismatch):
        Cassette.load(path)


async def test_compressed_answers_are_recorded_as_sent_and_replay(tmp_path: Path) -> None:
    import gzip

    cassette = tmp_path / "gz.json"
    handler = HANDLERS["anthropic"](ToyModel(PLAN))

    def gzipped(request: Received) -> Reply:
        reply = handler(request)
        reply.body = gzip.compress(reply.body)
        reply.headers["content-encoding"] = "gzip"
        return reply

    async with FakeServer(gzipped) as server:
        recorder = ReplayModel(
            "anthropic:claude-sonnet-4-5",
            cassette,
            mode="record",
            api_key=SECRET,
            base_url=server.url,
        )
        recorded = await recorder.complete(ModelRequest("m", None, (user("add"),), (ADD,)))
        await recorder.aclose()
    assert "body_b64" in cassette.read_text()
    replayed = await ReplayModel("anthropic:claude-sonnet-4-5", cassette).complete(
        ModelRequest("m", None, (user("add"),), (ADD,))
    )
    assert replayed == recorded and len(replayed.message.tool_calls) == 2
