"""Running a review and reading one back: the chair's session, made, resumed or folded.

Owns naming the participants, building the chair's agent (the participants as its sub-agent
tools) and the `ReviewResult`; what a round decides is `ledger`'s, what the chair answers
`chair`'s, and running the session is `Agent`'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from tether.agent import Agent
from tether.errors import SessionNotFound, UsageError
from tether.fold import Folder
from tether.limits import Limits
from tether.messages import JSONObject, Usage
from tether.review.chair import Chair
from tether.review.ledger import LIMIT_STOPS, Config, Minutes, Objection, replay
from tether.session import control
from tether.session.lease import worker_id
from tether.session.log import EventObserver
from tether.session.threads import DEFAULT_MAX_THREADS
from tether.store.base import Store
from tether.store.open import DEFAULT_STORE_URL, open_store

# A participant's answer reaches the chair whole (a revised artifact can be long): the chair
# reads it as data and never sends its transcript to a model.
REVIEW_OUTPUT_CAP = 10_000_000
GO_ON = "Go on with the review."  # the message that reopens an interrupted review


@dataclass(frozen=True, slots=True)
class CriticCount:
    """One critic's objections: `raised` (new ids), `repeated` (times it restated one), and
    how those it raised stand."""

    raised: int
    repeated: int
    accepted: int
    rejected: int
    open: int

    def to_json(self) -> JSONObject:
        return {
            "raised": self.raised,
            "repeated": self.repeated,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "open": self.open,
        }


@dataclass(frozen=True, slots=True)
class Headline:
    """How contended the review ended: objections still open (unanswered or deferred),
    rejected, and accepted."""

    open: int
    rejected: int
    accepted: int

    def __str__(self) -> str:
        return f"{self.open} open, {self.rejected} rejected, {self.accepted} accepted"


@dataclass(frozen=True, slots=True)
class ReviewResult:
    """`stop_reason`: `converged`, `max_rounds`, `budget` (a limit of the review or of a
    participant), `malformed` (an answer unusable after one retry), `interrupted`, `error`
    (a participant failed), `awaiting_approval` (a participant's call waits for a
    decision), or `unfinished` (a crashed run left the turn open: `resume_review`)."""

    session_id: str
    stop_reason: str
    detail: str | None
    artifact: str
    original: str
    ledger: tuple[Objection, ...]
    critics: dict[str, CriticCount]
    headline: Headline
    rounds: int
    usage: Usage
    cost_usd: float | None

    def to_json(self) -> JSONObject:
        return {
            "session_id": self.session_id,
            "stop_reason": self.stop_reason,
            "detail": self.detail,
            "rounds": self.rounds,
            "headline": {
                "open": self.headline.open,
                "rejected": self.headline.rejected,
                "accepted": self.headline.accepted,
            },
            "critics": {name: count.to_json() for name, count in self.critics.items()},
            "ledger": [o.to_json() for o in self.ledger],
            "artifact": self.artifact,
            "usage": self.usage.to_json(),
            "cost_usd": self.cost_usd,
        }


def participants(proposer: Agent, critics: Sequence[Agent]) -> tuple[str, tuple[str, ...]]:
    """The names the participants go by (tools, thread ids, objection ids): each agent's
    `name`, else `proposer` and `critic1`, `critic2`, ... in order."""
    if not critics:
        raise UsageError("a review needs at least one critic")
    names = tuple(c.name or f"critic{i}" for i, c in enumerate(critics, 1))
    proposer_name = proposer.name or "proposer"
    taken = [proposer_name, *names]
    if len(set(taken)) != len(taken):
        raise UsageError(f"the proposer and critics need distinct names, not {', '.join(taken)}")
    return proposer_name, names


async def review(
    artifact: str,
    *,
    proposer: Agent,
    critics: Sequence[Agent],
    max_rounds: int = 6,
    stable_rounds: int = 2,
    limits: Limits | None = None,
    store: Store | str | None = None,
    on_event: EventObserver | None = None,
    lease_ttl: float = 30.0,
) -> ReviewResult:
    """Review `artifact`: each round the critics (in parallel threads) raise objections and
    the proposer answers each and may revise, until the review converges (no new objection
    and no changed disposition for `stable_rounds` rounds) or stops. One session holds it
    all: `limits` (by default no step cap: `max_rounds` bounds it) are the whole review's,
    every thread included. The store is as for `Agent` (a `Store`, a URL, or the default);
    `lease_ttl` is how long the run's lease outlives a crashed process."""
    if not artifact.strip():
        raise UsageError("there is nothing to review: the artifact is empty")
    config = Config(*participants(proposer, critics), max_rounds, stable_rounds)
    chair, owned = _chair(config, proposer, critics, limits or Limits(max_steps=None), store)
    chair.on_event, chair.lease_ttl = on_event, lease_ttl
    try:
        run = await chair.run(artifact)
        await _settle(chair, run.session_id)
        return await review_from_log(chair.store, run.session_id)
    finally:
        await _close(chair, owned)


