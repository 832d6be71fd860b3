"""The Runtime protocol: the managed-session face of tether, in-process or over HTTP.

Owns `Runtime`, `Capabilities`, `SessionSpec` (and its sub-agents, `AgentSpec`), `SessionRef`,
`SessionStatus`, the session list's `ListOptions`, `SessionSummary` and `SessionPage`, their
JSON forms and `validate_capabilities`. It runs nothing: `LocalRuntime` and `HttpRuntime` do,
and both pass `tether.testing`'s runtime conformance suite. Each dataclass here is the one
definition of its wire shape: its JSON form and the API's JSON Schema derive from it (`wire`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal, Protocol, TypedDict, Unpack, cast, overload

import pydantic

from tether.errors import UsageError
from tether.events import Event, ForkKind
from tether.limits import Limits
from tether.messages import JSONObject, JSONValue, Usage
from tether.providers.base import Delta
from tether.runtime import wire
from tether.scheduler.queue import PRIORITIES, Priority
from tether.scheduler.status import StatusKind
from tether.session.fork import KEEP, Forked, ForkPoint, OpenCalls
from tether.session.threads import DEFAULT_MAX_DEPTH, DEFAULT_MAX_THREADS, check_name
from tether.settings import ModelSettings
from tether.state import TERMINAL_STATES, SessionView
from tether.store import catalog

# Metadata keys the runtime writes into session.created; a spec may not set them.
RESERVED_METADATA = catalog.RESERVED
# A tenant's name: what a tokens file may call one (`server.auth`), and so what anything that
# tags sessions with a tenant (an experiment's runs) is held to.
TENANT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def check_tenant(name: str) -> str:
    """`name` if it is a tenant's name, else `UsageError` saying what one is."""
    if not TENANT_NAME.fullmatch(name):  # not `match`: its `$` lets a newline end one
        raise UsageError(f"tenant name {name[:80]!r} must be 1-64 of A-Z a-z 0-9 _ . -")
    return name


RESERVED_METADATA = catalog.RESERVED | {"model_settings"}
# What `settings.extra` may not set in a spec: what tether itself sends (the model, the
# conversation, the tools, the stream) and the output caps a tenant's quota holds.
SPEC_EXTRA_REFUSED = frozenset(
    {"model", "messages", "input", "system", "instructions", "tools", "stream",
     "max_tokens", "max_completion_tokens", "max_output_tokens", "options"}
)  # fmt: skip


def _settings_in(value: object) -> ModelSettings | None:
    if value is None or isinstance(value, ModelSettings):
        return value
    if not isinstance(value, Mapping):
        raise UsageError(f"settings must be an object of model settings, not {value!r}")
    return ModelSettings.from_json(value)


# `ModelSettings` on the wire: written as what it sets (`ModelSettings.given`), read back by
# `ModelSettings.from_json`, whose checks name the bad key and value.
Settings = Annotated[
    ModelSettings | None,
    pydantic.PlainValidator(_settings_in),
    pydantic.PlainSerializer(lambda s: None if s is None else s.given()),
    pydantic.WithJsonSchema({"anyOf": [{"type": "object"}, {"type": "null"}]}),
]


def check_settings_spec(where: str, settings: ModelSettings | None) -> None:
    """Refuse `extra` keys a spec may not set (`SPEC_EXTRA_REFUSED`)."""
    refused = sorted(SPEC_EXTRA_REFUSED & set((settings.extra or {}) if settings else ()))
    if refused:
        raise UsageError(
            f"{where}.extra may not set {', '.join(refused)}: tether sends the model, the "
            "conversation, the tools and the output cap itself"
        )


class CapabilityRefused(UsageError):
    """A spec asked for more than the runtime declares; nothing was created."""


class InvalidForkPoint(UsageError):
    """A fork was asked at a point that is not a commit point (a call without its result, a
    sub-agent thread running, the session's end) or that the session does not have. Nothing
    was created."""


