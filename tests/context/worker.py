"""A process of its own for the resume tests: `python -m context.worker DB OUT MODE [ARG]`.

`start CRASH_AT`: a new session; the process dies (exit 17) while the model holds request
CRASH_AT. `resume SESSION`: continue the session from its log. `rebuild SESSION`: fold the
log and write the request each `model.requested` stands for. Every request body (neutral
and as the OpenAI Chat codec encodes it) goes to OUT, one JSON line each.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from tether import Agent
from tether.context import DefaultPolicy
from tether.events import Event, ModelRequested
from tether.fold import Folder
from tether.limits import Limits
from tether.messages import canonical_json, user
from tether.providers.base import Caller, ModelRequest, ModelResponse
from tether.providers.openai_chat import encode_request
from tether.store.sqlite import SQLiteStore
from tether.tools.base import Toolbox

from .support import FIRST, SYSTEM, WindowedModel, fetch_tool, request_body

WINDOW, STEPS, OUTPUT_CAP, MAX_OUTPUT = 16_000, 120, 6_000, 1_000
CRASH_EXIT = 17


def record(out: Path, request: ModelRequest) -> None:
    wire = canonical_json(encode_request("gpt-4o", request))
    with out.open("a") as f:
        f.write(json.dumps({"neutral": request_body(request), "wire": wire}) + "\n")


class RecordingModel(WindowedModel):
    out: Path = Path()
    crash_at: int | None = None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        step_request = bool(request.tools)
        if step_request:
            record(self.out, request)
        response = await super().complete(request)
        if step_request and self.crash_at is not None and len(self.bodies) == self.crash_at:
            os._exit(CRASH_EXIT)  # a crash while the model holds the request
        return response


def agent(db: str, out: Path, crash_at: int | None, session_file: Path | None) -> Agent:
    model = RecordingModel(window=WINDOW, steps=STEPS, first=user(FIRST))
    model.out, model.crash_at = out, crash_at

    def note_session(event: Event) -> None:
        if session_file is not None and event.seq == 1:
            session_file.write_text(event.session_id)

    return Agent(
        model,
        tools=[fetch_tool(OUTPUT_CAP)],
        system=SYSTEM,
        limits=Limits(max_steps=STEPS + 10, max_output_tokens=MAX_OUTPUT),
        store=SQLiteStore(db),
        context=DefaultPolicy(window=WINDOW),
        on_event=note_session,
        # A crashed worker's lease runs out soon, so the resuming process need not wait long.
        lease_ttl=2.0,
        watch_interval=0.2,
    )


async def rebuild(db: str, session_id: str, out: Path) -> None:
    store = SQLiteStore(db)
    specs = Toolbox([fetch_tool(OUTPUT_CAP)]).specs
    folder = Folder()
    for event in await store.read(session_id):
        if isinstance(event.payload, ModelRequested):
            request = ModelRequest(
                model=event.payload.model,
                system=folder.system,
                messages=tuple(folder.messages),
                tools=specs,
                max_output_tokens=MAX_OUTPUT,
                caller=Caller(session_id),  # every run names its session (a cache key)
            )
            record(out, request)
        folder.apply(event)
    await store.close()


async def main(db: str, out: Path, mode: str, arg: str) -> None:
    if mode == "start":
        a = agent(db, out, int(arg), out.with_suffix(".session"))
        await a.run(FIRST)
    elif mode == "resume":
        a = agent(db, out, None, None)
        result = await a.resume(arg, lease_wait=60.0)
        print(json.dumps({"stop_reason": result.stop_reason, "output": result.output}))
    else:
        await rebuild(db, arg, out)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]))
