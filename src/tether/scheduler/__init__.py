"""The scheduler: one model gateway per backend, owning concurrency and rate limits,
priorities, fairness between tenants, backpressure and retries.

    gateway = Gateway(model, GatewayConfig(max_concurrency=32, weights={"acme": 2}))
    agent = Agent(gateway.for_session(tenant="acme", session_id="s1", priority="batch"))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.scheduler.clock import Clock, LoopClock, VirtualTimeLoop, run_virtual
    from tether.scheduler.figures import GatewayFigures, render_prometheus
    from tether.scheduler.gateway import Gateway, GatewayConfig, SessionModel, Ticket
    from tether.scheduler.queue import Priority
    from tether.scheduler.retry import RetryPolicy
    from tether.scheduler.status import GatewayStatus

# Each name's module, imported when the name is first asked for: every agent imports the
# retry policy (`scheduler.retry`), and only a process with a gateway needs the rest.
_HOMES = {
    "Clock": "clock",
    "LoopClock": "clock",
    "VirtualTimeLoop": "clock",
    "run_virtual": "clock",
    "GatewayFigures": "figures",
    "render_prometheus": "figures",
    "Gateway": "gateway",
    "GatewayConfig": "gateway",
    "SessionModel": "gateway",
    "Ticket": "gateway",
    "Priority": "queue",
    "RetryPolicy": "retry",
    "GatewayStatus": "status",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tether.scheduler' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tether.scheduler.{home}"), name)


__all__ = [
    "Clock",
    "Gateway",
    "GatewayConfig",
    "GatewayFigures",
    "GatewayStatus",
    "LoopClock",
    "Priority",
    "RetryPolicy",
    "SessionModel",
    "Ticket",
    "VirtualTimeLoop",
    "render_prometheus",
    "run_virtual",
]
