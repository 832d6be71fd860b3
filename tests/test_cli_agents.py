"""`tether run --agents FILE`: sub-agents from a TOML or JSON file, offered to the main agent
as tools or handoffs; a bad file is one line naming what is wrong, and nothing is stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = str(Path(__file__).resolve().parent)  # where `runtime.subagent_models` lives
PARENT = "python:runtime.subagent_models:parent"
HELPER = """
[agents.helper]
model = "python:tether.testing.runtime_fixtures:model"
tools = ["tether.testing.runtime_fixtures:tools"]
system = "You note things."
description = "Notes things down."
"""


def tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), TESTS])
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def events(session_id: str, cwd: Path) -> list[dict[str, object]]:
    out = tether("sessions", "events", session_id, "--json", cwd=cwd)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_run_offers_the_sub_agents_of_a_toml_file_as_tools(tmp_path: Path) -> None:
    (tmp_path / "agents.toml").write_text(HELPER)
    out = tether(
        "run", "ask helper note 1", "--model", PARENT, "--agents", "agents.toml", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["stop_reason"], result["output"]) == ("end_turn", "helper said: noted 1")
    log = events(result["session_id"], tmp_path)
    started = [e for e in log if e["type"] == "thread.started"]
    assert [(e["thread"], e["data"]["agent"], e["data"]["system"]) for e in started] == [  # type: ignore[index]
        ("helper-1", "helper", "You note things.")
    ]
    created = log[0]["data"]
    assert created["tools"].keys() == {"helper"}  # type: ignore[index]
    # Recorded as a runtime records a spec's, so a worker could rebuild the tree.
    assert created["metadata"]["cli"]["agents"]["helper"]["tools"] == [  # type: ignore[index]
        "tether.testing.runtime_fixtures:tools"
    ]


def test_a_json_file_offers_a_handoff_to_a_scripted_agent(tmp_path: Path) -> None:
    planner = {"model": "scripted:demo", "tools": ["tether.demo:tools"], "handoff": True}
    (tmp_path / "agents.json").write_text(json.dumps({"agents": {"planner": planner}}))
    out = tether(
        "run", "hand planner", "--model", PARENT, "--agents", "agents.json", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    started = [e for e in events(result["session_id"], tmp_path) if e["type"] == "thread.started"]
    assert [(e["thread"], e["data"]["handoff"]) for e in started] == [("planner-1", True)]  # type: ignore[index]
    finished = [e for e in events(result["session_id"], tmp_path) if e["type"] == "thread.finished"]
    assert result["output"] == finished[0]["data"]["output"] != ""  # type: ignore[index]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("a.toml", "[agents.helper\n", "not valid TOML"),
        ("a.json", "{", "not valid JSON"),
        ("a.toml", 'model = "x"\n', "unknown keys model"),
        ("a.toml", "[other]\n", "unknown keys other"),
        ("a.toml", "[agents]\n", "the agents table is empty"),
        (
            "a.toml",
            '[agents.helper]\ntool = ["x:y"]\nmodel = "scripted:demo"\n',
            "unknown keys tool",
        ),
        ("a.toml", "[agents.helper]\nsystem = 'x'\n", "agents.helper.model: Field required"),
        ("a.toml", '[agents.helper]\nmodel = "scripted:demo"\nagents = ["ghost"]\n', "'ghost'"),
        (
            "a.toml",
            '[agents.a]\nmodel = "scripted:demo"\nagents = ["b"]\n'
            '[agents.b]\nmodel = "scripted:demo"\nagents = ["a"]\n',
            "cycle: a -> b -> a",
        ),
        ("a.toml", '[agents."two words"]\nmodel = "scripted:demo"\n', "letters, digits"),
        ("a.toml", '[agents.helper]\nmodel = "nope:x"\n', "sub-agent helper: model 'nope:x'"),
        (
            "a.toml",
            '[agents.helper]\nmodel = "scripted:demo"\ntools = ["no_such_module:x"]\n',
            "cannot import no_such_module",
        ),
        ("a.toml", '[agents.forecast]\nmodel = "scripted:demo"\n', "two tools are named"),
        ("a.toml", 'max_depth = -1\n[agents.a]\nmodel = "scripted:demo"\n', "max_depth"),
        ("missing.toml", None, "cannot read it"),
    ],
)
def test_a_bad_agents_file_is_one_line_and_stores_nothing(
    tmp_path: Path, name: str, text: str | None, message: str
) -> None:
    if text is not None:
        (tmp_path / name).write_text(text)
    out = tether(
        "run", "x", "--model", "scripted:demo", "--tools", "tether.demo:tools",
        "--agents", name, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"tether: error: --agents {name}: "), lines[0]
    assert message in lines[0], lines[0]
    assert not (tmp_path / "tether.db").exists()


def test_an_approval_inside_a_sub_agent_is_decided_by_key_and_resumed_with_its_agents(
    tmp_path: Path,
) -> None:
    (tmp_path / "agents.toml").write_text(HELPER)
    out = tether(
        "run", "ask helper guarded wipe", "--model", PARENT, "--agents", "agents.toml", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 4, out.stderr
    session_id = json.loads(out.stdout)["session_id"]
    # stderr prints the command that decides the sub-agent's call, by THREAD:CALL_ID.
    approve = next(line.split() for line in out.stderr.splitlines() if " approve " in line)
    key = approve[approve.index(session_id) + 1]
    assert key.startswith("helper-1:"), out.stderr
    assert tether("sessions", "approve", session_id, key, cwd=tmp_path).returncode == 0
    # The resume rebuilds the sub-agents the session recorded: no --agents needed again.
    out = tether("sessions", "resume", session_id, "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["output"] == "helper said: guarded said: done: wipe"
    finished = [e for e in events(session_id, tmp_path) if e["type"] == "thread.finished"]
    assert [e["thread"] for e in finished] == ["helper-1"]