async def _settle(chair: Agent, session_id: str) -> None:
    """End the review's session once its turn stopped for good, except at a limit of the
    review's own turn: that one stays open, for `resume_review` with a larger limit."""
    observers = () if chair.on_event is None else (chair.on_event,)
    await control.settle(
        chair.store,
        session_id,
        worker_id(),
        chair.lease_ttl,
        keep_open=LIMIT_STOPS,
        observers=observers,
    )


async def resume_review(
    session_id: str,
    *,
    proposer: Agent,
    critics: Sequence[Agent],
    store: Store | str | None = None,
    limits: Limits | Mapping[str, int | float] | None = None,
    on_event: EventObserver | None = None,
    lease_wait: float = 0.0,
    lease_ttl: float = 30.0,
) -> ReviewResult:
    """Go on with a review a crashed process left open, one that was interrupted, or one
    stopped by a limit of its own turn, with the same participants (by name): finished
    threads give their recorded answers without running again (an interrupted round is
    asked again), and the chair decides as before. A review that had ended is read back as
    it is. `limits`: the continued turn's (`Limits`), or the recorded ones with some changed
    (`{"max_steps": 20}`); by default the recorded ones. `max_steps` counts the continued
    turn's steps afresh; `max_tokens` and `max_cost_usd` count the whole review's, so a
    review stopped by one is continued with a larger one. `lease_wait`: how long to wait
    for the lease a crashed process left to expire."""
    opened = _open(store)
    try:
        folder = await _folder(opened, session_id)
        config = Config.from_system(folder.system)
        named = participants(proposer, critics)
        if named != (config.proposer, config.critics):
            raise UsageError(
                f"review {session_id} was run by proposer {config.proposer} and critics "
                f"{', '.join(config.critics)}, not {named[0]} and {', '.join(named[1])}"
            )
        stopped = folder.stop_reason == "interrupted" or folder.stop_reason in LIMIT_STOPS
        if not folder.terminal and (folder.turn_open or stopped):
            # An interrupted or limited review's turn has closed: a message opens the next
            # one, and the chair asks again what the stop cut off.
            go_on = None if folder.turn_open else GO_ON
            given = limits if isinstance(limits, Limits) else _changed(folder, limits or {})
            chair, _ = _chair(config, proposer, critics, given, opened)
            chair.on_event, chair.lease_ttl = on_event, lease_ttl
            try:
                await chair.run(go_on, session_id=session_id, lease_wait=lease_wait)
                await _settle(chair, session_id)
            finally:
                await chair.runs.close()
        return await review_from_log(opened, session_id)
    finally:
        if store is None or isinstance(store, str):
            await opened.close()


