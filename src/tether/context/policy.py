"""The default context policy: when the next request would pass `threshold` of its budget,
bring it down to `target` by clearing the oldest tool results, then, if that is not enough,
by summarising the oldest turns with a model call. It returns events; it changes nothing.

Kept in every request: the system prompt, the first user message, the latest assistant
message with its results. A range replaced by a summary never ends between a call and its
result; a cleared result keeps its call and says what was cleared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tether.context.summary import summarize
from tether.context.view import ContextView
from tether.errors import UsageError
from tether.events import ContextCompacted
from tether.fold import CLEARED_PREFIX, cleared_marker, summary_message
from tether.messages import Message, ToolResult
from tether.providers.base import Model


@dataclass(slots=True)
class _Draft:
    """The transcript as the events decided so far would leave it, with per-message tokens."""

    view: ContextView
    messages: list[Message]
    tokens: list[int]
    fixed: int  # system, tools and framing: what no event can change
    live: list[int] = field(default_factory=list)  # indices of messages still in the request

    @property
    def total(self) -> int:
        return self.fixed + sum(self.tokens[i] for i in self.live)


@dataclass(frozen=True, slots=True)
class DefaultPolicy:
    """`threshold` and `target` are fractions of the budget (the window less the output
    reserve). `keep_recent` results are cleared only when nothing else is left to clear.
    `window` overrides the catalog's; `summarizer` writes summaries (default: the agent's
    model); `summary_tokens` caps a summary."""

    threshold: float = 0.8
    target: float = 0.5
    keep_recent: int = 3
    window: int | None = None
    summarizer: Model | None = None
    summary_tokens: int = 1_024

    def __post_init__(self) -> None:
        if not 0 < self.target <= self.threshold <= 1:
            raise UsageError(
                f"DefaultPolicy needs 0 < target <= threshold <= 1, not target={self.target}, "
                f"threshold={self.threshold}"
            )
        if self.keep_recent < 0 or self.summary_tokens <= 0:
            raise UsageError("DefaultPolicy.keep_recent must be >= 0 and summary_tokens > 0")

    async def __call__(self, view: ContextView) -> list[ContextCompacted]:
        if view.budget is None and not view.overflowed:
            return []
        limit = int(self.threshold * view.budget) if view.budget is not None else view.estimate
        if not view.overflowed and view.estimate <= limit:
            return []
        goal = int(self.target * view.budget) if view.budget is not None else view.estimate
        if view.overflowed:  # the provider counts more than we do: shrink by at least target
            goal = limit = min(goal, int(self.target * view.estimate))
        draft = _draft(view)
        start = view.first_user_index() + 1
        # Each step goes down to `goal`, so the next is needed only much later; a later step
        # is taken only while the request is still over `limit`.
        events = _clear(draft, start, goal, self.keep_recent)
        if draft.total > limit:
            events += await self._compact(draft, start, goal)
        if draft.total > limit:  # the latest turns alone are too large: clear them too
            events += _clear(draft, start, goal, 0)
        return events

    async def _compact(self, draft: _Draft, start: int, goal: int) -> list[ContextCompacted]:
        view = draft.view
        allowance = max(32, min(self.summary_tokens, goal // 4))
        end = _range_end(draft, start, goal - allowance)
        if end is None or self.summarizer is None:
            return []
        replaced = [draft.messages[i] for i in range(start, end)]
        budget = view.budget if view.budget is not None else goal
        summary = await summarize(
            self.summarizer,
            replaced,
            view.sizer,
            max(budget // 2, allowance),
            allowance,
            caller=view.caller,
            settings=view.settings,
        )
        message = summary_message(summary.text, end - start)
        draft.messages[start] = message
        draft.tokens[start] = view.sizer.message(message)
        draft.live = [i for i in draft.live if not start < i < end]
        return [
            ContextCompacted(
                view.seqs[start],
                view.seqs[end - 1],
                summary.text,
                (),
                summary.model,
                summary.usage,
                summary.cost_usd,
            )
        ]


def _draft(view: ContextView) -> _Draft:
    tokens = [view.sizer.message(m) for m in view.messages]
    fixed = max(0, view.estimate - sum(tokens))
    return _Draft(view, list(view.messages), tokens, fixed, list(range(len(view.messages))))


def _clear(draft: _Draft, start: int, goal: int, keep_recent: int) -> list[ContextCompacted]:
    """Clear results oldest first, never the `keep_recent` latest, until the draft is at `goal`."""
    sizer = draft.view.sizer
    candidates = [
        (i, r)
        for i in draft.live
        if i >= start and draft.messages[i].role == "tool"
        for r in draft.messages[i].tool_results
        if not r.content.startswith(CLEARED_PREFIX)
    ]
    if keep_recent:
        candidates = candidates[:-keep_recent]
    total = draft.total
    chosen: list[tuple[int, ToolResult]] = []
    for i, result in candidates:
        if total <= goal:
            break
        saved = sizer.text(result.content) - sizer.text(cleared_marker(result, "tool"))
        if saved > 0:
            chosen.append((i, result))
            total -= saved
    if not chosen:
        return []
    ids = {r.call_id for _, r in chosen}
    for i in sorted({i for i, _ in chosen}):
        draft.messages[i] = _cleared(draft.messages, i, ids)
        draft.tokens[i] = sizer.message(draft.messages[i])
    seqs = draft.view.seqs
    return [
        ContextCompacted(
            seqs[chosen[0][0]], seqs[chosen[-1][0]], None, tuple(r.call_id for _, r in chosen)
        )
    ]


def _cleared(messages: Sequence[Message], index: int, ids: set[str]) -> Message:
    """The message as the fold will hold it once the results `ids` are cleared."""
    names = {c.id: c.name for c in messages[index - 1].tool_calls} if index else {}
    parts = tuple(
        ToolResult(p.call_id, cleared_marker(p, names.get(p.call_id, "tool")), p.is_error)
        if isinstance(p, ToolResult) and p.call_id in ids
        else p
        for p in messages[index].parts
    )
    return Message("tool", parts)


def _range_end(draft: _Draft, start: int, goal: int) -> int | None:
    """The first message kept after a summary of `start`..end-1: the earliest end that brings
    the draft under `goal`, else the latest possible. An end is possible where the message
    there is not a result (calls stay with their results) and the latest assistant message
    is kept. None when there is nothing to summarise."""
    live = [i for i in draft.live if i >= start]
    last_assistant = max((i for i in live if draft.messages[i].role == "assistant"), default=-1)
    head = draft.fixed + sum(draft.tokens[i] for i in draft.live if i < start)
    tail = sum(draft.tokens[i] for i in live)
    best: int | None = None
    for k, i in enumerate(live):
        if k == 0:
            tail -= draft.tokens[i]
            continue
        if i > last_assistant:
            break
        if draft.messages[i].role != "tool":
            best = i
            if head + tail <= goal:
                return best
        tail -= draft.tokens[i]
    return best
