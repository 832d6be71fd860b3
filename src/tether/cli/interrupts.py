"""Ctrl-C for the `tether` command, as users expect: the first cancels the command (a
running turn closes `interrupted`, its async calls cancelled at once, a sync call given its
grace), the second exits at once with 130 and no traceback, leaving the turn to be settled by
the recovery rules when the session is next run. `tether chat` takes the presses first
(`divert`): one interrupts the turn and the chat goes on (`ChatPresses` says what each means).

Owns the SIGINT handler of commands that run turns; `tether serve` and `tether worker` keep
their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Literal


class Interrupts:
    """How many Ctrl-Cs the command saw, and the session it runs (named when it exits)."""

    def __init__(self) -> None:
        self.count = 0
        self.session_id: str | None = None
        # Asked first on each press: True when it dealt with the press (a chat's turn
        # interrupted); False sends it on, as the command's first or second Ctrl-C.
        self.divert: Callable[[], bool] | None = None
        self.stopping = "interrupting"  # what the first press does, as the command says it

    def install(self, task: asyncio.Task[int]) -> None:
        """From inside the running loop: Ctrl-C cancels `task`, a second one exits."""
        # Without loop signal handlers (another OS, another thread), Python's own applies.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._on_sigint, task)

    def _on_sigint(self, task: asyncio.Task[int]) -> None:
        if self.divert is not None and self.divert():
            return
        self.count += 1
        if self.count == 1:
            say(f"tether: {self.stopping}… (Ctrl-C again to quit at once)")
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


Press = Literal["interrupt", "prompt", "leave"]


class ChatPresses:
    """What a Ctrl-C means in `tether chat`: while a turn runs, interrupt it (the chat goes
    on); at the prompt, drop the line typed so far (the terminal does) and prompt again, as
    shells do; and leave the chat when it comes within `WINDOW` seconds of the previous one,
    or while the turn that one interrupted is still stopping (a tool slow to give up), as a
    second Ctrl-C does in Node's shell. A turn started since (`forget`) makes the next press
    a first one again."""

    WINDOW = 1.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last: float | None = None

    def forget(self) -> None:
        self.last = None

    def press(self, *, turn_running: bool, stopping: bool) -> Press:
        now = self.clock()
        again = self.last is not None and now - self.last < self.WINDOW
        self.last = now
        if again or stopping:
            return "leave"
        return "interrupt" if turn_running else "prompt"
