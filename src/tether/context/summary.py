"""Writing the summary that replaces the oldest turns: the messages rendered as plain text, cut
to what the summarising model can take, and one model call. It does not choose the range
(the policy does) nor record anything (the loop appends what the policy returns).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether.context.tokens import Sizer
from tether.errors import ProviderError
from tether.messages import Message, Text, ToolCall, ToolResult, Usage, canonical_json, user
from tether.providers.base import Caller, Model, ModelRequest

if TYPE_CHECKING:
    from tether.settings import ModelSettings

SUMMARY_SYSTEM = (
    "You compact an agent's conversation so that it fits the model's context window. "
    "Summarise the conversation below for the agent that will continue it: the task, what "
    "was decided, the facts learned from tool results (names, numbers, paths, ids), what was "
    "tried and failed, and what is left to do. Plain text, as short as the facts allow."
)
PART_CHARS = 2_000  # of one text, call or result in the rendered conversation


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    model: str | None = None  # None: no model wrote it (the call failed)
    usage: Usage = Usage()
    cost_usd: float | None = None


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [… {len(text) - limit:,} more characters]"


def render(messages: Sequence[Message]) -> str:
    """The conversation as lines a model can read: who said what, which calls, which results."""
    lines: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, Text):
                lines.append(f"{message.role}: {_clip(part.text, PART_CHARS)}")
            elif isinstance(part, ToolCall):
                args = part.raw_arguments or canonical_json(part.arguments)
                lines.append(f"assistant called {part.name} {_clip(args, PART_CHARS)} ({part.id})")
            elif isinstance(part, ToolResult):
                kind = "error from" if part.is_error else "result of"
                lines.append(f"{kind} {part.call_id}: {_clip(part.content, PART_CHARS)}")
    return "\n".join(lines)


def fit(text: str, sizer: Sizer, max_tokens: int) -> str:
    """`text` cut in its middle until the sizer counts at most `max_tokens`: the start holds
    the earlier summary and the task, the end the latest work."""
    for _ in range(8):
        tokens = sizer.text(text)
        if tokens <= max_tokens:
            return text
        keep = max(0, int(len(text) * max_tokens / tokens * 0.9) - 40)
        cut = len(text) - keep
        text = f"{text[: keep // 2]}\n[… {cut:,} characters left out …]\n{text[len(text) - keep // 2 :]}"
    return text[: max(0, max_tokens)]


async def summarize(
    model: Model,
    messages: Sequence[Message],
    sizer: Sizer,
    max_input: int,
    max_output: int,
    *,
    caller: Caller | None = None,
    settings: ModelSettings | None = None,
) -> Summary:
    """A summary of `messages` of at most about `max_output` tokens. When the model call fails,
    a plain note of what was removed stands in for it, so the session can go on. `settings`:
    the run's, less what concerns tools and the output cap (`settings.for_summary`); with
    reasoning, the cap also holds the thinking budget (both APIs count thinking in it)."""
    conversation = fit(render(messages), sizer, max(64, max_input - sizer.text(SUMMARY_SYSTEM)))
    cap = max_output
    if settings is not None:
        from tether.settings import for_summary

        settings = for_summary(settings)
        if settings is not None and settings.reasoning is not None:
            cap += settings.reasoning.effective_budget
    request = ModelRequest(
        model=model.name,
        system=SUMMARY_SYSTEM,
        messages=(user(conversation),),
        max_output_tokens=cap,
        caller=caller,
        settings=settings,
    )
    try:
        response = await model.complete(request)
    except (asyncio.CancelledError, KeyboardInterrupt):
        raise
    except ProviderError as exc:
        calls = sum(len(m.tool_calls) for m in messages)
        note = (
            f"{len(messages)} earlier messages with {calls} tool calls were removed; "
            f"no summary could be written ({exc.kind}: {_clip(str(exc), 200)})."
        )
        return Summary(note)
    text = fit(response.message.text.strip() or "(the summary was empty)", sizer, max_output)
    return Summary(text, model.name, response.usage, response.cost_usd)
