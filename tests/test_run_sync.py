"""`Agent.run_sync` called again on the same agent runs in a new event loop: nothing the
first loop left behind (the store's tail, its wake-up event) may fail in the second, even in
the background where only a logged "Task exception was never retrieved" would show it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import sys
from tether import Agent
from tether.testing import ScriptedModel, call

def count(n: int) -> int:
    \"\"\"Count to n.\"\"\"
    return n

agent = Agent(ScriptedModel([call("count", n=1), "done"]), tools=[count], store=sys.argv[1])
for task in ("first", "second", "third"):
    result = agent.run_sync(task)
    print(result.stop_reason, result.steps, result.output)
"""


@pytest.mark.parametrize("store", ["memory:", "sqlite"])
def test_run_sync_again_and_again_leaves_nothing_failing_behind(tmp_path: Path, store: str) -> None:
    url = store if store == "memory:" else f"sqlite:///{tmp_path / 'tether.db'}"
    (tmp_path / "twice.py").write_text(SCRIPT)
    # -X dev: asyncio's debug mode, which reports every task that failed unobserved.
    out = subprocess.run(
        [sys.executable, "-X", "dev", "twice.py", url],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["end_turn 2 done"] * 3
    assert "Task exception was never retrieved" not in out.stderr, out.stderr
    assert "different event loop" not in out.stderr, out.stderr
