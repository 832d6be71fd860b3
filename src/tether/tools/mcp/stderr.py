"""A stdio MCP server's stderr: passed on line by line, its last lines kept for the error that
says why the server would not start.

Owns one pipe and the thread that drains it. Starting and stopping the server is the SDK's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import deque
from typing import TextIO

TAIL_LINES = 5


class StderrTail:
    """`writer` is given to the server as its stderr; `release()` once the server has its
    own copy (started, or failed to), so the pipe ends when the server does."""

    def __init__(self, errlog: TextIO) -> None:
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w")
        self._lines: deque[str] = deque(maxlen=TAIL_LINES)
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