class StateConflict(UsageError):
    """The session's state does not allow this now (it has ended; no call waits for that
    decision). Nothing was changed."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a runtime can do. `resume_after_restart`: sessions survive the runtime's process
    (a durable store). `cancel`, `interrupt`, `approvals`: those operations; `inputs`: a call's
    pending input (an MCP elicitation, state `waiting_input`) is answered by `answer`. `event_stream`:
    `events()` is the log so far, then live. `live_deltas`: streamed model output, not stored.
    `tenants`: sessions are scoped to the caller's tenant. `fork`: `fork` makes a session
    that shares another's log up to a point (`tether.session.fork`)."""

    resume_after_restart: bool = False
    cancel: bool = False
    interrupt: bool = False
    approvals: bool = False
    inputs: bool = False
    event_stream: bool = False
    live_deltas: bool = False
    tenants: bool = False
    fork: bool = False

    @staticmethod
    def names() -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(Capabilities))

    def held(self) -> frozenset[str]:
        return frozenset(n for n in self.names() if getattr(self, n))

    @staticmethod
    def of(names: Iterable[str]) -> Capabilities:
        wanted = set(names)
        unknown = sorted(wanted - set(Capabilities.names()))
        if unknown:
            raise UsageError(
                f"unknown capabilities {', '.join(unknown)}; known: {', '.join(Capabilities.names())}"
            )
        return Capabilities(**{n: True for n in wanted})

    def to_json(self) -> JSONObject:
        return wire.to_json(self)

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Capabilities:
        return wire.from_json(Capabilities, data)


def validate_capabilities(declared: Capabilities, requested: Capabilities) -> None:
    """Refuse (`CapabilityRefused`) a request for anything the runtime does not declare."""
    missing = sorted(requested.held() - declared.held())
    if missing:
        raise CapabilityRefused(
            f"this runtime cannot provide {', '.join(missing)} "
            f"(it declares: {', '.join(sorted(declared.held())) or 'nothing'})"
        )


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """A sub-agent of a session (`SessionSpec.agents`, under its name there): its model
    string, system prompt, tool specs and limits, as for the main agent. `description`: what
    the tool that runs it tells the model. `handoff`: offered as `transfer_to_NAME`, which
    hands the rest of the turn over, instead of as a tool named NAME. `agents`: the names of
    other sub-agents of the same spec it is offered in turn (a tree, or a graph without
    cycles). `settings`: its own `ModelSettings`, over the session's (which reach it
    without a `tool_choice`)."""

    model: str
    system: str | None = None
    tools: tuple[str, ...] = ()
    limits: Limits = Limits()
    description: str | None = None
    handoff: bool = False
    agents: tuple[str, ...] = ()
    settings: Settings = None


def agent_json(agent: AgentSpec) -> JSONObject:
    """A sub-agent's JSON form; `settings` only when it has some (a record without them is
    what it always was)."""
    data = wire.to_json(agent)
    if data.get("settings") is None:
        data.pop("settings", None)
    return data


def _check_tools(where: str, tools: Iterable[str]) -> None:
    for spec in tools:
        if not spec.strip() or spec.startswith(":"):
            raise UsageError(f"{where}: {spec!r} is not MODULE or MODULE:ATTR")


def root_agents(agents: Mapping[str, AgentSpec]) -> list[str]:
    """The sub-agents the main agent is offered: those no other sub-agent lists, in order."""
    listed = {child for agent in agents.values() for child in agent.agents}
    return [name for name in agents if name not in listed]


