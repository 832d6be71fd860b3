"""`tether sessions ls` reads the store's catalog: a header row, a row per session, filters
by state, model, text and metadata, each sort, and paging by `--cursor` (each session once),
with bad filters refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_cli import tether
from tether.runtime.local import LocalRuntime
from tether.store import SQLiteStore
from tether.testing.runtime_conformance import Observer, spec


@pytest.fixture
async def stored(tmp_path: Path) -> list[str]:
    """Four sessions, oldest first: three idle (teams red, blue, red), the last canceled."""
    async with LocalRuntime(SQLiteStore(str(tmp_path / "tether.db")), workers=2) as rt:
        refs = []
        for n, team in enumerate(["red", "blue", "red", "red"]):
            ref = await rt.start(spec(f"echo errand {n}", metadata={"team": team}))
            await Observer(rt, ref).settled()
            refs.append(ref)
        await rt.cancel(refs[3])
        await Observer(rt, refs[3]).until("canceled", lambda s: s.state == "canceled")
    return [r.session_id for r in refs]


def ls(tmp_path: Path, *args: str) -> list[str]:
    out = tether("sessions", "ls", *args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def ids(lines: list[str]) -> list[str]:
    return [line.split()[0] for line in lines[1:] if not line.startswith("more: ")]


def test_the_list_has_a_header_and_a_row_per_session(tmp_path: Path, stored: list[str]) -> None:
    lines = ls(tmp_path)
    assert lines[0].split() == ["SESSION", "STATE", "STOP", "STEPS", "TOKENS", "COST", "UPDATED",
                                "TASK"]  # fmt: skip
    assert ids(lines) == stored[::-1]  # the most recently updated first
    canceled = lines[1].split()
    assert canceled[1] == "canceled" and "echo errand 3" in lines[1], lines[1]
    idle = lines[2].split()
    assert idle[:3] == [stored[2], "idle", "end_turn"] and idle[3] == "1", lines[2]


def test_filters_and_sorts_choose_the_rows(tmp_path: Path, stored: list[str]) -> None:
    assert ids(ls(tmp_path, "--state", "canceled")) == [stored[3]]
    assert ids(ls(tmp_path, "--state", "idle,canceled", "--sort", "oldest")) == stored
    assert ids(ls(tmp_path, "--metadata", "team=blue")) == [stored[1]]
    assert ids(ls(tmp_path, "--metadata", "team=red", "--state", "idle")) == [
        stored[2], stored[0],
    ]  # fmt: skip
    assert ids(ls(tmp_path, "--q", "ERRAND 2")) == [stored[2]]
    assert ids(ls(tmp_path, "--model", "scripted:runtime", "--sort", "newest")) == stored[::-1]
    assert ls(tmp_path, "--model", "no-such-model") == ["no session matches"]
    listed = json.loads(tether("sessions", "ls", "--json", "--sort", "oldest", cwd=tmp_path).stdout)
    assert [s["session_id"] for s in listed] == stored
    assert listed[0]["task"] == "echo errand 0" and listed[0]["metadata"]["team"] == "red"


def test_a_limit_pages_by_cursor_each_session_once(tmp_path: Path, stored: list[str]) -> None:
    first = ls(tmp_path, "--limit", "3")
    assert first[-1].startswith("more: --cursor ") and ids(first) == stored[:0:-1]
    cursor = first[-1].removeprefix("more: --cursor ")
    rest = ls(tmp_path, "--limit", "3", "--cursor", cursor)
    assert ids(rest) == [stored[0]] and not rest[-1].startswith("more:")
    as_json = tether("sessions", "ls", "--json", "--limit", "2", cwd=tmp_path)
    assert len(json.loads(as_json.stdout)) == 2 and as_json.stderr.startswith("more: --cursor ")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--state", "sleeping"], "unknown state 'sleeping'"),
        (["--metadata", "team"], "--metadata: must be KEY=VALUE, not 'team'"),
        (["--sort", "id"], "--sort: invalid choice: 'id'"),
        (["--cursor", "not-a-cursor"], "is not one this server gave"),
        (["--q", "x" * 201], "q is longer than 200 characters"),
    ],
)
def test_bad_filters_are_one_line_errors(
    tmp_path: Path, stored: list[str], args: list[str], says: str
) -> None:
    out = tether("sessions", "ls", *args, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "", out
    (line,) = out.stderr.strip().splitlines()
    assert says in line, line
