"""Writes the golden logs. Run by hand only when a change to the fold is intended:

    .venv/bin/python tests/golden/make_golden.py

The committed files are the contract: logs written by older versions must still fold to
the same transcript, so a schema change adds new golden logs and keeps the old ones.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tether import Agent, Limits, fold, tool
from tether.demo import demo_model, tools
from tether.errors import RateLimited
from tether.events import Event
from tether.session.fork import ForkChanges, fork
from tether.store import MemoryStore
from tether.testing import Fail, ScriptedModel, Truncated, call
from tether.tools import Tool

HERE = Path(__file__).parent


@tool(effect="write", needs_approval=True)
def transfer(amount: int, to: str) -> str:
    """Move money."""
    return f"sent {amount} to {to}"


@tool(effect="read")
def lookup(key: str) -> str:
    """Look a key up."""
    return {"a": "alpha"}.get(key, "")


def _subagents() -> tuple[ScriptedModel, list[Tool], str, Limits]:
    """Schema 3: a parent that asks two sub-agents at once, each of which calls a tool."""
    researcher = Agent(
        ScriptedModel(
            [
                lambda messages: call("lookup", key=messages[0].text),
                lambda messages: f"found {messages[-1].tool_results[0].content!r}",
            ]
        ),
        name="researcher",
        tools=[lookup],
        system="Research one key.",
        retry=None,
    )
    parent = ScriptedModel(
        [
            [call("researcher", task="a"), call("researcher", task="b")],
            lambda messages: "; ".join(r.content for r in messages[-1].tool_results),
        ]
    )
    return parent, [researcher.as_tool()], "look up a and b", Limits()


SCENARIOS = {
    "demo": (demo_model(), tools, "Where should we picnic?", Limits()),
    "turn_limit": (
        ScriptedModel([call("lookup", key="a")], repeat_last=True),
        [lookup],
        "loop",
        Limits(max_steps=3),
    ),
    "approval": (
        ScriptedModel([[call("transfer", amount=5, to="bob"), call("lookup", key="a")], "done"]),
        [transfer, lookup],
        "pay bob",
        Limits(),
    ),
    "output_limit": (ScriptedModel([Truncated("I will call")]), [lookup], "go", Limits()),
    "provider_error": (
        ScriptedModel([Fail(RateLimited("slow down", status=429))]),
        [],
        "hi",
        Limits(),
    ),
    "subagents": _subagents(),
}


async def _forked() -> list[Event]:
    """`session.forked` (schema 3, additive): a session waiting on an approval, forked with
    its open calls answered, another model and system prompt and a new message; the child's
    whole log as its store reads it (the parent's prefix under the child's id)."""
    store = MemoryStore()
    parent = await Agent(
        SCENARIOS["approval"][0],
        tools=[transfer, lookup],
        store=store,
        system="Be brief.",
        retry=None,
    ).run("pay bob")
    changes = ForkChanges(model="scripted-b", system="Be careful.")
    child = await fork(
        store, parent.session_id, changes=changes, message="just look a up", open_calls="cancel"
    )
    # A scripted model answers by the assistant messages already sent: the child's is the 2nd.
    model = ScriptedModel(["(the parent's)", "done"], name="scripted-b")
    await Agent(model, tools=[lookup], store=store, system="Be careful.", retry=None).resume(
        child.session_id
    )
    return await store.read(child.session_id)


async def _scenario(name: str) -> list[Event]:
    if name == "forked":
        return await _forked()
    model, tool_list, task, limits = SCENARIOS[name]
    store = MemoryStore()
    # retry=None: each scenario's log is its first attempt's (a failure ends the turn).
    result = await Agent(
        model, tools=tool_list, store=store, limits=limits, system="Be brief.", retry=None
    ).run(task)
    return await store.read(result.session_id)


async def main() -> None:
    force = "--force" in sys.argv
    for name in [*SCENARIOS, "forked"]:
        if (HERE / f"{name}.events.jsonl").exists() and not force:
            print(name, "kept: a committed golden log is the contract (--force to rewrite)")
            continue
        events = await _scenario(name)
        (HERE / f"{name}.events.jsonl").write_text("".join(e.canonical() + "\n" for e in events))
        transcript, view = fold(events)
        (HERE / f"{name}.transcript.json").write_text(transcript.canonical() + "\n")
        (HERE / f"{name}.view.json").write_text(
            json.dumps(view.to_json(), indent=1, ensure_ascii=False) + "\n"
        )
        threads = sorted({e.thread for e in events if e.thread})
        if threads:  # each sub-agent thread's own transcript, as the fold gives it
            body = {t: json.loads(fold(events, t)[0].canonical()) for t in threads}
            (HERE / f"{name}.threads.json").write_text(
                json.dumps(body, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
            )
        print(name, len(events), "events")


if __name__ == "__main__":
    asyncio.run(main())