async def review_from_log(store: Store, session_id: str) -> ReviewResult:
    """A review as its session's log tells it, running or ended: the chair's transcript
    replayed (`ledger.replay`) and the turn's stop mapped to the review's."""
    folder = await _folder(store, session_id)
    minutes = replay(folder.system, folder.messages)
    stop, detail = _stop(folder, minutes)
    ledger = tuple(minutes.ledger.values())
    return ReviewResult(
        session_id=session_id,
        stop_reason=stop,
        detail=detail,
        artifact=minutes.artifact,
        original=minutes.original,
        ledger=ledger,
        critics=_counts(minutes),
        headline=Headline(
            sum(o.open for o in ledger),
            sum(o.disposition == "rejected" for o in ledger),
            sum(o.disposition == "accepted" for o in ledger),
        ),
        rounds=minutes.round,
        usage=folder.usage,
        cost_usd=None if not folder.cost_known else folder.cost_usd or 0.0,
    )


def _stop(folder: Folder, minutes: Minutes) -> tuple[str, str | None]:
    reason = folder.stop_reason
    if folder.turn_open or reason is None:
        return "unfinished", "the review's turn is open: resume_review goes on with it"
    if reason == "end_turn" and minutes.stop is not None:
        return minutes.stop, minutes.detail
    if reason in LIMIT_STOPS:
        return "budget", f"{reason}: {folder.stop_detail}"
    return reason, folder.stop_detail


def _counts(minutes: Minutes) -> dict[str, CriticCount]:
    counts: dict[str, CriticCount] = {}
    for critic in minutes.config.critics:
        own = [o for o in minutes.ledger.values() if o.critic == critic]
        counts[critic] = CriticCount(
            raised=len(own),
            repeated=minutes.repeats[critic],
            accepted=sum(o.disposition == "accepted" for o in own),
            rejected=sum(o.disposition == "rejected" for o in own),
            open=sum(o.open for o in own),
        )
    return counts


def _chair(
    config: Config,
    proposer: Agent,
    critics: Sequence[Agent],
    limits: Limits,
    store: Store | str | None,
) -> tuple[Agent, bool]:
    """The chair's agent, and whether it opened its store (which it then closes). The
    chair's context policy is off (its transcript never goes to a model) and it is never
    retried (it cannot fail as a provider does)."""
    tools = [
        replace(agent.as_tool(name=name), output_cap=REVIEW_OUTPUT_CAP)
        for agent, name in ((proposer, config.proposer), *zip(critics, config.critics, strict=True))
    ]
    owned = store is None or isinstance(store, str)
    agent = Agent(
        Chair(),
        tools=tools,
        system=config.system(),
        limits=limits,
        store=_open(store),
        context=False,
        retry=None,
        max_threads=max(DEFAULT_MAX_THREADS, len(critics)),
        metadata={"review": {"proposer": config.proposer, "critics": list(config.critics)}},
    )
    return agent, owned


def _recorded(folder: Folder) -> Limits:
    """The limits the review was started with, as `session.created` recorded them."""
    recorded = folder.limits

    def number(key: str) -> float | None:
        value = recorded.get(key)
        return float(value) if isinstance(value, int | float) else None

    def whole(key: str) -> int | None:
        value = recorded.get(key)
        return value if isinstance(value, int) else None

    return Limits(
        max_steps=whole("max_steps"),
        max_tokens=whole("max_tokens"),
        max_cost_usd=number("max_cost_usd"),
        max_seconds=number("max_seconds"),
        max_output_tokens=whole("max_output_tokens"),
    )


def _changed(folder: Folder, changes: Mapping[str, int | float]) -> Limits:
    """The recorded limits with `changes` made (`UsageError` for a name `Limits` lacks)."""
    known = {f.name for f in fields(Limits)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise UsageError(f"no limit {unknown[0]!r} (limits: {', '.join(sorted(known))})")
    changed: dict[str, Any] = dict(changes)
    return replace(_recorded(folder), **changed)


def _open(store: Store | str | None) -> Store:
    if store is None or isinstance(store, str):
        return open_store(store or os.environ.get("TETHER_STORE") or DEFAULT_STORE_URL)
    return store


async def _folder(store: Store, session_id: str) -> Folder:
    events = await store.read(session_id)
    if not events:
        raise SessionNotFound(session_id)
    return Folder().apply_all(events)


async def _close(agent: Agent, owned: bool) -> None:
    await agent.runs.close()
    if owned:
        await agent.store.close()
