"""Typed, immutable events: the session log's vocabulary and its canonical JSON form.

Owns the payload types (one per event name), the `Event` envelope and the
schema version. It does no I/O: stores persist these, the fold reads them.

Schema changelog (one line per version; older logs must still fold to the same transcript):
  1 — first version.
  2 — `model.failed` may carry `retrying_in`: seconds until the same request is sent again
      (the request stays open); absent or null, the request failed for good.
  3 — sub-agent threads: `thread.started` (on the new thread: its agent, model, system, the
      parent's call, and for a handoff the conversation it takes over) and `thread.finished`
      (its output and stop reason); thread ids are paths (`researcher-1/critic-2`).
  (3, additive: new event types only, so older logs fold as before) — `input.requested` and
      `input.answered` (an MCP server's elicitation during a call, and its answer);
      `sampling.answered` (an MCP server's sampling request served by the session's model).
  (3, additive) — `session.forked`: the first event of a session forked from another, whose
      log shares the parent's events up to `parent_seq` (the store reads them from the parent).
  (3, additive: a sparse field, older events' bytes unchanged) — `tool.finished` may carry
      `replayed`: the id of the recorded `tool.finished` a replay served the call from.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal, TypeAlias

from tether.errors import CorruptLog
from tether.messages import Image, JSONObject, Message, Usage, canonical_json

SCHEMA_VERSION = 3

Outcome = Literal[
    "ok",
    "error",
    "timeout",
    "canceled",
    "denied",
    "unknown_effect",
    "invalid_input",
    "unknown_tool",
]
Effect = Literal["read", "idempotent", "write"]
EndOutcome = Literal["completed", "failed", "canceled"]
# How a user answers an elicitation (MCP's `ElicitResult.action`).
InputAction = Literal["accept", "decline", "cancel"]
INPUT_ACTIONS: tuple[InputAction, ...] = ("accept", "decline", "cancel")
# What a cancel request stops: the running turn (an interrupt), or the whole session.
CancelScope = Literal["turn", "session"]
CANCEL_SCOPES: tuple[CancelScope, ...] = ("turn", "session")


@dataclass(frozen=True, slots=True)
class SessionCreated:
    type: ClassVar[str] = "session.created"
    model: str
    system: str | None = None
    tools: JSONObject = field(default_factory=dict)  # tool name -> schema hash
    limits: JSONObject = field(default_factory=dict)
    metadata: JSONObject = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION


ForkKind = Literal["fork", "rewind", "replay"]
FORK_KINDS: tuple[ForkKind, ...] = ("fork", "rewind", "replay")


@dataclass(frozen=True, slots=True)
class SessionForked:
    """The first event of a forked session's own: its log is the parent's events 1 to
    `parent_seq` (read from the parent by the store), then this, then its own. It sets the
    session up as `session.created` does (the whole configuration, changes applied) and
    counts the child's work from zero: steps, turns, tokens and cost are the child's own.

    `parent_event` is the id of the parent's event at `parent_seq`, and `prefix_digest` the
    sha256 of the parent's id, that seq and that event's canonical bytes: a log is append-only
    and ids are unique, so these pin the prefix, at a cost that does not grow with it
    (`session/fork.py`). `kind`: `fork`, `rewind` (the child takes the parent's place for
    whoever rewound) or `replay` (the child re-runs the parent's remainder)."""

    type: ClassVar[str] = "session.forked"
    parent: str
    parent_seq: int
    parent_event: str
    prefix_digest: str
    model: str
    system: str | None = None
    tools: JSONObject = field(default_factory=dict)  # tool name -> schema hash
    limits: JSONObject = field(default_factory=dict)
    metadata: JSONObject = field(default_factory=dict)
    kind: ForkKind = "fork"
    schema_version: int = SCHEMA_VERSION


@dataclass(frozen=True, slots=True)
class UserMessage:
    type: ClassVar[str] = "user.message"
    message: Message


@dataclass(frozen=True, slots=True)
class ModelRequested:
    """`dropped_reasoning`: thinking blocks of another provider left out of the request
    (only that provider can read them); written only when there are some.

    `tools` and `tools_digest`: the tools this request offered (their names, sorted, and the
    `offered_digest` of their names and schema hashes), written only when they differ from
    what the thread's log last said it offered (its last request that recorded them, else
    `session.created`'s `tools`): a session whose tools never change carries neither. A
    digest with no names recorded is a request that offered no tools."""

    type: ClassVar[str] = "model.requested"
    SPARSE: ClassVar[frozenset[str]] = frozenset({"dropped_reasoning", "tools", "tools_digest"})
    model: str
    request_hash: str
    input_tokens_estimate: int
    dropped_reasoning: int = 0
    tools: tuple[str, ...] = ()
    tools_digest: str = ""


def offered_digest(schema_hashes: Mapping[str, object]) -> str:
    """What names an offered tool set: a hash of `{name: schema hash}` (`Tool.schema_hash`,
    as `session.created` records them), so the fold finds a session's first set from
    `session.created` alone, and the order the tools are offered in does not count."""
    return hashlib.sha256(canonical_json(dict(schema_hashes)).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class ModelResponded:
    """`latency_ms`: from the request handed to the gateway to the whole answer, queue waits
    and retries included. `first_token_ms`: the same clock to the first streamed delta;
    written only when the answer was streamed (a run with a delta observer), 0 otherwise
    (a sparse field's default is what is left out, so that a row gives back the event)."""

    type: ClassVar[str] = "model.responded"
    SPARSE: ClassVar[frozenset[str]] = frozenset({"first_token_ms"})
    message: Message
    stop: str = "end_turn"
    raw_stop_reason: str | None = None
    usage: Usage = Usage()
    cost_usd: float | None = None
    latency_ms: float = 0.0
    incomplete: bool = False
    response_hash: str | None = None
    first_token_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class ModelFailed:
    type: ClassVar[str] = "model.failed"
    error_class: str
    message: str
    status: int | None = None
    retryable: bool = False
    attempt: int = 1
    retrying_in: float | None = None


@dataclass(frozen=True, slots=True)
class ToolStarted:
    type: ClassVar[str] = "tool.started"
    call_id: str
    name: str
    effect: Effect = "write"


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """`images`: what the tool returned besides its text (a screenshot), sent with the
    result to the model; written only when there are some. `replayed`: in a replay, the id
    of the source session's `tool.finished` whose recorded result answers this call, which
    did not run (`tools/cassette.py`); written only then."""

    type: ClassVar[str] = "tool.finished"
    SPARSE: ClassVar[frozenset[str]] = frozenset({"images", "replayed"})
    call_id: str
    outcome: Outcome
    content: str
    duration_ms: float = 0.0
    images: tuple[Image, ...] = ()
    replayed: str = ""

    @property
    def is_error(self) -> bool:
        return self.outcome != "ok"


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """`effect`: the tool's effect class (read, idempotent, write), so whoever decides sees
    what the call would do; written only when known (logs before it have none)."""

    type: ClassVar[str] = "approval.requested"
    SPARSE: ClassVar[frozenset[str]] = frozenset({"effect"})
    call_id: str
    name: str
    arguments: JSONObject = field(default_factory=dict)
    effect: str = ""


@dataclass(frozen=True, slots=True)
class ApprovalDecided:
    type: ClassVar[str] = "approval.decided"
    call_id: str
    allow: bool
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class InputRequested:
    """An MCP server asks for input while call `call_id` runs (an elicitation): `message`
    for the user, the answer's JSON `schema` (MCP's `requestedSchema`), and `key`, a hash
    of server, message and schema, so the same question asked again by a call run again
    after a restart is recognised (`tools.inputs.input_key`)."""

    type: ClassVar[str] = "input.requested"
    call_id: str
    server: str
    message: str
    schema: JSONObject = field(default_factory=dict)
    key: str = ""


@dataclass(frozen=True, slots=True)
class InputAnswered:
    """The answer to the `input.requested` of call `call_id` with this `key`: `accept`
    with `content` (valid against the requested schema), `decline` or `cancel`."""

    type: ClassVar[str] = "input.answered"
    call_id: str
    action: InputAction = "accept"
    content: JSONObject = field(default_factory=dict)
    key: str = ""


@dataclass(frozen=True, slots=True)
class SamplingAnswered:
    """An MCP server's sampling request (`sampling/createMessage`) during call `call_id`,
    served by the session's own model: its `text`, `usage` and `cost_usd` (added to the
    session's), or `refused` with the reason (no model call was made). `key` names the
    request (`tools.inputs.sampling_key`): a call run again after a restart that asks the
    same gets this answer without a second model call."""

    type: ClassVar[str] = "sampling.answered"
    call_id: str
    server: str
    model: str = ""
    text: str = ""
    stop: str = "end_turn"
    usage: Usage = Usage()
    cost_usd: float | None = None
    refused: str | None = None
    key: str = ""


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """`scope="turn"` interrupts the running turn; `scope="session"` ends the session."""

    type: ClassVar[str] = "cancel.requested"
    scope: CancelScope = "turn"
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ContextCompacted:
    """With a `summary`: the transcript's messages from events `first_seq`..`last_seq` are
    replaced by one message holding it. Without: the results of `cleared_call_ids` in those
    messages keep a short marker instead of their content. `model`, `usage` and `cost_usd`
    are those of the call that wrote the summary (None when no model was called)."""

    type: ClassVar[str] = "context.compacted"
    first_seq: int
    last_seq: int
    summary: str | None = None
    cleared_call_ids: tuple[str, ...] = ()
    model: str | None = None
    usage: Usage = Usage()
    cost_usd: float | None = None


@dataclass(frozen=True, slots=True)
class ThreadStarted:
    """A sub-agent's thread begins, appended on that thread. Its parent is the thread named
    by the id's path without its last part (`a-1/b-2` is a child of `a-1`; `a-1` of the
    main thread), and `parent_call_id` the parent's call that runs it. A handoff carries
    `history`: the conversation it takes over, as the new thread's first messages."""

    type: ClassVar[str] = "thread.started"
    thread: str
    agent: str = ""
    parent_call_id: str | None = None
    model: str = ""
    system: str | None = None
    handoff: bool = False
    history: tuple[Message, ...] = ()


@dataclass(frozen=True, slots=True)
class ThreadFinished:
    """A thread's last event: its final answer, or how it stopped (a limit, an error)."""

    type: ClassVar[str] = "thread.finished"
    thread: str
    output: str = ""
    stop_reason: str = "end_turn"
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class TurnEnded:
    type: ClassVar[str] = "turn.ended"
    stop_reason: str
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class SessionEnded:
    type: ClassVar[str] = "session.ended"
    outcome: EndOutcome
    detail: str | None = None


Payload: TypeAlias = (
    SessionCreated
    | SessionForked
    | UserMessage
    | ModelRequested
    | ModelResponded
    | ModelFailed
    | ToolStarted
    | ToolFinished
    | ApprovalRequested
    | ApprovalDecided
    | InputRequested
    | InputAnswered
    | SamplingAnswered
    | CancelRequested
    | ContextCompacted
    | ThreadStarted
    | ThreadFinished
    | TurnEnded
    | SessionEnded
)

PAYLOAD_TYPES: dict[str, type[Payload]] = {
    cls.type: cls
    for cls in (
        SessionCreated,
        SessionForked,
        UserMessage,
        ModelRequested,
        ModelResponded,
        ModelFailed,
        ToolStarted,
        ToolFinished,
        ApprovalRequested,
        ApprovalDecided,
        InputRequested,
        InputAnswered,
        SamplingAnswered,
        CancelRequested,
        ContextCompacted,
        ThreadStarted,
        ThreadFinished,
        TurnEnded,
        SessionEnded,
    )
}


@dataclass(frozen=True, slots=True, init=False)
class Event:
    session_id: str
    seq: int
    id: str
    time: str
    payload: Payload
    thread: str = ""

    def __init__(
        self, session_id: str, seq: int, id: str, time: str, payload: Payload, thread: str = ""
    ) -> None:
        # Each field through its slot's own setter: the generated __init__ of a frozen
        # dataclass looks up and calls object.__setattr__ per field, which cost a third
        # more, and every payload becomes an event (four a step). Still frozen after.
        _set_session_id(self, session_id)
        _set_seq(self, seq)
        _set_id(self, id)
        _set_time(self, time)
        _set_payload(self, payload)
        _set_thread(self, thread)

    @property
    def type(self) -> str:
        return self.payload.type

    def to_json(self) -> JSONObject:
        return {
            "session_id": self.session_id,
            "seq": self.seq,
            "id": self.id,
            "time": self.time,
            "thread": self.thread,
            "type": self.payload.type,
            "data": payload_to_json(self.payload),
        }

    def canonical(self) -> str:
        return canonical_json(self.to_json())

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Event:
        try:
            return Event(
                session_id=str(data["session_id"]),
                seq=int(data["seq"]),
                id=str(data["id"]),
                time=str(data["time"]),
                thread=str(data.get("thread", "")),
                payload=payload_from_json(str(data["type"]), data["data"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # Neither the event nor the error's text is quoted: both may hold stored text,
            # another tenant's maybe (a torn page). The chained error keeps the detail.
            raise CorruptLog(
                f"cannot read an event (seq {data.get('seq')!s:.20}): {type(exc).__name__}"
            ) from exc


_set_session_id, _set_seq, _set_id, _set_time, _set_payload, _set_thread = (
    vars(Event)[f.name].__set__ for f in dataclasses.fields(Event)
)

_second_cache: tuple[int, str] = (-1, "")


def format_time(epoch_seconds: float) -> str:
    """The event time form: RFC 3339 in UTC with microseconds. The formatted second is
    cached: formatting every event from scratch cost a tenth of a step."""
    global _second_cache
    whole = int(epoch_seconds)
    micros = round((epoch_seconds - whole) * 1_000_000)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    if _second_cache[0] != whole:
        _second_cache = (whole, datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{_second_cache[1]}.{micros:06d}Z"


def parse_time(text: str) -> float:
    """Epoch seconds of an event time (`format_time`'s form)."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def _encode(value: object) -> Any:
    if isinstance(value, Message | Usage | Image):
        return value.to_json()
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value


# Per payload type, the fields written only when they hold something (`SPARSE`): a field
# added after logs were written keeps every older event's bytes as they were.
SPARSE_FIELDS: dict[type, frozenset[str]] = {
    cls: getattr(cls, "SPARSE", frozenset()) for cls in PAYLOAD_TYPES.values()
}


def payload_to_json(payload: Payload) -> JSONObject:
    sparse = SPARSE_FIELDS.get(type(payload))
    out = {f.name: _encode(getattr(payload, f.name)) for f in dataclasses.fields(payload)}
    if sparse:
        for name in sparse:
            if not out[name]:
                del out[name]
    return out


# Field annotations are strings (postponed evaluation); only these need more than a copy.
_FIELD_DECODERS: dict[str, Callable[[Any], object]] = {
    "Message": Message.from_json,
    "Usage": Usage.from_json,
    "tuple[str, ...]": lambda v: tuple(str(x) for x in v),
    "tuple[Message, ...]": lambda v: tuple(Message.from_json(x) for x in v),
    "tuple[Image, ...]": lambda v: tuple(Image.from_json(x) for x in v),
}


# Per payload type, its fields and each one's decoder, worked out once: `dataclasses.fields`
# on every event read cost more than decoding the rest of it.
_FIELD_PLANS: dict[type, tuple[tuple[str, Callable[[Any], object] | None], ...]] = {
    cls: tuple((f.name, _FIELD_DECODERS.get(str(f.type))) for f in dataclasses.fields(cls))
    for cls in PAYLOAD_TYPES.values()
}


def payload_from_json(type_name: str, data: Mapping[str, Any]) -> Payload:
    cls = PAYLOAD_TYPES.get(type_name)
    if cls is None:
        raise ValueError(f"unknown event type {type_name!r}")
    kwargs: dict[str, Any] = {}
    for name, decode in _FIELD_PLANS[cls]:
        if name not in data:
            continue
        kwargs[name] = decode(data[name]) if decode else data[name]
    return cls(**kwargs)
