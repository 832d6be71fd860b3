"""Structured logs: JSON lines (or tagged text) naming the session, turn, seq, thread and call
of the task that logged, from the library and through `tether --log-format json`."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether import Agent, tool
from tether.events import ToolStarted
from tether.store import MemoryStore
from tether.telemetry.logs import configure
from tether.testing import ScriptedModel, call

from .logging_tools import noisy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    hooks = sys.excepthook, threading.excepthook
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    sys.excepthook, threading.excepthook = hooks


async def test_a_record_made_in_a_run_names_its_session_turn_seq_and_call(
    restore_logging: None,
) -> None:
    out = io.StringIO()
    configure("info", "json", out)
    store = MemoryStore()
    agent = Agent(ScriptedModel([call("noisy", text="x"), "done"]), tools=[noisy], store=store)
    result = await agent.run("go")
    logging.getLogger("tether.tests.noisy").warning("outside any session")
    first, outside = (json.loads(line) for line in out.getvalue().splitlines())
    [started] = [
        e for e in await store.read(result.session_id) if isinstance(e.payload, ToolStarted)
    ]
    assert first["session_id"] == result.session_id
    assert first["turn"] == 1
    assert first["seq"] == started.seq  # the last event its task had appended
    assert first["call_id"] == "c-1"  # given with extra=
    assert first["level"] == "warning" and first["logger"] == "tether.tests.noisy"
    assert first["message"] == "looking at x"
    assert "thread" not in first  # the main thread
    assert "session_id" not in outside and outside["message"] == "outside any session"


async def test_a_tools_own_records_name_its_call_on_the_loop_and_on_a_thread(
    restore_logging: None,
) -> None:
    @tool(effect="read")
    async def on_loop(text: str) -> str:
        """Log from the event loop."""
        logging.getLogger("tether.tests.tool").warning("async %s", text)
        return text

    @tool(effect="read")
    def on_thread(text: str) -> str:
        """Log from a worker thread."""
        logging.getLogger("tether.tests.tool").warning("sync %s", text)
        return text

    out = io.StringIO()
    configure("info", "json", out)
    model = ScriptedModel([[call("on_loop", text="a"), call("on_thread", text="b")], "done"])
    result = await Agent(model, tools=[on_loop, on_thread], store=MemoryStore()).run("go")
    records = {r["message"]: r for r in map(json.loads, out.getvalue().splitlines())}
    assert records["async a"]["call_id"] == "call_0_0"
    assert records["sync b"]["call_id"] == "call_0_1"
    assert records["sync b"]["session_id"] == result.session_id  # the thread knows it too
    logging.getLogger("tether.tests.tool").warning("after")
    assert "call_id" not in json.loads(out.getvalue().splitlines()[-1])


def test_an_exception_is_one_json_line(restore_logging: None) -> None:
    out = io.StringIO()
    configure("warning", "json", out)
    try:
        raise ValueError("broken")
    except ValueError:
        logging.getLogger("tether.worker").exception("a run failed")
    logging.getLogger("tether.worker").info("below the level")
    [line] = out.getvalue().splitlines()
    record = json.loads(line)
    assert record["message"] == "a run failed"
    assert "ValueError: broken" in record["exc"]


def test_text_records_carry_their_session_fields_as_tags(restore_logging: None) -> None:
    out = io.StringIO()
    configure("info", "text", out)
    logging.getLogger("tether.x").info("hello", extra={"session_id": "ses_1", "seq": 4})
    line = out.getvalue().strip()
    assert line.endswith("INFO tether.x hello [session_id=ses_1 seq=4]")


@pytest.mark.parametrize("where", ["before the command", "after it"])
def test_tether_log_format_json_writes_json_lines_on_stderr(tmp_path: Path, where: str) -> None:
    flags = ["--log-format", "json", "--log-level", "info"]
    command = [
        sys.executable,
        "-m",
        "tether",
        *(flags if where == "before the command" else []),
        "run",
        *(flags if where == "after it" else []),
        "go",
        "--model",
        "python:tests.telemetry.test_logs:scripted",
        "--tools",
        "tests.telemetry.logging_tools:tools",
        "--store",
        f"sqlite:///{tmp_path / 't.db'}",
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    session_id = json.loads(done.stdout)["session_id"]
    records = [json.loads(line) for line in done.stderr.splitlines()]
    [noisy_record] = [r for r in records if r["logger"] == "tether.tests.noisy"]
    assert noisy_record["session_id"] == session_id
    assert noisy_record["call_id"] == "c-1" and noisy_record["turn"] == 1


def test_a_bad_log_level_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "--log-level", "loud", "demo", "--store", "memory:"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == "tether: error: no log level 'loud' (debug, info, warning, error)\n"


def scripted() -> ScriptedModel:
    return ScriptedModel([call("noisy", text="x"), "done"])


def test_with_json_logs_no_bare_traceback_reaches_stderr() -> None:
    code = (
        "import asyncio, gc, threading\n"
        "from tether.telemetry.logs import configure\n"
        "configure('warning', 'json')\n"
        "async def boom():\n"
        "    raise RuntimeError('in a task nobody awaited')\n"
        "async def main():\n"
        "    asyncio.get_running_loop().create_task(boom())\n"
        "    await asyncio.sleep(0.01)\n"
        "    gc.collect()\n"
        "asyncio.run(main())\n"
        "gc.collect()\n"
        "t = threading.Thread(target=lambda: 1 / 0)\n"
        "t.start(); t.join()\n"
        "raise SystemError('at the top')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    records = [json.loads(line) for line in done.stderr.splitlines()]
    excs = [r["exc"] for r in records]
    assert len(records) == 3
    assert "RuntimeError: in a task nobody awaited" in excs[0]
    assert "ZeroDivisionError" in excs[1] and "SystemError: at the top" in excs[2]


@pytest.mark.parametrize(
    "command",
    [
        ["serve"],
        ["worker"],
        ["run", "go", "--model", "m"],
        ["sessions", "ls"],
        ["experiment", "go"],
    ],
    ids=" ".join,
)
def test_the_log_flags_are_taken_after_any_command_and_kept_from_before_it(
    command: list[str],
) -> None:
    from tether.cli.main import build_parser

    parser = build_parser()
    after = parser.parse_args([*command, "--log-format", "json", "--log-level", "debug"])
    assert after.log_format == "json"
    assert "debug" in (after.global_log_level, getattr(after, "log_level", None))
    before = parser.parse_args(["--log-format", "json", "--log-level", "info", *command])
    assert (before.log_format, before.global_log_level) == ("json", "info")  # not reset
