"""The session the tracing tests trace: two tool steps, one retried model call and a
sub-agent that makes a tool call of its own."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tether import Agent, tool
from tether.errors import ProviderError
from tether.messages import Message
from tether.scheduler.retry import RetryPolicy
from tether.store.base import Store
from tether.testing import Fail, ScriptedModel, call
from tether.testing.scripted import Reply


@tool(effect="read")
async def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


@tool(effect="write")
async def save(text: str) -> str:
    """Save a text."""
    return "saved"


def failing_once(reply: Reply) -> Callable[[Sequence[Message]], Reply]:
    """`reply`, after one overloaded answer (which the agent retries)."""
    calls = 0

    def answer(_: Sequence[Message]) -> Reply:
        nonlocal calls
        calls += 1
        return (
            Fail(ProviderError("overloaded", status=529, retryable=True)) if calls == 1 else reply
        )

    return answer


def agent(store: Store) -> Agent:
    researcher = Agent(
        ScriptedModel([call("lookup", q="deep"), "the researcher's answer"]),
        tools=[lookup],
        name="researcher",
    )
    model = ScriptedModel(
        [
            call("lookup", q="a"),
            failing_once(call("researcher", task="dig")),
            call("save", text="t"),
            "done",
        ]
    )
    return Agent(
        model,
        tools=[lookup, save, researcher.as_tool()],
        store=store,
        retry=RetryPolicy(base_delay=0.01),
    )
