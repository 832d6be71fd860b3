"""Models, tools and checks for the experiment tests, importable by `MODULE:ATTR` (the
command's spec names them, with `tests/` on PYTHONPATH). Models are the only doubles:
the tools fail at set rates from seeded generators, as a flaky service would."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
from collections.abc import Sequence

from tether import Agent, RunResult
from tether.events import Event, SessionCreated, UserMessage, format_time
from tether.messages import JSONObject, Message, ToolResult, user
from tether.session.log import new_event_id, new_session_id
from tether.store.base import Store
from tether.testing import ScriptedModel, call
from tether.testing.scripted import Hang, Reply
from tether.tools.base import Tool, make_tool


def flaky(rate: float, seed: int) -> Tool:
    """`fetch`, which answers "ok" with probability `rate` and "broken" otherwise."""
    rng = random.Random(seed)

    def fetch() -> str:
        """Fetch the answer."""
        return "ok" if rng.random() < rate else "broken"

    return make_tool(fetch, effect="read")


def expected_passes(rate: float, seed: int, runs: int) -> int:
    """How many of `runs` calls of `flaky(rate, seed)` answer "ok", whatever their order."""
    rng = random.Random(seed)
    return sum(rng.random() < rate for _ in range(runs))


def say_what_fetch_said(messages: Sequence[Message]) -> Reply:
    results = [p for p in messages[-1].parts if isinstance(p, ToolResult)]
    return results[0].content if results else "nothing fetched"


def fetcher(price: tuple[float, float] | None = None) -> ScriptedModel:
    """Calls `fetch`, then answers with what it said."""
    return ScriptedModel([call("fetch"), say_what_fetch_said], price_per_million=price)


def said_ok(result: RunResult) -> bool:
    return result.output == "ok"


def always(result: RunResult) -> bool:
    return True


def half_marks(result: RunResult) -> float:
    return 0.5


def raises(result: RunResult) -> bool:
    raise ValueError("the check has a bug")


def agent_pair(
    store: Store, rates: tuple[float, float], seeds: tuple[int, int]
) -> dict[str, Agent]:
    """Variants `a` and `b`: the same model, each with its own flaky `fetch`."""
    return {
        name: Agent(fetcher(), tools=[flaky(rate, seed)], store=store)
        for name, rate, seed in zip("ab", rates, seeds, strict=True)
    }


# For the command: two variants of one flaky service, at 0.9 and 0.5.
reliable = [flaky(0.9, 1)]
unreliable = [flaky(0.5, 2)]
model = fetcher

# Answers "done" at once, unless $EXPERIMENT_HANG_AFTER is set: then the model calls past
# that many (in this process, over all variants) hang until the process is killed.
asked = itertools.count()


def answer_or_hang(messages: Sequence[Message]) -> Reply:
    limit = os.environ.get("EXPERIMENT_HANG_AFTER")
    if limit is not None and next(asked) >= int(limit):
        return Hang()
    return "done"


def stalling() -> ScriptedModel:
    return ScriptedModel([answer_or_hang], price_per_million=(3.0, 15.0))


async def fill(
    store: Store, count: int, tenant: str = "acme", tag: JSONObject | None = None
) -> None:
    """`count` sessions of `tenant` that have a task and nothing more, as a store holds
    sessions of other work (with `tag`: tagged as an experiment's runs are); appended a few
    at once, as concurrent writers do."""
    metadata: JSONObject = (
        {"tenant": tenant} if tag is None else {"tenant": tenant, "experiment": tag}
    )
    stamp = format_time(time.time())

    async def one() -> None:
        sid = new_session_id()
        await store.append(
            sid,
            [
                Event(sid, 1, new_event_id(), stamp, SessionCreated("scripted", metadata=metadata)),
                Event(sid, 2, new_event_id(), stamp, UserMessage(user("other work"))),
            ],
            0,
        )

    for done in range(0, count, 16):
        await asyncio.gather(*(one() for _ in range(min(16, count - done))))
