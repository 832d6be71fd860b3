"""`tether run` and `tether chat` take model settings as flags (`--reasoning`, `--temperature`,
`--max-output-tokens`, `--no-cache`, `--setting KEY=VALUE`): each reaches the request body a
loopback provider receives, is recorded in `session.created`, and holds when the session goes
on in another command. A bad value is refused before anything is stored, naming its flag."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from providers.fake_servers import FakeServer
from providers.toy_dialects import HANDLERS, ToyModel
from tether.events import SessionCreated
from tether.store.open import open_store

WAIT = 60


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TETHER_STORE", "NO_COLOR")}
    return env | extra


async def tether(*args: str, cwd: Path, stdin: bytes = b"", **env: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether", *args, cwd=cwd, env=_env(**env),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(WAIT):
            out, err = await process.communicate(stdin)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def _created(store_url: str, session_id: str) -> SessionCreated:
    store = open_store(store_url)
    try:
        created = (await store.read(session_id, limit=1))[0].payload
    finally:
        await store.close()
    assert isinstance(created, SessionCreated)
    return created


async def test_run_flags_reach_the_anthropic_body_and_hold_when_the_session_goes_on(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 't.db'}"
    async with FakeServer(HANDLERS["anthropic"](ToyModel([]))) as server:
        env = {"ANTHROPIC_API_KEY": "sk-loopback", "ANTHROPIC_BASE_URL": server.url}
        code, out, err = await tether(
            "run", "think it over", "--model", "anthropic:claude-sonnet-4-5", "--json",
            "--store", store, "--reasoning", "high", "--max-output-tokens", "20000",
            "--no-cache", "--setting", "reasoning.interleaved=true",
            "--setting", 'stop=["THE END"]', cwd=tmp_path, **env,
        )  # fmt: skip
        assert code == 0, err
        session_id = out.split('"session_id": "')[1].split('"')[0]
        code, _, err = await tether(
            "sessions", "send", session_id, "and again", "--json", "--store", store,
            cwd=tmp_path, **env,
        )  # fmt: skip
        assert code == 0, err
    assert len(server.requests) == 2
    for received in server.requests:  # the new session's request, then the resumed one's
        body = received.json()
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
        assert body["max_tokens"] == 20000 and body["stop_sequences"] == ["THE END"]
        assert "cache_control" not in received.body.decode()  # --no-cache
        assert received.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    recorded = (await _created(store, session_id)).metadata["model_settings"]
    assert isinstance(recorded, dict)
    assert recorded["reasoning"] == {"effort": "high", "budget_tokens": None, "interleaved": True}
    assert (recorded["max_output_tokens"], recorded["cache"]) == (20000, False)


async def test_chat_flags_reach_every_turn_and_a_setting_is_read_as_json(tmp_path: Path) -> None:
    async with FakeServer(HANDLERS["openai"](ToyModel([]))) as server:
        code, out, err = await tether(
            "chat", "--model", f"openai-compatible:m@{server.url}/v1", "--temperature", "0.3",
            "--setting", "seed=7", "--setting", "top_p=0.5",
            "--store", f"sqlite:///{tmp_path / 't.db'}", cwd=tmp_path,
            stdin=b"first\nsecond\n",
        )  # fmt: skip
    assert code == 0, err
    bodies = [r.json() for r in server.requests]
    assert len(bodies) == 2, out
    for body in bodies:
        assert (body["temperature"], body["seed"], body["top_p"]) == (0.3, 7, 0.5)


async def test_a_bad_setting_is_refused_naming_its_flag_before_anything_is_stored(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    cases = {
        ("--setting", "temperature=hot"): '--setting temperature="hot": ModelSettings.temperature',
        ("--setting", "temprature=1"): "--setting temprature=1: unknown model settings: temprature",
        ("--setting", "=1"): "--setting: must be KEY=VALUE",
        ("--setting", "reasoning.effort=extreme"): "Reasoning.effort must be 'low', 'medium'",
        ("--reasoning", "extreme"): "--reasoning: invalid choice: 'extreme'",
        ("--temperature", "3"): "--temperature: must be a number from 0 to 2, not 3",
    }
    for flags, wanted in cases.items():
        code, _, err = await tether(
            "run", "hi", "--model", "scripted:demo", "--store", f"sqlite:///{db}", *flags,
            cwd=tmp_path,
        )  # fmt: skip
        assert code == 2, (flags, err)
        assert wanted in err and err.count("\n") == 1, (flags, err)
    assert not db.exists()  # nothing was stored, not even the file
