"""An experiment: one task run twenty times, each run a session of its own, and a report of
how the runs ended and what they cost, with intervals. One run of a model says little.

    python examples/experiment.py
    TETHER_EXAMPLE_MODEL=openai:gpt-4o-mini python examples/experiment.py

The scripted model here varies the way a real one does (seeded, so the report is the same
each time): it usually looks the forecast up, sometimes answers from memory, and now and
then keeps asking for the forecast until the step limit stops the turn. `tether experiment TASK --model MODEL --runs 20` does the same from the command line.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import Sequence

from tether import Agent, Limits, Message, tool
from tether.experiment import render_report, run_experiment
from tether.testing import ScriptedModel, call
from tether.testing.scripted import Reply

rng = random.Random(7)


@tool(effect="read")
def forecast(city: str) -> str:
    """Saturday's forecast for a city."""
    return {"Lisbon": "sunny, 22 °C"}.get(city, "unknown")


def first_step(messages: Sequence[Message]) -> Reply:
    if rng.random() < 0.75:
        return call("forecast", city="Lisbon")
    return "Lisbon is usually sunny in spring."


def next_step(messages: Sequence[Message]) -> Reply:
    if rng.random() < 0.2:
        return call("forecast", city="Lisbon")  # once more, to be sure
    return "Lisbon: sunny, 22 °C on Saturday."


async def main() -> int:
    script = ScriptedModel(
        [first_step, next_step], repeat_last=True, delay=0.01, price_per_million=(3.0, 15.0)
    )
    agent = Agent(
        os.environ.get("TETHER_EXAMPLE_MODEL") or script,
        tools=[forecast],
        store="memory:",
        limits=Limits(max_steps=3),
    )
    try:
        # One run at a time keeps the seeded draws in order, so the report is the same each
        # time; against a real model, raise `concurrency` (4 by default).
        report = await run_experiment(
            agent, "Saturday's weather in Lisbon?", runs=20, concurrency=1
        )
    finally:
        await agent.close()
    print(render_report(report))
    outcomes = report.outcomes()
    return 1 if "error" in outcomes else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
