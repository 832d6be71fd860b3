"""The HTTP API's request bodies (pydantic, strict, no extra fields), the answers only HTTP
has, and its OpenAPI document.

The answers that carry a runtime shape (a status, a session list, capabilities) are the
dataclasses of `tether.runtime.base`: the document takes their JSON Schema from the same
adapters that write and read them (`tether.runtime.wire`). `app` maps all of it onto the
Runtime protocol.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    field_validator,
    model_validator,
)

from tether.errors import UsageError
from tether.events import ApprovalDecided
from tether.experiment.records import METRICS as CHART_METRICS
from tether.limits import Limits
from tether.messages import JSONValue, Usage
from tether.runtime.base import (
    MAX_MCP,
    MCP_NAME,
    AgentSpec,
    Capabilities,
    SessionSpec,
    SessionStatus,
    SessionSummary,
    SpecChanges,
    Waiting,
    check_mcp_names,
)
from tether.runtime.wire import adapter
from tether.session.fork import KEEP, Forked, ForkPoint
from tether.session.threads import DEFAULT_MAX_DEPTH, DEFAULT_MAX_THREADS
from tether.settings import ModelSettings
from tether.state import SessionView

if TYPE_CHECKING:
    CapabilityName = str
else:  # Capabilities' field names, as a Literal: pydantic checks a name and documents them all
    CapabilityName = Literal[Capabilities.names()]
# A text's own bound is the body's: `bounds.InputLimits.text_bytes` (set by the operator)
# is the one that names itself when a text is too long.
MAX_TEXT = 1 << 20
Text = Field(min_length=1, max_length=MAX_TEXT)
MAX_AGENTS = 16  # sub-agents in one spec
# A sub-agent's name (`SessionSpec.check` holds it to `tether.session.threads.check_name`).
AgentName = Annotated[str, Field(min_length=1, max_length=64)]
# An MCP server the operator configured, by its name (`SessionSpec.mcp`).
McpName = Annotated[str, Field(pattern=f"^{MCP_NAME.pattern}$", max_length=64)]
REF = "#/components/schemas/{model}"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class LimitsBody(_Body):
    """A spec's `Limits`, within the bounds this server takes."""

    max_steps: int | None = Field(50, gt=0, le=100_000)
    max_tokens: int | None = Field(None, gt=0)
    max_cost_usd: float | None = Field(None, gt=0, allow_inf_nan=False)
    max_seconds: float | None = Field(None, gt=0, le=7 * 86_400, allow_inf_nan=False)
    max_output_tokens: int | None = Field(None, gt=0)


class ReasoningBody(_Body):
    """`ModelSettings.reasoning`: an effort, a budget of thinking tokens, or both;
    `interleaved`: thinking between tool calls too (Anthropic's beta, asked for)."""

    effort: Literal["low", "medium", "high"] | None = None
    budget_tokens: int | None = Field(None, gt=0)
    interleaved: bool = False


