"""Fork and rewind: a two-turn conversation branched three ways, its log shared, not copied.

    python examples/fork.py
    TETHER_EXAMPLE_MODEL=anthropic:claude-sonnet-4-5 python examples/fork.py

Turn 2 is run again from its message, once as it was (the child sends the parent's request,
byte for byte) and once with another system prompt; then the conversation is rewound to the
end of turn 1 and goes elsewhere. The parent is never changed, and each child's counters are
its own work. With `TETHER_EXAMPLE_MODEL` set, every agent asks that model instead.
"""

from __future__ import annotations

import asyncio
import os
import sys

from tether import Agent, Limits, tool
from tether.events import ModelRequested
from tether.session.fork import ForkChanges, ForkPoint, fork
from tether.store import MemoryStore
from tether.store.catalog import CatalogQuery
from tether.testing import ScriptedModel, call
from tether.testing.scripted import Reply

TERSE = "Answer in three words at most."


@tool(effect="read")
def forecast(city: str) -> str:
    """Saturday's forecast for a city."""
    return {"Lisbon": "sunny, 22 °C", "Porto": "rain, 14 °C", "Faro": "windy, 19 °C"}.get(
        city, "unknown"
    )


def model(*turns: tuple[str, str]) -> ScriptedModel | str:
    """A script that answers each turn, a (city, answer), after a forecast call for the city;
    or the real model `TETHER_EXAMPLE_MODEL` names."""
    real = os.environ.get("TETHER_EXAMPLE_MODEL")
    script: list[Reply] = []
    for city, answer in turns:
        script += [call("forecast", city=city), answer]
    return real or ScriptedModel(script)


async def first_request(store: MemoryStore, session_id: str, after_seq: int) -> str:
    """The request hash of the session's first model call after `after_seq`."""
    events = await store.read(session_id, after_seq)
    return next(e.payload.request_hash for e in events if isinstance(e.payload, ModelRequested))


async def main() -> int:
    store = MemoryStore()
    limits = Limits(max_steps=10)

    def agent(script: ScriptedModel | str, system: str | None = None) -> Agent:
        return Agent(script, tools=[forecast], system=system, store=store, limits=limits)

    chat = agent(model(("Lisbon", "Lisbon: sunny, 22 °C."), ("Porto", "Porto: rain, 14 °C.")))
    parent = (await chat.run("Saturday's weather in Lisbon?")).session_id
    await chat.run("And in Porto?", session_id=parent)
    print(f"parent {parent}: {await store.last_seq(parent)} events")

    # Turn 2 again, nothing changed: the child sends the parent's request, byte for byte.
    again = await fork(store, parent, ForkPoint(turn=2))
    await chat.resume(again.session_id)
    theirs = await first_request(store, parent, again.at)
    same = await first_request(store, again.session_id, again.at) == theirs
    print(f"turn 2 again ({again.session_id}): the parent's request hash: {same}")

    # Turn 2 again with another system prompt: the child records it and runs with it.
    changed = await fork(store, parent, ForkPoint(turn=2), changes=ForkChanges(system=TERSE))
    terse = agent(model(("Lisbon", "Sunny, 22 °C."), ("Porto", "Rainy, 14 °C.")), TERSE)
    answer = await terse.resume(changed.session_id)
    print(f"turn 2, terse ({changed.session_id}): {answer.output}")

    # Rewound to the end of turn 1, and somewhere else from there.
    back = await fork(store, parent, ForkPoint(after_turn=1), kind="rewind")
    faro = agent(model(("Lisbon", "Lisbon: sunny."), ("Faro", "Faro: windy, 19 °C.")))
    elsewhere = await faro.run("What about Faro instead?", session_id=back.session_id)
    print(f"rewound to seq {back.at} ({back.session_id}): {elsewhere.output}")
    kept = await store.last_seq(parent)
    print(f"the parent keeps its seqs {back.at + 1}-{back.parent_last_seq}: {kept} events")

    view = await chat.view(parent)
    print(
        f"counters: the parent {view.steps} steps, the rewound child {elsewhere.steps} of its own"
    )
    forks = await store.catalog(CatalogQuery(parent=parent))
    print(f"forks of the parent: {len(forks)}")
    for each in (chat, terse, faro):
        await each.close()
    return 0 if same and len(forks) == 3 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
