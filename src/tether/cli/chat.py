"""`tether chat [--session ID] --model MODEL [--tools ...]`: a conversation over a session.
Each line read is a message, its turn run in this process and shown as `tether run` shows
one (`cli.live`); `/approve [CALL]`, `/deny [CALL [REASON]]` (CALL: any unique start of a
waiting call's id, or nothing when one call waits), `/interrupt`, `/help` and `/quit` (or the
end of the input) steer it. Ctrl-C interrupts the running turn and the chat goes on; a second
one within a second leaves (`interrupts.ChatPresses`). The session is stored like any other:
`sessions show`, `resume`, `send` and `chat --session` go on with it.

Owns reading the input while a turn runs (so `/interrupt` and Ctrl-C reach it) and the
commands; the turns are `Agent.run`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import threading
from collections.abc import Sequence
from typing import Any, TextIO

from tether.agent import Agent, RunResult, resolve_model
from tether.cli.args import COUNT, WAIT, number
from tether.cli.common import (
    TOOLS_ARGUMENT,
    CliError,
    existing_store,
    load_mcp_tools,
    load_tools,
    retry_policy,
    store_from,
)
from tether.cli.interrupts import ChatPresses, Interrupts
from tether.cli.live import LiveView, Style
from tether.cli.secrets import add_secret_flags, keyring_from
from tether.cli.settings_args import add_settings_flags, settings_from
from tether.errors import TetherError
from tether.events import Event
from tether.limits import Limits

HELP = (
    "/approve [CALL] · /deny [CALL [REASON]] · /interrupt (or Ctrl-C) · /help · "
    "/quit (or end of input, or Ctrl-C twice)"
)
Lines = asyncio.Queue[str | None]  # None: the end of the input


def add_chat_command(sub: Any, store_help: str) -> None:

    p = sub.add_parser("chat", help="a conversation over a session, a line at a time")
    p.add_argument("--session", default=None, metavar="ID", help="go on with this session")
    p.add_argument(
        "--model",
        default=None,
        help="as for `tether run`; with --session, default: the model the session ran with",
    )
    p.add_argument("--tools", **{**TOOLS_ARGUMENT, "default": None})
    p.add_argument("--mcp", default=None, metavar="FILE")
    add_secret_flags(p)
    p.add_argument("--system", default=None)
    p.add_argument("--store", default=None, help=store_help)
    p.add_argument("--max-steps", type=COUNT, default=50)
    p.add_argument("--retries", type=number(int, at_least=0), default=None, metavar="N")
    p.add_argument("--lease-wait", type=WAIT, default=0.0, metavar="SECONDS")
    add_settings_flags(p)


async def cmd_chat(args: argparse.Namespace) -> int:
    from tether.cli.steer import stored_setup

    # Everything the user named is checked before a line is read.
    model, specs, mcp = args.model, args.tools, args.mcp
    recorded = None  # the settings a session goes on with, under the flags given now
    if args.session is not None:
        store = existing_store(args.store)
        try:
            setup = await stored_setup(store, args.session)
        except BaseException:
            await store.close()
            raise
        model, specs, mcp = (
            model or setup.model,
            setup.tools if specs is None else specs,
            mcp or setup.mcp,
        )
        recorded = setup.settings
    elif model is None:
        raise CliError("--model is needed to start a conversation (or --session ID to go on)")
    else:
        store = store_from(args.store)
    source: Any = None
    try:
        args.settings = settings_from(args, recorded)
        try:
            resolved = resolve_model(model, stream=True)
        except TetherError as exc:
            raise CliError(f"--model {model}: {exc}") from exc
        tools = load_tools(specs or [])
        if mcp is not None:
            source, mcp_tools = await load_mcp_tools(
                mcp, [t.name for t in tools], store=args.store, keyring=keyring_from(args)
            )
            tools += mcp_tools
            args.system = await source.system_prompt(args.system)  # `use_instructions`, as run
    except BaseException:
        await store.close()
        if source is not None:
            await source.aclose()
        raise
    args.metadata = {"cli": {"model": model, "tools": list(specs or []), "mcp": mcp}}
    try:
        return await _chat(args, store, resolved, tools, source)
    finally:
        if source is not None:
            await source.aclose()


async def _chat(
    args: argparse.Namespace, store: Any, model: Any, tools: list[Any], source: Any
) -> int:

    view = LiveView(sys.stdout, Style.for_stream(sys.stdout))
    chat = Chat(view, args.session, args.lease_wait, sys.stdin.isatty())

    def observe(event: Event) -> None:
        chat.saw(event.session_id)
        args.interrupts.session_id = event.session_id
        args.kept.saw(event)
        view.on_event(event)

    chat.agent = Agent(
        model,
        tools=tools,
        system=args.system,
        limits=Limits(max_steps=args.max_steps),
        store=store,
        on_event=observe,
        on_delta=view.on_delta,
        metadata=args.metadata,
        retry=retry_policy(args.retries),
        settings=args.settings,
    )
    if source is not None:  # tools a server adds mid-conversation reach its next step
        source.keep_current(chat.agent.toolbox)
    try:
        if args.session is not None:
            args.interrupts.session_id = args.session
            if (await chat.agent.view(args.session)).terminal:
                raise CliError(f"session {args.session} has ended: start a new one")
        await chat.run(read_input(sys.stdin), args.interrupts)
    finally:
        view.end()
        await chat.agent.close()  # and with it the store
    chat.goodbye(store.url)
    return 0


def read_input(stream: TextIO) -> Lines:
    """The lines of `stream`, read on a daemon thread (a read never holds the process at
    exit, and any input works: a terminal, a pipe, a file)."""
    loop = asyncio.get_running_loop()
    lines: Lines = asyncio.Queue()

    def put(line: str | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody reads any more
            loop.call_soon_threadsafe(lines.put_nowait, line)

    def pump() -> None:
        for line in iter(stream.readline, ""):
            put(line)
        put(None)

    threading.Thread(target=pump, name="tether-chat-input", daemon=True).start()
    return lines


class Chat:
    """Two loops: one reads lines and acts at once on `/interrupt` and `/quit`; the other
    takes messages and commands in order, one turn at a time. Ctrl-C comes to `on_ctrl_c`,
    from the loop's signal handler."""

    agent: Agent

    def __init__(self, view: LiveView, session_id: str | None, lease_wait: float, tty: bool):
        self.view = view
        self.style = view.style
        self.session_id = session_id
        self.lease_wait = lease_wait
        self.tty = tty
        self.work: Lines = asyncio.Queue()
        self.turn: asyncio.Task[RunResult] | None = None
        self.quitting = False
        self.named = asyncio.Event()  # the session has an id (a new one, once it is created)
        self.presses = ChatPresses()
        self.stopping: asyncio.Task[RunResult] | None = None  # the turn a Ctrl-C interrupted
        self.group: asyncio.TaskGroup | None = None

    def saw(self, session_id: str) -> None:
        if self.session_id is None:
            self.session_id = session_id
            self.named.set()

    async def run(self, lines: Lines, interrupts: Interrupts) -> None:
        if self.tty:
            where = "a new session" if self.session_id is None else f"session {self.session_id}"
            self._say(f"tether chat · {where} · {HELP}")
            self._prompt()
        interrupts.divert, interrupts.stopping = self.on_ctrl_c, "leaving"
        try:
            async with asyncio.TaskGroup() as group:
                self.group = group
                group.create_task(self._read(lines))
                group.create_task(self._work())
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None  # a store that failed, as itself
        finally:
            interrupts.divert, self.group = None, None  # closing: Ctrl-C as for any command

    def on_ctrl_c(self) -> bool:
        """A Ctrl-C, first seen here: True when the chat dealt with it (a turn interrupted,
        a fresh prompt); False to leave (`Interrupts` cancels the command: the running turn
        closes `interrupted` and its lease is let go before the process exits, 130)."""
        turn = self.turn
        stopping = self.stopping is not None and not self.stopping.done()
        running = turn is not None and not turn.done()
        press = self.presses.press(turn_running=running, stopping=stopping)
        ended = self.view.end()
        if self.tty and not ended:
            print(flush=True)  # past the `^C` the terminal echoed
        if press == "leave" or self.group is None:
            self.quitting = True
            return False
        if press == "interrupt":
            self.stopping = turn
            self._say("· interrupting the turn (Ctrl-C again to leave the chat)")
            self.group.create_task(self._interrupt())
        else:  # the terminal dropped the line typed so far, as a shell's does
            self._say("· Ctrl-C again to leave the chat (or /quit, or Ctrl-D)")
            self._prompt()
        return True

    async def _read(self, lines: Lines) -> None:
        while True:
            line = await lines.get()
            text = None if line is None else line.strip()
            if text == "/quit":
                self.quitting = True
                await self._interrupt()
            if text is None or self.quitting:
                await self.work.put(None)
                return
            if text == "/interrupt" and self.turn is not None:
                await self._interrupt()
            elif text:
                await self.work.put(text)

    async def _work(self) -> None:
        while True:
            item = await self.work.get()
            if item is None or self.quitting:
                return
            if item.startswith("/"):
                await self._command(item)
            else:
                await self._run(item)
            if self.work.empty():
                self._prompt()

    async def _run(self, task: str | None) -> None:
        self.presses.forget()  # a Ctrl-C from now on is about this turn
        self.turn = asyncio.create_task(
            self.agent.run(task, session_id=self.session_id, lease_wait=self.lease_wait)
        )
        try:
            result = await self.turn
        except TetherError as exc:
            self.view.end()
            self._error(str(exc))
            return
        finally:
            self.turn = None
        self.view.end()
        usage = result.usage
        self._say(
            f"· {result.stop_reason} · {result.steps} steps · "
            f"{usage.input_tokens}+{usage.output_tokens} tokens"
        )
        if result.stop_reason == "awaiting_approval":
            waiting = (await self.agent.view(result.session_id)).pending_approvals
            self._say(
                "· to decide: " + " · ".join(f"/approve {c} or /deny {c} [REASON]" for c in waiting)
            )

    async def _interrupt(self) -> None:
        turn = self.turn
        if turn is None:
            return
        if self.session_id is None:  # a new session: its first event names it
            named = asyncio.ensure_future(self.named.wait())
            await asyncio.wait((named, turn), return_when=asyncio.FIRST_COMPLETED)
            named.cancel()
        if self.session_id is not None and not turn.done():
            try:
                await self.agent.interrupt(self.session_id)
            except TetherError as exc:  # the turn ended as it was asked to
                self._error(str(exc))

    async def _command(self, text: str) -> None:
        name, _, rest = text.partition(" ")
        if name in ("/approve", "/deny"):
            given, _, reason = rest.strip().partition(" ")
            await self._decide(given, name == "/approve", reason.strip() or None)
        elif name == "/interrupt":
            self._say("· no turn is running")
        elif name == "/help":
            self._say(HELP)
        else:
            self._error(f"unknown command {name}: {HELP}")

    async def _decide(self, given: str, allow: bool, reason: str | None) -> None:
        if self.session_id is None:
            self._error("no session yet: nothing waits for a decision")
            return
        try:
            waiting = (await self.agent.view(self.session_id)).pending_approvals
            call_id = waiting_call(given, waiting)
            await self.agent.decide(self.session_id, call_id, allow, reason)
        except (CliError, TetherError) as exc:
            self._error(str(exc))
            return
        self._say(f"· {call_id} {'allowed' if allow else 'denied'}")
        now = await self.agent.view(self.session_id)
        if now.pending_approvals:
            self._say(f"· still waiting for a decision: {', '.join(now.pending_approvals)}")
        else:
            self.view.know(now.open_calls)
            await self._run(None)  # the turn goes on with the decisions

    def goodbye(self, store_url: str) -> None:
        if self.session_id is not None:
            self._say(f"session {self.session_id} · store {store_url}")

    def _prompt(self) -> None:
        if self.tty and not self.quitting:
            print(self.style("› ", "bold"), end="", flush=True)

    def _say(self, text: str) -> None:
        print(self.style(text, "dim"), flush=True)

    def _error(self, text: str) -> None:
        print(f"tether: {text}", file=sys.stderr, flush=True)


def waiting_call(given: str, waiting: Sequence[str]) -> str:
    """The waiting call that `/approve GIVEN` or `/deny GIVEN` names: the only one when
    `given` is empty, else the one whose id is `given` or, failing that, the one whose id
    starts with it. Anything else is refused, naming what waits."""
    if not waiting:
        raise CliError("no call waits for a decision")
    if not given:
        if len(waiting) == 1:
            return waiting[0]
        raise CliError(f"which call? {len(waiting)} wait: {_listed(waiting)}")
    if given in waiting:
        return given
    starting = [c for c in waiting if c.startswith(given)]
    if len(starting) == 1:
        return starting[0]
    if starting:
        raise CliError(
            f"{given} is the start of {len(starting)} waiting calls: {_listed(starting)}"
        )
    waits = "waits" if len(waiting) == 1 else f"wait ({len(waiting)})"
    raise CliError(f"no waiting call's id starts with {given}: {_listed(waiting)} {waits}")


def _listed(calls: Sequence[str], at_most: int = 10) -> str:
    shown = ", ".join(calls[:at_most])
    return shown if len(calls) <= at_most else f"{shown} and {len(calls) - at_most} more"
