"""Text renderings for people: one line per event (the timeline), a transcript, a view.

Owns formatting only; the CLI decides where it goes.
"""

from __future__ import annotations

from tether.events import (
    ApprovalDecided,
    ApprovalRequested,
    CancelRequested,
    Event,
    InputAnswered,
    InputRequested,
    ModelFailed,
    ModelRequested,
    ModelResponded,
    SamplingAnswered,
    SessionCreated,
    SessionEnded,
    ThreadFinished,
    ThreadStarted,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UserMessage,
    format_time,
    parse_time,
)
from tether.fold import Transcript
from tether.messages import (
    Image,
    JSONObject,
    Message,
    Text,
    ToolCall,
    ToolResult,
    canonical_json,
)
from tether.state import SessionView, ThreadNode, parent_thread
from tether.store.base import Lease, Queued


def clip(text: str, width: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _calls(message: Message) -> str:
    return ", ".join(
        f"{c.name}({clip(canonical_json(c.arguments), 40)})" for c in message.tool_calls
    )


def summarize(event: Event) -> str:
    p = event.payload
    if isinstance(p, SessionCreated):
        tools = ", ".join(p.tools) or "no tools"
        return f"model {p.model}; tools: {tools}"
    if isinstance(p, UserMessage):
        images = p.message.images
        said = clip(p.message.text)
        return f"{said} [+{len(images)} image(s)]" if images else said
    if isinstance(p, ModelRequested):
        return f"{p.model}, ~{p.input_tokens_estimate} input tokens"
    if isinstance(p, ModelResponded):
        what = f"asks for {_calls(p.message)}" if p.message.tool_calls else clip(p.message.text)
        cut = " [cut by the output limit]" if p.incomplete else ""
        return f"{what}{cut} ({p.usage.input_tokens}+{p.usage.output_tokens} tokens, {p.latency_ms:.0f} ms)"
    if isinstance(p, ModelFailed):
        again = (
            ""
            if p.retrying_in is None
            else f" — attempt {p.attempt}, retrying in {p.retrying_in:.1f} s"
        )
        return f"{p.error_class}: {clip(p.message)}{again}"
    if isinstance(p, ToolStarted):
        return f"{p.name} [{p.call_id}, {p.effect}]"
    if isinstance(p, ToolFinished):
        return f"{p.outcome} [{p.call_id}] {clip(p.content, 70)} ({p.duration_ms:.0f} ms)"
    if isinstance(p, ApprovalRequested):
        effect = f" ({p.effect})" if p.effect else ""
        return f"{p.name}{effect} [{p.call_id}] waits for a decision"
    if isinstance(p, ApprovalDecided):
        return f"[{p.call_id}] {'allowed' if p.allow else 'denied'}" + (
            f": {p.reason}" if p.reason else ""
        )
    if isinstance(p, InputRequested):
        return f"[{p.call_id}] {p.server} asks: {clip(p.message, 70)}"
    if isinstance(p, InputAnswered):
        return f"[{p.call_id}] {p.action}" + (
            f" {clip(canonical_json(p.content), 60)}" if p.content else ""
        )
    if isinstance(p, SamplingAnswered):
        if p.refused is not None:
            return f"[{p.call_id}] {p.server}'s request refused: {clip(p.refused, 60)}"
        return f"[{p.call_id}] {p.model} for {p.server}: {clip(p.text, 60)} ({p.usage.input_tokens}+{p.usage.output_tokens} tokens)"
    if isinstance(p, CancelRequested):
        return f"scope {p.scope}" + (f": {p.reason}" if p.reason else "")
    if isinstance(p, ThreadStarted):
        return _thread_started(p)
    if isinstance(p, ThreadFinished):
        ended = p.stop_reason + (f" — {clip(p.detail, 60)}" if p.detail else "")
        return ended + (f": {clip(p.output, 70)}" if p.output else "")
    if isinstance(p, TurnEnded | SessionEnded):
        name = p.stop_reason if isinstance(p, TurnEnded) else p.outcome
        return name + (f" — {p.detail}" if p.detail else "")
    return ""


def _thread_started(p: ThreadStarted) -> str:
    who = f"{p.agent or 'an agent'}" + (f" ({p.model})" if p.model else "")
    where = _call_of(parent_thread(p.thread), p.parent_call_id)
    if p.handoff:
        return f"{who} takes the turn over from {where}, with {len(p.history)} message(s)"
    return f"{who} runs {where}"


def _call_of(parent: str, call_id: str | None) -> str:
    thread = f"[{parent}]" if parent else "the main thread"
    return f"{call_id} of {thread}" if call_id else thread


def thread_label(thread: str) -> str:
    """How a line names a sub-agent's thread: `[PATH] `, indented two spaces per level of the
    tree; nothing for the main thread."""
    return f"{_indent(thread)}[{thread}] " if thread else ""


def _indent(thread: str) -> str:
    return "  " * (thread.count("/") + 1)


class Timeline:
    """Formats events one line each, with the time since the first event it saw, and on a
    request that offered other tools than its thread's last, what changed."""

    def __init__(self) -> None:
        self._start: float | None = None
        self._offered: dict[str, tuple[str, ...]] = {}  # per thread, the last set it saw

    def line(self, event: Event) -> str:
        t = parse_time(event.time)
        if self._start is None:
            self._start = t
        indent = thread_label(event.thread) + ("  " if event.type.startswith("tool.") else "")
        said = summarize(event)
        p = event.payload
        if isinstance(p, SessionCreated):
            self._offered[event.thread] = tuple(p.tools)
        elif isinstance(p, ModelRequested) and p.tools_digest:
            said += f"; {self._tools_changed(event.thread, p.tools)}"
        return f"{event.seq:>5}  +{t - self._start:7.3f}s  {indent}{event.type:<17} {said}"

    def _tools_changed(self, thread: str, tools: tuple[str, ...]) -> str:
        before = self._offered.get(thread)
        self._offered[thread] = tools
        if before is None:  # a sub-agent's first record: its thread named none before
            return f"tools offered: {', '.join(tools) or 'none'}"
        added = [f"+{name}" for name in tools if name not in before]
        removed = [f"−{name}" for name in sorted(before) if name not in tools]
        return f"tools changed: {' '.join([*added, *removed]) or 'same names, other schemas'}"


def render_transcript(transcript: Transcript) -> str:
    lines: list[str] = []
    if transcript.system:
        lines.append(f"[system] {transcript.system}")
    for message in transcript.messages:
        for part in message.parts:
            lines.append(f"[{message.role}] {_part_text(part)}")
    return "\n".join(lines)


def _part_text(part: object) -> str:
    if isinstance(part, Text):
        return part.text
    if isinstance(part, ToolCall):
        return f"call {part.name}({canonical_json(part.arguments)}) [{part.id}]"
    if isinstance(part, ToolResult):
        mark = "error" if part.is_error else "result"
        shown = f"{mark} [{part.call_id}] {clip(part.content, 200)}"
        return " ".join([shown, *(image_placeholder(i) for i in part.images)])
    if isinstance(part, Image):
        return image_placeholder(part)
    return repr(part)


def image_placeholder(image: Image) -> str:
    """An image as one line: never its bytes."""
    if image.data is not None:
        return f"[image {image.media_type}, {len(image.data):,} bytes]"
    return f"[image {clip(image.url or '', 80)}]"


def render_view(view: SessionView) -> str:
    cost = "unknown" if view.cost_usd is None else f"${view.cost_usd:.6f}"
    stop = view.stop_reason or "-"
    lines = [
        f"session  {view.session_id}",
        f"state    {view.state}",
        f"stop     {stop}" + (f" — {view.stop_detail}" if view.stop_detail else ""),
        f"model    {view.model}",
        f"steps    {view.steps} in {view.turns} turn(s)",
        f"usage    {view.usage.input_tokens} input + {view.usage.output_tokens} output tokens",
        f"cost     {cost}",
    ]
    if view.pending_approvals:
        # Each as `tether sessions approve` takes it: THREAD:CALL_ID inside a sub-agent.
        lines.append(f"waiting  approval of {', '.join(view.pending_approvals)}")
    for key, asked in view.pending_inputs.items():
        # As `tether sessions answer ID CALL JSON` takes it.
        lines.append(f"waiting  input for {key} from {asked.server}: {asked.message}")
    if view.threads:
        lines.append(f"threads  {len(view.threads)}")
        lines.extend(render_thread(node) for node in view.threads)
    return "\n".join(lines)


def render_thread(node: ThreadNode) -> str:
    """One line of the thread tree: the thread, indented by its depth, its agent, where it
    stands, and the call that runs it."""
    status = node.status + (f" ({node.stop_reason})" if node.stop_reason else "")
    runs = "takes the turn over from" if node.handoff else "runs"
    return (
        f"{_indent(node.thread)}{node.thread}  {node.agent} · {status}"
        f" · {runs} {_call_of(node.parent, node.parent_call_id)}"
    )


def runner_json(lease: Lease | None, queued: Queued | None) -> JSONObject | None:
    """Who holds the session now, and until when: a worker running it (`owner`), or nobody
    until a deferral ends (`deferred`: "parked" or "backoff"); None when it is free."""
    if lease is not None:
        return {"owner": lease.owner, "until": format_time(lease.expires), "parked": False}
    if queued is not None:
        return {
            "owner": None,
            "until": format_time(queued.not_before),
            "parked": queued.reason == "parked",
            "deferred": queued.reason,
        }
    return None


def render_runner(lease: Lease | None, queued: Queued | None) -> str:
    if lease is not None:
        return f"runner   {lease.owner}, lease until {format_time(lease.expires)}"
    if queued is None:
        return "runner   none (no worker holds it)"
    until = format_time(queued.not_before)
    if queued.reason == "parked":
        return f"runner   parked until {until}: its model's backend could not take the call"
    return f"runner   none; its last run failed, and it is tried again after {until}"
