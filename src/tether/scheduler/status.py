"""What a session waiting on the model gateway is waiting for, as the gateway reports it:
queued for its turn, rate limited until a time, held by an open circuit, backing off before
a retry after an error, or being answered. The loop maps these to `waiting_model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tether.messages import JSONObject

StatusKind = Literal["queued", "rate_limited", "circuit_open", "retrying", "sending"]


@dataclass(frozen=True, slots=True)
class GatewayStatus:
    """`since` and `until` are on the gateway's clock (monotonic seconds; `now` says where
    that clock stood when this was read). `until` is when the wait can end at the earliest:
    the budget's refill or the circuit's reopening for `rate_limited` and `circuit_open`, the
    end of the backoff for `retrying`. `error` names the failure being retried, as
    `kind: message`. `attempt` counts from 1."""

    kind: StatusKind
    now: float
    since: float
    until: float | None = None
    attempt: int = 1
    error: str | None = None
    detail: str | None = None

    @property
    def waiting(self) -> bool:
        """True while the session waits for the gateway rather than for the model's answer."""
        return self.kind != "sending"

    @property
    def reason(self) -> str:
        """One line for a person: what the session waits for and until when."""
        left = "" if self.until is None else f" for {max(0.0, self.until - self.now):.1f} s"
        if self.kind == "queued":
            return f"queued for the model{f' ({self.detail})' if self.detail else ''}"
        if self.kind == "rate_limited":
            return f"rate limited{left}{f' ({self.detail})' if self.detail else ''}"
        if self.kind == "circuit_open":
            return f"backend failing, circuit open{left}"
        if self.kind == "retrying":
            return f"retrying after error {self.error} (attempt {self.attempt + 1}){left}"
        return "waiting for the model's answer"

    def to_json(self) -> JSONObject:
        return {
            "kind": self.kind,
            "reason": self.reason,
            "since": self.since,
            "until": self.until,
            "seconds_left": None if self.until is None else max(0.0, self.until - self.now),
            "attempt": self.attempt,
            "error": self.error,
        }
