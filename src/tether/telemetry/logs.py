"""Structured process logs: one logger hierarchy (`tether.*`), and formatters (JSON lines or
text) whose every record names the session, turn, seq and thread its task was working on.

Owns the log context (which session log a task last appended to, set by `SessionLog.append`)
and `configure`, the one set-up the CLI calls. A call id, where a record is about one, is
given by its caller as `extra={"call_id": ...}`; any other `extra` is kept too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from types import TracebackType
from typing import IO, Literal, Protocol

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
CONTEXT_FIELDS = ("session_id", "turn", "seq", "thread", "call_id")


class _Fold(Protocol):
    last_seq: int
    turns: int
    turn_open: bool


class _Log(Protocol):
    session_id: str

    @property
    def folder(self) -> _Fold: ...


# The log a task last appended to, and on which thread: read only when a record is made.
_current: ContextVar[tuple[_Log, str] | None] = ContextVar("tether_log_context", default=None)


# The tool call a task (or a tool's thread) is running, set by `tools/run.execute`.
current_call: ContextVar[str | None] = ContextVar("tether_call_id", default=None)


def note(log: _Log, thread: str) -> None:
    """Records made in this task (and tasks it starts) from now on are about `log`."""
    _current.set((log, thread))


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """Records made after the block are about what they were about before it (a run
    awaited in its caller's task leaves no session behind it)."""
    token = _current.set(_current.get())
    try:
        yield
    finally:
        _current.reset(token)


def context_fields() -> dict[str, object]:
    current = _current.get()
    if current is None:
        call = current_call.get()
        return {} if call is None else {"call_id": call}
    log, thread = current
    folder = log.folder
    fields: dict[str, object] = {
        "session_id": log.session_id,
        "turn": folder.turns + (1 if folder.turn_open else 0),
        "seq": folder.last_seq,
    }
    if thread:
        fields["thread"] = thread
    call = current_call.get()
    if call is not None:
        fields["call_id"] = call
    return fields


class SessionContext(logging.Filter):
    """Puts the task's session fields on each record; fields given in `extra` win."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in context_fields().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


# Attributes every LogRecord has: anything else on a record came from `extra` or the filter.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)


def _extras(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the session fields and any
    other `extra`; a traceback goes in `exc` (one line of JSON, never a bare traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="microseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(_extras(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """`TIME LEVEL LOGGER MESSAGE [session=… turn=… seq=… call_id=…]`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        extras = _extras(record)
        tags = " ".join(f"{k}={extras[k]}" for k in CONTEXT_FIELDS if k in extras)
        return f"{line} [{tags}]" if tags else line


def formatter(log_format: LogFormat) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure(
    level: str = "warning", log_format: LogFormat = "text", stream: IO[str] | None = None
) -> logging.Handler:
    """Send the process's log records to `stream` (stderr) in `log_format`, from `level` up;
    a handler an earlier call installed is replaced."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "tether", False)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.tether = True  # type: ignore[attr-defined]
    handler.setFormatter(formatter(log_format))
    handler.addFilter(SessionContext())
    root.addHandler(handler)
    root.setLevel(level.upper())
    if log_format == "json":  # no bare traceback on stderr among the JSON lines
        sys.excepthook = _uncaught
        threading.excepthook = _uncaught_in_thread
    return handler


def _uncaught(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
    logging.getLogger("tether").critical(
        "uncaught %s", kind.__name__, exc_info=(kind, error, trace)
    )


def _uncaught_in_thread(hook: threading.ExceptHookArgs) -> None:
    if hook.exc_value is None:
        return
    logging.getLogger("tether").error(
        "uncaught %s in thread %s",
        hook.exc_type.__name__,
        getattr(hook.thread, "name", "?"),
        exc_info=(hook.exc_type, hook.exc_value, hook.exc_traceback),
    )
