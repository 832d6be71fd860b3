"""What a context policy sees before each request, what it returns, and the checks every
returned event must pass before it is appended. Pure: nothing here calls a model or a store.
"""

from __future__ import annotations

import bisect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether.context.tokens import Sizer
from tether.errors import UsageError
from tether.events import ContextCompacted
from tether.messages import Message
from tether.providers.base import Caller

if TYPE_CHECKING:
    from tether.settings import ModelSettings


@dataclass(frozen=True, slots=True)
class ContextView:
    """The transcript of the next request and its size.

    `seqs[i]` is the seq of the event `messages[i]` came from: a `context.compacted` names
    messages by that range. `estimate` is the request's input tokens; `budget` what the input
    may use (the window less the output reserve), None when the window is unknown.
    `overflowed` is set when the provider has just refused the request as too large: a
    policy that returns nothing then ends the turn with that error."""

    session_id: str
    model: str
    system: str | None
    messages: Sequence[Message]
    seqs: Sequence[int]
    estimate: int
    budget: int | None
    sizer: Sizer
    overflowed: bool = False
    # The session's caller, for the policy's own model calls (a summary) to be its too.
    caller: Caller | None = None
    # The run's settings (`ModelSettings`), which its summary calls are made with too.
    settings: ModelSettings | None = None

    def first_user_index(self) -> int:
        """The first user message: kept in every request, like the system prompt."""
        for i, message in enumerate(self.messages):
            if message.role == "user":
                return i
        return -1

    def index_of_seq(self, seq: int) -> int:
        return bisect.bisect_left(self.seqs, seq)


# A policy returns the events to append before the request (none: leave it as it is).
ContextPolicy = Callable[
    [ContextView], Awaitable[Sequence[ContextCompacted]] | Sequence[ContextCompacted]
]


def check_events(view: ContextView, events: Sequence[ContextCompacted]) -> None:
    """Refuse an event that would break a request: a summary range holding the first user
    message, or one that ends between a call and its result. (A cleared result keeps its
    call, so clearing is always safe.) Checking each event against the view before the batch
    is sound: compaction keeps the seqs of the messages it does not replace."""
    first_user = view.first_user_index() if events else -1
    for event in events:
        if not isinstance(event, ContextCompacted):
            raise UsageError(f"a context policy may only return context.compacted, not {event!r}")
        if event.first_seq > event.last_seq:
            raise UsageError(
                f"context.compacted range {event.first_seq}..{event.last_seq} is empty"
            )
        if event.summary is None:
            continue
        lo = view.index_of_seq(event.first_seq)
        hi = bisect.bisect_right(view.seqs, event.last_seq)
        if lo <= first_user < hi:
            raise UsageError("a compaction may not replace the first user message")
        if hi < len(view.messages) and view.messages[hi].role == "tool":
            raise UsageError(
                f"a compaction ending at seq {event.last_seq} would part calls from their results"
            )
