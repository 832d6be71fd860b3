"""`tether sessions fork|rewind`, and the lineage `tether sessions show` prints: thin adapters
over `tether.session.fork` (a session a runtime started goes through `LocalRuntime.fork`,
which checks the changes as a start's spec and marks a child with a turn runnable)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from tether.agent import resolve_model
from tether.cli.args import COUNT, nonblank
from tether.cli.common import CliError, existing_store
from tether.errors import TetherError
from tether.events import ForkKind, ModelResponded, TurnEnded, UserMessage
from tether.messages import JSONObject
from tether.runtime.base import SpecChanges
from tether.session.fork import KEEP, ForkChanges, Forked, ForkPoint, OpenCalls, config_of, fork
from tether.store.base import Store
from tether.store.catalog import CatalogQuery

PAGE = 500  # events read at once while counting what a rewind dropped
FORKS_SHOWN = 10  # a session's forks `show` names; the rest are counted


def add_fork_commands(ssub: Any) -> None:
    forking = ssub.add_parser(
        "fork", help="a new session whose log is this one's up to a point, then its own"
    )
    forking.add_argument("id")
    point = forking.add_mutually_exclusive_group()
    point.add_argument("--at", type=COUNT, default=None, metavar="SEQ", help="at this seq")
    point.add_argument(
        "--turn", type=COUNT, default=None, metavar="N",
        help="at the start of turn N, after its message (the child runs turn N again)",
    )  # fmt: skip
    point.add_argument(
        "--after-turn", type=COUNT, default=None, metavar="N", help="at the end of turn N"
    )
    forking.add_argument("--model", default=None, help="the child's model (default: the parent's)")
    forking.add_argument("--system", default=None, help="the child's system prompt")
    forking.add_argument(
        "--message", type=nonblank, default=None, help="a user message that opens its first turn"
    )
    forking.add_argument(
        "--answer-open",
        action="store_true",
        help="answer calls open at the point (canceled / unknown effect) instead of refusing",
    )
    rewind = ssub.add_parser(
        "rewind",
        help="a fork at the start of turn N that takes the session's place; the session is kept",
    )
    rewind.add_argument("id")
    rewind.add_argument("--turn", type=COUNT, required=True, metavar="N")


async def cmd_fork(args: argparse.Namespace) -> int:
    point = ForkPoint(seq=args.at, turn=args.turn, after_turn=args.after_turn)
    store = existing_store(args.store)
    try:
        forked = await _fork(store, args, point, "fork")
    finally:
        await store.close()
    where = f"{point.describe()}, seq {forked.at}" if point != ForkPoint() else f"seq {forked.at}"
    if args.json:
        print(json.dumps(_forked_json(forked, point)))
        return 0
    print(f"{forked.session_id}: forked from {forked.parent} at {where} · {forked.state}")
    if forked.answered:
        print(f"answered open calls: {', '.join(forked.answered)}")
    _next_step(forked, args)
    return 0


async def cmd_rewind(args: argparse.Namespace) -> int:
    point = ForkPoint(turn=args.turn)
    args.model = args.system = args.message = None
    args.answer_open = False
    store = existing_store(args.store)
    try:
        forked = await _fork(store, args, point, "rewind")
        gone = await dropped(store, forked.parent, forked.at, forked.parent_last_seq)
    finally:
        await store.close()
    if args.json:
        print(json.dumps({**_forked_json(forked, point), "dropped": gone.to_json()}))
        return 0
    print(
        f"{forked.session_id}: {forked.parent} rewound to the start of turn {args.turn} "
        f"(seq {forked.at}) · {forked.state}"
    )
    print(f"dropped: {gone.describe()} (session {forked.parent} keeps them, unchanged)")
    _next_step(forked, args)
    return 0


async def _fork(store: Store, args: argparse.Namespace, point: ForkPoint, kind: ForkKind) -> Forked:
    """A runtime's session through `LocalRuntime.fork` (its runner rebuilt with the changes,
    checked as a start's, marked runnable); any other through `session.fork.fork`, the model
    string the command line recorded (`metadata.cli`) changed with `--model`."""
    from tether.runtime.base import SessionRef
    from tether.runtime.local import LocalRuntime

    config = await config_of(store, args.id)
    open_calls: OpenCalls = "cancel" if args.answer_open else "refuse"
    if "runner" in config.metadata:
        changes = SpecChanges(model=args.model, system=KEEP if args.system is None else args.system)
        async with LocalRuntime(store, workers=0) as runtime:
            return await runtime.fork(
                SessionRef(args.id), at=point, changes=changes, message=args.message,
                kind=kind, open_calls=open_calls,
            )  # fmt: skip
    given: dict[str, Any] = {} if args.system is None else {"system": args.system}
    if args.model is not None:
        try:
            given["model"] = resolve_model(args.model).name
        except TetherError as exc:
            raise CliError(f"--model {args.model}: {exc}") from exc
        recorded = config.metadata.get("cli")
        if isinstance(recorded, dict):  # what `sessions resume` rebuilds the model from
            given["metadata"] = {"cli": {**recorded, "model": args.model}}
    return await fork(
        store, args.id, point, changes=ForkChanges(**given), message=args.message,
        kind=kind, open_calls=open_calls,
    )  # fmt: skip


def _forked_json(forked: Forked, point: ForkPoint) -> JSONObject:
    return {
        "session_id": forked.session_id,
        "parent": forked.parent,
        "at": forked.at,
        "point": point.describe(),
        "parent_last_seq": forked.parent_last_seq,
        "state": forked.state,
        "kind": forked.kind,
        "answered": list(forked.answered),
    }


def _next_step(forked: Forked, args: argparse.Namespace) -> None:
    store = f" --store {args.store}" if args.store else ""
    if forked.state == "idle":
        print(f"continue it: tether sessions send {forked.session_id} TEXT{store}")
    else:
        print(
            f"it has a turn to run: a `tether worker` runs a runtime's session; otherwise "
            f"tether sessions resume {forked.session_id}{store}"
        )


@dataclass(frozen=True, slots=True)
class Dropped:
    """What a session has after a seq: what a fork there leaves behind."""

    turns: int = 0
    user_messages: int = 0
    model_answers: int = 0
    tool_calls: int = 0
    events: int = 0

    def describe(self) -> str:
        if not self.events:
            return "nothing"
        return (
            f"{self.turns} turn(s), {self.user_messages} user message(s), "
            f"{self.model_answers} model answer(s), {self.tool_calls} tool call(s), "
            f"{self.events} event(s)"
        )

    def to_json(self) -> JSONObject:
        return {
            "turns": self.turns,
            "user_messages": self.user_messages,
            "model_answers": self.model_answers,
            "tool_calls": self.tool_calls,
            "events": self.events,
        }


async def dropped(store: Store, session_id: str, at: int, last: int) -> Dropped:
    """What `session_id` holds after seq `at` up to `last`, read once, a page at a time: the
    main thread's turns ended and user messages, and every thread's model answers and the
    calls they asked for."""
    turns = messages = answers = calls = events = 0
    after = at
    while after < last:
        page = await store.read(session_id, after, limit=min(PAGE, last - after))
        if not page:
            break
        for event in page:
            payload = event.payload
            events += 1
            if isinstance(payload, ModelResponded):
                answers += 1
                calls += len(payload.message.tool_calls)
            elif event.thread:
                continue
            elif isinstance(payload, TurnEnded):
                turns += 1
            elif isinstance(payload, UserMessage):
                messages += 1
        after = page[-1].seq
    return Dropped(turns, messages, answers, calls, events)


async def lineage(store: Store, session_id: str) -> JSONObject:
    """A session's forks from the catalog: the newest `FORKS_SHOWN` and how many in all."""
    query = CatalogQuery(parent=session_id, sort="newest", limit=FORKS_SHOWN)
    rows = await store.catalog(query)
    total = sum((await store.catalog_counts(query)).values())
    return {
        "forks": [{"session_id": r.session_id, "state": r.state} for r in rows],
        "total": total,
    }


def render_lineage(forked: JSONObject | None, forks: JSONObject, session_id: str) -> str:
    """The lines `show` prints: where the session came from, and its forks ("and N more",
    with the command that lists them all)."""
    lines = []
    if forked is not None:
        lines.append(
            f"forked from {forked['parent']} at seq {forked['parent_seq']} ({forked['kind']})"
        )
    shown = forks["forks"]
    assert isinstance(shown, list)
    if shown:
        names = ", ".join(f"{f['session_id']} ({f['state']})" for f in shown)  # type: ignore[index,call-overload]
        total = forks["total"]
        assert isinstance(total, int)
        more = total - len(shown)
        tail = f" and {more} more (tether sessions ls --parent {session_id})" if more > 0 else ""
        lines.append(f"forks: {names}{tail}")
    return "\n".join(lines)
