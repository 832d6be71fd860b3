"""`tether chat` on a real terminal, driven through tmux as a person types: Ctrl-C at the
prompt drops the line typed so far; Ctrl-C mid-turn interrupts the turn (the session idle,
the turn `interrupted`) and the prompt comes back; the next message goes on with the same
session; a second Ctrl-C leaves (130) with the lease let go, so another process takes the
session at once. A call's arguments show as the model streams them.

The turns are slow only as long as the test wants: their tool waits on a FIFO the test
writes, never on a sleep. tmux is found as CI finds it (`.ci/tmux.sh`)."""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from tether.events import Event, ToolFinished, TurnEnded, UserMessage
from tether.fold import fold
from tether.store import SQLiteStore

HOW = "install tmux (bash .ci/tmux.sh)"

CHAT = """
import asyncio
import os

from tether import tool
from tether.testing import ScriptedModel, call

GATE = "gate"  # a FIFO: a call waits until the test writes a line into it


async def gate_line() -> str:
    # Read-write, so the open never blocks and no writer's close reads as the end.
    fd = os.open(GATE, os.O_RDWR | os.O_NONBLOCK)
    loop = asyncio.get_running_loop()
    line = loop.create_future()

    def readable() -> None:
        if not line.done():
            line.set_result(os.read(fd, 4096).decode().strip())

    loop.add_reader(fd, readable)
    try:
        return await line
    finally:
        loop.remove_reader(fd)
        os.close(fd)


@tool(effect="read")
async def wait_at_gate(why: str) -> str:
    '''Wait until the gate opens.'''
    return await gate_line()


@tool(effect="read")
async def slow_to_stop() -> str:
    '''Wait until the gate opens, even when cancelled (a cleanup that takes its time).'''
    reading = asyncio.ensure_future(gate_line())
    cancelled = False
    while not reading.done():
        try:
            await asyncio.shield(reading)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return reading.result()


def through_the_gate(messages):
    return f"the gate said {messages[-1].tool_results[0].content}"


model = ScriptedModel([
    "Hello, ready.",
    call("wait_at_gate", why="to be interrupted"),
    call("wait_at_gate", why="to be let through"),
    through_the_gate,
    call("slow_to_stop"),
    "back again",
])
"""
CHAT_ARGS = (
    "--model",
    "python:chatmod:model",
    "--tools",
    "chatmod:wait_at_gate,chatmod:slow_to_stop",
)


def tmux() -> str:
    path = os.environ.get("TETHER_TEST_TMUX") or shutil.which("tmux") or ""
    if not path:
        if os.environ.get("CI"):
            pytest.fail(f"no tmux in CI: {HOW}")
        pytest.skip(f"no tmux: {HOW}")
    return path


