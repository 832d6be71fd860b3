"""Tools and scripted models that the crash workers and the CLI round trips run in their own
processes (imported as `crash.kit`, with tests/ on PYTHONPATH).

Every tool writes one line per execution to a file under `$CRASH_EFFECTS`, so a test can
count effects across processes that were killed. `$CRASH_CALL=CALL_ID:before|after`
SIGKILLs the process inside that call, before or after its effect happened.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from tether import ToolContext, tool
from tether.published import model_factory
from tether.testing import ScriptedModel, call
from tether.tools import Tool

EFFECTS_ENV = "CRASH_EFFECTS"
CRASH_CALL_ENV = "CRASH_CALL"


def effects_dir() -> Path:
    return Path(os.environ[EFFECTS_ENV])


def record(kind: str, line: str) -> None:
    """One line per execution; O_APPEND keeps lines from parallel calls whole."""
    with open(effects_dir() / f"{kind}.log", "a") as f:
        f.write(line + "\n")


def read_records(directory: Path, kind: str) -> list[list[str]]:
    path = directory / f"{kind}.log"
    if not path.exists():
        return []
    return [line.split(" ") for line in path.read_text().splitlines()]


def die() -> None:
    """A crash: no finally block, no flush, no lease release."""
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(99)  # unreachable: SIGKILL to oneself lands before kill() returns


def _maybe_die(call_id: str, when: str) -> None:
    if os.environ.get(CRASH_CALL_ENV) == f"{call_id}:{when}":
        die()


def _effect(call_id: str, kind: str, line: str) -> None:
    """One effect of a call, with the kill points around it (`$CRASH_CALL`)."""
    _maybe_die(call_id, "before")
    record(kind, line)
    _maybe_die(call_id, "after")


# -- the crash script: read, idempotent and write tools, one parallel turn -----------------


@tool(effect="read")
async def read_note(name: str, ctx: ToolContext) -> str:
    """Read a note."""
    _effect(ctx.call_id, "read", ctx.call_id)
    await asyncio.sleep(0)
    return f"note {name}: remember the milk"


@tool(effect="idempotent")
def set_flag(key: str, value: int, ctx: ToolContext) -> str:
    """Set a flag; setting it twice with the same key is harmless."""
    _effect(ctx.call_id, "idempotent", f"{ctx.call_id} {ctx.idempotency_key} {key}={value}")
    return f"flag {key} set to {value}"


@tool  # effect="write", the default
def append_line(text: str, ctx: ToolContext) -> str:
    """Append a line to the journal (not safe to repeat)."""
    _effect(ctx.call_id, "write", f"{ctx.call_id} {text}")
    return f"appended {text!r}"


CRASH_TOOLS: list[Tool] = [read_note, set_flag, append_line]
FINAL_ANSWER = "done: the journal has hello and world"


@model_factory
def crash_model() -> ScriptedModel:
    return ScriptedModel(
        [
            call("read_note", name="a"),
            call("set_flag", key="x", value=1),
            call("append_line", text="hello"),
            [
                call("read_note", name="b"),
                call("set_flag", key="y", value=2),
                call("append_line", text="world"),
            ],
            FINAL_ANSWER,
        ]
    )


# -- the fork script: a runtime session over several turns, then forks of it ----------------
# The same call ids come up in a parent and its forks (a scripted model numbers its calls by
# the transcript), so each line of the ledger names its session: SESSION CALL KEY WHAT.


def _ledger(ctx: ToolContext, kind: str, what: str) -> None:
    _effect(ctx.call_id, kind, f"{ctx.session_id} {ctx.call_id} {ctx.idempotency_key} {what}")


@tool(name="read_note", effect="read")
def look(name: str, ctx: ToolContext) -> str:
    """Read a note."""
    _ledger(ctx, "read", name)
    return f"note {name}: remember the milk"


@tool(name="set_flag", effect="idempotent")
def flag(key: str, value: int, ctx: ToolContext) -> str:
    """Set a flag; setting it twice with the same key is harmless."""
    _ledger(ctx, "idempotent", f"{key}={value}")
    return f"flag {key} set to {value}"


@tool(name="append_line")  # effect="write"
def journal(text: str, ctx: ToolContext) -> str:
    """Append a line to the journal (not safe to repeat)."""
    _ledger(ctx, "write", text)
    return f"appended {text!r}"


FORK_TOOLS: list[Tool] = [look, flag, journal]
# A parent runs three turns (the task, then each message); a fork made at the end of its
# turn 2 runs turn 3's replies again as its own turn, and a fork of that fork turn 4's.
FORK_TASK = "Journal the first line."
FORK_MESSAGES = ("Now the second.", "And the third.")
FORK_MESSAGE = "Now the fork's own line."  # the message a fork of it starts its turn with


def turn_answer(n: int) -> str:
    return f"turn {n} done"


@model_factory
def fork_model() -> ScriptedModel:
    return ScriptedModel(
        [
            call("read_note", name="a"),
            call("set_flag", key="x", value=1),
            call("append_line", text="one"),
            turn_answer(1),
            [
                call("read_note", name="b"),
                call("set_flag", key="y", value=2),
                call("append_line", text="two"),
            ],
            turn_answer(2),
            call("append_line", text="three"),
            [call("read_note", name="c"), call("set_flag", key="z", value=3)],
            turn_answer(3),
            call("append_line", text="four"),
            call("set_flag", key="w", value=4),
            turn_answer(4),
        ]
    )


# -- the zombie script: a write that holds until the test lets it go ----------------------


def _hold(call_id: str, block_loop: bool) -> None:
    (effects_dir() / "running").write_text(f"{call_id} {os.getpid()}")
    deadline = time.monotonic() + 60
    while not (effects_dir() / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    record("write", f"{call_id} held{'-blocking' if block_loop else ''}")


@tool(name="hold_write")
def hold_write_thread(text: str, ctx: ToolContext) -> str:
    """Write, after waiting for the go file (in a tool thread: the event loop keeps running)."""
    _hold(ctx.call_id, block_loop=False)
    return f"wrote {text}"


@tool(name="hold_write")
async def hold_write_blocking(text: str, ctx: ToolContext) -> str:
    """Write, after waiting for the go file while blocking the event loop (a badly behaved
    tool: nothing else of its process runs until it returns)."""
    _hold(ctx.call_id, block_loop=True)
    return f"wrote {text}"


def zombie_model() -> ScriptedModel:
    return ScriptedModel([call("hold_write", text="zombie"), "done after the held write"])


# The fenced zombie: the same held write, but the tool asks whether its worker still holds
# the session just before its effect (`ToolContext.ensure_held`), as the README says to.


@tool(name="hold_write")
async def hold_write_fenced(text: str, ctx: ToolContext) -> str:
    """Write, after waiting for the go file (the event loop runs), if still the holder."""
    (effects_dir() / "running").write_text(f"{ctx.call_id} {os.getpid()} {ctx.fence}")
    deadline = time.monotonic() + 60
    # Polls a file another process makes: there is no event to wait on.
    while not (effects_dir() / "go").exists() and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    try:
        await ctx.ensure_held()
    except Exception as exc:
        record("refused", f"{ctx.call_id} {ctx.fence} {type(exc).__name__}")
        raise
    record("write", f"{ctx.call_id} fenced {ctx.fence}")
    return f"wrote {text}"


@tool(name="hold_write")
def hold_write_fenced_thread(text: str, ctx: ToolContext) -> str:
    """The same from a tool thread: `ensure_held_sync`, or the `lease_lost` flag."""
    (effects_dir() / "running").write_text(f"{ctx.call_id} {os.getpid()} {ctx.fence}")
    deadline = time.monotonic() + 60
    while not (effects_dir() / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    if ctx.lease_lost.is_set():
        record("refused", f"{ctx.call_id} {ctx.fence} flag")
        return "not written: the lease is lost"
    try:
        ctx.ensure_held_sync()
    except Exception as exc:
        record("refused", f"{ctx.call_id} {ctx.fence} {type(exc).__name__}")
        raise
    record("write", f"{ctx.call_id} fenced {ctx.fence}")
    return f"wrote {text}"


# -- cancel and interrupt: a tool that runs until it is cancelled -------------------------


@tool(timeout=120)
async def long_write(text: str, ctx: ToolContext) -> str:
    """A long write that notes when it starts and when it is cancelled."""
    record("long", f"{ctx.call_id} started {time.time():.6f}")
    try:
        await asyncio.sleep(100)
    except asyncio.CancelledError:
        record("long", f"{ctx.call_id} cancelled {time.time():.6f}")
        raise
    record("long", f"{ctx.call_id} finished {time.time():.6f}")
    return f"wrote {text}"


@tool(effect="read")
async def quick_read(ctx: ToolContext) -> str:
    """A read that takes a moment."""
    await asyncio.sleep(float(os.environ.get("QUICK_READ_SECONDS", "0.3")))
    record("read", ctx.call_id)
    return "all quiet"


LONG_TOOLS: list[Tool] = [long_write, quick_read]


@model_factory
def long_model() -> ScriptedModel:
    """A long write first; after an interrupt, a user's next message gets a plain answer."""
    return ScriptedModel([call("long_write", text="slowly"), "stopped as asked", "fine, done"])


