"""A stdio MCP server's last words: its stderr passed on line by line with the last lines
kept, and its exit code, for the error that says why the server would not start.

Owns one pipe and the thread that drains it. Starting and stopping the server is the SDK's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TextIO

TAIL_LINES = 5


class StderrTail:
    """`writer` is given to the server as its stderr; `release()` once the server has its
    own copy (started, or failed to), so the pipe ends when the server does."""

    def __init__(self, errlog: TextIO) -> None:
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w")
        self._lines: deque[str] = deque(maxlen=TAIL_LINES)
        self._process: Any = None  # the SDK's process handle, when it could be found
        reader = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
        self._thread = threading.Thread(
            target=self._pump, args=(reader, errlog), name="mcp-stderr", daemon=True
        )
        self._thread.start()

    def _pump(self, reader: TextIO, errlog: TextIO) -> None:
        with reader:
            for line in reader:
                self._lines.append(line.rstrip("\n"))
                with contextlib.suppress(OSError, ValueError):  # errlog closed: keep draining
                    errlog.write(line)
                    errlog.flush()

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.writer.close()

    async def tail(self, wait: float) -> str:
        """The last lines, once the server's end of the pipe closed (or `wait` s passed)."""
        self.release()
        await asyncio.to_thread(self._thread.join, wait)
        return " | ".join(line for line in self._lines if line.strip())

    def watch(
        self, transport: AbstractAsyncContextManager[Any]
    ) -> AbstractAsyncContextManager[Any]:
        """`transport` (the SDK's `stdio_client(...)`), noting its process for `exit_code`."""
        return _watched(transport, self)

    def exit_code(self) -> int | None:
        """The server's exit code, once it has exited and been reaped; None if not known."""
        code = getattr(self._process, "returncode", None)
        return code if isinstance(code, int) else None


@asynccontextmanager
async def _watched(
    transport: AbstractAsyncContextManager[Any], tail: StderrTail
) -> AsyncIterator[Any]:
    async with transport as streams:
        # The SDK keeps its process handle to itself: it is a local of the generator behind
        # `stdio_client`, suspended at its `yield` while we are inside. Read only, and only
        # for the exit code; any other SDK shape just leaves the code unknown.
        frame = getattr(getattr(transport, "gen", None), "ag_frame", None)
        tail._process = frame.f_locals.get("process") if frame is not None else None
        yield streams
