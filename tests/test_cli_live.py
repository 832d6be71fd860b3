"""`tether run` shows the turn as it happens: the model's text as it streams (the real command
against a loopback Anthropic that holds its stream open half sent), each tool call and its
result; colour on a terminal, never with NO_COLOR or in a pipe; `--timeline` and `--json`
as before. Text from a model never reaches the terminal as control characters."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from providers.fake_servers import FakeServer, Received, Reply
from providers.toy_dialects import ToyModel, anthropic_handler
from tether import Agent, tool
from tether.cli.live import ARGUMENTS_SHOWN, LiveView, Style
from tether.providers.base import Delta
from tether.testing import ScriptedModel, call, say

MODEL = "anthropic:claude-sonnet-4-5"
ANSWER = "Hello there from a stream that takes its time"


@dataclass
class Talker(ToyModel):
    """Answers every request with the same text, a word per SSE event."""

    def answer(self, results: list[str]) -> str:
        return ANSWER


def env_for(base_url: str | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TETHER_STORE", "NO_COLOR")}
    env.pop("FORCE_COLOR", None)
    if base_url is not None:
        env |= {"ANTHROPIC_API_KEY": "sk-loopback", "ANTHROPIC_BASE_URL": base_url}
    return env | extra


async def read_until(stream: asyncio.StreamReader, text: bytes, seen: bytearray) -> None:
    while text not in seen:
        piece = await stream.read(4096)
        assert piece, f"the output ended before {text!r}: {bytes(seen)!r}"
        seen.extend(piece)


async def test_the_first_text_is_printed_while_the_model_still_streams(tmp_path: Path) -> None:
    resume = asyncio.Event()
    toy = Talker(plan=[], stream=True)
    answer = anthropic_handler(toy)

    def held(request: Received) -> Reply:
        reply = answer(request)
        assert reply.chunks is not None, "the command must ask for a stream"
        # message_start, content_block_start, the first word; then the stream waits.
        reply.hold_at, reply.resume = 3, resume
        return reply

    async with FakeServer(held) as server:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tether", "run", "say hello", "--model", MODEL,
            "--store", f"sqlite:///{tmp_path / 't.db'}",
            cwd=tmp_path, env=env_for(server.url),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None
        seen = bytearray()
        try:
            async with asyncio.timeout(60):
                await read_until(process.stdout, b"Hello", seen)
            # The first word is out while the server holds the rest of its answer.
            assert not resume.is_set() and b"there" not in seen
            resume.set()
            async with asyncio.timeout(60):
                rest, err = await process.communicate()
        finally:
            resume.set()
            if process.returncode is None:
                process.kill()
                await process.wait()
    out = (bytes(seen) + rest).decode()
    assert process.returncode == 0, err.decode()
    assert out.count(ANSWER) == 1, out  # streamed once, not printed again at the end
    assert "stop: end_turn" in out and "\x1b[" not in out  # a pipe: no colour


def tether(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd, env=env_for(**env), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


DEMO = ("run", "plan a picnic", "--model", "scripted:demo", "--tools", "tether.demo:tools")


def test_tool_calls_and_results_are_shown_as_they_happen_in_plain_text_when_piped(
    tmp_path: Path,
) -> None:
    out = tether(*DEMO, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert '→ forecast(city="Atlantis")  [call_0_1]' in lines
    assert any(line.startswith("  ← forecast error") and "LookupError" in line for line in lines)
    assert lines.index('→ save_plan(place="Lisbon", note="sunny, 22 °C; Atlantis has no forecast")'
                       "  [call_1_0]") > lines.index('→ forecast(city="Lisbon")  [call_0_2]')  # fmt: skip
    assert "\x1b[" not in out.stdout
    assert "model.requested" not in out.stdout  # the timeline is --timeline's


def test_colour_is_forced_on_and_no_color_wins(tmp_path: Path) -> None:
    coloured = tether(*DEMO, cwd=tmp_path, FORCE_COLOR="1")
    assert "\x1b[36m→ forecast" in coloured.stdout and "\x1b[31mforecast error" in coloured.stdout
    plain = tether(*DEMO, cwd=tmp_path, FORCE_COLOR="1", NO_COLOR="1")
    assert plain.returncode == 0 and "\x1b[" not in plain.stdout
    assert "→ forecast" in plain.stdout


def test_timeline_and_json_print_what_they_printed_before(tmp_path: Path) -> None:
    timeline = tether(*DEMO, "--timeline", cwd=tmp_path)
    assert "model.requested" in timeline.stdout and "tool.finished" in timeline.stdout
    assert "→ forecast" not in timeline.stdout
    result = json.loads(tether(*DEMO, "--json", cwd=tmp_path).stdout)
    assert (result["stop_reason"], result["steps"]) == ("end_turn", 3)


async def test_control_characters_from_a_model_never_reach_the_terminal() -> None:
    out = io.StringIO()
    view = LiveView(out, Style(True))
    model = ScriptedModel(["clear\x1b[2J the screen\x07 and\x9b ring"])
    agent = Agent(model, store="memory:", on_event=view.on_event, on_delta=view.on_delta)
    await agent.run("go")
    await agent.close()
    assert out.getvalue() == "clear␛[2J the screen� and� ring\n"


def test_a_calls_arguments_stream_on_a_line_of_their_own_and_a_long_one_says_its_length() -> None:
    out = io.StringIO()
    view = LiveView(out, Style(False))
    view.on_delta(Delta("text", "Checking"))
    view.on_delta(Delta("tool_input", '{"city": ', "call_a"))
    view.on_delta(Delta("tool_input", '"Lisbon"}', None))  # a later piece names no call
    long = '{"text": "' + "x" * 500 + '"}'
    view.on_delta(Delta("tool_input", long[:300], "call_b"))
    view.on_delta(Delta("tool_input", long[300:], "call_b"))
    assert view.end()
    assert not view.end()  # nothing left open
    assert out.getvalue() == (
        'Checking\n⋯ [call_a] {"city": "Lisbon"}\n'
        f"⋯ [call_b] {long[:ARGUMENTS_SHOWN]} … {len(long)} characters in all\n"
    )


async def test_a_turn_shows_the_arguments_as_they_stream_then_the_call() -> None:
    out = io.StringIO()
    view = LiveView(out, Style(False))

    @tool
    def forecast(city: str) -> str:
        """The weather."""
        return "sunny"

    model = ScriptedModel([say("Let me look.", call("forecast", city="Lisbon")), "Sunny."])
    agent = Agent(
        model, tools=[forecast], store="memory:", on_event=view.on_event, on_delta=view.on_delta
    )
    await agent.run("weather?")
    await agent.close()
    lines = out.getvalue().splitlines()
    assert lines[:3] == [
        "Let me look.",
        '⋯ [call_0_0] {"city": "Lisbon"}',
        '→ forecast(city="Lisbon")  [call_0_0]',
    ]
    assert lines[-1] == "Sunny."
