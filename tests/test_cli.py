"""The `tether` command, run for real as a subprocess against a SQLite file."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tether.store import SQLiteStore
from threads.support import fan_out_agent


def tether(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    full_env = {**base, "PYTHONPATH": str(cwd), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _park(path: Path, session_id: str) -> None:
    store = SQLiteStore(str(path))
    try:
        await store.defer(session_id, 60.0, "parked")
    finally:
        await store.close()


def test_demo_runs_end_to_end_and_prints_the_timeline(tmp_path: Path) -> None:
    out = tether("demo", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for kind in (
        "session.created",
        "user.message",
        "model.requested",
        "model.responded",
        "tool.started",
        "tool.finished",
        "turn.ended",
    ):
        assert kind in out.stdout
    assert "LookupError" in out.stdout  # the failing call went back to the model as a result
    assert "Lisbon: sunny" in out.stdout
    assert "stop: end_turn" in out.stdout
    assert (tmp_path / "tether.db").exists()


def test_sessions_ls_show_and_events_read_what_the_run_stored(tmp_path: Path) -> None:
    run = tether("demo", "--json", cwd=tmp_path)
    result = json.loads(run.stdout)
    sid = result["session_id"]
    assert result["stop_reason"] == "end_turn" and result["state"] == "idle"
    assert result["cost_usd"] is None  # the scripted model has no price: unknown, not 0

    listed = json.loads(tether("sessions", "ls", "--json", cwd=tmp_path).stdout)
    assert [s["session_id"] for s in listed] == [sid]
    assert listed[0]["state"] == "idle" and listed[0]["steps"] == 3

    shown = json.loads(tether("sessions", "show", sid, "--json", cwd=tmp_path).stdout)
    assert shown["view"]["stop_reason"] == "end_turn"
    assert shown["transcript"]["messages"][0]["parts"][0]["text"].startswith("Where should we")
    assert shown["runner"] is None  # nobody holds an idle session
    human = tether("sessions", "show", sid, cwd=tmp_path).stdout
    assert "state    idle" in human and "[assistant] call forecast" in human
    assert "runner   none" in human

    # Parked on the queue (a worker's gateway could not send its model call): it says so.
    asyncio.run(_park(tmp_path / "tether.db", sid))
    shown = json.loads(tether("sessions", "show", sid, "--json", cwd=tmp_path).stdout)
    assert shown["runner"]["parked"] is True and shown["runner"]["owner"] is None
    assert shown["runner"]["deferred"] == "parked"
    assert "runner   parked until " in tether("sessions", "show", sid, cwd=tmp_path).stdout

    lines = tether("sessions", "events", sid, "--json", cwd=tmp_path).stdout.splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "turn.ended"


async def _fan_out(path: Path) -> str:
    store = SQLiteStore(str(path))
    agent = fan_out_agent(store)
    try:
        return (await agent.run("go")).session_id
    finally:
        await agent.close()
        await store.close()


def test_sessions_show_prints_the_thread_tree_and_a_threads_transcript(tmp_path: Path) -> None:
    sid = asyncio.run(_fan_out(tmp_path / "tether.db"))
    human = tether("sessions", "show", sid, cwd=tmp_path).stdout
    assert "threads  3" in human
    for n, topic in enumerate("abc"):
        tree_line = f"  researcher-{n + 1}  researcher · finished (end_turn) · runs call_0_{n}"
        assert tree_line in human, human
        assert f"[tool] result [call_0_{n}] report: noted {topic}" in human
    assert "[user] go" in human and "[user] b" not in human  # the main thread's transcript

    one = tether("sessions", "show", sid, "--thread", "researcher-2", cwd=tmp_path).stdout
    transcript = one.split("transcript of thread researcher-2\n", 1)[1].splitlines()
    assert transcript == [
        "[system] Research one topic.",
        "[user] b",
        '[assistant] call note({"topic":"b"}) [call_0_0]',
        "[tool] result [call_0_0] noted b",
        "[assistant] report: noted b",
    ]
    shown = json.loads(
        tether("sessions", "show", sid, "--thread", "researcher-2", "--json", cwd=tmp_path).stdout
    )
    assert shown["thread"] == "researcher-2"
    assert [t["thread"] for t in shown["view"]["threads"]] == [f"researcher-{n}" for n in (1, 2, 3)]
    assert shown["transcript"]["messages"][-1]["parts"][0]["text"] == "report: noted b"

    # The log of one thread, each line labelled with it; the whole log labels every thread.
    lines = tether("sessions", "events", sid, "--thread", "researcher-3", cwd=tmp_path).stdout
    assert lines.splitlines() and all("[researcher-3] " in line for line in lines.splitlines())
    assert "thread.finished   end_turn: report: noted c" in lines
    every = tether("sessions", "events", sid, cwd=tmp_path).stdout
    assert all(f"[researcher-{n}] thread.started" in every for n in (1, 2, 3))

    wrong = tether("sessions", "show", sid, "--thread", "researcher-9", cwd=tmp_path)
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert "no such thread" in wrong.stderr and "researcher-1, researcher-2" in wrong.stderr


def test_run_loads_tools_from_a_module_and_honours_max_steps(tmp_path: Path) -> None:
    (tmp_path / "mytools.py").write_text(
        "from tether import tool\n"
        "@tool(effect='read')\n"
        "def ping(host: str) -> str:\n"
        "    '''Ping a host.'''\n"
        "    return 'pong from ' + host\n"
    )
    out = tether(
        "run",
        "ping it",
        "--model",
        "scripted:demo",
        "--tools",
        "mytools:ping",
        "--max-steps",
        "1",
        "--json",
        cwd=tmp_path,
    )
    assert out.returncode == 3, out.stderr  # a limit
    result = json.loads(out.stdout)
    # The demo script asks for `forecast`, which this run does not have; one step allowed.
    assert result["stop_reason"] == "turn_limit"
    assert result["steps"] == 1


def _store_fingerprint(tmp_path: Path) -> str:
    return hashlib.sha256((tmp_path / "tether.db").read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "x", "--model", "nope:model"], "--model nope:model"),
        (["run", "x", "--model", "scripted:other"], "scripted:other"),
        (
            ["run", "x", "--model", "scripted:demo", "--store", "/no/such/dir/t.db"],
            "cannot open store",
        ),
        (["run", "x", "--model", "scripted:demo", "--store", "redis://x"], "cannot open store"),
        (
            ["run", "x", "--model", "scripted:demo", "--tools", "no_such_module:x"],
            "cannot import no_such_module",
        ),
        (
            ["run", "x", "--model", "scripted:demo", "--tools", "broken:tools"],
            "cannot import broken",
        ),
        (["run", "x", "--model", "scripted:demo", "--tools", "json:dumps_nope"], "no attribute"),
        (["run", "x", "--model", "scripted:demo", "--max-steps", "0"], "--max-steps"),
        (["sessions", "show", "ses_missing"], "no session 'ses_missing'"),
    ],
)
def test_bad_input_is_one_clear_line_and_changes_nothing_stored(
    tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('this module is broken')\n")
    assert tether("demo", cwd=tmp_path).returncode == 0
    before = _store_fingerprint(tmp_path)
    out = tether(*args, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tether: error:") and message in lines[0], (
        out.stderr
    )
    assert _store_fingerprint(tmp_path) == before


def test_the_store_can_be_chosen_by_environment(tmp_path: Path) -> None:
    out = tether("demo", "--json", cwd=tmp_path, env={"TETHER_STORE": "sqlite:///other.db"})
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "other.db").exists() and not (tmp_path / "tether.db").exists()


def test_tools_and_models_resolve_from_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "mytools.py").write_text(
        "from tether import tool\n"
        "@tool(effect='read')\n"
        "def ping(host: str) -> str:\n"
        "    '''Ping a host.'''\n"
        "    return 'pong from ' + host\n"
    )
    (tmp_path / "mymodel.py").write_text(
        "from tether.testing import ScriptedModel, call\n"
        "model = ScriptedModel([call('ping', host='example.org'), 'it answered'])\n"
    )
    # -P: Python puts nothing on sys.path for us, as when the installed `tether` script runs.
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    out = subprocess.run(
        [sys.executable, "-P", "-m", "tether", "run", "--model", "python:mymodel:model",
         "--tools", "mytools:ping", "ping example.org", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    # The task after --tools was not taken for a tools module.
    assert (result["stop_reason"], result["output"]) == ("end_turn", "it answered")
    assert (
        "pong from example.org"
        in tether("sessions", "show", result["session_id"], cwd=tmp_path).stdout
    )


def test_tools_are_repeated_or_separated_by_commas(tmp_path: Path) -> None:
    (tmp_path / "two.py").write_text(
        "def a() -> str:\n    '''A.'''\n    return 'a'\n"
        "def b() -> str:\n    '''B.'''\n    return 'b'\n"
        "def c() -> str:\n    '''C.'''\n    return 'c'\n"
    )
    out = tether(
        "run", "--tools", "two:a,two:b", "--tools", "two:c", "go", "--model", "scripted:demo",
        "--max-steps", "1", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 3, out.stderr  # the demo script asks for a tool it lacks: a limit
    events = tether(
        "sessions", "events", json.loads(out.stdout)["session_id"], "--json", cwd=tmp_path
    )
    created = json.loads(events.stdout.splitlines()[0])
    assert sorted(created["data"]["tools"]) == ["a", "b", "c"]


def test_version_comes_from_the_package_metadata(tmp_path: Path) -> None:
    from importlib.metadata import version

    import tether as package

    out = tether("--version", cwd=tmp_path)
    assert out.returncode == 0
    assert out.stdout.strip() == f"tether {package.__version__}" == f"tether {version('tether')}"


@pytest.mark.parametrize(
    "args",
    [
        ["sessions", "ls"],
        ["sessions", "show", "ses_x"],
        ["sessions", "events", "ses_x"],
        ["sessions", "blob", "ses_x", "sha256:00"],
        ["sessions", "approve", "ses_x", "call_1"],
        ["sessions", "interrupt", "ses_x"],
        ["sessions", "resume", "ses_x"],
        ["sessions", "send", "ses_x", "hi"],
        ["sessions", "send", "ses_x", "hi", "--no-run"],
        ["chat", "--session", "ses_x"],
    ],
    ids=lambda a: " ".join(a[:2] + a[4:]),
)
def test_commands_on_stored_sessions_never_create_a_store(tmp_path: Path, args: list[str]) -> None:
    out = tether(*args, "--store", "sqlite:///tehter.db", cwd=tmp_path)
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("tether: error: no store at tehter.db"), line
    by_env = tether(*args, cwd=tmp_path, env={"TETHER_STORE": str(tmp_path / "typo.sqlite")})
    assert by_env.returncode == 2 and "typo.sqlite" in by_env.stderr
    assert list(tmp_path.iterdir()) == []
