"""The seam between the loop and a model: a neutral request in, a neutral response out.

Owns `ModelRequest`, `ModelResponse`, `ToolSpec` and the `Model` protocol. It does no I/O;
codecs for real wire APIs and the scripted test model implement `Model`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from tether.messages import JSONObject, Message, Usage

if TYPE_CHECKING:  # only the type: the HTTP module is not imported by the neutral seam
    from tether.errors import ProviderError
    from tether.providers.rate_limits import RateLimits
    from tether.settings import ModelSettings

StopKind = Literal["end_turn", "tool_calls", "max_tokens", "other"]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told of a tool: its name, description and JSON schema."""

    name: str
    description: str
    parameters: JSONObject


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """The final answer's shape, when the agent asks for structured output: a name and a
    JSON schema. A codec sends it as its API's JSON-schema output format."""

    name: str
    schema: JSONObject


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of a streamed answer, offered to observers and never stored. `reasoning` is
    the model's thinking as it streams (summarised, where the API summarises it)."""

    kind: Literal["text", "reasoning", "tool_input", "progress"]
    text: str
    call_id: str | None = None


DeltaObserver = Callable[[Delta], None]


class FirstDelta:
    """A delta observer that passes every delta on and notes when the first one came, in
    milliseconds after `started` (a `time.perf_counter()` reading): time to first token."""

    __slots__ = ("_observer", "_started", "elapsed_ms")

    def __init__(self, observer: DeltaObserver, started: float) -> None:
        self._observer = observer
        self._started = started
        self.elapsed_ms: float | None = None

    def __call__(self, delta: Delta) -> None:
        if self.elapsed_ms is None:
            self.elapsed_ms = round((time.perf_counter() - self._started) * 1000, 3)
        self._observer(delta)


# Told of each failed attempt that will be tried again: the error, the attempt's number
# (1-based) and the seconds until the next one. Awaited before the wait begins.
RetryObserver = Callable[["ProviderError", int, float], Awaitable[None]]


Priority = Literal["interactive", "batch"]


@dataclass(frozen=True, slots=True)
class Caller:
    """Whose request it is, for a model shared by many sessions (a runtime's gateway): its
    session, its tenant (fairness is between tenants) and its priority in the queue."""

    session_id: str
    tenant: str = "default"
    priority: Priority = "interactive"


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """`messages` is the transcript as the loop holds it; a model must not change it.
    `on_retry`: whoever retries the request (the agent, or the model gateway) reports each
    failed attempt it will try again there. `caller`: the session the request is for, when
    the runner knows it (None: a model used by one caller needs none). `settings`: how to
    sample and shape the request (`tether.ModelSettings`; None: the provider's defaults);
    `max_output_tokens` is already the tighter of the limits' cap and the settings' own
    when the loop builds the request. `output`: the final answer must be JSON of this
    schema (None: free text); a model that cannot say so natively is given a tool for it
    instead, by the loop. `live`: `on_delta` feeds a runtime's live streams, whose readers
    follow the session's log too (a worker's sessions): the answer is streamed even by a
    model built to ask for whole ones, and a failed attempt may be tried again after some
    of its output was streamed, since those readers are told of the retry by its
    `model.failed` event (an observer that reads no log is never shown a second answer
    after the start of a first)."""

    model: str
    system: str | None
    messages: Sequence[Message]
    tools: tuple[ToolSpec, ...] = ()
    max_output_tokens: int | None = None
    on_delta: DeltaObserver | None = None
    on_retry: RetryObserver | None = None
    caller: Caller | None = None
    settings: ModelSettings | None = None
    output: OutputFormat | None = None
    live: bool = False


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """One assistant message with its stop reason, usage and cost.

    `stop` is the normalised stop reason and `raw_stop_reason` the provider's own word.
    `incomplete` is true when the output limit cut the answer inside a tool call: such a
    message's calls are never executed. `cost_usd` is None when the price is unknown.
    `rate_limits` is what the answer's headers said of the budgets left, when it said any;
    the model gateway learns from it."""

    message: Message
    stop: StopKind = "end_turn"
    raw_stop_reason: str | None = None
    usage: Usage = Usage()
    cost_usd: float | None = None
    incomplete: bool = False
    response_hash: str | None = None
    rate_limits: RateLimits | None = None


@runtime_checkable
class Model(Protocol):
    """Anything that answers a `ModelRequest`. Raises `tether.errors.ProviderError` subclasses."""

    @property
    def name(self) -> str: ...

    async def complete(self, request: ModelRequest) -> ModelResponse: ...
