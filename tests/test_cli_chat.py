"""`tether chat` and `tether sessions send`, through the real commands. Chat is driven a line
at a time through a pipe on its stdin, reading its answers as they come: messages, an
approval, a denial with a reason, an interrupt while a call runs, the end of the input, and
going on with the session later. `sessions send` runs the next turn here, or with
`--no-run` only adds the message."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tether.cli.chat import waiting_call
from tether.cli.common import CliError
from tether.events import ApprovalDecided, Event, ToolFinished, TurnEnded, UserMessage
from tether.store import SQLiteStore

CHAT = """
import asyncio

from tether import tool
from tether.testing import ScriptedModel, call


@tool(effect="write", needs_approval=True)
def pay(amount: int) -> str:
    '''Pay an amount.'''
    return f"paid {amount}"


@tool(effect="read")
async def slow() -> str:
    '''Look something up, slowly.'''
    await asyncio.sleep(60)
    return "found it"


def after_pay(messages):
    result = messages[-1].tool_results[0]
    return f"the payment: {result.content}"


model = ScriptedModel([
    "Hi! How can I help?",
    call("pay", amount=5),
    after_pay,
    call("slow"),
    "still here",
])
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "chatmod.py").write_text(CHAT)
    return tmp_path


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("TETHER_STORE", "FORCE_COLOR")}


class Chat:
    """A `tether chat` process: `say` writes a line, `until` reads until a text appears."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.out = bytearray()

    @classmethod
    async def start(cls, cwd: Path, *args: str) -> Chat:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tether", "chat", *args,
            cwd=cwd, env=env(), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(process)

    async def say(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        await self.process.stdin.drain()

    async def until(self, text: str) -> str:
        assert self.process.stdout is not None
        async with asyncio.timeout(60):
            while text.encode() not in self.out:
                piece = await self.process.stdout.read(4096)
                assert piece, f"the chat ended before {text!r}: {self.out.decode()}"
                self.out.extend(piece)
        return self.out.decode()

    async def end(self, *, close_input: bool = True) -> tuple[int, str, str]:
        assert self.process.stdin is not None
        if close_input:
            self.process.stdin.close()
        async with asyncio.timeout(60):
            rest, err = await self.process.communicate()
        assert self.process.returncode is not None
        return self.process.returncode, (self.out + rest).decode(), err.decode()


async def read_log(db: Path) -> list[Event]:
    store = SQLiteStore(str(db))
    try:
        (info,) = await store.sessions(limit=2)
        return await store.read(info.session_id)
    finally:
        await store.close()


def of(events: list[Event], kind: type) -> list:  # type: ignore[type-arg]
    return [e.payload for e in events if isinstance(e.payload, kind)]


CHAT_ARGS = ("--model", "python:chatmod:model", "--tools", "chatmod:pay,chatmod:slow")


async def test_a_conversation_with_an_approval_an_interrupt_and_a_quit(workdir: Path) -> None:
    chat = await Chat.start(workdir, *CHAT_ARGS)
    try:
        await chat.say("hello")
        await chat.until("Hi! How can I help?")
        await chat.say("pay 5 please")
        await chat.until("/approve call_1_0 or /deny call_1_0")
        assert "? pay(amount=5) (write) waits for approval [call_1_0]" in chat.out.decode()
        await chat.say("/approve call_1_0")
        await chat.until("the payment: paid 5")
        assert "→ pay(amount=5)  [call_1_0]" in chat.out.decode()  # the call, as it starts
        await chat.say("look it up")
        await chat.until("→ slow()")
        await chat.say("/interrupt")
        await chat.until("· interrupted · ")
        await chat.say("are you there?")
        await chat.until("still here")
        await chat.say("/quit")
        await chat.say("never read")
        code, out, err = await chat.end(close_input=False)
    finally:
        if chat.process.returncode is None:
            chat.process.kill()
    assert code == 0, err
    events = await read_log(workdir / "tether.db")
    assert [m.message.text for m in of(events, UserMessage)] == [
        "hello", "pay 5 please", "look it up", "are you there?",
    ]  # fmt: skip
    assert of(events, ApprovalDecided) == [ApprovalDecided("call_1_0", True, None)]
    assert [(f.call_id, f.outcome) for f in of(events, ToolFinished)] == [
        ("call_1_0", "ok"),
        ("call_3_0", "canceled"),
    ]
    stops = [t.stop_reason for t in of(events, TurnEnded)]
    assert stops == ["end_turn", "awaiting_approval", "end_turn", "interrupted", "end_turn"]
    assert f"session {events[0].session_id} · store sqlite:///tether.db" in out


async def test_a_denial_with_its_reason_then_the_end_of_input_and_going_on_later(
    workdir: Path,
) -> None:
    chat = await Chat.start(workdir, *CHAT_ARGS)
    await chat.say("hello")
    await chat.until("Hi! How can I help?")
    await chat.say("pay 5 please")
    await chat.until("/deny call_1_0")
    await chat.say("/deny call_1_0 not today")
    await chat.until("the payment: The user denied this call: not today")
    code, _, err = await chat.end()  # the end of the input ends the chat
    assert code == 0, err
    events = await read_log(workdir / "tether.db")
    session_id = events[0].session_id

    # Later, in another process: the same session, its model and tools as recorded.
    later = await Chat.start(workdir, "--session", session_id)
    await later.say("look it up")
    await later.until("→ slow()")
    await later.say("/interrupt")
    await later.until("· interrupted · ")
    code, out, err = await later.end()
    assert code == 0, err
    assert f"session {session_id}" in out
    events = await read_log(workdir / "tether.db")
    assert len(of(events, UserMessage)) == 3


async def test_bad_commands_are_answered_and_the_chat_goes_on(workdir: Path) -> None:
    chat = await Chat.start(workdir, *CHAT_ARGS)
    await chat.say("/approve call_9_9")
    await chat.say("/frobnicate")
    await chat.say("/interrupt")
    await chat.until("· no turn is running")
    await chat.say("hello")
    await chat.until("Hi! How can I help?")
    code, _, err = await chat.end()
    assert code == 0
    assert "tether: no session yet" in err and "tether: unknown command /frobnicate" in err


def tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd, env=env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_chat_without_a_model_or_session_is_bad_input(workdir: Path) -> None:
    out = tether("chat", cwd=workdir)
    assert out.returncode == 2 and "--model is needed" in out.stderr
    missing = tether("chat", "--session", "ses_nope", cwd=workdir)
    assert missing.returncode == 2 and "no store at tether.db" in missing.stderr


async def test_sessions_send_runs_the_next_turn_here_or_only_adds_the_message(
    workdir: Path,
) -> None:
    first = tether("run", "hello", *CHAT_ARGS, "--json", cwd=workdir)
    session_id = json.loads(first.stdout)["session_id"]

    sent = tether("sessions", "send", session_id, "pay 5 please", cwd=workdir)
    assert sent.returncode == 4, sent.stderr  # it ran: the call waits for approval
    assert "? pay(amount=5) (write) waits for approval [call_1_0]" in sent.stdout
    assert tether("sessions", "approve", session_id, "call_1_0", cwd=workdir).returncode == 0
    resumed = tether("sessions", "resume", session_id, cwd=workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert "→ pay(amount=5)  [call_1_0]" in resumed.stdout
    assert "the payment: paid 5" in resumed.stdout

    only = tether("sessions", "send", session_id, "look it up", "--no-run", cwd=workdir)
    assert (only.returncode, only.stdout) == (0, f"{session_id}: message sent\n")
    events = await read_log(workdir / "tether.db")
    assert events[-1].type == "user.message"  # added, and nothing ran it

    missing = tether("sessions", "send", "ses_nope", "hi", cwd=workdir)
    assert missing.returncode == 2 and "no session 'ses_nope'" in missing.stderr


APPROVALS = """
from tether import tool
from tether.testing import ScriptedModel, call