class SettingsBody(_Body):
    """A spec's `ModelSettings` (see `tether.ModelSettings`); a field left out is the
    provider's default. Each is checked as `ModelSettings` checks it, and against the model
    at start: a setting its API cannot honour is a 422 naming it."""

    temperature: float | None = Field(None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    max_output_tokens: int | None = Field(None, gt=0)
    stop: list[str] | None = Field(None, max_length=16)
    seed: int | None = None
    tool_choice: str | None = Field(None, min_length=1, max_length=200)
    reset_tool_choice: bool | None = None
    parallel_tool_calls: bool | None = None
    timeout: float | None = Field(None, gt=0, le=3_600, allow_inf_nan=False)
    reasoning: ReasoningBody | None = None
    cache: bool = True
    extra: dict[str, JsonValue] | None = None

    def to_settings(self) -> ModelSettings:
        try:
            return ModelSettings.from_json(self.model_dump(exclude_none=True))
        except UsageError as exc:
            raise UsageError(f"settings: {exc}") from None


class AgentBody(_Body):
    """A sub-agent of a session to start (see `AgentSpec`)."""

    model: str = Field(min_length=1, max_length=500)
    system: str | None = Field(None, max_length=MAX_TEXT)
    tools: list[str] = Field(default_factory=list, max_length=100)
    limits: LimitsBody = Field(default_factory=lambda: LimitsBody.model_validate({}))
    description: str | None = Field(None, max_length=10_000)
    handoff: bool = False
    agents: list[AgentName] = Field(default_factory=list, max_length=MAX_AGENTS)
    settings: SettingsBody | None = None

    def to_spec(self) -> AgentSpec:
        return AgentSpec(
            model=self.model,
            system=self.system,
            tools=tuple(self.tools),
            limits=Limits(**self.limits.model_dump()),
            description=self.description,
            handoff=self.handoff,
            agents=tuple(self.agents),
            settings=None if self.settings is None else self.settings.to_settings(),
        )


class StartBody(_Body):
    """A session to start (see `SessionSpec`)."""

    model: str = Field(min_length=1, max_length=500, examples=["scripted:demo"])
    task: str = Text
    tools: list[str] = Field(default_factory=list, max_length=100)
    system: str | None = Field(None, max_length=MAX_TEXT)
    limits: LimitsBody = Field(default_factory=lambda: LimitsBody.model_validate({}))
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    end_after_turn: bool = False
    requires: list[CapabilityName] = Field(default_factory=list)
    priority: Literal["interactive", "batch"] = "interactive"
    agents: dict[AgentName, AgentBody] = Field(default_factory=dict, max_length=MAX_AGENTS)
    max_depth: int = Field(DEFAULT_MAX_DEPTH, ge=0, le=MAX_AGENTS)
    max_threads: int = Field(DEFAULT_MAX_THREADS, ge=1, le=64)
    mcp: list[McpName] = Field(default_factory=list, max_length=MAX_MCP)
    settings: SettingsBody | None = None

    @field_validator("mcp", mode="before")
    @classmethod
    def _mcp_names(cls, value: object) -> object:
        """A command, URL or server config says so in one line, not as a pattern mismatch."""
        try:
            check_mcp_names(value)  # type: ignore[arg-type]
        except UsageError as exc:
            raise ValueError(str(exc)) from None
        return value

    def to_spec(self) -> SessionSpec:
        return SessionSpec(
            model=self.model,
            task=self.task,
            tools=tuple(self.tools),
            system=self.system,
            limits=Limits(**self.limits.model_dump()),
            metadata=dict(self.metadata),
            end_after_turn=self.end_after_turn,
            requires=Capabilities.of(self.requires),
            priority=self.priority,
            agents={name: agent.to_spec() for name, agent in self.agents.items()},
            max_depth=self.max_depth,
            max_threads=self.max_threads,
            mcp=tuple(self.mcp),
            settings=None if self.settings is None else self.settings.to_settings(),
        )


class ForkAtBody(_Body):
    """Where to fork: one of `seq` (an exact seq), `turn` (the start of turn N, after the
    message that opened it) and `after_turn` (the end of turn N)."""

    seq: int | None = Field(None, ge=1, le=10**15 - 1)
    turn: int | None = Field(None, ge=1, le=10**15 - 1)
    after_turn: int | None = Field(None, ge=1, le=10**15 - 1)

    @model_validator(mode="after")
    def _one(self) -> ForkAtBody:
        given = [v for v in (self.seq, self.turn, self.after_turn) if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of seq, turn and after_turn")
        return self


class ForkBody(_Body):
    """A fork of the session (see `Runtime.fork`): where (`at`; default: the session's end),
    a message that opens the child's first turn, and what the child runs differently (each
    left out: the parent's; `system: null`: no system prompt; `limits` replace the
    parent's; `metadata` is merged over the parent's, a null value removing a key)."""

    at: ForkAtBody | None = None
    message: str | None = Field(None, min_length=1, max_length=MAX_TEXT)
    kind: Literal["fork", "rewind"] = "fork"
    open_calls: Literal["refuse", "cancel"] = "refuse"
    model: str | None = Field(None, min_length=1, max_length=500)
    system: str | None = Field(None, max_length=MAX_TEXT)
    tools: list[str] | None = Field(None, max_length=100)
    settings: SettingsBody | None = None
    limits: LimitsBody | None = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    def point(self) -> ForkPoint:
        at = self.at
        return ForkPoint() if at is None else ForkPoint(at.seq, at.turn, at.after_turn)

    def to_changes(self) -> SpecChanges:
        return SpecChanges(
            model=self.model,
            system=self.system if "system" in self.model_fields_set else KEEP,
            tools=None if self.tools is None else tuple(self.tools),
            settings=None if self.settings is None else self.settings.to_settings(),
            limits=None if self.limits is None else Limits(**self.limits.model_dump()),
            metadata=dict(self.metadata),
        )


class MessageBody(_Body):
    text: str = Text


class DecisionBody(_Body):
    call_id: str = Field(min_length=1, max_length=200)
    allow: bool
    reason: str | None = Field(None, max_length=10_000)


class AnswerBody(_Body):
    """The answer to a call's pending input: `accept` with `data` (an object meeting the
    schema the MCP server asked with), or `decline` / `cancel`."""

    call_id: str = Field(min_length=1, max_length=200)
    action: Literal["accept", "decline", "cancel"] = "accept"
    data: dict[str, JsonValue] | None = None


class StopBody(_Body):
    reason: str | None = Field(None, max_length=10_000)


class ErrorDetail(BaseModel):
    code: str
    message: str
    status: int


class ErrorBody(BaseModel):
    error: ErrorDetail


class DoneModel(BaseModel):
    session_id: str
    done: str


class EventModel(BaseModel):
    session_id: str
    seq: int
    id: str
    time: str
    thread: str
    type: str
    data: dict[str, JsonValue]


class EventSummary(BaseModel):
    """An event as `?summary=true` sends it (`server.summary`): its data cut short, the
    whole event's size in bytes, and whether anything was cut."""

    seq: int
    time: str
    thread: str
    type: str
    data: dict[str, JsonValue]
    size: int
    clipped: bool


class EventPage(BaseModel):
    events: list[EventModel | EventSummary]
    last_seq: int
    more: bool


class TranscriptText(BaseModel):
    text: str
    chars: int
    cut: bool


class TranscriptMessage(BaseModel):
    """A message of the transcript: each part's text (a call's arguments as pretty JSON) cut
    at `clip` characters, with its whole length (`server.transcript.part_json`)."""

    index: int
    seq: int
    role: str
    parts: list[dict[str, JsonValue]]


class TranscriptPage(BaseModel):
    """A page of one thread's transcript (`server.transcript`): `next` is the index the next
    page starts at (null: this is the last), `threads` the sub-agent threads this one
    started, each named by the call that started it."""

    session_id: str
    thread: str
    agent: str
    model: str
    system: TranscriptText | None
    total: int
    compactions: int
    last_seq: int
    messages: list[TranscriptMessage]
    next: int | None
    threads: list[dict[str, JsonValue]]


class HealthModel(BaseModel):
    status: str


MODELS: list[type[BaseModel]] = [
    StartBody, ForkBody, MessageBody, DecisionBody, AnswerBody, StopBody, ErrorBody, DoneModel, EventPage,
    HealthModel, TranscriptPage,
]  # fmt: skip
# The runtime's shapes in the answers (a status is its view's fields and what it waits for).
SHAPES: list[type] = [Capabilities, SessionSummary, SessionView, Waiting, Forked]


def _ref(shape: type | str) -> dict[str, str]:
    return {"$ref": REF.format(model=shape if isinstance(shape, str) else shape.__name__)}


def _json(shape: type | str) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(shape)}}