def check_agents(agents: Mapping[str, AgentSpec], max_depth: int) -> None:
    """Refuse (`UsageError`) a bad name, an empty model, a bad tool spec, a sub-agent that
    lists an unknown one, a cycle, or a tree deeper than `max_depth` (its deepest calls
    could never run)."""
    for name, agent in agents.items():
        try:
            check_name(name)
        except UsageError as exc:
            raise UsageError(f"spec.agents: {exc}") from None
        if not agent.model.strip():
            raise UsageError(f"spec.agents.{name}.model is empty: name a model")
        _check_tools(f"spec.agents.{name}.tools", agent.tools)
        check_settings_spec(f"spec.agents.{name}.settings", agent.settings)
        unknown = [child for child in agent.agents if child not in agents]
        if unknown:
            raise UsageError(
                f"spec.agents.{name}.agents names {', '.join(map(repr, unknown))}, which "
                f"spec.agents does not define (it defines: {', '.join(agents)})"
            )
    depth: dict[str, int] = {}  # how deep the tree below each sub-agent goes, itself included

    def below(name: str, path: tuple[str, ...]) -> int:
        if name in path:
            cycle = " -> ".join([*path[path.index(name) :], name])
            raise UsageError(f"spec.agents form a cycle: {cycle}")
        if name not in depth:
            children = agents[name].agents
            depth[name] = 1 + max((below(c, (*path, name)) for c in children), default=0)
        return depth[name]

    deepest = max((below(name, ()) for name in agents), default=0)
    if deepest > max_depth:
        raise UsageError(
            f"spec.agents nest {deepest} deep, more than max_depth={max_depth}: "
            "the deepest could never be called"
        )


def agents_from_json(data: object) -> dict[str, AgentSpec]:
    """Sub-agents from their JSON form (a spec's `agents`, a runner's record, a CLI file),
    checked for what each says alone; a bad one is a one-line `UsageError` naming it."""
    if not isinstance(data, Mapping):
        raise UsageError(f"agents must be a table of sub-agents by name, not {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(AgentSpec)}
    agents: dict[str, AgentSpec] = {}
    for name, value in data.items():
        if not isinstance(value, Mapping):
            raise UsageError(f"agents.{name} must be a table, not {type(value).__name__}")
        extra = sorted(set(value) - known)
        if extra:
            raise UsageError(
                f"agents.{name} has unknown keys {', '.join(map(str, extra))} "
                f"(known: {', '.join(sorted(known))})"
            )
        try:
            agents[str(name)] = wire.from_json(AgentSpec, value)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in ("agents", name, *first["loc"]))
            raise UsageError(f"{where}: {first['msg']}") from None
        except UsageError as exc:  # Limits refuses a value of its own
            raise UsageError(f"agents.{name}: {exc}") from None
    return agents


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """A session to start. `model` is a model string (`scripted:demo`, `python:MODULE:ATTR`,
    `anthropic:MODEL`, ...) and `tools` are `MODULE:ATTR` specs, so any worker process can
    rebuild the runner from what `session.created` records. `end_after_turn`: the session
    ends after a turn that stops for good (completed on `end_turn` or a custom stop, failed
    on an error or a limit); otherwise it stays idle for more messages. `requires`: the
    capabilities the caller relies on, refused before anything is created if not declared.
    `priority`: the session's model calls queue at the gateway as interactive (first) or
    batch. `agents`: sub-agents by name (`AgentSpec`); the main agent is offered those no
    other sub-agent lists, and each runs as a thread of the session; `max_depth` and
    `max_threads` cap how deep they nest and how many run at once (`loop.Engine`). `mcp`:
    the names of MCP servers the operator configured (`tether serve --mcp FILE`) whose tools
    the session is offered: a name only, never a command or URL (`check_mcp_names`).
    `settings`: the `ModelSettings` of every request (its sub-agents' too, under their own)."""

    model: str
    task: str
    tools: tuple[str, ...] = ()
    system: str | None = None
    limits: Limits = Limits()
    metadata: JSONObject = field(default_factory=dict)
    end_after_turn: bool = False
    requires: Capabilities = Capabilities()
    priority: Priority = "interactive"
    agents: dict[str, AgentSpec] = field(default_factory=dict)
    max_depth: int = DEFAULT_MAX_DEPTH
    max_threads: int = DEFAULT_MAX_THREADS
    mcp: tuple[str, ...] = ()
    settings: Settings = None

    def check(self) -> None:
        """What is wrong whatever the runtime: raised as `UsageError`, before any I/O."""
        if not self.model.strip():
            raise UsageError("spec.model is empty: name a model, e.g. scripted:demo")
        if not self.task.strip():
            raise UsageError("spec.task is empty: a session starts with a task")
        _check_tools("spec.tools", self.tools)
        if self.priority not in PRIORITIES:
            raise UsageError(
                f"spec.priority must be one of {', '.join(PRIORITIES)}, not {self.priority!r}"
            )
        taken = sorted(RESERVED_METADATA & set(self.metadata))
        if taken:
            raise UsageError(
                f"spec.metadata may not set {', '.join(taken)}: the runtime writes them"
            )
        if self.max_depth < 0 or self.max_threads < 1:
            raise UsageError(
                f"spec.max_depth must be 0 or more and spec.max_threads 1 or more, "
                f"not {self.max_depth} and {self.max_threads}"
            )
        check_agents(self.agents, self.max_depth)
        check_mcp_names(self.mcp)
        check_settings_spec("spec.settings", self.settings)

    def to_json(self) -> JSONObject:
        """The body of a start request (its fingerprint, too). `requires` is written as the
        names it holds, sorted: what a caller writes, and what the server reads. The
        sub-agent fields and `mcp` are written only when they say something (sub-agents,
        caps other than the defaults, servers), and `settings` only when set, so a spec
        without them is the body, and has the fingerprint, it had before they existed."""
        data = wire.to_json(self)
        for name, default in SUB_AGENT_DEFAULTS.items():
            if data.get(name) == default:
                del data[name]
        if not self.mcp:
            del data["mcp"]
        if "agents" in data:
            data["agents"] = {name: agent_json(a) for name, a in self.agents.items()}
        names = list[JSONValue](sorted(self.requires.held()))
        return {**data, "requires": names}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> SessionSpec:
        requires = Capabilities.of(data.get("requires") or ())
        return wire.from_json(SessionSpec, {**data, "requires": requires})


