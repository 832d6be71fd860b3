"""`tether sessions fork|rewind`, the lineage `sessions show` prints and `sessions ls --parent`,
as real `tether` processes on a SQLite file: a runtime's session (its fork goes through
`LocalRuntime.fork`, a worker runs it) and a `tether run` session (`sessions resume` runs its
fork, with the model `--model` changed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_cli import tether
from tether.cli.fork import FORKS_SHOWN
from tether.runtime.base import SessionRef
from tether.runtime.local import LocalRuntime
from tether.session.fork import ForkPoint
from tether.store import SQLiteStore
from tether.testing.runtime_conformance import Observer, turns
from tether.testing.runtime_fixtures import MODEL

TWIN_B = "python:tether.testing.runtime_fixtures:twin_b"


def runtime(tmp_path: Path) -> LocalRuntime:
    return LocalRuntime(SQLiteStore(str(tmp_path / "tether.db")), workers=2, poll_interval=0.05)


@pytest.fixture
async def parent(tmp_path: Path) -> tuple[str, int]:
    """A runtime's session of four turns (the third calls a tool twice), and its last seq."""
    async with runtime(tmp_path) as rt:
        ref, watch = await turns(rt, "echo one", "echo two", "note 2", "echo four")
        return ref.session_id, (await watch.settled()).last_seq


def run(tmp_path: Path, *args: str) -> list[str]:
    out = tether(*args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


async def settled(tmp_path: Path, session_id: str) -> str:
    """Run the session's turn with a runtime's workers (as `tether worker` would): its
    last output."""
    async with runtime(tmp_path) as rt:
        return (await Observer(rt, SessionRef(session_id)).settled()).last_output


async def test_rewind_prints_the_new_session_and_what_it_dropped(
    tmp_path: Path, parent: tuple[str, int]
) -> None:
    session_id, last = parent
    lines = run(tmp_path, "sessions", "rewind", session_id, "--turn", "2")
    child, said = lines[0].split(": ", 1)
    at = 6  # turn 2 opened with its message at seq 6 (session.created, turn 1's four events)
    assert said == f"{session_id} rewound to the start of turn 2 (seq {at}) · pending", lines
    # Turns 2 to 4 ended after it; turns 3 and 4 opened with a message; turn 2 answered once,
    # turn 3 three times (two calls, then its answer), turn 4 once.
    assert lines[1] == (
        f"dropped: 3 turn(s), 2 user message(s), 5 model answer(s), 2 tool call(s), "
        f"{last - at} event(s) (session {session_id} keeps them, unchanged)"
    ), lines
    # The child runs turn 2 again, and the parent is as it was.
    assert await settled(tmp_path, child) == "echo: two"
    shown = json.loads(run(tmp_path, "sessions", "show", session_id, "--json")[0])
    assert shown["view"]["last_seq"] == last and shown["view"]["turns"] == 4
    assert shown["forks"] == {"forks": [{"session_id": child, "state": "idle"}], "total": 1}
    as_json = json.loads(
        run(tmp_path, "sessions", "rewind", session_id, "--turn", "4", "--json")[0]
    )
    assert as_json["kind"] == "rewind" and as_json["dropped"]["turns"] == 1


async def test_show_prints_the_lineage_and_ls_lists_the_forks(
    tmp_path: Path, parent: tuple[str, int]
) -> None:
    session_id, _ = parent
    async with runtime(tmp_path) as rt:
        forks = [
            (await rt.fork(SessionRef(session_id), at=ForkPoint(after_turn=1))).session_id
            for _ in range(FORKS_SHOWN + 2)
        ]
    child = forks[0]
    lines = run(tmp_path, "sessions", "show", child)
    assert f"forked from {session_id} at seq 5 (fork)" in lines, lines
    [listed] = [
        line for line in run(tmp_path, "sessions", "show", session_id) if line.startswith("forks: ")
    ]
    assert listed.endswith(f" and 2 more (tether sessions ls --parent {session_id})"), listed
    assert listed.count("(idle)") == FORKS_SHOWN
    rows = run(tmp_path, "sessions", "ls", "--parent", session_id, "--limit", "100")
    assert sorted(line.split()[0] for line in rows[1:]) == sorted(forks)
    as_json = json.loads(run(tmp_path, "sessions", "ls", "--parent", child, "--json")[0])
    assert as_json == []
    assert run(tmp_path, "sessions", "ls", "--parent", child) == ["no session matches"]
    one = json.loads(
        run(tmp_path, "sessions", "ls", "--parent", session_id, "--json", "--limit", "1")[0]
    )
    assert one[0]["parent"] == session_id


async def test_a_fork_with_another_model_and_a_message_is_run_by_a_worker(
    tmp_path: Path, parent: tuple[str, int]
) -> None:
    session_id, _ = parent
    lines = run(
        tmp_path, "sessions", "fork", session_id, "--after-turn", "1",
        "--model", TWIN_B, "--message", "echo other",
    )  # fmt: skip
    child, said = lines[0].split(": ", 1)
    assert said == f"forked from {session_id} at the end of turn 1, seq 5 · pending", lines
    assert await settled(tmp_path, child) == "twin b: echo other"


def test_a_run_sessions_fork_is_resumed_with_the_model_it_was_given(tmp_path: Path) -> None:
    started = json.loads(run(tmp_path, "run", "echo one", "--model", MODEL, "--json")[0])
    session_id = started["session_id"]
    lines = run(
        tmp_path, "sessions", "fork", session_id, "--message", "echo two", "--model", TWIN_B
    )
    child = lines[0].split(":")[0]
    assert lines[1] == (
        "it has a turn to run: a `tether worker` runs a runtime's session; otherwise "
        f"tether sessions resume {child}"
    ), lines
    resumed = run(tmp_path, "sessions", "resume", child, "--timeline")
    assert "twin b: echo two" in "\n".join(resumed)
    idle = run(tmp_path, "sessions", "fork", session_id, "--json")
    assert json.loads(idle[0])["state"] == "idle"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--at", "999"], "there is no seq 999"),
        (
            ["--turn", "9"],
            "has no turn 9 to fork at (the start of turn 9): it has 4 finished turn(s)",
        ),
        (["--at", "2", "--turn", "1"], "not allowed with argument"),
        (["--message", "  "], "--message"),
        (["--model", "nosuch:model"], "nosuch"),
    ],
)
async def test_bad_input_is_one_line_and_makes_nothing(
    tmp_path: Path, parent: tuple[str, int], args: list[str], says: str
) -> None:
    session_id, _ = parent
    out = tether("sessions", "fork", session_id, *args, cwd=tmp_path)
    assert out.returncode == 2 and says in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert run(tmp_path, "sessions", "ls", "--parent", session_id) == ["no session matches"]


def test_an_unknown_session_is_not_found(tmp_path: Path) -> None:
    run(tmp_path, "run", "echo one", "--model", MODEL, "--json")
    out = tether("sessions", "rewind", "ses_nosuchsession00", "--turn", "1", cwd=tmp_path)
    assert out.returncode == 2 and "ses_nosuchsession00" in out.stderr, out.stderr