def _object(**properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


def _as_written(schema: dict[str, Any], written: JSONValue) -> None:
    """Narrow a shape's schema to the keys its encoder writes, each of them required: an
    adapter's schema leaves a field with a default optional, though every answer carries it,
    and lists a field the encoder leaves out (the view's `transcript_chars`)."""
    assert isinstance(written, dict)
    schema["properties"] = {k: schema["properties"][k] for k in written}
    schema["required"] = list(written)


def components() -> dict[str, Any]:
    """The schemas of the bodies and the answers, by name."""
    _, document = TypeAdapter.json_schemas(
        [(shape, "validation", adapter(shape)) for shape in [*MODELS, *SHAPES]], ref_template=REF
    )
    defs: dict[str, Any] = document["$defs"]
    # What the encoders write, read off samples, so the document says what answers carry.
    decided = ApprovalDecided("call_1", allow=True)
    status = SessionStatus(SessionView(decisions={decided.call_id: decided})).to_json()
    decisions = status["decisions"]
    assert isinstance(decisions, dict)
    _as_written(defs["ApprovalDecided"], decisions[decided.call_id])  # its id is the key
    _as_written(defs["Capabilities"], Capabilities().to_json())
    _as_written(defs["Usage"], Usage().to_json())
    _as_written(defs["Waiting"], Waiting("queued", "").to_json())
    defs["Forked"]["description"] = (
        "A fork made: the child (session_id), its parent, the parent's seq it shares up to "
        "(at), the parent's last seq then (parent_last_seq), the child's state (pending: a "
        "turn to run, which a worker takes; idle: it waits for a message), the kind, and the "
        "open calls the fork answered (open_calls=cancel)"
    )
    defs["Forked"]["required"] = list(defs["Forked"]["properties"])
    view = defs.pop("SessionView")
    view["properties"] |= {
        "waiting_reason": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "waiting": {"anyOf": [_ref(Waiting), {"type": "null"}]},
    }
    _as_written(view, status)
    view.update(title="SessionStatus", description=inspect.cleandoc(SessionStatus.__doc__ or ""))
    defs["SessionStatus"] = view
    defs["StartedModel"] = _object(session_id={"type": "string"}, status=_ref(SessionStatus))
    row = defs["SessionSummary"]
    _as_written(row, SessionSummary("", "", None, "", 0, 0, "", "", "").to_json())
    row["properties"]["task"]["description"] = "the first user message, cut at 300 characters"
    row["properties"]["tokens"]["description"] = "input and output tokens, sub-agents' too"
    row["properties"]["metadata"]["description"] = (
        "the start's metadata (20 keys), each value as text, cut at 300 characters"
    )
    defs["SessionList"] = _object(
        sessions={"type": "array", "items": _ref(SessionSummary)},
        next_cursor={"anyOf": [{"type": "string"}, {"type": "null"}],
                     "description": "the `cursor` of the next page; null on the last page"},
    )  # fmt: skip
    defs["SessionList"]["properties"]["counts"] = {
        "type": "object", "additionalProperties": {"type": "integer"},
        "description": "with counts=true: per state, the sessions every filter but state lets through",
    }  # fmt: skip
    defs["StartOptions"] = _object(
        allow_code={"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
        tools={"type": "array", "items": _object(
            spec={"type": "string"}, tools={"type": "array", "items": _object(
                name={"type": "string"}, description={"type": "string"})})},
        mcp={"type": "array", "items": {"type": "string"},
             "description": "the MCP servers a spec may name in `mcp`"},
        models={"type": "array", "items": _object(
            provider={"type": "string"}, models={"type": "array", "items": {"type": "string"}},
            template={"anyOf": [{"type": "string"}, {"type": "null"}]})},
    )  # fmt: skip
    bounds = {"type": "object", "description": "what the answer was bounded by (its limits) "
              "and whether it holds everything (complete)"}  # fmt: skip
    defs["ExperimentList"] = _object(
        experiments={"type": "array", "items": _object(
            experiment_id={"type": "string"}, variants={"type": "array", "items": {"type": "string"}},
            tasks={"type": "array", "items": {"type": "string"}}, runs={"type": "integer"},
            updated={"type": "string"})},
        bounds=bounds,
    )  # fmt: skip
    defs["ExperimentReport"] = _object(
        experiment_id={"type": "string"}, plan={"type": "object"}, confidence={"type": "number"},
        variants={"type": "object"}, runs={"type": "array", "items": {"type": "object"}},
        comparisons={"type": "array", "items": {"type": "object"}},
        checks={"type": "object", "description": "task -> run, none, or why its check was not run"},
        bounds=bounds,
    )  # fmt: skip
    day = {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}
    defs["UsageReport"] = _object(
        tenant={"anyOf": [{"type": "string"}, {"type": "null"}],
                "description": "null: a server without tokens, every tenant's"},
        **{"from": day, "to": day},
        usage={"type": "array", "description": "by (day, model), the earliest first; a day is the "
               "UTC date of a session's last event, on which all it spent is counted",
               "items": _object(
                   day=day, model={"type": "string"}, sessions={"type": "integer"},
                   input_tokens={"type": "integer"}, output_tokens={"type": "integer"},
                   cache_read_tokens={"type": "integer"}, cache_write_tokens={"type": "integer"},
                   cost_usd={"type": "number", "description": "the known costs"},
                   cost_unknown_sessions={"type": "integer",
                                          "description": "sessions whose cost is unknown"})},
        bounds=bounds,
    )  # fmt: skip
    return defs


def _errors(*statuses: int) -> dict[str, Any]:
    return {
        str(s): {"description": "an error envelope", "content": _json(ErrorBody)} for s in statuses
    }


SESSION_ID = {
    "name": "session_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": 200},
}
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 200},
    "description": "The same key with the same body answers with what it made the first time.",
}
EXPERIMENT_ID = {
    "name": "experiment_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"},
}
MAX_SEQ = 10**15 - 1  # the server reads at most 15 digits
AFTER_SEQ = {
    "name": "after_seq",
    "in": "query",
    "required": False,
    "schema": {"type": "integer", "minimum": 0, "maximum": MAX_SEQ, "default": 0},
}


