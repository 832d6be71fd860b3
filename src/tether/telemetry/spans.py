"""Spans from events: a turn (`invoke_agent`), each model call (`chat {model}`) and its
retries, each tool call (`execute_tool {name}`), each sub-agent thread (`invoke_agent
{agent}`, a child of the parent's tool span) and each approval wait.

Owns which event opens and closes which span, and its attributes. Pure: it reads no clock
(span times are event times) and does no I/O; emitting is `live`, sending is `export`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from tether.events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    ModelFailed,
    ModelRequested,
    ModelResponded,
    SessionCreated,
    SessionEnded,
    ThreadFinished,
    ThreadStarted,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UserMessage,
)
from tether.state import parent_thread
from tether.telemetry import conventions as c
from tether.telemetry.ids import span_id, time_ns, trace_id_of

AttributeValue: TypeAlias = str | bool | int | float | list[str]
Attributes: TypeAlias = dict[str, AttributeValue]
SpanKind = Literal["internal", "client"]

# A turn that stops for one of these went as asked; any other stop is an error of the span.
_FINE_STOPS = frozenset({"end_turn", "awaiting_approval", "interrupted"})
_RETRY_PREFIX = "retry "


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """A finished span. `error`: its `error.type` when it failed (`message` the detail)."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    kind: SpanKind = "internal"
    attributes: Attributes = field(default_factory=dict)
    error: str | None = None
    message: str | None = None


@dataclass(slots=True)
class _Open:
    name: str
    span_id: int
    parent_id: int | None
    start_ns: int
    kind: SpanKind
    attributes: Attributes

    def close(
        self, trace_id: int, end_ns: int, error: str | None = None, message: str | None = None
    ) -> SpanRecord:
        if error is not None:
            self.attributes[c.ERROR_TYPE] = error
        return SpanRecord(
            self.name,
            trace_id,
            self.span_id,
            self.parent_id,
            self.start_ns,
            max(end_ns, self.start_ns),
            self.kind,
            self.attributes,
            error,
            message,
        )


CallKey: TypeAlias = tuple[str, str]  # (thread, call id): call ids repeat across threads


