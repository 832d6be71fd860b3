"""`GET /metrics`: the server's own counters, the series its sessions and workers feed
(`telemetry.metrics`: model and tool latency, time to first token, tokens, cost, outcomes,
worker slots, leases, states, takeovers, parks), every session of the store by state (from
its catalog, whichever process runs them), and the figures of the model gateways (the
runtime's own, one per backend its workers used, and any others it is given), in the
Prometheus text format (0.0.4). Backends, models, tools, tenants and routes are named only
to the operator (`names`, the bearer of the metrics token): a backend is what a tenant chose,
and which tenants there are, what they spend and which routes they use is the operator's
business, not another's."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, get_args

from tether.errors import ConfigError, StoreError
from tether.runtime.local import LocalRuntime
from tether.scheduler.figures import _COUNTERS as COUNTERS
from tether.scheduler.figures import GatewayFigures, _escape, render_prometheus
from tether.server.auth import MIN_TOKEN, Tokens
from tether.state import State
from tether.store.catalog import CatalogQuery
from tether.telemetry import metrics as session_metrics
from tether.telemetry.prometheus import render as render_sessions


class Metrics:
    def __init__(self, runtime: LocalRuntime, gateways: Iterable[Any] = ()) -> None:
        self.runtime = runtime
        self.gateways = list(gateways)  # objects with .figures() -> GatewayFigures
        self.requests: Counter[tuple[str, int]] = Counter()
        self.streams = 0
        self.subscribers = 0
        self.events_streamed = 0
        session_metrics.enable()  # this process's sessions feed the series below

    def request(self, route: str, status: int) -> None:
        self.requests[(route, status)] += 1

    async def scrape(self, *, names: bool = False) -> str:
        """`render`, with every session of the store counted by state from its catalog (one
        query; left out, and logged, while the store cannot answer)."""
        try:
            states = await self.runtime.store.catalog_counts(CatalogQuery())
        except StoreError as exc:
            _log.warning("metrics: the store did not count its sessions: %s", exc)
            states = None
        return self.render(names=names, states=states)

    def render(self, *, names: bool = False, states: Mapping[str, int] | None = None) -> str:
        """The server's own series and the gateways': per backend (`names`, for the operator),
        else summed over all backends, so that no tenant's backend is named. `states`: the
        store's sessions by state (`tether_sessions`), every state shown, 0 when none."""
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> str:
            lines.append(f"# HELP tether_{name} {help_text}")
            lines.append(f"# TYPE tether_{name} {kind}")
            return f"tether_{name}"

        if names:
            metric = family(
                "http_requests_total", "counter", "requests answered, by route and status"
            )
            for (route, status), count in sorted(self.requests.items()):
                lines.append(f'{metric}{{route="{route}",status="{status}"}} {count}')
        else:  # which routes every tenant uses, and how often, is the operator's to know
            metric = family("http_requests_total", "counter", "requests answered, by status")
            by_status = Counter[int]()
            for (_, status), count in self.requests.items():
                by_status[status] += count
            for status, count in sorted(by_status.items()):
                lines.append(f'{metric}{{status="{status}"}} {count}')
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
        if states is not None:
            metric = family(
                "sessions", "gauge", "sessions in the store by state, whichever process runs them"
            )
            for state in sorted({*STATES, *states}):
                lines.append(f'{metric}{{state="{_escape(state)}"}} {states.get(state, 0)}')
        lines.extend(render_sessions(names=names))
        figures = [*self.runtime.figures(), *(g.figures() for g in self.gateways)]
        if not names:
            lines.extend(totals(figures))
        text = "\n".join(lines) + "\n"
        if figures and names:
            text += render_prometheus(figures)
        return text


_log = logging.getLogger("tether.server")
STATES: tuple[str, ...] = get_args(State)


def check_token(metrics_token: str | None, tokens: Tokens | None) -> None:
    """Refuse a metrics token that would show every tenant's names and spending to someone
    else: one short enough to guess, or one a tenant holds (it would read /metrics too)."""
    if metrics_token is None:
        return
    if len(metrics_token) < MIN_TOKEN:
        raise ConfigError(f"the metrics token is shorter than {MIN_TOKEN} characters")
    if tokens is not None and tokens.tenant(f"Bearer {metrics_token}") is not None:
        raise ConfigError("the metrics token is also a tenant's token: give the operator its own")


# What adds up over backends: counters, and the gauges that count requests.
SUMMED = (
    *((f"{name}_total", "counter", text, name) for name, text in COUNTERS),
    ("queue_depth", "gauge", "requests waiting for their turn", "queue_depth"),
    ("waiting_for_place", "gauge", "callers waiting for a place in a full queue", "waiting_for_place"),
    ("in_flight", "gauge", "requests being answered now", "in_flight"),
)  # fmt: skip


def totals(figures: list[GatewayFigures]) -> list[str]:
    """The model gateways' figures summed over every backend, with no label that names one."""
    lines = [
        "# HELP tether_gateways_backends model backends this process has a gateway for",
        "# TYPE tether_gateways_backends gauge",
        f"tether_gateways_backends {len(figures)}",
    ]
    for name, kind, help_text, field in SUMMED:
        lines.append(f"# HELP tether_gateways_{name} {help_text}, over all backends")
        lines.append(f"# TYPE tether_gateways_{name} {kind}")
        lines.append(f"tether_gateways_{name} {sum(getattr(f, field) for f in figures)}")
    return lines