SUB_AGENT_DEFAULTS: dict[str, JSONValue] = {
    "settings": None,
    "agents": {},
    "max_depth": DEFAULT_MAX_DEPTH,
    "max_threads": DEFAULT_MAX_THREADS,
}
# An operator's MCP server as a spec names it: a name, nothing a shell or a URL could be.
MCP_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
MAX_MCP = 16  # servers one spec may name


def check_mcp_names(names: Sequence[object]) -> None:
    """Refuse (`UsageError` naming `spec.mcp`) anything but a list of a few distinct server
    names: a tenant picks among the operator's servers, it never starts a process or names
    a host, so a command, a URL or a server's config is refused as such."""
    if isinstance(names, str | bytes) or not isinstance(names, Sequence):
        raise UsageError(f"spec.mcp must be a list of MCP server names, not {type(names).__name__}")
    if len(names) > MAX_MCP:
        raise UsageError(f"spec.mcp names {len(names)} MCP servers; at most {MAX_MCP}")
    for index, name in enumerate(names):
        where = f"spec.mcp[{index}]"
        if isinstance(name, Mapping):
            raise UsageError(
                f"{where} is a server's config; name one of the MCP servers the operator "
                "configured instead (a spec never gives a command or URL)"
            )
        if not isinstance(name, str):
            raise UsageError(f"{where} must be an MCP server's name, not {type(name).__name__}")
        if MCP_NAME.fullmatch(name) is None:
            raise UsageError(
                f"{where} {name[:80]!r} is not an MCP server's name (1-64 of A-Z a-z 0-9 _ . -): "
                "name one of the servers the operator configured, never a command or URL"
            )
    if len(set(names)) < len(names):
        raise UsageError("spec.mcp names one MCP server twice")


