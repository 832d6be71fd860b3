"""Limits of a run and the checks made before each model request.

Owns `Limits`, the input-token estimate and the decision to stop before a request. It
reads only a `Folder`'s counters, so the check costs the same at step 1,000 as at step 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tether.errors import UsageError
from tether.messages import JSONObject
from tether.state import SessionView

# A custom stop condition: the view after each step in, a stop reason's name or None out.
StopCondition = Callable[[SessionView], str | None]

CHARS_PER_TOKEN = 4  # a coarse estimate; provider codecs correct it with reported usage


@dataclass(frozen=True, slots=True)
class Limits:
    """`max_steps`: model calls in one turn. `max_tokens` and `max_cost_usd`: over the
    session, checked with an estimate of the next request's input so it stops before it
    overspends. `max_seconds`: wall time of one run. `max_output_tokens`: the cap sent
    with each request."""

    max_steps: int | None = 50
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_seconds: float | None = None
    max_output_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_tokens", "max_cost_usd", "max_seconds", "max_output_tokens"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise UsageError(f"Limits.{name} must be positive or None, not {value!r}")

    def to_json(self) -> JSONObject:
        return {
            "max_steps": self.max_steps,
            "max_tokens": self.max_tokens,
            "max_cost_usd": self.max_cost_usd,
            "max_seconds": self.max_seconds,
            "max_output_tokens": self.max_output_tokens,
        }


def estimate_input_tokens(transcript_chars: int, system: str | None, schema_chars: int) -> int:
    return (transcript_chars + len(system or "") + schema_chars) // CHARS_PER_TOKEN + 1


@dataclass(frozen=True, slots=True)
class Stop:
    reason: str
    detail: str | None = None


def check_before_request(
    limits: Limits,
    *,
    turn_steps: int,
    tokens_used: int,
    cost_usd: float | None,
    cost_known: bool,
    input_estimate: int,
    input_cost_estimate: float | None,
    elapsed_seconds: float,
) -> Stop | None:
    if limits.max_steps is not None and turn_steps >= limits.max_steps:
        return Stop(
            "turn_limit", f"{turn_steps} model calls in this turn (max_steps={limits.max_steps})"
        )
    if limits.max_seconds is not None and elapsed_seconds >= limits.max_seconds:
        return Stop(
            "time_limit", f"{elapsed_seconds:.3f} s elapsed (max_seconds={limits.max_seconds:g})"
        )
    if limits.max_tokens is not None and tokens_used + input_estimate > limits.max_tokens:
        return Stop(
            "budget",
            f"{tokens_used} tokens used and about {input_estimate} more to send "
            f"would pass max_tokens={limits.max_tokens}",
        )
    if limits.max_cost_usd is not None:
        if not cost_known:
            return Stop("budget", "the model's price is unknown, so max_cost_usd cannot be kept")
        projected = (cost_usd or 0.0) + (input_cost_estimate or 0.0)
        if projected > limits.max_cost_usd:
            return Stop(
                "budget",
                f"${cost_usd or 0.0:.6f} spent and about ${input_cost_estimate or 0.0:.6f} more "
                f"would pass max_cost_usd={limits.max_cost_usd:g}",
            )
    return None