@model_factory
def quick_model() -> ScriptedModel:
    return ScriptedModel([call("quick_read"), "all quiet here"])


# -- approvals: a write that needs a decision ----------------------------------------------


@tool(needs_approval=True)
def transfer(amount: int, ctx: ToolContext) -> str:
    """Move money out of the account."""
    record("write", f"{ctx.call_id} transfer={amount}")
    return f"sent {amount}"


APPROVAL_TOOLS: list[Tool] = [transfer]


@model_factory
def approval_model() -> ScriptedModel:
    return ScriptedModel([call("transfer", amount=30), "transfer handled"])


# -- the fan-out script: a parent asks three researchers at once, each of which writes ----


@tool  # effect="write": never repeated after a crash
async def note(topic: str) -> str:
    """Write a note about a topic (not safe to repeat)."""
    record("write", f"{topic}")
    await asyncio.sleep(0)
    return f"noted {topic}"


def _researcher() -> Tool:
    # Imported here: the kit's other scripts need no agent.
    from tether import Agent

    model = ScriptedModel(
        [
            lambda messages: call("note", topic=messages[0].text),
            lambda messages: f"report: {messages[-1].tool_results[0].content}",
        ]
    )
    return Agent(model, name="researcher", tools=[note], system="Research one topic.").as_tool()


FAN_OUT_TOPICS = ("alpha", "beta", "gamma")


def fan_out_model() -> ScriptedModel:
    return ScriptedModel(
        [
            [call("researcher", task=topic) for topic in FAN_OUT_TOPICS],
            lambda messages: " | ".join(r.content for r in messages[-1].tool_results),
        ]
    )


def fan_out_tools() -> list[Tool]:
    return [_researcher()]