class SpanBuilder:
    """Feed it a session's events in order; each `feed` returns the spans that event ends.
    `content`: also record messages, tool arguments and results."""

    def __init__(self, *, content: bool = False) -> None:
        self.content = content
        self.session_id = ""
        self.trace_id = 0
        self.turns = 0
        self._turn: _Open | None = None
        self._threads: dict[str, _Open] = {}
        self._chats: dict[str, _Open] = {}
        self._tools: dict[CallKey, _Open] = {}
        self._approvals: dict[CallKey, _Open] = {}
        self._arguments: dict[CallKey, str] = {}

    def feed(self, event: Event) -> list[SpanRecord]:
        if not self.trace_id:
            self.session_id = event.session_id
            created = event.payload if isinstance(event.payload, SessionCreated) else None
            self.trace_id = trace_id_of(event.session_id, created)
        handle = _HANDLERS.get(type(event.payload))
        return [] if handle is None else handle(self, event)

    def finish(self, end_ns: int) -> list[SpanRecord]:
        """Close what is still open (a session stopped mid-turn), marked incomplete."""
        opened = [
            *self._approvals.values(),
            *self._tools.values(),
            *self._chats.values(),
            *self._threads.values(),
            *([self._turn] if self._turn else []),
        ]
        self._approvals, self._tools, self._chats, self._threads = {}, {}, {}, {}
        self._turn = None
        for span in opened:
            span.attributes["tether.incomplete"] = True
        return [span.close(self.trace_id, end_ns) for span in opened]

    # -- parents ---------------------------------------------------------------------------
    def _parent(self, event: Event) -> int | None:
        """The span a thread's model and tool calls hang under: its thread's span, or on
        the main thread the turn's (opened by this event if none is open)."""
        if event.thread:
            thread = self._threads.get(event.thread)
            if thread is not None:
                return thread.span_id
        return self._open_turn(event).span_id

    def _open_turn(self, event: Event) -> _Open:
        if self._turn is None:
            self._turn = _Open(
                "invoke_agent",
                span_id(self.trace_id, event, "turn"),
                None,
                time_ns(event),
                "internal",
                {
                    c.OPERATION: "invoke_agent",
                    c.CONVERSATION: self.session_id,
                    "tether.turn": self.turns + 1,
                },
            )
        return self._turn

    # -- handlers --------------------------------------------------------------------------
    def _user(self, event: Event) -> list[SpanRecord]:
        if not event.thread:
            turn = self._open_turn(event)
            if self.content and isinstance(event.payload, UserMessage):
                turn.attributes[c.INPUT_MESSAGES] = json.dumps([event.payload.message.to_json()])
        return []

    def _requested(self, event: Event) -> list[SpanRecord]:
        p = event.payload
        assert isinstance(p, ModelRequested)
        ended = self._abandon(self._chats.pop(event.thread, None), event)
        provider, model = c.provider_and_model(p.model)
        self._chats[event.thread] = _Open(
            f"chat {model}",
            span_id(self.trace_id, event, "chat"),
            self._parent(event),
            time_ns(event),
            "client",
            {
                c.OPERATION: "chat",
                c.PROVIDER: provider,
                c.SYSTEM: provider,
                c.REQUEST_MODEL: model,
                c.CONVERSATION: self.session_id,
            },
        )
        return ended

    def _responded(self, event: Event) -> list[SpanRecord]:
        p = event.payload
        assert isinstance(p, ModelResponded)
        chat = self._chats.pop(event.thread, None)
        if chat is None:
            return []
        a = chat.attributes
        a[c.INPUT_TOKENS] = p.usage.input_tokens
        a[c.OUTPUT_TOKENS] = p.usage.output_tokens
        if p.usage.cache_read_tokens:
            a[c.CACHE_READ_TOKENS] = p.usage.cache_read_tokens
        a[c.FINISH_REASONS] = [p.stop]
        if p.cost_usd is not None:
            a["tether.cost_usd"] = p.cost_usd
        self._add_usage(event, p.usage.input_tokens, p.usage.output_tokens)
        for call in p.message.tool_calls:
            if self.content:
                self._arguments[(event.thread, call.id)] = json.dumps(call.arguments)
        if self.content:
            a[c.OUTPUT_MESSAGES] = json.dumps([p.message.to_json()])
        return [chat.close(self.trace_id, time_ns(event))]

    def _add_usage(self, event: Event, input_tokens: int, output_tokens: int) -> None:
        """A turn's span and a thread's carry the tokens of every call made under them."""
        spans = [self._turn, *(self._threads.get(t) for t in _lineage(event.thread))]
        for span in spans:
            if span is not None:
                _count(span.attributes, c.INPUT_TOKENS, input_tokens)
                _count(span.attributes, c.OUTPUT_TOKENS, output_tokens)

    def _failed(self, event: Event) -> list[SpanRecord]:
        p = event.payload
        assert isinstance(p, ModelFailed)
        chat = self._chats.get(event.thread)
        if chat is None:
            return []
        if p.status is not None:
            chat.attributes[c.HTTP_STATUS] = p.status
        if p.retrying_in is not None:  # the same request goes again after the wait
            chat.attributes["tether.retries"] = p.attempt
            return [self._retry(event, p, chat)]
        del self._chats[event.thread]
        return [chat.close(self.trace_id, time_ns(event), p.error_class, p.message)]

    def _retry(self, event: Event, p: ModelFailed, chat: _Open) -> SpanRecord:
        start = time_ns(event)
        attributes: Attributes = {
            "tether.retry.attempt": p.attempt,
            "tether.retry.delay_s": float(p.retrying_in or 0.0),
        }
        if p.status is not None:
            attributes[c.HTTP_STATUS] = p.status
        model = chat.name.removeprefix("chat ")
        wait = _Open(
            _RETRY_PREFIX + model,
            span_id(self.trace_id, event, "retry"),
            chat.span_id,
            start,
            "internal",
            attributes,
        )
        end = start + int((p.retrying_in or 0.0) * 1e9)
        return wait.close(self.trace_id, end, p.error_class, p.message)

    def _tool_started(self, event: Event) -> list[SpanRecord]:
        p = event.payload
        assert isinstance(p, ToolStarted)
        key = (event.thread, p.call_id)
        ended = self._abandon(self._tools.pop(key, None), event)
        attributes: Attributes = {
            c.OPERATION: "execute_tool",
            c.TOOL_NAME: p.name,
            c.TOOL_CALL_ID: p.call_id,
            c.TOOL_TYPE: "function",
            "tether.tool.effect": p.effect,
        }
        arguments = self._arguments.pop(key, None)
        if arguments is not None:
            attributes[c.TOOL_ARGUMENTS] = arguments
        self._tools[key] = _Open(
            f"execute_tool {p.name}",
            span_id(self.trace_id, event, "tool"),
            self._parent(event),
            time_ns(event),
            "internal",
            attributes,
        )
        return ended

    def _tool_finished(self, event: Event) -> list[SpanRecord]:
        p = event.payload
        assert isinstance(p, ToolFinished)
        tool = self._tools.pop((event.thread, p.call_id), None)
        if tool is None:
            return []  # answered without running (denied, unknown): no span ran
        tool.attributes["tether.tool.outcome"] = p.outcome
        if self.content:
            tool.attributes[c.TOOL_RESULT] = p.content
        error = None if p.outcome == "ok" else p.outcome
        return [tool.close(self.trace_id, time_ns(event), error)]

    def _approval_requested(self, event: Event) -> list[SpanRecord]:
        p = event.payload
        assert isinstance(p, ApprovalRequested)
        attributes: Attributes = {c.TOOL_NAME: p.name, c.TOOL_CALL_ID: p.call_id}
        if p.effect:
            attributes["tether.tool.effect"] = p.effect
        if self.content:
            attributes[c.TOOL_ARGUMENTS] = json.dumps(p.arguments)
        self._approvals[(event.thread, p.call_id)] = _Open(
            f"approval {p.name}",
            span_id(self.trace_id, event, "approval"),
            self._parent(event),
            time_ns(event),
            "internal",
            attributes,
        )
        return []

    def _approval_decided(self, event: Event) -> list[SpanRecord]:
        p = event.payload
        assert isinstance(p, ApprovalDecided)
        wait = self._approvals.pop((event.thread, p.call_id), None)
        self._open_turn(event)  # a decision makes the session run again: a new turn
        if wait is None:
            return []
        wait.attributes["tether.approval.allowed"] = p.allow
        if self.content and p.reason:
            wait.attributes["tether.approval.reason"] = p.reason
        return [wait.close(self.trace_id, time_ns(event))]

    def _thread_started(self, event: Event) -> list[SpanRecord]:
        p = event.payload
        assert isinstance(p, ThreadStarted)
        parent_tool = self._tools.get((parent_thread(p.thread), p.parent_call_id or ""))
        parent = parent_tool.span_id if parent_tool else self._parent_of_thread(event)
        _, model = c.provider_and_model(p.model)
        self._threads[p.thread] = _Open(
            f"invoke_agent {p.agent}",
            span_id(self.trace_id, event, "thread"),
            parent,
            time_ns(event),
            "internal",
            {
                c.OPERATION: "invoke_agent",
                c.AGENT_NAME: p.agent,
                c.REQUEST_MODEL: model,
                c.CONVERSATION: self.session_id,
                "tether.thread": p.thread,
                "tether.handoff": p.handoff,
            },
        )
        return []

    def _parent_of_thread(self, event: Event) -> int | None:
        above = self._threads.get(parent_thread(event.thread))
        return above.span_id if above else self._open_turn(event).span_id

    def _thread_finished(self, event: Event) -> list[SpanRecord]:
        p = event.payload
        assert isinstance(p, ThreadFinished)
        thread = self._threads.pop(p.thread, None)
        if thread is None:
            return []
        thread.attributes["tether.stop_reason"] = p.stop_reason
        error = None if p.stop_reason in _FINE_STOPS else p.stop_reason
        return [thread.close(self.trace_id, time_ns(event), error, p.detail)]

    def _turn_ended(self, event: Event) -> list[SpanRecord]:
        p = event.payload
        assert isinstance(p, TurnEnded)
        ended = self._abandon(self._chats.pop(event.thread, None), event, p.stop_reason)
        if event.thread or self._turn is None:
            return ended
        turn, self._turn = self._turn, None
        self.turns += 1
        turn.attributes["tether.stop_reason"] = p.stop_reason
        error = None if p.stop_reason in _FINE_STOPS else p.stop_reason
        return [*ended, turn.close(self.trace_id, time_ns(event), error, p.detail)]

    def _session_ended(self, event: Event) -> list[SpanRecord]:
        assert isinstance(event.payload, SessionEnded)
        return self.finish(time_ns(event))

    def _abandon(
        self, span: _Open | None, event: Event, why: str = "tether.abandoned"
    ) -> list[SpanRecord]:
        """A span its run never closed (a crash, a hand-over, a stop): ended by the event
        that shows it is over."""
        return [] if span is None else [span.close(self.trace_id, time_ns(event), why)]


