"""Every bad input the `tether` command is given is one line on stderr, exit 2, and nothing
stored changes: deep JSON, a binary file, NaN, infinities and numbers out of range, an empty
task or message, a store URL parameter given twice, a `${` that starts no variable, a file
that is no tether store. Run for real, as a subprocess, beside a store with a session."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DEEP = "[" * 100_000 + "]" * 100_000  # a RecursionError in json.loads, unbounded
ARG_DEEP = "[" * 60_000 + "]" * 60_000  # as deep, within the length of one argument
TWICE = "sqlite:///tether.db?synchronous=full&synchronous=normal"
JUST_TOO_DEEP = "[" * 65 + "]" * 65  # parses, but deeper than any config is written


def tether(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        env={**base, "PYTHONPATH": str(cwd), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with the demo's session in it, and the bad files the cases name."""
    root = tmp_path_factory.mktemp("bad")
    assert tether("demo", cwd=root).returncode == 0
    (root / "deep.json").write_text(DEEP)
    (root / "deep_tokens.json").write_text('{"tenants": {"acme": ' + DEEP + "}}")
    (root / "deep_agents.json").write_text('{"agents": ' + JUST_TOO_DEEP + "}")
    (root / "deep_agents.toml").write_text("[agents]\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    (root / "nan_schema.json").write_text('{"type": "number", "maximum": NaN}')
    (root / "binary.json").write_bytes(bytes(range(128, 256)) * 4)
    (root / "dollar.json").write_text('{"mcpServers": {"fs": {"command": "x", "args": ["a${"]}}}')
    (root / "empty.db").write_bytes(b"")
    return root


def session_id(root: Path) -> str:
    out = tether("sessions", "ls", "--json", cwd=root)
    return str(json.loads(out.stdout)[0]["session_id"])


def fingerprint(root: Path) -> dict[str, str]:
    """Every file in the directory (the store and its WAL among them), by content."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.iterdir() if p.is_file()
    }


CASES: list[tuple[list[str], str]] = [
    (["serve", "--tokens", "deep_tokens.json"], "deep_tokens.json: it nests deeper than 64"),
    (["run", "x", "--model", "scripted:demo", "--agents", "deep_agents.json"], "nests deeper"),
    (["run", "x", "--model", "scripted:demo", "--agents", "deep_agents.toml"], "nests deeper"),
    (["run", "x", "--model", "scripted:demo", "--output-schema", "deep.json"], "nests deeper"),
    (
        ["run", "x", "--model", "scripted:demo", "--output-schema", "nan_schema.json"],
        "numbers must be finite, not nan",
    ),
    (["mcp", "tools", "binary.json"], "MCP config binary.json: not UTF-8 text (byte 0: 0x80)"),
    (["mcp", "tools", "dollar.json"], "args[0]: the ${ at character 2 starts no ${VAR}"),
    (["worker", "--lease-ttl", "nan"], "--lease-ttl: must be a number above 0, not nan"),
    (["worker", "--poll-interval", "inf"], "--poll-interval: must be a number above 0, not inf"),
    (["serve", "--no-auth", "--port", "70000"], "--port: must be a whole number from 0 to 65535"),
    (["serve", "--no-auth", "--port", "-1"], "--port: must be a whole number from 0 to 65535"),
    (["run", "x", "--model", "scripted:demo", "--max-seconds", "nan"], "--max-seconds: must be"),
    (["run", "x", "--model", "scripted:demo", "--max-seconds=-inf"], "not -inf"),
    (["run", "x", "--model", "scripted:demo", "--max-tokens", "1e3"], "not '1e3'"),
    (["run", "x", "--model", "scripted:demo", "--retries", "9" * 30], "must be at most"),
    (["sessions", "resume", "SID", "--lease-wait", "-1"], "--lease-wait: must be a number 0 or"),
    (["sessions", "resume", "SID", "--lease-wait", "nan"], "--lease-wait: must be a number 0 or"),
    (["sessions", "ls", "--limit", "0"], "--limit: must be a whole number 1 or more, not 0"),
    (["experiment", "go", "--model", "scripted:demo", "--confidence", "1"], "above 0 and below 1"),
    (["run", "", "--model", "scripted:demo"], "argument task: must not be empty"),
    (["run", "  ", "--model", "scripted:demo"], "argument task: must not be empty"),
    (["sessions", "send", "SID", ""], "argument text: must not be empty"),
    (["sessions", "answer", "SID", "call_1", ARG_DEEP], "the answer: it nests deeper than 64"),
    (["run", "x", "--model", "scripted:demo", "--store", TWICE], "given more than once"),
    (["sessions", "ls", "--store", "empty.db"], "empty.db is not a tether store (the file is"),
    (["db", "status", "--store", "empty.db"], "empty.db is not a tether store (the file is"),
    (["sessions", "show", "SID", "--store", "sqlite:///deep.json"], "(not a SQLite database"),
    (["run"], "the following arguments are required: task, --model"),
]


@pytest.mark.parametrize(("args", "message"), CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_nothing_stored_changes(
    workdir: Path, args: list[str], message: str
) -> None:
    args = [session_id(workdir) if a == "SID" else a for a in args]
    before = fingerprint(workdir)
    out = tether(*args, cwd=workdir)
    assert out.returncode == 2, out.stderr[-2000:]
    (line,) = out.stderr.splitlines()  # one line, no traceback
    assert line.startswith("tether: error: ") and message in line, line
    assert out.stdout == ""
    assert fingerprint(workdir) == before


def test_a_bad_log_format_in_the_environment_is_one_line_and_exit_2(workdir: Path) -> None:
    out = tether("sessions", "ls", cwd=workdir, env={"TETHER_LOG_FORMAT": "xml"})
    assert out.returncode == 2
    assert out.stderr == "tether: error: TETHER_LOG_FORMAT must be text or json, not xml\n"