@dataclass(frozen=True, slots=True)
class SpecChanges:
    """What a fork runs differently from its parent, in a spec's terms (`SessionSpec`): the
    model string, the system prompt (None: none; left out: the parent's), the tools as
    `MODULE:ATTR` specs, the model settings, the limits (the parent's whole, replaced) and
    metadata merged over the parent's (a None value removes a key). What is not given is the
    parent's. A runtime checks the child's spec as `start` checks one."""

    model: str | None = None
    system: str | None = KEEP
    tools: tuple[str, ...] | None = None
    settings: ModelSettings | None = None
    limits: Limits | None = None
    metadata: JSONObject = field(default_factory=dict)

    def to_json(self) -> JSONObject:
        """The fields given, as the fork route's body holds them."""
        out: JSONObject = {}
        if self.model is not None:
            out["model"] = self.model
        if self.system is not KEEP:
            out["system"] = self.system
        if self.tools is not None:
            out["tools"] = list[JSONValue](self.tools)
        if self.settings is not None:
            out["settings"] = self.settings.given()
        if self.limits is not None:
            out["limits"] = {k: v for k, v in self.limits.to_json().items() if v is not None}
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out


@dataclass(frozen=True, slots=True)
class SessionRef:
    session_id: str


WaitKind = Literal[StatusKind, "parked"]


@dataclass(frozen=True, slots=True)
class Waiting:
    """What a `waiting_model` session is waiting for at the model gateway of the process that
    runs it: `kind` is queued, rate_limited, circuit_open, retrying or sending (the call is
    out; the answer is awaited), or parked (no worker holds it until `until`, when one runs
    it again: read from the store, so any process sees it); `reason` says it in one line; `until` (wall clock, ISO) is
    when the wait can end at the earliest; `error` names what is being retried. Live: it is
    read from the gateway at the poll and never stored."""

    kind: WaitKind
    reason: str
    until: str | None = None
    attempt: int = 1
    error: str | None = None

    def to_json(self) -> JSONObject:
        return wire.to_json(self)

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Waiting:
        return wire.from_json(Waiting, data)


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One line of a runtime's session list: enough to choose a session to look at. It is
    the session's catalog row as `catalog.describe` shows it (`of`): read from the index,
    never from the session's log."""

    session_id: str
    state: str
    stop_reason: str | None
    model: str
    steps: int
    turns: int
    created: str
    updated: str
    last_output: str  # its first 300 characters
    task: str = ""  # the first user message, its first 300 characters
    tokens: int = 0  # input and output tokens, its sub-agents' too
    cost_usd: float | None = None  # None: some price was unknown
    metadata: dict[str, str] = field(default_factory=dict)  # the start's (20 keys), as text
    parent: str | None = None  # the session it was forked from (None: not a fork)

    @staticmethod
    def of(row: catalog.CatalogRow) -> SessionSummary:
        # `describe` writes exactly these fields, of these types: nothing to validate.
        return SessionSummary(**cast(dict[str, Any], catalog.describe(row)))

    def to_json(self) -> JSONObject:
        return wire.to_json(self)

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> SessionSummary:
        return wire.from_json(SessionSummary, data)


class ListOptions(TypedDict, total=False):
    """What `Runtime.sessions` takes besides its `limit`: the parameters of `GET /v1/sessions`
    (the same names, the same rules). Every filter given must hold. A text is at most 200
    characters; a filter of several values takes at most 20, as a collection or as one
    comma-separated string."""

    cursor: str | None  # a page's `next_cursor` (of the same sort): the page after it
    state: str | Collection[str]  # only sessions in these states
    stop_reason: str | Collection[str]  # whose last stop reason is one of these
    model: str | Collection[str]  # of these model strings
    id_prefix: str  # whose id starts with this
    q: str  # whose id, task or a metadata value holds this text, case-insensitive
    created_after: str | datetime | None  # created at or after (ISO 8601; UTC if no offset)
    created_before: str | datetime | None  # created before
    metadata: Mapping[str, str]  # whose start metadata has each KEY: VALUE (a value that is
    # not a string compares as its JSON); at most 20
    sort: str  # updated (default), newest, oldest: by time; tokens, cost: the most first
    parent: str  # only the forks of this session
    counts: bool  # also count, per state, the sessions every filter but `state` lets through


