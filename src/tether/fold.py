"""The fold: events in, transcript and session view out. Pure and deterministic.

`Folder` applies one event at a time (the loop keeps one per session, so no step re-reads the
history); `fold(events)` is the same Folder over a whole log. Both give byte-identical output.
`context.compacted` is applied here too: what the context policy decided is rebuilt, not redone.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tether.events import (
    ApprovalDecided,
    ApprovalRequested,
    CancelRequested,
    CancelScope,
    ContextCompacted,
    Event,
    InputAnswered,
    InputRequested,
    ModelFailed,
    ModelRequested,
    ModelResponded,
    SamplingAnswered,
    SessionCreated,
    SessionEnded,
    SessionForked,
    ThreadFinished,
    ThreadStarted,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UserMessage,
    offered_digest,
)
from tether.events import payload_to_json as payload_json
from tether.messages import (
    JSONObject,
    Message,
    Part,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Usage,
    canonical_json,
)
from tether.state import (
    TERMINAL_STATES,
    ForkOrigin,
    SessionView,
    State,
    ThreadNode,
    approval_key,
    parent_thread,
)

# Characters of the first user message a fold keeps as the session's task.
TASK_CHARS = 2_000
CLEARED_PREFIX = "[result cleared to save context:"
SUMMARY_PREFIX = "[summary of the earlier conversation:"


def cleared_marker(result: ToolResult, name: str) -> str:
    """What a cleared result says instead of its content: which call, and how much went."""
    return f"{CLEARED_PREFIX} {name} call {result.call_id}, {len(result.content):,} characters]"


def summary_message(summary: str, replaced: int) -> Message:
    head = f"{SUMMARY_PREFIX} {replaced} messages were compacted to fit the context window]"
    return Message("user", (Text(f"{head}\n{summary}"),))


@dataclass(frozen=True, slots=True)
class Transcript:
    system: str | None
    messages: tuple[Message, ...]

    def to_json(self) -> JSONObject:
        return {"system": self.system, "messages": [m.to_json() for m in self.messages]}

    def canonical(self) -> str:
        return canonical_json(self.to_json())


class Folder:
    """Incremental fold of one thread of one session's log.

    A thread's own events make its transcript and state. Its sub-agents' events (the
    threads below it) add to its counters (steps, tokens, cost: one budget for the tree),
    its approvals (named `THREAD:CALL_ID`) and its tree of threads, and never to its
    transcript."""

    def __init__(self, thread: str = "") -> None:
        self.thread = thread
        self._below = f"{thread}/" if thread else ""  # the prefix of its descendants' ids
        self.session_id = ""
        self.model = ""
        self.system: str | None = None
        self.tools: JSONObject = {}
        # The tools this thread's requests offer as the log last said (`offered`): set by a
        # model.requested that records them; else worked out from session.created when read.
        self._offered: tuple[tuple[str, ...], str] | None = None
        self._created = False
        self.limits: JSONObject = {}
        self.metadata: JSONObject = {}
        self.messages: list[Message] = []
        self.state: State = "pending"
        self.stop_reason: str | None = None
        self.stop_detail: str | None = None
        # Token counts as plain ints (input, output, cache read, cache write, reasoning):
        # adding up a new frozen Usage per answer cost more than the rest of its fold.
        self._tokens = [0, 0, 0, 0, 0]
        self.cost_usd: float | None = None
        self._cost_unknown = False
        self.steps = 0
        self.turn_steps = 0
        self.turns = 0
        self.last_seq = 0
        # When the log began and last grew, and what its first user message asked (cut):
        # what the session catalog lists (`store/catalog.row_of`); no part of the view.
        self.created = ""
        self.updated = ""
        self.task = ""
        self.last_output = ""
        self.open_calls: list[ToolCall] = []
        self.results: dict[str, ToolResult] = {}
        self.started: set[str] = set()
        self.pending_approvals: list[str] = []
        self.decisions: dict[str, ApprovalDecided] = {}
        self.cancel_scope: CancelScope | None = None
        # Elicitations of running calls that wait for an answer (named like approvals), and
        # the answers given to the calls of the last answer, by (call, request key): a call
        # run again after a restart that asks the same again gets the recorded answer.
        self.pending_inputs: dict[str, InputRequested] = {}
        self.input_answers: dict[tuple[str, str], InputAnswered] = {}
        self.samplings: dict[tuple[str, str], SamplingAnswered] = {}  # the same, for sampling
        self.model_request_open = False
        # While a request is open: the seq of the `model.requested` that first asked it (a
        # park, a hand-over or a crash asks it again, each time with another).
        self.asked_seq = 0
        # Open from a user message (or a decision that makes the session runnable again)
        # until turn.ended: whether a runner has work to do.
        self.turn_open = False
        self.transcript_chars = 0
        # Whether any answer carried reasoning: only then does a request look for the
        # reasoning another provider wrote (a scan per step otherwise costs every session).
        self.has_thinking = False
        # Per message, the seq of the event it came from (context.compacted names messages by
        # seq range; a summary takes the seq of the first message it replaces, so the list
        # stays sorted) and the length of its canonical JSON.
        self.message_seqs: list[int] = []
        self.message_chars: list[int] = []
        self.compactions = 0  # context.compacted events applied: old messages may have changed
        # (transcript chars of the last answered request, input tokens the model counted for
        # it): the context policy calibrates its estimate with it, the same in any process.
        self.calibration: tuple[int, int] | None = None
        self._request_chars = 0
        # Chain hash over the transcript's messages: O(1) per step, names the request content.
        self.transcript_hash = hashlib.sha256(b"tether.transcript").hexdigest()
        # -- threads: who runs this one, and those below it ---------------------------------
        self.agent = ""
        self.finished: ThreadFinished | None = None  # this thread's own end
        # The threads started by the calls of the last answer, by call id (call ids repeat
        # across answers with some models, so older ones are forgotten with their answer).
        self.call_threads: dict[str, str] = {}
        self.children_started = 0  # threads this one started, ever: numbers the next
        self.thread_nodes: dict[str, ThreadNode] = {}  # every thread below, in start order
        # A handoff of this turn that finished: its answer is the turn's.
        self.handoff: ThreadFinished | None = None
        # Where a forked session came from: its `session.forked` (None: not a fork).
        self.forked: SessionForked | None = None

    # -- reading ----------------------------------------------------------------------------
    def view(self) -> SessionView:
        return SessionView(
            session_id=self.session_id,
            state=self.state,
            stop_reason=self.stop_reason,
            stop_detail=self.stop_detail,
            model=self.model,
            usage=self.usage,
            cost_usd=None if self._cost_unknown else self.cost_usd,
            steps=self.steps,
            turn_steps=self.turn_steps,
            turns=self.turns,
            last_seq=self.last_seq,
            last_output=self.last_output,
            open_calls=tuple(c for c in self.open_calls if c.id not in self.results),
            started_calls=frozenset(self.started),
            pending_approvals=tuple(self.pending_approvals),
            decisions=dict(self.decisions),
            cancel_scope=self.cancel_scope,
            model_request_open=self.model_request_open,
            transcript_chars=self.transcript_chars,
            threads=tuple(self.thread_nodes.values()) if self.thread_nodes else (),
            pending_inputs=dict(self.pending_inputs),
            forked=None
            if self.forked is None
            else ForkOrigin(self.forked.parent, self.forked.parent_seq, self.forked.kind),
        )

    def transcript(self) -> Transcript:
        return Transcript(self.system, tuple(self.messages))

    @property
    def usage(self) -> Usage:
        return Usage(*self._tokens)

    @property
    def tokens(self) -> tuple[int, int, int, int, int]:
        """The token counts without building a `Usage`: input, output, cache read, cache
        write, reasoning."""
        t = self._tokens
        return (t[0], t[1], t[2], t[3], t[4])

    @property
    def total_tokens(self) -> int:
        return self._tokens[0] + self._tokens[1]

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def cost_known(self) -> bool:
        return not self._cost_unknown

    @property
    def offered(self) -> tuple[tuple[str, ...], str] | None:
        """The tools this thread's requests offer, as its log last said: their names (sorted)
        and `offered_digest`, from its last `model.requested` that recorded them, else from
        `session.created`. None for a thread whose log names none (a sub-agent's:
        `thread.started` does not list its tools)."""
        if self._offered is None and self._created:
            self._offered = (tuple(sorted(self.tools)), offered_digest(self.tools))
        return self._offered

    # -- applying ---------------------------------------------------------------------------
    def apply_all(self, events: Iterable[Event]) -> Folder:
        for event in events:
            self.apply(event)
        return self

    def apply(self, event: Event) -> None:
        self.last_seq = event.seq
        self.updated = event.time
        if not self.session_id:
            self.session_id = event.session_id
            self.created = event.time
        if self.state in TERMINAL_STATES:
            return  # terminal states absorb: nothing after session.ended changes the view
        if event.thread != self.thread:
            if event.thread.startswith(self._below):  # a sub-agent's, at any depth
                below = _APPLY_BELOW.get(type(event.payload))
                if below is not None:
                    below(self, event.thread, event.payload)
            return
        # Dispatch on the payload's exact type: one dict lookup instead of a chain of
        # isinstance checks on every event.
        apply = _APPLY.get(type(event.payload))
        if apply is not None:
            apply(self, event.payload)

    def _apply_created(self, p: SessionCreated) -> None:
        self.model, self.system = p.model, p.system
        self.tools, self.limits, self.metadata = p.tools, p.limits, p.metadata
        self._created = True

    def _apply_forked(self, p: SessionForked) -> None:
        """A fork's own first event: the prefix before it is the parent's. The transcript
        and its hash stay; the configuration is the fork's; the counters count the child's
        own work from here, so its spending is never the parent's counted twice; the child is
        born now, neither stopped nor being canceled (a fork point has no open call)."""
        self._apply_created(p)  # type: ignore[arg-type]  # the same five fields
        self._offered = None
        self.forked = p
        self.created = self.updated
        self._tokens = [0, 0, 0, 0, 0]
        self.cost_usd = None
        self._cost_unknown = False
        self.steps = self.turn_steps = self.turns = 0
        self.last_output = ""
        self.stop_reason = self.stop_detail = None
        self.cancel_scope = None
        self.handoff = None
        self.state = "pending" if self.turn_open else "idle"

    def _apply_user(self, p: UserMessage) -> None:
        self._add_message(p.message)
        if not self.task:
            self.task = p.message.text[:TASK_CHARS]
        # A message into a turn still running (a steer, an output correction) goes on with
        # that turn: its steps keep counting against the same `max_steps`.
        steps = self.turn_steps if self.turn_open else 0
        self._open_turn()
        self.turn_steps = steps

    def _open_turn(self) -> None:
        self.turn_open = True
        self.turn_steps = 0
        self.handoff = None
        self.stop_reason = self.stop_detail = None
        self.state = "canceling" if self.cancel_scope == "session" else "pending"

    def _apply_thread_start(self, p: ThreadStarted) -> None:
        """This thread's first event: what runs it, and a handoff's conversation so far."""
        self.agent, self.model, self.system = p.agent, p.model, p.system
        for message in p.history:
            self._add_message(message)
        if p.history:
            self._open_turn()

    def _apply_thread_end(self, p: ThreadFinished) -> None:
        self.finished = p

    def _apply_request(self, p: ModelRequested) -> None:
        if p.tools_digest:  # the request offered other tools than the one before it
            self._offered = (p.tools, p.tools_digest)
        self._request_chars = self.transcript_chars
        if not self.model_request_open:
            self.asked_seq = self.last_seq
        self.model_request_open = True
        self._set_running("waiting_model")

    def _apply_failure(self, p: ModelFailed) -> None:
        if p.retrying_in is None:  # else the same request is sent again: it stays open
            self.model_request_open = False

    def _apply_approval_request(self, p: ApprovalRequested) -> None:
        if p.call_id not in self.pending_approvals:
            self.pending_approvals.append(p.call_id)
        self._set_running("waiting_approval")

    def _apply_start(self, p: ToolStarted) -> None:
        self.started.add(p.call_id)
        self._set_running("waiting_tool")

    def _apply_session_end(self, p: SessionEnded) -> None:
        self.state = (
            "completed"
            if p.outcome == "completed"
            else ("canceled" if p.outcome == "canceled" else "failed")
        )

    def _set_running(self, state: State) -> None:
        # A pending cancel shows until the turn closes: a client never sees work resume.
        self.state = "canceling" if self.cancel_scope else state

    def _add_message(self, message: Message) -> None:
        self.messages.append(message)
        if message.parts and isinstance(message.parts[0], Thinking):
            self.has_thinking = True
        body = message.canonical()
        self.message_seqs.append(self.last_seq)
        self.message_chars.append(len(body))
        self.transcript_chars += len(body)
        self.transcript_hash = hashlib.sha256((self.transcript_hash + body).encode()).hexdigest()

    def _apply_response(self, p: ModelResponded) -> None:
        self.model_request_open = False
        message = p.message
        if p.incomplete and message.tool_calls:
            # A call cut by the output limit is never executable: keep only the text.
            kept = tuple(x for x in message.parts if isinstance(x, Text | Thinking))
            message = Message("assistant", kept)
        self._add_message(message)
        if p.usage.input_tokens > 0:
            self.calibration = (self._request_chars, p.usage.input_tokens)
        self._add_cost(p.usage, p.cost_usd)
        self.steps += 1
        self.turn_steps += 1
        self.last_output = message.text
        self.open_calls = list(message.tool_calls)
        self.results = {}
        self.started = set()
        if self.call_threads:
            self.call_threads = {}
        if self.input_answers or self.samplings:
            self.input_answers, self.samplings = {}, {}
        self._set_running("waiting_tool" if self.open_calls else "pending")

    def _add_cost(self, usage: Usage, cost_usd: float | None) -> None:
        tokens = self._tokens
        tokens[0] += usage.input_tokens
        tokens[1] += usage.output_tokens
        tokens[2] += usage.cache_read_tokens
        tokens[3] += usage.cache_write_tokens
        tokens[4] += usage.reasoning_tokens
        if cost_usd is None:
            self._cost_unknown = True
        else:
            self.cost_usd = (self.cost_usd or 0.0) + cost_usd

    def _apply_compaction(self, p: ContextCompacted) -> None:
        """Costs the size of the range, not of the transcript: only the messages named change."""
        if p.model is not None:
            self._add_cost(p.usage, p.cost_usd)
        lo = bisect.bisect_left(self.message_seqs, p.first_seq)
        hi = bisect.bisect_right(self.message_seqs, p.last_seq)
        if lo >= hi or (self.open_calls and hi == len(self.messages)):
            return  # nothing named, or it would part open calls from their coming results
        if p.summary is not None:
            self._replace(lo, hi, summary_message(p.summary, hi - lo))
        else:
            cleared = set(p.cleared_call_ids)
            for i in range(lo, hi):
                if self.messages[i].role == "tool":
                    self._clear_results(i, cleared)
        self.compactions += 1
        body = canonical_json({"context.compacted": payload_json(p)})
        self.transcript_hash = hashlib.sha256((self.transcript_hash + body).encode()).hexdigest()

    def _clear_results(self, index: int, cleared: set[str]) -> None:
        message = self.messages[index]
        if not any(r.call_id in cleared for r in message.tool_results):
            return
        asked = self.messages[index - 1].tool_calls if index > 0 else ()
        names = {c.id: c.name for c in asked}
        parts: list[Part] = []
        for part in message.parts:
            if (
                isinstance(part, ToolResult)
                and part.call_id in cleared
                and not part.content.startswith(CLEARED_PREFIX)
            ):
                marker = cleared_marker(part, names.get(part.call_id, "tool"))
                part = ToolResult(part.call_id, marker, part.is_error)
            parts.append(part)
        self._replace(index, index + 1, Message("tool", tuple(parts)))

    def _replace(self, lo: int, hi: int, message: Message) -> None:
        """Messages lo..hi-1 become `message`, which keeps the seq of the first of them."""
        chars = len(message.canonical())
        self.transcript_chars += chars - sum(self.message_chars[lo:hi])
        self.messages[lo:hi] = [message]
        self.message_seqs[lo:hi] = [self.message_seqs[lo]]
        self.message_chars[lo:hi] = [chars]

    def _apply_decision(self, p: ApprovalDecided) -> None:
        if p.call_id in self.pending_approvals:
            self.pending_approvals.remove(p.call_id)
        self.decisions[p.call_id] = p
        self.turn_open = True
        if not self.pending_approvals and self.state == "waiting_approval":
            self.state = "pending"

    def _apply_input_request(self, p: InputRequested) -> None:
        self._ask(p.call_id, p)

    def _apply_input_answer(self, p: InputAnswered) -> None:
        self._answer(p.call_id, p)

    def _ask(self, key: str, p: InputRequested) -> None:
        self.pending_inputs[key] = p
        self._set_running("waiting_input")

    def _answer(self, key: str, p: InputAnswered) -> None:
        asked = self.pending_inputs.get(key)
        if asked is not None and asked.key == p.key:
            del self.pending_inputs[key]
        self.input_answers[(key, p.key)] = p
        # Runnable again: a runner that died while the call waited runs it again, and the
        # call's server, asking the same, gets this answer.
        self.turn_open = True
        self._inputs_settled()

    def _inputs_settled(self) -> None:
        if not self.pending_inputs and self.state == "waiting_input":
            self.state = "waiting_tool"

    def _apply_sampling(self, p: SamplingAnswered) -> None:
        if p.refused is None:
            self._add_cost(p.usage, p.cost_usd)
            self.samplings[(p.call_id, p.key)] = p

    def _below_sampling(self, thread: str, p: SamplingAnswered) -> None:
        if p.refused is None:
            self._add_cost(p.usage, p.cost_usd)

    def _apply_result(self, p: ToolFinished) -> None:
        self.results[p.call_id] = ToolResult(p.call_id, p.content, p.is_error, p.images)
        self.started.discard(p.call_id)
        if self.pending_inputs and self.pending_inputs.pop(p.call_id, None) is not None:
            self._inputs_settled()  # the call ended without its answer (a timeout, a cancel)
        if self.pending_approvals and p.call_id in self.pending_approvals:
            # Answered without a decision (a fork answered it): it waits for none, and the
            # turn it stopped goes on, as after a decision.
            self.pending_approvals.remove(p.call_id)
            self.turn_open = True
        calls, results = self.open_calls, self.results
        if calls and all([c.id in results for c in calls]):
            self._add_message(Message("tool", tuple([results[c.id] for c in calls])))
            self.open_calls, self.results = [], {}
            self._set_running("pending")

    def _apply_cancel(self, p: CancelRequested) -> None:
        if p.scope == "turn" and self.state in ("idle", "waiting_approval"):
            return  # nothing runs: an interrupt of an idle session has nothing to stop
        if self.cancel_scope != "session":
            self.cancel_scope = p.scope
        self.state = "canceling"

    def _end_turn(self, p: TurnEnded) -> None:
        self.stop_reason, self.stop_detail = p.stop_reason, p.detail
        self.turns += 1
        self.turn_open = False
        self.model_request_open = False
        if self.pending_inputs:  # every call of the turn was answered: nothing waits now
            self.pending_inputs = {}
        if self.cancel_scope == "turn":
            self.cancel_scope = None
        if self.cancel_scope == "session":
            self.state = "canceling"
        elif p.stop_reason == "awaiting_approval":
            if self.pending_approvals:
                self.state = "waiting_approval"
            else:  # every decision came in before the turn closed: it can go on at once
                self.turn_open = True
                self.state = "pending"
        else:
            self.state = "idle"

    # -- the threads below this one ---------------------------------------------------------
    def _below_answer(self, thread: str, p: ModelResponded) -> None:
        self._add_cost(p.usage, p.cost_usd)
        self.steps += 1
        self.turn_steps += 1

    def _below_compaction(self, thread: str, p: ContextCompacted) -> None:
        if p.model is not None:
            self._add_cost(p.usage, p.cost_usd)

    def _below_approval_request(self, thread: str, p: ApprovalRequested) -> None:
        key = approval_key(thread, p.call_id)
        if key not in self.pending_approvals:
            self.pending_approvals.append(key)
        self._set_node(thread, "waiting_approval")
        self._set_running("waiting_approval")

    def _below_decision(self, thread: str, p: ApprovalDecided) -> None:
        key = approval_key(thread, p.call_id)
        if key in self.pending_approvals:
            self.pending_approvals.remove(key)
        self.decisions[key] = p
        self.turn_open = True
        self._set_node(thread, "running")
        if not self.pending_approvals and self.state == "waiting_approval":
            self.state = "waiting_tool" if self.open_calls else "pending"

    def _below_input_request(self, thread: str, p: InputRequested) -> None:
        self._ask(approval_key(thread, p.call_id), p)

    def _below_input_answer(self, thread: str, p: InputAnswered) -> None:
        self._answer(approval_key(thread, p.call_id), p)

    def _below_result(self, thread: str, p: ToolFinished) -> None:
        if self.pending_inputs:
            key = approval_key(thread, p.call_id)
            if self.pending_inputs.pop(key, None) is not None:
                self._inputs_settled()

    def _below_start(self, thread: str, p: ThreadStarted) -> None:
        self.thread_nodes[thread] = ThreadNode(thread, p.agent, p.parent_call_id, handoff=p.handoff)
        if parent_thread(thread) == self.thread:
            if p.parent_call_id is not None:
                self.call_threads[p.parent_call_id] = thread
            self.children_started += 1

    def _below_turn_end(self, thread: str, p: TurnEnded) -> None:
        node = self.thread_nodes.get(thread)
        if node is not None and node.status != "finished":
            status = "waiting_approval" if p.stop_reason == "awaiting_approval" else "stopped"
            self.thread_nodes[thread] = _with(node, status, p.stop_reason)

    def _below_finish(self, thread: str, p: ThreadFinished) -> None:
        node = self.thread_nodes.get(thread)
        if node is None:
            return
        self.thread_nodes[thread] = _with(node, "finished", p.stop_reason)
        if node.handoff and parent_thread(thread) == self.thread:
            self.handoff = p
            self.last_output = p.output

    def _set_node(self, thread: str, status: str) -> None:
        node = self.thread_nodes.get(thread)
        if node is not None:
            self.thread_nodes[thread] = _with(node, status, node.stop_reason)


def _with(node: ThreadNode, status: str, stop_reason: str | None) -> ThreadNode:
    return ThreadNode(
        node.thread, node.agent, node.parent_call_id, status, stop_reason, node.handoff
    )


def fold(
    events: Sequence[Event] | Iterable[Event], thread: str = ""
) -> tuple[Transcript, SessionView]:
    """The full fold: the transcript and view of one thread of a session's log."""
    folder = Folder(thread).apply_all(events)
    return folder.transcript(), folder.view()


