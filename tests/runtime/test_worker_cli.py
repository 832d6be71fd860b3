"""`tether worker --poison-after N`: the number of worker deaths in a row, each with a call of
the session in flight, that end it; a real `tether worker` process on a SQLite file."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tether.cli.main import main
from tether.events import ModelResponded, SessionCreated, ToolStarted, UserMessage
from tether.fold import Folder
from tether.messages import Message, ToolCall, user
from tether.session.log import SessionLog
from tether.store import SQLiteStore
from tether.testing.runtime_conformance import WAIT


def test_poison_after_must_be_positive(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'w.db'}"
    assert main(["worker", "--store", store, "--poison-after", "0"]) == 2


async def test_a_worker_parks_a_session_after_poison_after_deaths(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    store = SQLiteStore(str(path))
    log = SessionLog(store, "s")
    await log.append(SessionCreated(model="scripted", system=None, tools={}))
    answer = Message("assistant", (ToolCall("c1", "write", {}),))
    await log.append(UserMessage(user("go")), ModelResponded(answer, stop="tool_calls"))
    await log.append(ToolStarted("c1", "write"))
    await store.mark_runnable("s")
    await store.claim_runnable("dead", ttl=0.1, limit=1)  # a worker died with c1 in flight
    await asyncio.sleep(0.2)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether", "worker", "--store", f"sqlite:///{path}",
        "--poison-after", "1", "--poll-interval", "0.05",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(WAIT):
            while True:
                if Folder().apply_all(await store.read("s")).terminal:
                    break
                await asyncio.sleep(0.05)
    finally:
        proc.terminate()
        _, stderr = await proc.communicate()
    view = Folder().apply_all(await store.read("s")).view()
    assert view.state == "failed", stderr.decode()
    assert view.stop_detail is not None and "1 times" in view.stop_detail
    assert "write (c1)" in view.stop_detail
    await store.close()
