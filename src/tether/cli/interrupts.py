"""Ctrl-C for the `tether` command, as users expect: the first cancels the command (a
running turn closes `interrupted`, its async calls cancelled at once, a sync call given its
grace), the second exits at once with 130 and no traceback, leaving the turn to be settled by
the recovery rules when the session is next run.

Owns the SIGINT handler of commands that run turns; `tether serve` and `tether worker` keep
their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys


class Interrupts:
    """How many Ctrl-Cs the command saw, and the session it runs (named when it exits)."""

    def __init__(self) -> None:
        self.count = 0
        self.session_id: str | None = None

    def install(self, task: asyncio.Task[int]) -> None:
        """From inside the running loop: Ctrl-C cancels `task`, a second one exits."""
        # Without loop signal handlers (another OS, another thread), Python's own applies.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._on_sigint, task)

    def _on_sigint(self, task: asyncio.Task[int]) -> None:
        self.count += 1
        if self.count == 1:
            say("tether: interrupting… (Ctrl-C again to quit at once)")
            task.cancel()
            return
        left = ""
        if self.session_id is not None:
            left = (
                f"; session {self.session_id} may have a turn left open: "
                f"`tether sessions resume {self.session_id}` settles it"
            )
        say(f"tether: interrupted again: quitting now{left}")
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(130)  # no cleanup, no traceback: at once, as asked

    def summary(self) -> str:
        """What the command says as it exits interrupted."""
        if self.session_id is None:
            return "tether: interrupted"
        return f"tether: interrupted (session {self.session_id})"


def say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # stderr is gone: the exit code says it
        print(text, file=sys.stderr, flush=True)