_APPLY: dict[type[Any], Callable[[Folder, Any], None]] = {
    SessionCreated: Folder._apply_created,
    SessionForked: Folder._apply_forked,
    UserMessage: Folder._apply_user,
    ModelRequested: Folder._apply_request,
    ModelFailed: Folder._apply_failure,
    ModelResponded: Folder._apply_response,
    ApprovalRequested: Folder._apply_approval_request,
    ApprovalDecided: Folder._apply_decision,
    InputRequested: Folder._apply_input_request,
    InputAnswered: Folder._apply_input_answer,
    SamplingAnswered: Folder._apply_sampling,
    ToolStarted: Folder._apply_start,
    ToolFinished: Folder._apply_result,
    CancelRequested: Folder._apply_cancel,
    TurnEnded: Folder._end_turn,
    ContextCompacted: Folder._apply_compaction,
    SessionEnded: Folder._apply_session_end,
    ThreadStarted: Folder._apply_thread_start,
    ThreadFinished: Folder._apply_thread_end,
}

# What a sub-agent's event (any thread below) changes in this thread's fold.
_APPLY_BELOW: dict[type[Any], Callable[[Folder, str, Any], None]] = {
    ModelResponded: Folder._below_answer,
    ContextCompacted: Folder._below_compaction,
    ApprovalRequested: Folder._below_approval_request,
    ApprovalDecided: Folder._below_decision,
    InputRequested: Folder._below_input_request,
    InputAnswered: Folder._below_input_answer,
    SamplingAnswered: Folder._below_sampling,
    ToolFinished: Folder._below_result,
    ThreadStarted: Folder._below_start,
    TurnEnded: Folder._below_turn_end,
    ThreadFinished: Folder._below_finish,
}
