"""A disk that fills up in the middle of `tether run`: the run exits 5 with one line saying
what the session kept and the command that goes on, says each distinct store failure once
(not once per retry), and that command finishes the session with no effect made twice.

The store lives on a small tmpfs the test mounts (root only; skipped where it cannot be
mounted); the `write` tool counts its effects in a file outside it."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SCENARIO = """
import os
from pathlib import Path

from tether import tool
from tether.testing import ScriptedModel, call


@tool(effect="write")
def record(n: int) -> str:
    '''Record n.'''
    with Path(os.environ["EFFECTS"]).open("a") as effects:
        effects.write(f"{n}\\n")
    if n == 3 and not Path(os.environ["FILLER"]).exists():  # the disk fills up here
        with Path(os.environ["FILLER"]).open("wb") as filler:
            try:
                while True:
                    filler.write(b"x" * 65536)
                    filler.flush()
            except OSError:
                pass
    return f"recorded {n}"


model = ScriptedModel([call("record", n=n) for n in range(1, 7)] + ["done"])
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs, unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip() or made.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def tether(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_a_disk_full_mid_run_exits_5_in_one_line_and_resume_finishes_with_no_effect_twice(
    tmp_path: Path, small_disk: Path
) -> None:
    (tmp_path / "scenario.py").write_text(SCENARIO)
    effects, filler = tmp_path / "effects.txt", small_disk / "filler"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env |= {"PYTHONPATH": str(tmp_path), "EFFECTS": str(effects), "FILLER": str(filler)}
    store = f"sqlite:///{small_disk / 't.db'}"
    run = tether(
        "run", "go", "--model", "python:scenario:model", "--tools", "scenario:record",
        "--store", store, "--timeline", cwd=tmp_path, env=env,
    )  # fmt: skip
    assert run.returncode == 5, run.stderr
    assert effects.read_text().split() == ["1", "2", "3"]
    lines = run.stderr.splitlines()
    assert len(lines) == len(set(lines)) <= 4, run.stderr  # each failure said once
    summary = lines[-1]
    found = re.fullmatch(
        r"tether: error: store \S+: database or disk is full; session (ses_\w+) keeps the "
        r"(\d+) events stored before the failure: `(tether sessions resume \S+ --store \S+)` "
        r"goes on from there",
        summary,
    )
    assert found is not None, summary
    session_id, kept, command = found.group(1), int(found.group(2)), found.group(3)
    assert all(session_id in line for line in lines[:-1]), run.stderr  # the retries' lines

    filler.unlink()  # the operator frees the disk
    events = tether(
        "sessions", "events", session_id, "--json", "--store", store, cwd=tmp_path, env=env
    )
    assert len(events.stdout.splitlines()) == kept  # what the line said was kept

    # The run's lease may have a moment left: the command waits for it.
    resumed = tether(*shlex.split(command)[1:], "--lease-wait", "30", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert effects.read_text().split() == ["1", "2", "3", "4", "5", "6"]  # none twice
    last = tether("sessions", "show", session_id, "--json", "--store", store, cwd=tmp_path, env=env)
    view = json.loads(last.stdout)["view"]
    assert (view["state"], view["stop_reason"]) == ("idle", "end_turn")
