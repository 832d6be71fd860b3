"""Replaying a recorded session: its remainder after a fork point run again by a variant (an
`Agent`: another model, tools, limits or settings; `system` another prompt). The replay is
a fork of kind `replay` (`session/fork.py`); the messages that opened the source's later
turns are sent to it in order, each once the turn before has finished; the source's tool
results after the point are its cassette (`tools/cassette.py`). Comparing replays is
`experiment/`'s."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from tether.agent import Agent, RunResult
from tether.errors import SessionNotFound, UsageError
from tether.events import Event, SessionEnded, SessionForked, ToolFinished, TurnEnded, UserMessage
from tether.fold import Folder
from tether.messages import JSONObject, Message
from tether.session.fork import KEEP, ForkChanges, ForkPoint, fork, locate
from tether.settings import ModelSettings, check_settings, merged
from tether.state import session_outcome
from tether.store.base import Store
from tether.tools.cassette import Live, ToolCassette, check_live, recorded_calls

PAGE = 500  # events of the source read at once


@dataclass(frozen=True, slots=True)
class Replayed:
    """A replay run: the child session, where it branched off its source, how many turns it
    was to run and ran, how its last turn ended, and what the cassette did with the calls
    (`served` from the recording; `ran` live; `refused` by the `live` policy)."""

    session_id: str
    source: str
    at: int
    turns: int
    ran_turns: int
    result: RunResult[str]
    served: int
    ran: int
    refused: int


async def replay(
    agent: Agent,
    source: str,
    at: ForkPoint,
    *,
    system: str | None = KEEP,  # left out: the source's prompt
    settings: ModelSettings | None = None,
    live: Live = "reads",
    tenant: str | None = None,
    end_session: bool = True,
    session_id: str | None = None,
) -> Replayed:
    """Replay session `source` (in `agent`'s store) from `at` with `agent`'s model, tools,
    limits and metadata (merged over the source's), `system` (default: the source's) and
    `settings` (over the agent's). The open turn at the point, if any, runs first; then each
    later turn's opening message of the source (messages sent into a running turn are that
    turn's own, not sent again). A turn that does not finish (a limit, an error, a call
    awaiting approval) ends the replay there. With `end_session`, the last turn ends the
    session, as an experiment's run does.

    A fresh call that repeats a recorded one (same tool and arguments, in order, each once)
    is answered with the recorded result, which its `tool.finished` names (`replayed`);
    one that repeats none runs if `live` allows: `reads` (default) runs `read` and
    `idempotent` tools, `all` write tools too, `none` nothing; a refused call is answered
    `denied`, saying why. `tenant`: another tenant's source is not found. `UsageError`
    (nothing stored) when the point is not a commit point or nothing follows it."""
    live = check_live(live)
    store = agent.store
    seq, last = await source_point(store, source, at, tenant)
    remainder = await read_after(store, source, seq, last)
    if not any(not e.thread and not isinstance(e.payload, SessionEnded) for e in remainder):
        raise UsageError(f"session {source} has nothing after {at.describe()} to replay")
    changes = ForkChanges(
        model=agent.model.name,
        tools={t.name: t.schema_hash for t in agent.toolbox},
        limits=agent.limits.to_json(),
        metadata=_metadata(agent, settings, live, last),
        system=system,
    )
    forked = await fork(
        store,
        source,
        ForkPoint(seq=seq),
        changes=changes,
        kind="replay",
        tenant=tenant,
        session_id=session_id,
    )
    pending = forked.state == "pending"
    todo: list[Message | None] = [None] if pending else []
    todo.extend(turn_openers(remainder, pending))
    cassette = ToolCassette(recorded_calls(remainder), source=source, live=live)
    return await _run(agent, forked.session_id, seq, todo, cassette, settings, end_session)


async def resume_replay(
    agent: Agent,
    session_id: str,
    *,
    settings: ModelSettings | None = None,
    end_session: bool = True,
) -> Replayed:
    """Go on with replay `session_id` after its run stopped without finishing it (its process
    died, or handed it over): its open turn, then the source's turns it has not sent yet,
    with the cassette of the source's results the replay read (up to the source's last seq
    then) less those its log says it served, and its recorded `live` policy. A replay whose
    last turn ended unfinished (a limit, an error, an interrupt) ended there: nothing runs.
    `agent` is the variant, as for `replay`. `UsageError` for a session that is not one."""
    store = agent.store
    link = await store.fork_link(session_id)
    events = [] if link is None else await store.read(session_id)
    own = [e for e in events if link is not None and e.seq > link.at]
    forked = own[0].payload if own else None
    if not isinstance(forked, SessionForked) or forked.kind != "replay":
        raise UsageError(f"session {session_id} is not a replay")
    plan = forked.metadata.get("replay")
    plan = plan if isinstance(plan, dict) else {}
    until = plan.get("until")
    last = until if isinstance(until, int) else forked.parent_seq
    remainder = await read_after(store, forked.parent, forked.parent_seq, last)
    folder = Folder().apply_all(events[: len(events) - len(own) + 1])  # as forked
    pending = folder.turn_open
    sent = len(turn_openers(own, pending))
    folder.apply_all(own[1:])
    todo: list[Message | None] = [None] if folder.turn_open and not folder.terminal else []
    unfinished = folder.stop_reason and session_outcome(folder.stop_reason) != "completed"
    if not folder.terminal and not unfinished:
        todo.extend(turn_openers(remainder, pending)[sent:])
    used = [p.replayed for e in own if isinstance(p := e.payload, ToolFinished) and p.replayed]
    cassette = ToolCassette(
        recorded_calls(remainder),
        source=forked.parent,
        live=check_live(str(plan.get("live", "reads"))),
        used=used,
    )
    return await _run(agent, session_id, forked.parent_seq, todo, cassette, settings, end_session)


async def _run(
    agent: Agent,
    session_id: str,
    at: int,
    todo: Sequence[Message | None],
    cassette: ToolCassette,
    settings: ModelSettings | None,
    end_session: bool,
) -> Replayed:
    """Run the replay's turns in order (None: the open one), stopping at one that did not
    finish, with `agent`'s engine and `cassette`."""
    agent.store, agent.runs  # noqa: B018  (made once, shared with the copy: hand_over, close)
    runner = copy.copy(agent)
    runner.engine = dataclasses.replace(agent.engine, cassette=cassette)
    result: RunResult[str] | None = None
    ran = 0
    for i, message in enumerate(todo):
        done = await runner.run(
            message,
            session_id=session_id,
            settings=settings,
            end_session=end_session and i == len(todo) - 1,
        )
        result, ran = done, ran + 1
        if session_outcome(done.stop_reason) != "completed":
            break
    if result is None:  # nothing to run: the turn was closed and none followed
        result = RunResult.from_view(await agent.view(session_id))
    source = cassette.source
    counts = (cassette.served, cassette.ran, cassette.refused)
    return Replayed(session_id, source, at, len(todo), ran, result, *counts)