def _op(
    summary: str, ok: int, answer: type | str | None, *errors: int, **extra: Any
) -> dict[str, Any]:
    # 401: no tenant's token; 403: a server without authentication refuses a Host that is
    # not loopback, or a change from another origin.
    op: dict[str, Any] = {"summary": summary, "responses": _errors(401, 403, *errors)}
    op["responses"][str(ok)] = {"description": summary}
    if answer is not None:
        op["responses"][str(ok)]["content"] = _json(answer)
    op.update(extra)
    return op


def _body(model: type[BaseModel], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": _json(model)}


SUMMARY = {
    "name": "summary", "in": "query", "required": False,
    "description": "each event's summary instead of the whole event: seq, time, thread, type, its "
                   "data with strings past 160 characters and lists or objects past 12 items cut "
                   "(marked …), size (bytes of the whole event) and clipped (whether anything was "
                   "cut); the whole event: GET /v1/sessions/{session_id}/events/{seq}",
    "schema": {"type": "string", "enum": ["true", "false", "1", "0"]},
}  # fmt: skip


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema}  # fmt: skip


LISTED = {"type": "string", "maxLength": 4_200}  # 20 comma-separated values of 200 characters
TIME = {"type": "string", "format": "date-time"}
# `GET /v1/sessions`'s parameters (read by `listquery`); a bad value is a 422 naming it.
LIST_PARAMETERS = [
    _query("limit", "rows per page", {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}),
    _query("cursor", "a page's next_cursor, with the same sort: the page after it", {"type": "string"}),
    _query("state", "only sessions in these states (comma-separated)", LISTED),
    _query("stop_reason", "only sessions whose last stop reason is one of these (comma-separated)", LISTED),
    _query("model", "only sessions of these models (comma-separated model strings)", LISTED),
    _query("id_prefix", "only sessions whose id starts with this", {"type": "string", "maxLength": 200}),
    _query("q", "only sessions whose id, task (first user message) or a metadata value holds this "
                "text, case-insensitive", {"type": "string", "maxLength": 200}),
    _query("created_after", "only sessions created at or after this time (ISO 8601; UTC without "
                            "an offset)", TIME),
    _query("created_before", "only sessions created before this time", TIME),
    {**_query("metadata", "only sessions whose start metadata has KEY=VALUE (a value that is not "
                          "a string as its JSON); repeat for several, all must hold",
              {"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 20}),
     "style": "form", "explode": True},
    _query("sort", "updated: most recently updated first; newest, oldest: by creation; tokens, "
                   "cost: the most first (an unknown cost last)",
           {"type": "string", "enum": ["updated", "newest", "oldest", "tokens", "cost"],
            "default": "updated"}),
    _query("parent", "only the forks of this session (its id)", {"type": "string", "maxLength": 200}),
    _query("counts", "also counts per state of the sessions every filter but state lets through",
           {"type": "string", "enum": ["true", "false", "1", "0"]}),
]  # fmt: skip


# One Server-Sent Events frame: `event` is the event type (or `end`, whose data says why the
# stream ended), `id` the event's seq, `data` the event's JSON.
SSE_FRAME = {
    "type": "object",
    "properties": {
        "event": {"type": "string"},
        "id": {"type": "string"},
        "data": {"type": "string"},
    },
}


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API, built from the same models and dataclasses that
    validate, write and read its bodies."""
    session = [SESSION_ID]
    stream = {
        "summary": "the session's events as Server-Sent Events: the log so far, then live",
        "parameters": [
            SESSION_ID,
            AFTER_SEQ,
            {"name": "Last-Event-ID", "in": "header", "required": False,
             "schema": {"type": "string", "pattern": "^[0-9]{1,15}$"}},
            {"name": "timeout", "in": "query", "required": False,
             "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600}},
            {"name": "deltas", "in": "query", "required": False,
             "description": "also the model's streamed output, as `delta` frames without an "
                            "id (live only, never stored)",
             "schema": {"type": "string", "enum": ["true", "false", "1", "0"]}},
            SUMMARY,
        ],
        "responses": {
            "200": {"description": "id: seq, event: type, data: the event's JSON (with summary, "
                                   "its EventSummary); with deltas, also event: delta, "
                                   "data: {kind, text, call_id}",
                    "content": {"text/event-stream": {"schema": SSE_FRAME}}},
            **_errors(400, 401, 403, 404, 422),
        },
    }  # fmt: skip
    paths: dict[str, Any] = {
        "/healthz": {"get": {"summary": "the process answers (touches nothing else)", "security": [],
                             "responses": {"200": {"description": "ok", "content": _json(HealthModel)}}}},
        "/readyz": {"get": {"summary": "the store takes a write and a read now", "security": [],
                            "responses": {"200": {"description": "ready", "content": _json(HealthModel)},
                                          **_errors(503)}}},
        "/metrics": {"get": {
            "summary": "Prometheus text: totals for anyone; per-backend series with the operator's "
                       "metrics token as the bearer token", "security": [],
            "responses": {"200": {"description": "the text exposition format 0.0.4",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
        "/openapi.json": {"get": {"summary": "this document", "security": [], "responses": {
            "200": {"description": "OpenAPI 3.1",
                    "content": {"application/json": {"schema": {"type": "object"}}}}}}},
        "/v1/capabilities": {"get": _op("what this runtime can do", 200, Capabilities)},
        "/v1/start-options": {"get": _op(
            "what a start may name here: the operator's --allow-code patterns (null: any code), "
            "the tool specs they match, each with its tools' names, and the models by provider",
            200, "StartOptions")},
        "/v1/sessions": {
            "post": _op("start a session", 201, "StartedModel", 400, 409, 413, 415, 422,
                        parameters=[IDEMPOTENCY_KEY], requestBody=_body(StartBody)),
            "get": _op("this tenant's sessions, a page at a time, filtered and sorted, every one "
                       "of them (read from the store's catalog)", 200, "SessionList", 422,
                       parameters=LIST_PARAMETERS),
        },
        "/v1/sessions/{session_id}": {"get": _op(
            "poll a session", 200, SessionStatus, 404, parameters=session)},
        "/v1/sessions/{session_id}/fork": {"post": _op(
            "fork the session: a new session whose log is this one's up to `at` (default: its "
            "end), then its own; 422 invalid_fork_point at a point that is not a commit point "
            "(a call without its result, a sub-agent running, the session's end)",
            201, Forked, 400, 404, 409, 413, 415, 422, 429,
            parameters=[SESSION_ID, IDEMPOTENCY_KEY], requestBody=_body(ForkBody, required=False))},
        "/v1/sessions/{session_id}/cancel": {"post": _op(
            "end the session (an ended session: nothing to do)", 200, DoneModel, 400, 404, 413, 415, 422,
            parameters=session, requestBody=_body(StopBody, required=False))},
        "/v1/sessions/{session_id}/interrupt": {"post": _op(
            "end the running turn", 200, DoneModel, 400, 404, 413, 415, 422,
            parameters=session, requestBody=_body(StopBody, required=False))},
        "/v1/sessions/{session_id}/messages": {"post": _op(
            "send a user message", 202, DoneModel, 400, 404, 409, 413, 415, 422,
            parameters=[SESSION_ID, IDEMPOTENCY_KEY], requestBody=_body(MessageBody))},
        "/v1/sessions/{session_id}/decisions": {"post": _op(
            "allow or deny a call that waits for approval", 200, DoneModel, 400, 404, 409, 413, 415, 422,
            parameters=session, requestBody=_body(DecisionBody))},
        "/v1/sessions/{session_id}/answers": {"post": _op(
            "answer the input a running call waits for (an MCP elicitation)", 200, DoneModel, 400,
            404, 409, 413, 415, 422, parameters=session, requestBody=_body(AnswerBody))},
        "/v1/sessions/{session_id}/events": {"get": _op(
            "a page of the session's events", 200, EventPage, 404, 422,
            parameters=[SESSION_ID, AFTER_SEQ, {"name": "limit", "in": "query", "required": False,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 10_000, "default": 1000}},
                        SUMMARY])},
        "/v1/sessions/{session_id}/events/{seq}": {"get": _op(
            "one whole event of the session, by its seq", 200, EventModel, 404, 422,
            parameters=[SESSION_ID, {"name": "seq", "in": "path", "required": True,
                                     "schema": {"type": "integer", "minimum": 1, "maximum": MAX_SEQ}}])},
        "/v1/sessions/{session_id}/transcript": {"get": _op(
            "a page of one thread's transcript, as the fold holds it (what the model saw): at "
            "most `limit` messages from message `after`, each text cut at `clip` characters",
            200, TranscriptPage, 404, 422, parameters=[
                SESSION_ID,
                _query("thread", "a sub-agent thread's id (default: the main thread)",
                       {"type": "string", "maxLength": 1_000}),
                _query("after", "the index of the page's first message",
                       {"type": "integer", "minimum": 0, "default": 0}),
                _query("limit", "messages at most (a page also stops past about 1 MB)",
                       {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}),
                _query("clip", "characters kept of each text (0: whole)",
                       {"type": "integer", "minimum": 0, "default": 2_000}),
            ])},
        "/v1/sessions/{session_id}/stream": {"get": stream},
        "/v1/experiments": {"get": _op(
            "this tenant's experiments (run_matrix's tagged sessions among the store's newest), "
            "the most recently run first", 200, "ExperimentList")},
        "/v1/experiments/{experiment_id}": {"get": _op(
            "an experiment's report: each variant's figures with intervals, each variant against "
            "the first, the runs; checks the operator did not allow are not run", 200,
            "ExperimentReport", 404, 422, parameters=[EXPERIMENT_ID])},
        "/v1/experiments/{experiment_id}/chart.svg": {"get": _op(
            "the variants on one metric with intervals, as SVG: by default the pass rate (steps "
            "when no check ran)", 200, None, 404, 422, parameters=[EXPERIMENT_ID, _query(
                "metric", "the metric drawn", {"type": "string", "enum": list(CHART_METRICS)})])},
        "/v1/usage": {"get": _op(
            "this tenant's tokens and cost by model and UTC day, from the store's catalog; each "
            "session counted on the day of its last event", 200, "UsageReport", 422,
            parameters=[_query(name, f"the {which} UTC day, included (default: {default})",
                               {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"})
                        for name, which, default in (("from", "first", "29 days before `to`"),
                                                     ("to", "last", "today"))])},
    }  # fmt: skip
    chart = paths["/v1/experiments/{experiment_id}/chart.svg"]["get"]["responses"]["200"]
    chart["content"] = {"image/svg+xml": {"schema": {"type": "string"}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "tether", "version": "1", "description": "Managed agent sessions."},
        "paths": paths,
        "components": {
            "schemas": components(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
