"""Every script in examples/ runs as a user would run it: its own process, a fresh working
directory, the scripted model (no TETHER_EXAMPLE_MODEL), exit code 0 and the line that says
it did what it shows."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TIMEOUT = 120

# script -> lines its output must hold
EXPECTED: dict[str, tuple[str, ...]] = {
    "quickstart.py": ("answer: Picnic in Lisbon: sunny, 22 °C.", "stop reason: end_turn"),
    "approvals.py": (
        "turn stopped: awaiting_approval",
        "approval: transfer({'to': 'Ana', 'amount': 40}) -> allow",
        "approval: transfer({'to': 'Bruno', 'amount': 900}) -> deny",
        "ledger: ['40 EUR to Ana']",
        "stop reason: end_turn",
    ),
    "crash_resume.py": (
        "killed the child",
        "unknown_effect",
        "resumed: end_turn",
        "effects across both processes: ['check_stock tent', 'place_order tent', "
        "'lookup_price tent']",
    ),
    "gateway.py": (
        "sessions: 12, stop reasons: ['end_turn']",
        "most calls in flight at once: 3 (limit 3)",
    ),
    "serve.py": (
        "tether serve: listening on http://127.0.0.1:",
        "state: completed, stop reason: end_turn",
    ),
    "mcp_time.py": (
        "tool from MCP: get_current_time",
        "answer: In Lisbon it is",
        "stop reason: end_turn",
    ),
    "fork.py": (
        "the parent's request hash: True",
        "rewound to seq 9",
        "the parent keeps its seqs 10-17: 17 events",
        "forks of the parent: 3",
    ),
    "experiment.py": (
        "ended    end_turn           18/20",
        "turn_limit          2/20",
        "sessions ses_",
    ),
}


def test_every_example_is_run_here() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_the_example_runs_to_the_end_on_the_scripted_model(script: str, tmp_path: Path) -> None:
    if script == "mcp_time.py" and importlib.util.find_spec("mcp_server_time") is None:
        pytest.skip("mcp-server-time is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONUNBUFFERED"] = "1"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, f"{script} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    for line in EXPECTED[script]:
        assert line in done.stdout, f"{script} did not print {line!r}:\n{done.stdout}"
    assert list(tmp_path.iterdir()) == [], "an example left files in the working directory"