@dataclass(frozen=True, slots=True)
class SessionPage(Sequence[SessionSummary]):
    """A page of a session list: its sessions in the sort asked for (the page is a sequence
    of them), the cursor of the next page (None on the last), and the counts per state when
    asked for (`ListOptions.counts`)."""

    sessions: tuple[SessionSummary, ...]
    next_cursor: str | None = None
    counts: dict[str, int] | None = None

    @overload
    def __getitem__(self, index: int) -> SessionSummary: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[SessionSummary]: ...
    def __getitem__(self, index: int | slice) -> SessionSummary | Sequence[SessionSummary]:
        return self.sessions[index]

    def __len__(self) -> int:
        return len(self.sessions)

    def to_json(self) -> JSONObject:
        """`GET /v1/sessions`'s answer: `counts` only when they were asked for."""
        out: JSONObject = {
            "sessions": [s.to_json() for s in self.sessions],
            "next_cursor": self.next_cursor,
        }
        if self.counts is not None:
            out["counts"] = dict(self.counts)
        return out

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> SessionPage:
        counts = data.get("counts")
        return SessionPage(
            tuple(SessionSummary.from_json(item) for item in data["sessions"]),
            data.get("next_cursor"),
            None if counts is None else {str(k): int(v) for k, v in counts.items()},
        )


@dataclass(frozen=True, slots=True)
class SessionStatus:
    """One observation of a session: its fold's view (state, stop reason, usage, cost, last
    output, seq, open calls and pending approvals), and, while it is `waiting_model` in the
    process answering the poll, what it waits for there (`waiting`). Successive observations
    obey `tether.state.validate_observation(a.view, b.view)`."""

    view: SessionView
    waiting: Waiting | None = None

    @property
    def waiting_reason(self) -> str | None:
        """E.g. "queued for the model", "rate limited for 3.0 s", "retrying after error ..."."""
        return None if self.waiting is None else self.waiting.reason

    @property
    def session_id(self) -> str:
        return self.view.session_id

    @property
    def state(self) -> str:
        return self.view.state

    @property
    def stop_reason(self) -> str | None:
        return self.view.stop_reason

    @property
    def usage(self) -> Usage:
        return self.view.usage

    @property
    def cost_usd(self) -> float | None:
        return self.view.cost_usd

    @property
    def last_output(self) -> str:
        return self.view.last_output

    @property
    def last_seq(self) -> int:
        return self.view.last_seq

    @property
    def terminal(self) -> bool:
        return self.view.state in TERMINAL_STATES

    @property
    def settled(self) -> bool:
        """Nothing runs and nothing will until someone acts: ended, idle, or waiting for a
        decision or for input."""
        return self.terminal or self.view.state in ("idle", "waiting_approval", "waiting_input")

    def to_json(self) -> JSONObject:
        """The view's JSON (`SessionView.to_json`, with `forked` null for a session that is
        not a fork), then `waiting_reason` and `waiting`."""
        out = self.view.to_json()
        out.setdefault("forked", None)
        out["waiting_reason"] = self.waiting_reason
        out["waiting"] = None if self.waiting is None else self.waiting.to_json()
        return out

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> SessionStatus:
        waiting = data.get("waiting")
        return SessionStatus(
            view_from_json(data), None if waiting is None else Waiting.from_json(waiting)
        )


def view_from_json(data: Mapping[str, Any]) -> SessionView:
    """The inverse of `SessionView.to_json`, read by the view's own adapter. That form leaves
    out `transcript_chars` (read as its default) and writes each decision under its call id
    without repeating it, so the id is put back from the key."""
    decisions = {k: {**d, "call_id": k} for k, d in (data.get("decisions") or {}).items()}
    return wire.from_json(SessionView, {**data, "decisions": decisions})


