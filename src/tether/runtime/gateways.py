"""The model gateways of one worker: one `tether.scheduler.Gateway` per backend (the model's
identity: provider, model, URL and credentials; never its name alone), which every model call
of the sessions it runs passes, queued and parked as the request's caller (its tenant,
session and priority); plus reading them back (what a session waits for, the figures).

It queues and limits nothing itself (the scheduler does) and writes no events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether.providers.base import Model, ModelRequest, ModelResponse, ToolSpec
from tether.scheduler import Gateway, GatewayConfig, GatewayFigures, GatewayStatus, Ticket
from tether.scheduler.queue import PRIORITIES, Priority

if TYPE_CHECKING:
    from tether.settings import ModelSettings


def priority_of(value: object) -> Priority:
    """A recorded priority, or "interactive" when none (or an unknown one) was recorded."""
    for priority in PRIORITIES:
        if value == priority:
            return priority
    return "interactive"


class SessionRouted:
    """A `Model` for an Agent shared by many sessions: each call goes through the gateway
    as its request's caller (`ModelRequest.caller`), or as the gateway's default ticket
    when it names none. A call that would wait `park_after` seconds or more for the backend
    raises `Parked`, so the worker can let the session go meanwhile."""

    def __init__(self, gateway: Gateway, park_after: float | None = None) -> None:
        self.gateway = gateway
        self.park_after = park_after

    @property
    def name(self) -> str:
        return self.gateway.name

    def check_settings(self, settings: ModelSettings | None, tools: Sequence[ToolSpec]) -> None:
        """The backend's own check (`CodecModel.check_settings`), where it has one."""
        check = getattr(self.gateway.model, "check_settings", None)
        if callable(check):
            check(settings, tools)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        caller = request.caller
        if caller is None:
            return await self.gateway.complete(request)
        ticket = Ticket(caller.tenant, caller.session_id, caller.priority, self.park_after)
        return await self.gateway.submit(request, ticket)


def model_identity(model: Model, spec: str) -> str:
    """What `model`, built from the model string `spec`, is for sharing: a codec's own
    identity (provider, model, URL, a digest of its credentials), else the string itself
    (`python:MODULE:ATTR` names its object). Two models with one name but another endpoint,
    key or object never share a gateway, so one session's prompts never reach another's
    backend."""
    identity = getattr(model, "identity", None)
    return identity if isinstance(identity, str) else f"spec:{spec}"


class Gateways:
    """`Gateways(GatewayConfig(...), park_after=...)`: every backend gets a gateway with this
    configuration the first time a session uses it, keyed by the model's identity
    (`model_identity`): one backend has one owner of its limits, and only sessions of that
    very backend share it."""

    def __init__(
        self, config: GatewayConfig | None = None, *, park_after: float | None = None
    ) -> None:
        self.config = config or GatewayConfig()
        self.park_after = park_after
        self._by_identity: dict[str, Gateway] = {}

    def route(self, model: Model, spec: str) -> SessionRouted:
        """A model for sessions of the model string `spec`, which resolved to `model`."""
        identity = model_identity(model, spec)
        gateway = self._by_identity.get(identity)
        if gateway is None:
            gateway = self._by_identity[identity] = Gateway(model, self.config)
        return SessionRouted(gateway, self.park_after)

    def status(self, session_id: str) -> GatewayStatus | None:
        """What the session's model call is doing at a gateway here; None when it has none."""
        for gateway in self._by_identity.values():
            status = gateway.status(session_id)
            if status is not None:
                return status
        return None

    def figures(self) -> list[GatewayFigures]:
        return [gateway.figures() for gateway in self._by_identity.values()]

    async def aclose(self) -> None:
        """Close the backends' clients. The figures stay readable (a command prints them
        after its workers stop)."""
        for gateway in self._by_identity.values():
            await gateway.aclose()


def describe(figures: GatewayFigures) -> str:
    """A few lines for a person (`tether worker` prints them on exit and on SIGUSR1)."""
    f = figures
    used = ", ".join(
        f"{limit} {share:.0%}" for limit, share in f.utilisation.items() if share is not None
    )
    waits = ", ".join(
        f"{priority} n={w.count} p50 {w.p50 or 0.0:.3f} s p99 {w.p99 or 0.0:.3f} s"
        for priority, w in f.wait.items()
        if w.count
    )
    return (
        f"gateway {f.backend}: queue {f.queue_depth} (+{f.waiting_for_place} waiting for a "
        f"place), in flight {f.in_flight}/{f.concurrency_limit:g} (max {f.max_concurrency}), "
        f"circuit {f.circuit}\n"
        f"  requests {f.requests}, attempts {f.attempts}, succeeded {f.succeeded}, failed "
        f"{f.failed}, 429s {f.rate_limited}, overloaded {f.overloaded}, server errors "
        f"{f.server_errors}, retries {f.retries}, refused busy {f.rejected_busy}, cancelled "
        f"{f.cancelled}, parked {f.parked}\n"
        f"  waits: {waits or 'none yet'}\n"
        f"  utilisation: {used or 'nothing sent yet'}"
    )
