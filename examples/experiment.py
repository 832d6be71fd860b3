"""Experiments: one task run twenty times, each run a session of its own, and a report of how
the runs ended and what they cost, with intervals; then two variants of an agent compared
on a checked task, with a paired interval and a verdict. One run of a model says little.

    python examples/experiment.py
    TETHER_EXAMPLE_MODEL=openai:gpt-4o-mini python examples/experiment.py

The scripted models here vary the way a real one does (seeded, so the report is the same
each time): it usually looks the forecast up, sometimes answers from memory, and now and
then keeps asking for the forecast until the step limit stops the turn. `tether experiment
TASK --model MODEL --runs 20` does the first part from the command line, and `tether
experiment run SPEC.toml` the second (docs/how-to/experiments.md).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import Sequence

from tether import Agent, Limits, Message, RunResult, tool
from tether.experiment import Task, render_comparison, render_report, run_experiment, run_matrix
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call
from tether.testing.scripted import Reply

rng = random.Random(7)
TASK = "Saturday's weather in Lisbon?"


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


def looks_up(share: float, seed: int) -> ScriptedModel:
    """A model that looks the forecast up in `share` of its runs, else answers from memory."""
    draws = random.Random(seed)

    def first(messages: Sequence[Message]) -> Reply:
        if draws.random() < share:
            return call("forecast", city="Lisbon")
        return "Lisbon is usually sunny in spring."

    return ScriptedModel([first, "Lisbon: sunny, 22 °C on Saturday."], delay=0.001)


def gives_the_forecast(result: RunResult) -> bool:
    """The check: the answer holds the forecast's temperature."""
    return "22 °C" in result.output


async def main() -> int:
    script = ScriptedModel(
        [first_step, next_step], repeat_last=True, delay=0.01, price_per_million=(3.0, 15.0)
    )
    real = os.environ.get("TETHER_EXAMPLE_MODEL")
    agent = Agent(real or script, tools=[forecast], store="memory:", limits=Limits(max_steps=3))
    try:
        # One run at a time keeps the seeded draws in order, so the report is the same each
        # time; against a real model, raise `concurrency` (4 by default).
        report = await run_experiment(agent, TASK, runs=20, concurrency=1)
    finally:
        await agent.close()
    print(render_report(report))

    # Two variants, compared: does telling the model to check make it give the forecast?
    store = MemoryStore()
    told = "Always look the forecast up."
    variants = {
        "told": Agent(real or looks_up(0.95, 1), tools=[forecast], system=told, store=store),
        "plain": Agent(real or looks_up(0.5, 2), tools=[forecast], store=store),
    }
    try:
        matrix = await run_matrix(
            variants, [Task(TASK, check=gives_the_forecast)], runs=30, concurrency=1, seed=1
        )
    finally:
        await store.close()
    print()
    print(render_comparison(matrix.compare("told", "plain")))
    return 1 if "error" in report.outcomes() else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
