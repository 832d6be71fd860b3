"""Many sessions at once: N sessions of 5 model calls each (4 tool steps and an answer),
the scripted model sleeping 20 ms per call, all started together in one process. Each
scenario runs in a fresh subprocess so its peak RSS is its own. `configure_gc()` rows use
the collector settings the `tether` command itself runs with (tether.process).

    .venv/bin/python bench/bench_sessions.py [N ...]
"""

from __future__ import annotations

import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import bare_loop

STEPS = 4  # tool steps; plus the final answer, 5 model calls
DELAY = 0.020


async def run_scenario(kind: str, sessions: int) -> dict[str, float]:
    from tether import Agent, Limits, tool
    from tether.store import MemoryStore, SQLiteStore
    from tether.testing import ScriptedModel, call

    @tool(effect="read")
    async def echo(text: str) -> str:
        """Say it back."""
        return text

    if kind == "bare":
        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(bare_loop(STEPS, model_delay=DELAY) for _ in range(sessions)))
        return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    store = (
        MemoryStore() if kind == "memory" else SQLiteStore(str(Path(tempfile.mkdtemp()) / "s.db"))
    )
    model = ScriptedModel([*([call("echo", text="hi")] * STEPS), "done"], delay=DELAY)
    agent = Agent(model, tools=[echo], store=store, limits=Limits(max_steps=10))
    t0, c0 = time.perf_counter(), time.process_time()
    results = await asyncio.gather(*(agent.run("go") for _ in range(sessions)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert all(r.stop_reason == "end_turn" and r.steps == STEPS + 1 for r in results)
    await store.close()
    return {"wall_s": wall, "cpu_s": cpu}


def child(kind: str, sessions: int) -> None:
    if kind.endswith("+gc"):
        from tether.process import configure_gc

        configure_gc()
        kind = kind.removesuffix("+gc")
    figures = asyncio.run(run_scenario(kind, sessions))
    figures["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(figures))


def main(sizes: list[int]) -> None:
    print(
        f"{STEPS + 1} model calls per session, {DELAY * 1000:.0f} ms each (ideal wall {(STEPS + 1) * DELAY:.2f} s)"
    )
    for n in sizes:
        target = "≤ 1.0 s" if n <= 1000 else "≤ 5 s, peak RSS ≤ 1 GiB"
        for kind in ("bare", "memory", "memory+gc", "sqlite", "sqlite+gc"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", kind, str(n)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            f = json.loads(out.strip().splitlines()[-1])
            label = {
                "bare": "bare asyncio loop",
                "memory": "tether, memory store",
                "sqlite": "tether, SQLite store",
                "memory+gc": "  same, configure_gc()",
                "sqlite+gc": "  same, configure_gc()",
            }[kind]
            print(
                f"  {n:>6} sessions  {label:<22} wall {f['wall_s']:6.2f} s  peak RSS {f['peak_rss_mib']:7.1f} MiB"
                + ("" if kind == "bare" else f"   (target {target})")
            )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
    else:
        main([int(a) for a in sys.argv[1:]] or [1000, 10000])