def _count(attributes: Attributes, name: str, more: int) -> None:
    before = attributes.get(name, 0)
    attributes[name] = (before if isinstance(before, int) else 0) + more


def _lineage(thread: str) -> list[str]:
    """`a-1/b-2` → [`a-1/b-2`, `a-1`]: the threads whose spans hold a call on `thread`."""
    out = []
    while thread:
        out.append(thread)
        thread = parent_thread(thread)
    return out


_HANDLERS: dict[type, Callable[[SpanBuilder, Event], list[SpanRecord]]] = {
    UserMessage: SpanBuilder._user,
    ModelRequested: SpanBuilder._requested,
    ModelResponded: SpanBuilder._responded,
    ModelFailed: SpanBuilder._failed,
    ToolStarted: SpanBuilder._tool_started,
    ToolFinished: SpanBuilder._tool_finished,
    ApprovalRequested: SpanBuilder._approval_requested,
    ApprovalDecided: SpanBuilder._approval_decided,
    ThreadStarted: SpanBuilder._thread_started,
    ThreadFinished: SpanBuilder._thread_finished,
    TurnEnded: SpanBuilder._turn_ended,
    SessionEnded: SpanBuilder._session_ended,
}


def build_spans(events: Iterable[Event], *, content: bool = False) -> list[SpanRecord]:
    """Every span of a stored session; what is still open ends at the last event."""
    builder = SpanBuilder(content=content)
    spans: list[SpanRecord] = []
    last = None
    for event in events:
        spans.extend(builder.feed(event))
        last = event
    if last is not None:
        spans.extend(builder.finish(time_ns(last)))
    return spans
