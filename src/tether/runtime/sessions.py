"""Creating managed sessions and rebuilding their runners; folds kept current for polling.

Owns what `session.created` records for a runtime session (`metadata.runner`: model string,
tool specs, `end_after_turn`, `priority`, the sub-agents and their caps, the operator's MCP
servers it named (`mcp`, names only); `metadata.tenant`; `metadata.idempotency`;
`metadata.model_settings`, where `Agent` records its own), building a spec's sub-agents into
tools, idempotent creation, and `Views`, the per-process cache of incremental folds behind
`poll`. Running
sessions is `worker`; the operations themselves are `local`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tether.agent import Agent, resolve_model
from tether.bounded import ByteLRU, approx_size
from tether.errors import Conflict, IdempotencyConflict, KeyMissing, TetherError, UsageError
from tether.events import (
    Event,
    SessionCreated,
    SessionForked,
    ToolFinished,
    UserMessage,
    format_time,
)
from tether.fold import Folder
from tether.limits import Limits
from tether.messages import JSONObject, JSONValue, canonical_json, user
from tether.providers.base import Model
from tether.published import Published, unavailable
from tether.runtime.base import (
    RESERVED_METADATA,
    AgentSpec,
    SessionSpec,
    SpecChanges,
    agent_json,
    agents_from_json,
    check_agents,
    root_agents,
)
from tether.runtime.gateways import priority_of
from tether.scheduler.queue import Priority
from tether.session import snapshots
from tether.session.control import KEYED, Known
from tether.session.fork import KEEP, Forked, ForkPoint, config_of, merged
from tether.session.log import new_event_id, new_session_id
from tether.session.threads import DEFAULT_MAX_DEPTH, DEFAULT_MAX_THREADS
from tether.settings import ModelSettings, check_settings, inherited
from tether.store import catalog
from tether.store.base import Store
from tether.telemetry.ids import new_trace_id
from tether.tools.base import Tool
from tether.tools.load import load_tools

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True, slots=True)
class Runner:
    """What a worker needs to run a session, as `session.created` recorded it."""

    model: str
    tools: tuple[str, ...]
    limits: JSONObject
    end_after_turn: bool
    tenant: str | None = None
    priority: Priority = "interactive"
    agents: JSONObject = field(default_factory=dict)  # as recorded: read by `sub_agents`
    max_depth: int = DEFAULT_MAX_DEPTH
    max_threads: int = DEFAULT_MAX_THREADS
    mcp: tuple[str, ...] = ()  # the operator's MCP servers, by name
    settings: JSONObject | None = None  # `metadata.model_settings`: read by `model_settings`

    @staticmethod
    def from_created(created: SessionCreated | SessionForked) -> Runner | None:
        """None for a session no runtime started (and that no worker should take)."""
        recorded = created.metadata.get("runner") or created.metadata.get("cli")
        if not isinstance(recorded, dict) or not isinstance(recorded.get("model"), str):
            return None
        tools = recorded.get("tools") or []
        agents = recorded.get("agents")
        mcp = recorded.get("mcp") if "runner" in created.metadata else None  # the CLI's: a file
        return Runner(
            model=str(recorded["model"]),
            tools=tuple(str(t) for t in tools) if isinstance(tools, list) else (),
            limits=dict(created.limits),
            end_after_turn=bool(recorded.get("end_after_turn", False)),
            tenant=tenant if isinstance(tenant := created.metadata.get("tenant"), str) else None,
            priority=priority_of(recorded.get("priority")),
            agents=agents if isinstance(agents, dict) else {},
            max_depth=_count(recorded.get("max_depth"), DEFAULT_MAX_DEPTH),
            max_threads=_count(recorded.get("max_threads"), DEFAULT_MAX_THREADS),
            mcp=tuple(str(n) for n in mcp) if isinstance(mcp, list) else (),
            settings=settings
            if isinstance(settings := created.metadata.get("model_settings"), dict)
            else None,
        )

    def key(self) -> str:
        return canonical_json(
            [
                self.model,
                list(self.tools),
                self.limits,
                self.agents,
                self.max_depth,
                self.max_threads,
                self.settings,
            ]
        )

    def model_settings(self) -> ModelSettings | None:
        """The recorded settings, checked again as at start (`UsageError` if not)."""
        if self.settings is None:
            return None
        try:
            return ModelSettings.from_json(self.settings)
        except UsageError as exc:
            raise UsageError(f"recorded model_settings: {exc}") from None

    def sub_agents(self) -> dict[str, AgentSpec]:
        """The recorded sub-agents, checked again (unknown names, cycles, depth) as at
        start: a record is rebuilt only if a spec could have said it. `UsageError` if not."""
        if self.max_depth < 0 or self.max_threads < 1:
            raise UsageError(
                f"recorded max_depth {self.max_depth} or max_threads {self.max_threads} "
                "is out of range"
            )
        agents = agents_from_json(self.agents)
        check_agents(agents, self.max_depth)
        return agents

    def build_limits(self) -> Limits:
        return Limits(**{k: v for k, v in self.limits.items() if v is not None})  # type: ignore[arg-type]


def _count(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


# Builds one sub-agent's model and tools (by its name and spec), checked and routed as its
# caller builds the main model: the same endpoint policy, the same gateways.
BuildAgent = Callable[[str, AgentSpec], tuple[Model, list[Tool]]]


def subagent_tools(
    agents: Mapping[str, AgentSpec], build: BuildAgent, settings: ModelSettings | None = None
) -> list[Tool]:
    """The tools that offer a spec's sub-agents to its main agent (`root_agents`), each one
    made by `Agent.as_tool` or `Agent.handoff_tool` as a library user would, its own
    sub-agents among its tools. A sub-agent listed by several is built once. A failure
    names the sub-agent. `settings`: the session's, which reach each sub-agent under its
    own (`settings.inherited`): the two are checked together against its model now."""
    check_agents(agents, len(agents))  # never recurse without end, whoever checked before
    made: dict[str, Agent] = {}

    def offer(name: str) -> Tool:
        spec = agents[name]
        agent = made.get(name)
        if agent is None:
            try:
                model, tools = build(name, spec)
            except UsageError as exc:
                _name_in(exc, name)
                raise
            children = [offer(child) for child in spec.agents]
            try:
                agent = Agent(
                    model,
                    name=name,
                    tools=[*tools, *children],
                    system=spec.system,
                    limits=spec.limits,
                    settings=spec.settings,
                )
                if settings is not None:  # what it runs with under the session
                    check_settings(inherited(settings, agent.settings), model, agent.toolbox.specs)
            except UsageError as exc:  # e.g. two tools of one name
                _name_in(exc, name)
                raise
            made[name] = agent
        if spec.handoff:
            return agent.handoff_tool(description=spec.description)
        return agent.as_tool(description=spec.description)

    return [offer(name) for name in root_agents(agents)]


def _name_in(exc: UsageError, name: str) -> None:
    """Say which sub-agent failed, keeping the error's class (a refused endpoint stays
    `CapabilityRefused`, and so an HTTP 422)."""
    exc.args = (f"sub-agent {name}: {exc}", *exc.args[1:])


def build_runner(
    model: str,
    tools: tuple[str, ...],
    http_client: httpx.AsyncClient | None = None,
    code: Published | None = None,
) -> tuple[Model, list[Tool]]:
    """Resolve the model string (a provider model making its requests with `http_client`)
    and load the tools, or say clearly which one is wrong. With `code` (a spec a tenant
    wrote), only what the operator published loads, and an error says no more than the
    tenant may know: a provider key this process lacks is not named."""
    if code is None:
        try:
            resolved = resolve_model(model, http_client)
        except TetherError as exc:
            raise UsageError(f"model {model!r}: {exc}") from exc
        except Exception as exc:  # a model factory of the user's that raised
            raise UsageError(f"model {model!r}: {type(exc).__name__}: {exc}") from exc
        return resolved, load_tools(tools)
    if model.startswith("python:"):
        made = code.model(model)  # its refusals name the model
    else:
        try:
            made = resolve_model(model, http_client)
        except KeyMissing as exc:
            raise unavailable(model, exc) from None
        except TetherError as exc:
            raise UsageError(f"model {model[:200]!r}: {exc}") from exc
    return made, [t for spec in tools for t in code.tools(spec)]


def fingerprint(spec: SessionSpec) -> str:
    return hashlib.sha256(canonical_json(spec.to_json()).encode()).hexdigest()[:32]


def session_id_for(tenant: str | None, key: str) -> str:
    """The same key of the same tenant names the same session, in any process."""
    digest = hashlib.sha256(f"{tenant or ''}\x00{key}".encode()).hexdigest()
    return f"ses_{digest[:16]}"


def created_event(
    spec: SessionSpec, model: Model, tools: list[Tool], tenant: str | None, key: str | None
) -> SessionCreated:
    metadata: JSONObject = dict(spec.metadata)
    runner: JSONObject = {
        "model": spec.model,
        "tools": list[JSONValue](spec.tools),
        "end_after_turn": spec.end_after_turn,
        "priority": spec.priority,
    }
    if spec.settings is not None:  # where `Agent` records its own: one place for both
        metadata["model_settings"] = spec.settings.to_json()
    if spec.agents:
        runner["agents"] = {name: agent_json(agent) for name, agent in spec.agents.items()}
        runner["max_depth"] = spec.max_depth
        runner["max_threads"] = spec.max_threads
    if spec.mcp:
        runner["mcp"] = list[JSONValue](spec.mcp)
    metadata["runner"] = runner
    metadata.setdefault("trace_id", new_trace_id())
    if tenant is not None:
        metadata["tenant"] = tenant
    if key is not None:
        metadata["idempotency"] = {"key": key, "fingerprint": fingerprint(spec)}
    return SessionCreated(
        model=model.name,
        system=spec.system,
        tools={t.name: t.schema_hash for t in tools},
        limits=spec.limits.to_json(),
        metadata=metadata,
    )


async def create_session(
    store: Store,
    spec: SessionSpec,
    created: SessionCreated,
    tenant: str | None,
    key: str | None,
    now: float,
    *,
    views: Views | None = None,
    admit: catalog.Admit | None = None,
) -> str:
    """Append `session.created` and the task as one batch, with the session's catalog row,
    then mark the session runnable. A retried key returns the session it made (and marks it
    again, should the first try have stopped before marking). `views`: handed the fold of a
    session made here, so the first poll of it reads only what came after. `admit`: the
    tenant's quota of running sessions, checked by the store in the creating append
    (`QuotaExceeded`; a retried key's session is not counted again)."""
    session_id = new_session_id() if key is None else session_id_for(tenant, key)
    stamp = format_time(now)
    events = [
        Event(session_id, 1, new_event_id(), stamp, created),
        Event(session_id, 2, new_event_id(), stamp, UserMessage(user(spec.task))),
    ]
    try:
        row = catalog.row_of(Folder().apply_all(events))
        await store.append(session_id, events, 0, row=row, admit=admit)
        if views is not None:
            views.seed(session_id, events)
    except Conflict:
        if key is None:
            raise
        first = (await store.read(session_id, limit=1))[0].payload
        recorded = first.metadata.get("idempotency") if isinstance(first, SessionCreated) else None
        if not isinstance(recorded, dict) or recorded.get("fingerprint") != fingerprint(spec):
            raise IdempotencyConflict(
                f"idempotency key {key!r} was already used for a different session spec"
            ) from None
    await store.mark_runnable(session_id)
    return session_id


def forked_spec(
    parent: str, config: SessionCreated | SessionForked, changes: SpecChanges, task: str
) -> SessionSpec:
    """The spec a fork of a runtime session runs: the parent's, as its first event recorded
    it (`metadata.runner`, the system prompt, the limits, the settings, the caller's
    metadata), with `changes`; `task` only satisfies `SessionSpec.check` (a fork records
    none). `UsageError` for a session no runtime started: no worker could run its fork."""
    runner = Runner.from_created(config) if "runner" in config.metadata else None
    if runner is None:
        raise UsageError(
            f"session {parent} was not started by a runtime (its first event has no "
            "metadata.runner): fork it with Agent.fork or `tether sessions fork`"
        )
    kept = {k: v for k, v in config.metadata.items() if k not in RESERVED_METADATA}
    metadata = merged(kept, changes.metadata)
    return SessionSpec(
        model=changes.model or runner.model,
        task=task,
        tools=runner.tools if changes.tools is None else changes.tools,
        system=config.system if changes.system is KEEP else changes.system,
        limits=runner.build_limits() if changes.limits is None else changes.limits,
        metadata=metadata,
        end_after_turn=runner.end_after_turn,
        priority=runner.priority,
        agents=runner.sub_agents(),
        max_depth=runner.max_depth,
        max_threads=runner.max_threads,
        mcp=runner.mcp,
        settings=runner.model_settings() if changes.settings is None else changes.settings,
    )


def fork_fingerprint(
    parent: str,
    point: ForkPoint,
    changes: SpecChanges,
    message: str | None,
    kind: str,
    open_calls: str,
) -> str:
    """What a fork asked for, as its idempotency key's record holds it: a retry with the
    same key must ask for the same."""
    asked = {
        "parent": parent,
        "at": [point.seq, point.turn, point.after_turn],
        "changes": changes.to_json(),
        "message": message,
        "kind": kind,
        "open_calls": open_calls,
    }
    return hashlib.sha256(canonical_json(asked).encode()).hexdigest()[:32]


async def forked_again(store: Store, child: str, key: str, digest: str) -> Forked:
    """The fork an idempotency key made already (its id is taken): the same child when the
    same fork was asked (`fingerprint`), else `IdempotencyConflict`. Its state is the
    child's now; `parent_last_seq` the parent's now."""
    link = await store.fork_link(child)
    config = await config_of(store, child) if link is not None else None
    recorded = config.metadata.get("idempotency") if isinstance(config, SessionForked) else None
    if (
        link is None
        or not isinstance(config, SessionForked)
        or not isinstance(recorded, dict)
        or recorded.get("fingerprint") != digest
    ):
        raise IdempotencyConflict(
            f"idempotency key {key!r} was already used for a different request"
        ) from None
    row = await store.catalog_row(child)
    parent_row = await store.catalog_row(link.parent)
    answered: list[str] = []
    after = link.at + 1  # the calls the fork answered follow its session.forked
    while True:
        page = await store.read(child, after, limit=PAGE)
        finished = [e.payload for e in page if isinstance(e.payload, ToolFinished)]
        answered += [p.call_id for p in finished[: _leading(page)]]
        if _leading(page) < len(page) or len(page) < PAGE:
            break
        after = page[-1].seq
    return Forked(
        child,
        link.parent,
        link.at,
        link.at if parent_row is None else parent_row.last_seq,
        "idle" if row is None else row.state,
        config.kind,
        tuple(answered),
    )


def _leading(page: Sequence[Event]) -> int:
    """How many events at the page's start are `tool.finished`."""
    count = 0
    for event in page:
        if not isinstance(event.payload, ToolFinished):
            break
        count += 1
    return count


# Events a view reads from the store at once: folding a long log for the first time holds
# a page of it, not all of it.
PAGE = 500


@dataclass(slots=True)
class _View:
    folder: Folder
    keyed: dict[str, Event]  # events named by an idempotency key, for `control.send_message`
    fixed: int = 0  # the estimated bytes of what never changes: system prompt and metadata
    # Whether `keyed` holds every keyed event of the fold: not when it began at a snapshot.
    whole: bool = True

    def size(self) -> int:
        """About the bytes the view holds: its fixed part and the transcript."""
        if not self.fixed and self.folder.last_seq:
            folder = self.folder
            self.fixed = len(folder.system or "") + approx_size(folder.metadata) + 1_024
        return self.fixed + self.folder.transcript_chars


VIEWS_BYTES = 64 << 20  # what `Views` holds at most: a view past a quarter of it is not kept


class Views:
    """Incremental folds of the sessions this process was asked about, so a poll reads only
    the events since the last one (the first, those since the session's snapshot), and
    steering (`known`) reads no log at all. Bounded by count and by bytes (`budget`, each
    view charged its transcript, system prompt and metadata): the least recently polled are
    dropped, and a view too large to keep is folded again at each poll."""

    def __init__(self, store: Store, size: int = 1_000, budget: int = VIEWS_BYTES) -> None:
        self.store = store
        self.size = size
        self._views: ByteLRU[str, _View] = ByteLRU(size, budget, budget // 4)

    @property
    def bytes(self) -> int:
        return self._views.bytes

    def __len__(self) -> int:
        return len(self._views)

    async def get(self, session_id: str) -> Folder:
        view = self._views.get(session_id) or await self._start(session_id)
        folder = view.folder
        while True:
            news = await self.store.read(session_id, folder.last_seq, limit=PAGE)
            for event in news:
                if event.seq == folder.last_seq + 1:  # a concurrent poll may have applied it
                    folder.apply(event)
                    if event.id.startswith(KEYED):
                        view.keyed[event.id] = event
            if len(news) < PAGE:
                break
        if folder.last_seq > 0:
            self._views.put(session_id, view, view.size())
        return folder

    async def _start(self, session_id: str) -> _View:
        """A view of a session not held: from its snapshot when it has one (the events after
        it are read next), else from its first event."""
        folder = await snapshots.stored(self.store, session_id)
        if folder is None or await self.store.last_seq(session_id) < folder.last_seq:
            return _View(Folder(), {})  # none, or one ahead of its log (a restored store)
        return _View(folder, {}, whole=False)

    def seed(self, session_id: str, events: Sequence[Event]) -> None:
        """The session's first events, as this process just appended them: folded here, so
        a poll right after the start reads and decodes nothing it wrote."""
        if session_id in self._views:
            return
        view = _View(Folder(), {})
        for event in events:
            view.folder.apply(event)
            if event.id.startswith(KEYED):
                view.keyed[event.id] = event
        self._views.put(session_id, view, view.size())

    def known(self, session_id: str) -> Known | None:
        """What this process knows of the session as of its last `get`, for steering it
        without reading its log; None when it is not held (never asked, or dropped)."""
        view = self._views.peek(session_id)
        # Begun at a snapshot, its keys are not all known: a send reads the log for them.
        return None if view is None or not view.whole else Known(view.folder, view.keyed)
