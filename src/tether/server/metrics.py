"""`GET /metrics`: the server's own counters and the figures of the model gateways (the
runtime's own, one per backend its workers used, and any others it is given), in the
Prometheus text format (0.0.4)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from tether.runtime.local import LocalRuntime
from tether.scheduler.figures import render_prometheus


class Metrics:
    def __init__(self, runtime: LocalRuntime, gateways: Iterable[Any] = ()) -> None:
        self.runtime = runtime
        self.gateways = list(gateways)  # objects with .figures() -> GatewayFigures
        self.requests: Counter[tuple[str, int]] = Counter()
        self.streams = 0
        self.subscribers = 0
        self.events_streamed = 0

    def request(self, route: str, status: int) -> None:
        self.requests[(route, status)] += 1

    def render(self) -> str:
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> str:
            lines.append(f"# HELP tether_{name} {help_text}")
            lines.append(f"# TYPE tether_{name} {kind}")
            return f"tether_{name}"

        metric = family("http_requests_total", "counter", "requests answered, by route and status")
        for (route, status), count in sorted(self.requests.items()):
            lines.append(f'{metric}{{route="{route}",status="{status}"}} {count}')
        worker = self.runtime.worker
        for name, kind, help_text, value in (
            ("sse_streams_total", "counter", "event streams opened", self.streams),
            ("sse_subscribers", "gauge", "event streams open now", self.subscribers),
            ("sse_events_total", "counter", "events sent on streams", self.events_streamed),
            ("hub_subscribers", "gauge", "in-process event subscribers", self.runtime.hub.subscribers),
            ("worker_running", "gauge", "sessions this process runs now", worker.running if worker else 0),
            ("worker_turns_total", "counter", "turns this process ran", worker.turns_run if worker else 0),
            ("worker_failures_total", "counter", "session runs that failed and wait to retry",
             worker.failures if worker else 0),
        ):  # fmt: skip
            lines.append(f"{family(name, kind, help_text)} {value}")
        text = "\n".join(lines) + "\n"
        figures = [*self.runtime.figures(), *(g.figures() for g in self.gateways)]
        if figures:
            text += render_prometheus(figures)
        return text