class Pane:
    """One tmux server of the test's own, with one pane running a command."""

    def __init__(self, binary: str, cwd: Path) -> None:
        self.binary = binary
        self.cwd = cwd
        self.socket = f"tether-test-{uuid.uuid4().hex[:12]}"

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            [self.binary, "-L", self.socket, *args], capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, f"tmux {args[0]}: {done.stderr}"
        return done.stdout

    def start(self, command: Sequence[str]) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("TETHER_STORE", "FORCE_COLOR")}
        env |= {"NO_COLOR": "1", "TERM": "xterm-256color"}
        # The exit code is shown in the pane, which stays open after the command (`cat`
        # waits on the terminal) so it can still be read. The shell traps Ctrl-C, which
        # reaches the whole foreground group, so as to outlive the command (the command
        # gets Ctrl-C as it would from an interactive shell: a trap is not inherited).
        shell = f'trap true INT; {shlex.join(command)}; echo "[exit $?]"; exec cat'
        subprocess.run(
            [self.binary, "-L", self.socket, "-f", "/dev/null", "new-session", "-d",
             "-x", "220", "-y", "50", "-c", str(self.cwd), "sh", "-c", shell],
            env=env, check=True, timeout=30,
        )  # fmt: skip

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "0", *keys)

    def type(self, text: str) -> None:
        self._tmux("send-keys", "-t", "0", "-l", text)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "0")

    async def until(self, text: str, times: int = 1) -> str:
        """The whole screen, once `text` is on it `times` times."""
        return await self.when(lambda screen: screen.count(text) >= times, repr(text))

    async def prompted(self) -> str:
        """The whole screen, once it ends with the chat's prompt."""
        return await self.when(lambda screen: screen.rstrip().endswith("›"), "the prompt")

    async def when(self, seen: Callable[[str], bool], what: str) -> str:
        screen = ""
        try:
            async with asyncio.timeout(60):
                while True:  # tmux tells nobody when a pane changes: look again
                    screen = await asyncio.to_thread(self.screen)
                    if seen(screen):
                        return screen
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"never saw {what} on the screen:\n{screen}") from None

    def close(self) -> None:
        subprocess.run([self.binary, "-L", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "chatmod.py").write_text(CHAT)
    os.mkfifo(tmp_path / "gate")
    return tmp_path


@pytest.fixture
async def pane(workdir: Path) -> AsyncIterator[Pane]:
    opened = Pane(tmux(), workdir)
    try:
        yield opened
    finally:
        opened.close()


async def open_gate(workdir: Path, line: str) -> None:
    """Write a line into the gate; the open waits for the call to have it open."""

    def write() -> None:
        with open(workdir / "gate", "w") as gate:
            gate.write(line + "\n")

    async with asyncio.timeout(60):
        await asyncio.to_thread(write)


async def read_log(db: Path) -> list[Event]:
    store = SQLiteStore(str(db))
    try:
        (info,) = await store.sessions(limit=2)
        return await store.read(info.session_id)
    finally:
        await store.close()


def stops(events: list[Event]) -> list[str | None]:
    return [e.payload.stop_reason for e in events if isinstance(e.payload, TurnEnded)]


async def test_ctrl_c_interrupts_the_turn_and_the_chat_goes_on_then_twice_leaves(
    workdir: Path, pane: Pane
) -> None:
    pane.start([sys.executable, "-m", "tether", "chat", *CHAT_ARGS])
    await pane.prompted()
    # At the prompt, Ctrl-C drops the line typed so far and prompts again.
    pane.type("never sent")
    pane.keys("C-c")
    await pane.until("· Ctrl-C again to leave the chat")
    await pane.prompted()
    pane.type("hi")
    pane.keys("Enter")
    await pane.until("Hello, ready.")

    # Mid-turn: the call waits at the gate; Ctrl-C interrupts the turn, the prompt returns.
    pane.type("go and wait")
    pane.keys("Enter")
    await pane.until('→ wait_at_gate(why="to be interrupted")')
    screen = pane.screen()
    assert '⋯ [call_1_0] {"why": "to be interrupted"}' in screen  # the arguments, streamed
    pane.keys("C-c")
    await pane.until("· interrupting the turn (Ctrl-C again to leave the chat)")
    await pane.until("· interrupted · ")
    await pane.prompted()  # the prompt is back
    events = await read_log(workdir / "tether.db")
    session_id = events[0].session_id
    _, view = fold(events)
    assert (view.state, view.stop_reason) == ("idle", "interrupted")
    assert stops(events) == ["end_turn", "interrupted"]

    # The next message goes on with the same session.
    pane.type("once more")
    pane.keys("Enter")
    await pane.until('→ wait_at_gate(why="to be let through")')
    await open_gate(workdir, "open")
    await pane.until("the gate said open")
    events = await read_log(workdir / "tether.db")
    assert events[0].session_id == session_id
    assert stops(events) == ["end_turn", "interrupted", "end_turn"]

    # A call slow to stop: the first Ctrl-C is still stopping the turn when the second
    # comes, which leaves; the turn closes as the call gives up, and the lease goes with it.
    pane.type("wait, and stop slowly")
    pane.keys("Enter")
    await pane.until("→ slow_to_stop()")
    pane.keys("C-c")
    await pane.until("· interrupting the turn", times=2)
    pane.keys("C-c")
    await pane.until("tether: leaving… (Ctrl-C again to quit at once)")
    await open_gate(workdir, "stopped")
    screen = await pane.until("[exit ")
    assert "[exit 130]" in screen, screen
    assert f"tether: interrupted (session {session_id})" in screen
    events = await read_log(workdir / "tether.db")
    assert stops(events) == ["end_turn", "interrupted", "end_turn", "interrupted"]
    assert [f.outcome for f in (e.payload for e in events) if isinstance(f, ToolFinished)] == [
        "canceled", "ok", "canceled",
    ]  # fmt: skip
    assert [u.message.text for e in events if isinstance(u := e.payload, UserMessage)] == [
        "hi", "go and wait", "once more", "wait, and stop slowly",
    ]  # fmt: skip

    # The lease was let go, not left to expire: another process takes the session now.
    taken = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tether", "sessions", "send", session_id, "are you back?",
         "--lease-wait", "0"],
        cwd=workdir, capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "TETHER_STORE"},
    )  # fmt: skip
    assert taken.returncode == 0, taken.stderr
    assert "back again" in taken.stdout
