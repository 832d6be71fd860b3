"""Sub-agent scenarios shared by the thread tests and the crash-point worker: a parent that
fans out to three researchers at once, each calling a `write` tool that records its effect
in a file (so a repeat is visible across processes)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tether import Agent, Limits, tool
from tether.messages import Message
from tether.store import Store
from tether.testing import ScriptedModel, call
from tether.tools import Tool

PRICE = (1.0, 2.0)  # dollars per million input and output tokens: cost is known


def _task(messages: Sequence[Message]) -> str:
    return messages[0].text


def researcher(effects: Path | None = None, *, price: tuple[float, float] = PRICE) -> Agent:
    """Calls `note(topic)` once (a write), then answers with what it noted."""

    @tool(effect="write")
    def note(topic: str) -> str:
        """Write a note about a topic."""
        if effects is not None:
            with effects.open("a") as f:
                f.write(f"{topic}\n")
        return f"noted {topic}"

    model = ScriptedModel(
        [
            lambda messages: call("note", topic=_task(messages)),
            lambda messages: f"report: {messages[-1].tool_results[0].content}",
        ],
        price_per_million=price,
    )
    return Agent(model, name="researcher", tools=[note], system="Research one topic.")


def fan_out_model(topics: Sequence[str] = ("a", "b", "c")) -> ScriptedModel:
    """Asks one researcher per topic in one answer, then joins their results."""
    return ScriptedModel(
        [
            [call("researcher", task=t) for t in topics],
            lambda messages: " | ".join(r.content for r in messages[-1].tool_results),
        ],
        price_per_million=PRICE,
    )


def fan_out_agent(
    store: Store, effects: Path | None = None, *, limits: Limits | None = None
) -> Agent:
    sub: Tool = researcher(effects).as_tool()
    return Agent(fan_out_model(), tools=[sub], store=store, limits=limits, retry=None)
