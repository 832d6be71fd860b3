"""What the `tether` command says when something is in the way, through the real command: a
lease another worker holds (until when, and how to wait for it), a PostgreSQL server that
does not answer (one line, no password), a SQLite path with four slashes (echoed as typed)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tether.store import SQLiteStore


def tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("tether: error: ")
    return line


async def hold(db: Path, session_id: str) -> None:
    store = SQLiteStore(str(db))
    try:
        await store.claim(session_id, "otherhost:4242:abc", 60.0)
    finally:
        await store.close()


def test_a_lease_held_elsewhere_says_until_when_and_how_to_wait(tmp_path: Path) -> None:
    run = tether(
        "run", "hi", "--model", "scripted:demo", "--max-steps", "1", "--json", cwd=tmp_path
    )
    session_id = json.loads(run.stdout)["session_id"]
    asyncio.run(hold(tmp_path / "tether.db", session_id))

    line = one_error_line(tether("sessions", "send", session_id, "more", cwd=tmp_path))
    assert f"session {session_id} is being run by otherhost:4242:abc" in line
    left = re.search(r"its lease runs until \d\d:\d\d:\d\d UTC \(in (\d+) s\)", line)
    assert left is not None and 30 <= int(left.group(1)) <= 60, line
    assert line.endswith("; to wait for it, pass --lease-wait SECONDS")
    # The session id is random hex, which can hold ten digits in a row: look past it.
    assert not re.search(r"\d{10}", line.replace(session_id, "")), "a raw epoch"


def test_a_postgresql_server_that_does_not_answer_is_one_line_without_the_password(
    tmp_path: Path,
) -> None:
    pytest.importorskip("psycopg")
    url = "postgresql://tether:hunter2@127.0.0.1:1/tether"  # nothing listens on port 1
    line = one_error_line(tether("sessions", "ls", "--store", url, cwd=tmp_path))
    assert "cannot connect to postgresql://tether:***@127.0.0.1:1/tether: " in line
    assert "hunter2" not in line


def test_a_sqlite_path_with_four_slashes_is_absolute_and_echoed_as_typed(tmp_path: Path) -> None:
    missing = f"sqlite:///{tmp_path}/typo.db"  # tmp_path starts with /: four slashes
    assert missing.startswith("sqlite:////")
    line = one_error_line(tether("sessions", "ls", "--store", missing, cwd=tmp_path))
    assert f"no store at {tmp_path}/typo.db (store {missing})" in line

    made = f"sqlite:///{tmp_path}/made.db"
    out = tether("run", "hi", "--model", "scripted:demo", "--store", made, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"store {made}\n" in out.stdout and "/////" not in out.stdout
    assert (tmp_path / "made.db").exists()


async def test_the_store_says_a_connection_error_in_one_line() -> None:
    pytest.importorskip("psycopg")
    from tether.errors import StoreError
    from tether.store.pg_conn import connect

    with pytest.raises(StoreError) as raised:
        await connect("postgresql://tether:hunter2@127.0.0.1:1/tether")
    assert "\n" not in str(raised.value) and "hunter2" not in str(raised.value)
