"""Per-step cost of metrics, on the memory store, beside the bare asyncio loop: with metrics
off and OpenTelemetry never imported; then, interleaved run by run so that the machine's
noise falls on all alike, metrics off, the process's registry enabled (what `tether serve`
does: every event through the observer), and an OpenTelemetry SDK meter provider set as well
(histograms and the GenAI client metrics fed alongside; counters and gauges read only when
collected, here once at the end, so the cost is tether's and the SDK's per event, not an
export's).

    .venv/bin/python bench/bench_metrics.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_loop import tether_run
from bench_tracing import STEPS, per_step
from common import bare_loop
from tether.store import MemoryStore
from tether.telemetry import metrics
from tether.telemetry.metrics import Histogram
from tether.telemetry.prometheus import render

ROUNDS = 100


def modes() -> dict[str, Callable[[], None]]:
    """How to put the process in each mode, once a meter provider is bound."""
    r = metrics.METRICS
    histograms: list[Histogram] = [r.model_seconds, r.first_token_seconds, r.tool_seconds]
    mirrors = [h.mirror for h in histograms]
    genai = r.on_answer  # the GenAI client metrics: SDK records too

    def mirrored(on: bool) -> None:
        for h, mirror in zip(histograms, mirrors, strict=True):
            h.mirror = mirror if on else None
        r.on_answer = genai if on else None

    def off() -> None:
        r.enabled = False

    def counted() -> None:
        r.enabled = True
        mirrored(False)

    def both() -> None:
        r.enabled = True
        mirrored(True)

    return {
        "tether, metrics off": off,
        "tether, metrics on (Prometheus registry)": counted,
        "tether, metrics on, SDK meter provider": both,
    }


async def main() -> None:
    print(f"per-step cost of metrics, {STEPS}-step run (memory store, one read tool per step)")
    bare = await per_step("bare asyncio loop", lambda: bare_loop(STEPS), 200)
    assert "opentelemetry" not in sys.modules and not metrics.METRICS.enabled
    await per_step(
        "tether, OpenTelemetry not imported", lambda: tether_run(STEPS, MemoryStore()), 100
    )
    from opentelemetry import metrics as otel_metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    otel_metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    await tether_run(STEPS, MemoryStore())  # the first log binds the registry to it
    samples: dict[str, list[float]] = {}
    for _ in range(ROUNDS):
        for label, enter in modes().items():
            enter()
            t0 = time.perf_counter()
            await tether_run(STEPS, MemoryStore())
            samples.setdefault(label, []).append((time.perf_counter() - t0) / STEPS)
    medians = {label: statistics.median(s) for label, s in samples.items()}
    for label, best in medians.items():
        print(f"  {label:<40} {best * 1e6:9.1f} µs/step  (median of {ROUNDS}, interleaved)")
    collected = reader.get_metrics_data()
    assert collected is not None and collected.resource_metrics  # the series did reach it
    off, counted, both = medians.values()
    lines = len([line for line in render() if not line.startswith("#")])
    print(f"  Prometheus samples after the runs        {lines:9d}")
    print(f"  metrics off / bare loop                  {off / bare:9.1f} ×")
    print(f"  metrics on − off                         {(counted - off) * 1e6:9.1f} µs/step")
    print(f"  with the meter provider − off            {(both - off) * 1e6:9.1f} µs/step")


if __name__ == "__main__":
    asyncio.run(main())
