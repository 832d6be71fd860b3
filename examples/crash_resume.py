"""Crash and resume: a session runs in a child process that is killed (SIGKILL) while two
tool calls are in flight; this process then takes the session over from the SQLite file.

    python examples/crash_resume.py
    TETHER_EXAMPLE_MODEL=anthropic:claude-sonnet-4-5 python examples/crash_resume.py

What recovery does with each call the dead process left open: a finished call is never run
again; a started `read` is run again; a started `write` is answered `unknown_effect` and
never repeated (the order below was placed once, and stays placed once).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from tether import Agent, Event, tool
from tether.events import ToolFinished
from tether.testing import ScriptedModel, call

IN_CHILD = os.environ.get("CRASH_EXAMPLE_CHILD") == "1"
TASK = "Check that a tent is in stock, then at once look up its price and order one."


def effect(line: str) -> None:
    """Each execution of a tool leaves a line in a file, so the effects survive the crash."""
    with open(os.environ["CRASH_EXAMPLE_EFFECTS"], "a") as f:
        f.write(line + "\n")


async def hang_if_child(name: str) -> None:
    if IN_CHILD:
        print(f"started {name}", flush=True)
        await asyncio.sleep(60)  # the parent kills us here


@tool(effect="read")
async def check_stock(item: str) -> str:
    """Whether an item is in stock."""
    effect(f"check_stock {item}")
    return f"{item}: 3 in stock"


@tool(effect="read")
async def lookup_price(item: str) -> str:
    """An item's price."""
    await hang_if_child("lookup_price")
    effect(f"lookup_price {item}")
    return f"{item}: 120 EUR"


@tool  # effect="write": repeating it would order a second tent
async def place_order(item: str) -> str:
    """Order one item."""
    effect(f"place_order {item}")
    await hang_if_child("place_order")
    return f"ordered one {item}"


def agent(db: Path, **options: Any) -> Agent:
    script = ScriptedModel(
        [
            call("check_stock", item="tent"),
            [call("lookup_price", item="tent"), call("place_order", item="tent")],
            "The tent costs 120 EUR. Whether the order went through is unknown: "
            "check the orders before placing it again.",
        ]
    )
    model = os.environ.get("TETHER_EXAMPLE_MODEL") or script
    tools = [check_stock, lookup_price, place_order]
    return Agent(model, tools=tools, store=f"sqlite:///{db}", **options)


async def child(db: Path) -> None:
    def announce(event: Event) -> None:
        if event.seq == 1:
            print(f"session {event.session_id}", flush=True)

    # A short lease, so the next process may take over one second after we die.
    await agent(db, lease_ttl=1.0, on_event=announce).run(TASK)


def crash(db: Path, env: dict[str, str]) -> str | None:
    """Run the session in a child, kill it once the write is in flight; its session id."""
    command = [sys.executable, __file__, str(db)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    watchdog = threading.Timer(60, proc.kill)  # a child that never gets there
    watchdog.start()
    session_id = None
    assert proc.stdout is not None
    for line in proc.stdout:
        print(f"child: {line.rstrip()}")
        if line.startswith("session "):
            session_id = line.split()[1]
        if line.startswith("started place_order"):
            proc.kill()  # SIGKILL: no cleanup, no lease release
            print(f"killed the child (pid {proc.pid}) while place_order was running")
            break
    proc.wait()
    watchdog.cancel()
    return session_id if proc.returncode == -9 else None


async def resume(db: Path, session_id: str) -> int:
    survivor = agent(db)
    try:
        result = await survivor.resume(session_id, lease_wait=15)
        for event in await survivor.store.read(session_id):
            if isinstance(event.payload, ToolFinished):
                p = event.payload
                print(f"  {event.seq:>3} tool.finished {p.call_id} {p.outcome}: {p.content[:60]}")
    finally:
        await survivor.close()
    print(f"resumed: {result.stop_reason}; answer: {result.output}")
    return 0 if result.stop_reason == "end_turn" else 1


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        db, effects = Path(tmp) / "crash.db", Path(tmp) / "effects.log"
        env = {**os.environ, "CRASH_EXAMPLE_CHILD": "1", "CRASH_EXAMPLE_EFFECTS": str(effects)}
        session_id = crash(db, env)
        if session_id is None:
            print("the child ended before place_order ran: nothing to recover")
            return 1
        os.environ["CRASH_EXAMPLE_EFFECTS"] = str(effects)
        code = asyncio.run(resume(db, session_id))
        lines = effects.read_text().splitlines()
        print(f"effects across both processes: {lines}")
        if lines.count("place_order tent") != 1:
            print("the order was placed more than once")
            return 1
        return code


if __name__ == "__main__":
    if IN_CHILD:
        asyncio.run(child(Path(sys.argv[1])))
    else:
        sys.exit(main())
