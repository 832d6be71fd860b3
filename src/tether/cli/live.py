"""What `tether run`, `tether chat` and `tether sessions send` print while a turn runs: the
model's text as it streams, a tool call's arguments as the model writes them, each call as it
starts and its result as it comes, retries, approvals and errors. Colour on a terminal, plain text otherwise or with `NO_COLOR`.

Owns formatting and colour; the commands decide when a view is used (`--json` uses none).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import TextIO

from tether.events import (
    ApprovalDecided,
    ApprovalRequested,
    CancelRequested,
    ContextCompacted,
    Event,
    ModelFailed,
    ModelRequested,
    ModelResponded,
    ToolFinished,
    ToolStarted,
)
from tether.messages import JSONValue, ToolCall
from tether.providers.base import Delta
from tether.render import clip, summarize

_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}
# Terminal control characters a model or a tool could send (an escape sequence rewrites the
# screen): shown as visible marks, never passed on. Newlines and tabs stay.
_CONTROLS = {c: "\N{SYMBOL FOR ESCAPE}" if c == 0x1B else "\N{REPLACEMENT CHARACTER}" for c in
             [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)]}  # fmt: skip
_OUTCOME_COLOURS = {"ok": "green", "canceled": "yellow", "denied": "yellow"}
# How much of a call's arguments is shown as they stream (a file a model writes may be long);
# the line then says how many characters came in all.
ARGUMENTS_SHOWN = 400


def colour_wanted(stream: TextIO) -> bool:
    """Colour on a terminal; never with `NO_COLOR` set (no-color.org), always with
    `FORCE_COLOR` set, never on a `dumb` terminal."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty()) and os.environ.get("TERM") != "dumb"


class Style:
    """`style(text, "bold", "red")`: the text in ANSI colour, or as it is when off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, *names: str) -> str:
        if not self.enabled or not names:
            return text
        return f"\x1b[{';'.join(_CODES[n] for n in names)}m{text}\x1b[0m"

    @staticmethod
    def for_stream(stream: TextIO) -> Style:
        return Style(colour_wanted(stream))


def printable(text: str) -> str:
    """Text from a model or a tool, safe to write to a terminal."""
    return text.translate(_CONTROLS)


def call_text(name: str, arguments: dict[str, JSONValue] | None, width: int = 100) -> str:
    if arguments is None:
        return name
    shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return f"{name}({clip(printable(shown), width)})"


class LiveView:
    """Writes a turn as it happens to `out`. `on_delta` and `on_event` are an agent's
    observers; `end` finishes a line the stream left open."""

    def __init__(self, out: TextIO, style: Style) -> None:
        self.out = out
        self.style = style
        self.session_id: str | None = None
        self._calls: dict[str, ToolCall] = {}
        self._streamed = False  # some text of the current answer was shown as it came
        self._open_line = False  # the last write did not end its line
        self._writing: str | None = None  # the call whose arguments stream on the open line
        self._written = 0  # characters of its arguments that came so far

    def know(self, calls: Iterable[ToolCall]) -> None:
        """Calls an earlier answer asked for (a turn that goes on after a decision), so their
        starts show their arguments."""
        self._calls.update((call.id, call) for call in calls)

    def on_delta(self, delta: Delta) -> None:
        if delta.kind == "text" and delta.text:
            if self._writing is not None:
                self.end()
            self._write(printable(delta.text))
            self._streamed = True
        elif delta.kind == "tool_input" and delta.text:
            self._arguments(delta.call_id, delta.text)

    def _arguments(self, call_id: str | None, piece: str) -> None:
        """A piece of a call's arguments: on a line of the call's own, the first
        `ARGUMENTS_SHOWN` characters as they come. A piece with no id goes on the call
        before it (a provider names a call in its first piece only)."""
        if self._writing is None or (call_id is not None and call_id != self._writing):
            self.end()
            self._writing = call_id or ""
            self._write(self.style(f"⋯ [{call_id}] " if call_id else "⋯ ", "dim"))
        room = ARGUMENTS_SHOWN - self._written
        self._written += len(piece)
        if room > 0:
            self._write(self.style(printable(piece[:room]), "dim"))

    def on_event(self, event: Event) -> None:
        self.session_id = event.session_id
        p = event.payload
        if isinstance(p, ModelRequested):
            self._streamed = False
        elif isinstance(p, ModelResponded):
            self._responded(p)
        elif isinstance(p, ModelFailed):
            self._failed(p)
        elif isinstance(p, ToolStarted):
            call = self._calls.get(p.call_id)
            shown = call_text(p.name, None if call is None else dict(call.arguments))
            self._line(self.style(f"→ {shown}", "cyan") + self.style(f"  [{p.call_id}]", "dim"))
        elif isinstance(p, ToolFinished):
            self._finished(p)
        elif isinstance(p, ApprovalRequested):
            shown = call_text(p.name, dict(p.arguments)) + (f" ({p.effect})" if p.effect else "")
            self._line(self.style(f"? {shown} waits for approval [{p.call_id}]", "yellow", "bold"))
        elif isinstance(p, ApprovalDecided | CancelRequested):
            self._line(self.style(f"· {event.type}: {printable(summarize(event))}", "dim"))
        elif isinstance(p, ContextCompacted):
            what = "summarised" if p.summary is not None else "cleared"
            cleared = f", {len(p.cleared_call_ids)} tool results" if p.cleared_call_ids else ""
            seqs = f"events {p.first_seq}–{p.last_seq}"
            self._line(self.style(f"· context compacted: {what} {seqs}{cleared}", "dim"))

    def end(self) -> bool:
        """End the line the stream left open; False when there was none."""
        if self._writing is not None:  # a call's arguments: how long they were, if cut
            if self._written > ARGUMENTS_SHOWN:
                self._write(self.style(f" … {self._written:,} characters in all", "dim"))
            self._writing, self._written = None, 0
        if not self._open_line:
            return False
        self._write("\n")
        return True

    def _responded(self, p: ModelResponded) -> None:
        for call in p.message.tool_calls:
            self._calls[call.id] = call
        if not self._streamed and p.message.text:  # a model that does not stream
            self._write(printable(p.message.text))
        self.end()
        if p.incomplete:
            self._line(self.style("[the output limit cut the answer]", "yellow"))

    def _failed(self, p: ModelFailed) -> None:
        status = "" if p.status is None else f" ({p.status})"
        text = f"{p.error_class}{status}: {clip(printable(p.message), 200)}"
        if p.retrying_in is None:
            self._line(self.style(f"✗ {text}", "red", "bold"))
        else:
            again = f" — attempt {p.attempt}, retrying in {p.retrying_in:.1f} s"
            self._line(self.style(f"! {text}{again}", "yellow"))

    def _finished(self, p: ToolFinished) -> None:
        call = self._calls.get(p.call_id)
        colour = _OUTCOME_COLOURS.get(p.outcome, "red")
        head = p.outcome if call is None else f"{call.name} {p.outcome}"
        took = f" · {p.duration_ms:.0f} ms" if p.duration_ms else ""
        content = clip(printable(p.content), 160)
        self._line(f"  ← {self.style(head, colour)}{self.style(took, 'dim')}  {content}")

    def _line(self, text: str) -> None:
        self.end()
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
        self._open_line = not text.endswith("\n")
