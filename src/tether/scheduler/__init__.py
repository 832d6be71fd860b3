"""The scheduler: one model gateway per backend, owning concurrency and rate limits,
priorities, fairness between tenants, backpressure and retries.

    gateway = Gateway(model, GatewayConfig(max_concurrency=32, weights={"acme": 2}))
    agent = Agent(gateway.for_session(tenant="acme", session_id="s1", priority="batch"))
"""

from tether.scheduler.clock import Clock, LoopClock, VirtualTimeLoop, run_virtual
from tether.scheduler.figures import GatewayFigures, render_prometheus
from tether.scheduler.gateway import Gateway, GatewayConfig, SessionModel, Ticket
from tether.scheduler.queue import Priority
from tether.scheduler.retry import RetryPolicy
from tether.scheduler.status import GatewayStatus

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