@tool(effect="write", needs_approval=True)
def pay(amount: int) -> str:
    '''Pay an amount.'''
    return f"paid {amount}"


def results(messages):
    return "results: " + "; ".join(r.content for r in messages[-1].tool_results)


model = ScriptedModel([
    [call("pay", amount=1), call("pay", amount=2)],
    results,
    call("pay", amount=3),
    results,
])
"""


async def test_approve_and_deny_take_the_start_of_an_id_or_none_when_one_call_waits(
    workdir: Path,
) -> None:
    (workdir / "approvals.py").write_text(APPROVALS)
    chat = await Chat.start(
        workdir, "--model", "python:approvals:model", "--tools", "approvals:pay"
    )
    await chat.say("pay twice")
    await chat.until("/approve call_0_1 or /deny call_0_1")
    for refused in ("/approve", "/approve call_0", "/deny zzz no"):
        await chat.say(refused)  # each refused, and nothing decided
    await chat.say("/approve call_0_1")
    await chat.until("· still waiting for a decision: call_0_0")
    await chat.say("/deny c too much")  # `c`: the start of the one call still waiting
    await chat.until("results: The user denied this call: too much; paid 2")
    await chat.say("pay three")
    await chat.until("/approve call_2_0")
    await chat.say("/approve")  # the one call that waits
    await chat.until("results: paid 3")
    code, _, err = await chat.end()
    assert code == 0, err
    assert err.splitlines() == [
        "tether: which call? 2 wait: call_0_0, call_0_1",
        "tether: call_0 is the start of 2 waiting calls: call_0_0, call_0_1",
        "tether: no waiting call's id starts with zzz: call_0_0, call_0_1 wait (2)",
    ]
    events = await read_log(workdir / "tether.db")
    assert of(events, ApprovalDecided) == [
        ApprovalDecided("call_0_1", True, None),
        ApprovalDecided("call_0_0", False, "too much"),
        ApprovalDecided("call_2_0", True, None),
    ]


def test_the_waiting_call_a_command_names() -> None:
    waiting = ("call_1", "call_10", "toolu_01AbC")
    assert waiting_call("call_1", waiting) == "call_1"  # a whole id, though others start so
    assert waiting_call("call_10", waiting) == "call_10"
    assert waiting_call("t", waiting) == "toolu_01AbC"
    assert waiting_call("", ("fc_9",)) == "fc_9"
    for given, why in (
        ("", "which call? 3 wait: call_1, call_10, toolu_01AbC"),
        ("ca", "ca is the start of 2 waiting calls: call_1, call_10"),
        ("TOOLU", "no waiting call's id starts with TOOLU: call_1, call_10, toolu_01AbC wait (3)"),
    ):
        with pytest.raises(CliError) as refused:
            waiting_call(given, waiting)
        assert str(refused.value) == why
    with pytest.raises(CliError, match=r"^no call waits for a decision$"):
        waiting_call("", ())
    many = [f"call_{i:02}" for i in range(25)]
    with pytest.raises(CliError) as refused:
        waiting_call("", many)
    assert str(refused.value).endswith("call_08, call_09 and 15 more")  # no silent cap
