"""Instructions per step, counted by valgrind: the figure to compare two commits by when the
wall clock is too noisy for a few per cent (a shared or two-core machine).

Each figure is the instructions of a process that runs `RUNS` agent turns of 50 steps, less
those of the same process running none (imports, the store opened), divided by the steps;
the bare-loop baseline is counted the same way. `child` kinds run the same steps inside a
sub-agent: a parent's one call to it (two steps of the parent's own per turn, counted as
steps like the child's), so the figure beside the top-level one is a sub-agent's cost per
step. Also the cost of `from tether import Agent`
(with `SQLiteStore`), less a bare interpreter's. Needs valgrind (`apt-get install valgrind`);
prints a line and exits without it. Never fails on a figure.

    .venv/bin/python bench/bench_instructions.py            (RUNS=4 by default)
    PYTHONPATH=/path/to/other/checkout/src .venv/bin/python bench/bench_instructions.py
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

STEPS = 50
RUNS = int(os.environ.get("BENCH_RUNS", "4"))


def count(*args: str) -> int:
    """Instructions valgrind counts for `python args...`."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *args],
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_step(kind: str) -> float:
    me = str(Path(__file__).resolve())
    steps = STEPS + 2 if kind.endswith("child") else STEPS
    return (count(me, "--child", kind, str(RUNS)) - count(me, "--child", kind, "0")) / (
        RUNS * steps
    )


async def child(kind: str, runs: int) -> None:
    """What each counted process does: `runs` turns of `STEPS` steps."""
    if kind == "bare":
        from common import bare_loop

        for _ in range(runs):
            await bare_loop(STEPS)
        return
    from tether import Agent, Limits, tool
    from tether.store import MemoryStore, SQLiteStore, Store
    from tether.testing import ScriptedModel, call

    @tool(effect="read")
    def echo(text: str) -> str:
        """Say it back."""
        return text

    with tempfile.TemporaryDirectory() as folder:
        store: Store = (
            MemoryStore()
            if kind.startswith("memory")
            else SQLiteStore(str(Path(folder) / "bench.db"))
        )
        for _ in range(runs):
            model = ScriptedModel([call("echo", text="a")] * (STEPS - 1) + ["done"])
            if kind.endswith("child"):
                roomy = Limits(max_steps=STEPS + 10)
                sub = Agent(model, tools=[echo], name="sub", limits=roomy).as_tool()
                parent = ScriptedModel([call("sub", task="go"), "done"])
                agent = Agent(parent, tools=[sub], store=store, limits=roomy)
                result = await agent.run("go")
                assert result.steps == STEPS + 2, result
            else:
                result = await Agent(model, tools=[echo], store=store).run("go")
                assert result.steps == STEPS, result
        await store.close()


def main() -> None:
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install valgrind (nothing was counted)")
        return
    bare = per_step("bare")
    print(f"instructions per step, {RUNS} turns of {STEPS} steps (valgrind callgrind):")
    print(f"  bare loop        {bare / 1000:9.1f} k")
    for kind in ("memory", "sqlite"):
        top, inside = per_step(kind), per_step(f"{kind}-child")
        print(f"  tether, {kind:<8} {top / 1000:9.1f} k")
        print(f"    in a sub-agent {inside / 1000:9.1f} k  ({inside / top - 1:+.1%})")
    imported = count("-c", "from tether import Agent; from tether.store import SQLiteStore")
    print(f"from tether import Agent: {(imported - count('-c', 'pass')) / 1e6:,.0f} M")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(child(sys.argv[2], int(sys.argv[3])))
    else:
        main()