async def source_point(
    store: Store, source: str, at: ForkPoint, tenant: str | None = None
) -> tuple[int, int]:
    """The seq of `at` in session `source` and the session's last seq: `SessionNotFound` for
    an unknown session or another tenant's, `UsageError` for a point it does not have."""
    row = await store.catalog_row(source)
    if row is None or (tenant is not None and row.tenant != tenant):
        raise SessionNotFound(f"no session {source}")
    return await locate(store, source, at, row.last_seq), row.last_seq


async def read_after(store: Store, session_id: str, after: int, last: int) -> list[Event]:
    """The events of `session_id` after seq `after` up to `last`, a page at a time."""
    events: list[Event] = []
    while after < last:
        page = await store.read(session_id, after, limit=min(PAGE, last - after))
        if not page:
            break
        events.extend(page)
        after = page[-1].seq
    return events


def turn_openers(events: Sequence[Event], turn_open: bool) -> list[Message]:
    """The main thread's messages in `events` that opened a turn (`turn_open`: whether one
    was open before the first), in order, up to the session's end."""
    found: list[Message] = []
    for event in events:
        payload = event.payload
        if event.thread:
            continue
        if isinstance(payload, UserMessage):
            if not turn_open:
                found.append(payload.message)
            turn_open = True
        elif isinstance(payload, TurnEnded):
            turn_open = False
        elif isinstance(payload, SessionEnded):
            break
    return found


def _metadata(agent: Agent, settings: ModelSettings | None, live: Live, until: int) -> JSONObject:
    """The child's metadata over the source's: the agent's; its settings and output type as
    `Agent` records them (checked now: a run would refuse them after the fork), None
    removing the source's; and the replay's policy and the source's last seq it replays."""
    metadata: JSONObject = dict(agent.metadata)
    merged_settings = merged(agent.engine.settings, settings)
    check_settings(merged_settings, agent.model, agent.toolbox.specs)
    metadata["model_settings"] = None if merged_settings is None else merged_settings.to_json()
    metadata["output_type"] = None if agent.output is None else agent.output.to_json()
    metadata["replay"] = {"live": live, "until": until}
    return metadata
