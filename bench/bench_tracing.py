"""Per-step cost of tracing, on the memory store, beside the bare asyncio loop: with
OpenTelemetry never imported (the SDK absent, as far as tether can tell), imported with no
tracer provider set, and with the SDK's provider set (every span through a span processor
to an exporter that keeps nothing, so the cost is tether's and the SDK's, not an export's).

    .venv/bin/python bench/bench_tracing.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_loop import tether_run
from common import bare_loop
from tether.store import MemoryStore

STEPS = 50


async def per_step(label: str, run: Callable[[], Awaitable[None]], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        await run()
        samples.append((time.perf_counter() - t0) / STEPS)
    best = statistics.median(samples)
    print(f"  {label:<40} {best * 1e6:9.1f} µs/step  (median of {repeats} runs of {STEPS} steps)")
    return best


def tracing_on() -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Dropping(SpanExporter):
        def __init__(self) -> None:
            self.spans = 0

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            self.spans += len(spans)
            return SpanExportResult.SUCCESS

    exporter = Dropping()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


async def main() -> None:
    print(f"per-step cost of tracing, {STEPS}-step run (memory store, one read tool per step)")
    bare = await per_step("bare asyncio loop", lambda: bare_loop(STEPS), 200)
    run = lambda: tether_run(STEPS, MemoryStore())  # noqa: E731
    assert "opentelemetry" not in sys.modules
    off = await per_step("tether, OpenTelemetry not imported", run, 100)
    import opentelemetry.trace  # noqa: F401

    unset = await per_step("tether, imported, no provider set", run, 100)
    exporter = tracing_on()
    on = await per_step("tether, tracing on (SDK provider)", run, 100)
    spans_per_run = exporter.spans / 100 / STEPS
    print(f"  spans per step                           {spans_per_run:9.2f}")
    print(f"  tracing off / bare loop                  {off / bare:9.1f} ×")
    print(f"  imported, unset − off                    {(unset - off) * 1e6:9.1f} µs/step (noise)")
    print(f"  tracing on − off                         {(on - off) * 1e6:9.1f} µs/step")


if __name__ == "__main__":
    asyncio.run(main())