class Runtime(Protocol):
    """Start, watch, steer and stop sessions. Every method that waits takes `timeout`
    (seconds; None waits as long as it takes) and raises `TimeoutError` past it; cancelling
    the calling task cancels the wait. A session of another tenant is `SessionNotFound`."""

    async def capabilities(self, *, timeout: float | None = None) -> Capabilities:
        """What this runtime can do. Creates nothing."""
        ...

    async def start(
        self,
        spec: SessionSpec,
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> SessionRef:
        """Create the session and return once it exists (a worker runs it). The same
        `idempotency_key` with the same spec returns the same session."""
        ...

    async def poll(self, ref: SessionRef, *, timeout: float | None = None) -> SessionStatus:
        """What the session is doing now. Never waits on the session itself."""
        ...

    async def fork(
        self,
        ref: SessionRef,
        *,
        at: ForkPoint | None = None,
        changes: SpecChanges | None = None,
        message: str | None = None,
        kind: ForkKind = "fork",
        open_calls: OpenCalls = "refuse",
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Forked:
        """A new session whose log is this one's up to `at` (default: its end), then its
        own, running with `changes` (checked as `start` checks a spec); `message` opens its
        first turn. A child with a turn to run (a message, or a point inside a turn) is run
        by a worker; an idle one waits for `send`. A point that is not a commit point is
        `InvalidForkPoint`, nothing created. The same `idempotency_key` with the same
        request returns the same child."""
        ...

    async def cancel(self, ref: SessionRef, *, timeout: float | None = None) -> None:
        """End the session `canceled`. Cancelling an ended session succeeds and changes
        nothing: its evidence stays readable."""
        ...

    async def interrupt(self, ref: SessionRef, *, timeout: float | None = None) -> None:
        """End the running turn `interrupted`; the session stays usable."""
        ...

    async def send(
        self,
        ref: SessionRef,
        message: str,
        *,
        timeout: float | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        """Add a user message; a worker runs the turn it opens. The same `idempotency_key`
        with the same message adds it once, from any process, at any later time; with
        another message it is `IdempotencyConflict`."""
        ...

    async def decide(
        self,
        ref: SessionRef,
        call_id: str,
        allow: bool,
        reason: str | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """Allow or deny a call that waits for approval."""
        ...

    async def answer(
        self,
        ref: SessionRef,
        call_id: str,
        data: JSONObject | None = None,
        action: str = "accept",
        *,
        timeout: float | None = None,
    ) -> None:
        """Answer the input a running call waits for (`SessionView.pending_inputs`): `accept`
        with `data`, which must meet the schema the MCP server asked with, or `decline` /
        `cancel`. The call goes on with it, in this runner or the next."""
        ...

    async def sessions(
        self, limit: int = 50, *, timeout: float | None = None, **options: Unpack[ListOptions]
    ) -> SessionPage:
        """A page of this tenant's sessions (at most `limit`, 1 to 500), the most recently
        updated first unless `sort` says otherwise, filtered as `options` say, read from the
        store's catalog. Follow `next_cursor` (as `cursor`, with the same filters and sort) to
        the last page: every session that matched when the first page was read and was not
        updated since is seen exactly once. Bad options are a `UsageError` naming them."""
        ...

    def events(
        self, ref: SessionRef, after_seq: int = 0, *, timeout: float | None = None
    ) -> AsyncIterator[Event]:
        """The session's events after `after_seq`: the log so far, then live, each once and
        in order; the stream ends after the event that ends the session."""
        ...

    def live(
        self, ref: SessionRef, after_seq: int = 0, *, timeout: float | None = None
    ) -> AsyncIterator[Event | Delta]:
        """`events`, and between them the model's streamed output as it is produced
        (`live_deltas`): never stored, so only what comes while the stream is open."""
        ...

    async def close(self) -> None: ...


async def events_only(stream: AsyncGenerator[Event | Delta, None]) -> AsyncIterator[Event]:
    """A live stream's events, its deltas dropped; closed as soon as the consumer stops,
    not when collected (it holds a subscription or a connection)."""
    try:
        async for item in stream:
            if isinstance(item, Event):
                yield item
    finally:
        await stream.aclose()
