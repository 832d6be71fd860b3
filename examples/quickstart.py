"""Quick start: the README's ten lines. One tool, one session, no API key.

    python examples/quickstart.py
    TETHER_EXAMPLE_MODEL=anthropic:claude-sonnet-4-5 python examples/quickstart.py

With `TETHER_EXAMPLE_MODEL` unset the model is scripted; set it to any model string
(`openai:gpt-4o-mini`, `ollama:llama3.2`, ...) and its usual key variable to ask a real one.
"""

from __future__ import annotations

import os
import sys

from tether import Agent, Limits, tool
from tether.testing import ScriptedModel, call


@tool(effect="read")
def forecast(city: str) -> str:
    """Saturday's forecast for a city."""
    return {"Lisbon": "sunny, 22 °C"}.get(city, "unknown")


def main() -> int:
    script = ScriptedModel([call("forecast", city="Lisbon"), "Picnic in Lisbon: sunny, 22 °C."])
    model = os.environ.get("TETHER_EXAMPLE_MODEL") or script
    agent = Agent(model, tools=[forecast], store="memory:", limits=Limits(max_steps=10))
    result = agent.run_sync("Where should we have a picnic on Saturday? Lisbon, perhaps?")
    print(f"answer: {result.output}")
    print(f"stop reason: {result.stop_reason}, state: {result.state}, steps: {result.steps}")
    print(f"usage: {result.usage}, cost: {result.cost_usd}")
    return 0 if result.stop_reason == "end_turn" else 1


if __name__ == "__main__":
    sys.exit(main())
