"""`tether experiment TASK --model MODEL --runs N`: the task run N times, each run a session
of its own, and how the runs ended and what they cost, with intervals (`tether.experiment`).
A progress line with the running tally goes to stderr while it runs; Ctrl-C prints the
report of the runs that ended (exit 130). Exits 1 when any run ended in error (the report is
printed all the same).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any, TextIO

from tether.agent import Agent, resolve_model
from tether.cli.common import TOOLS_ARGUMENT, CliError, load_tools, store_from
from tether.errors import TetherError
from tether.experiment import Report, render_report
from tether.limits import Limits

PLAIN_EVERY = 2.0  # seconds between progress lines when stderr is not a terminal
BAR = 20  # characters of the progress bar


class Progress:
    """The running tally: on a terminal one line redrawn in place, with a bar; elsewhere a
    plain line as runs end, at most every `PLAIN_EVERY` seconds, and one for the last."""

    def __init__(self, out: TextIO, total: int) -> None:
        self.out = out
        self.total = total
        self.tty = out.isatty()
        self.started = time.monotonic()
        self.shown = float("-inf")  # the first run to end is shown at once
        self.drawn = False
        if self.tty:
            self._draw(f"{' ' * BAR}▏ 0/{total} runs")

    def update(self, report: Report) -> None:
        done = len(report.runs)
        tally = " · ".join(f"{reason} {n}" for reason, (n, _) in report.outcomes().items())
        line = f"{done}/{self.total} runs · {tally} · {time.monotonic() - self.started:.1f} s"
        if self.tty:
            filled = round(BAR * done / self.total)
            self._draw(f"{'█' * filled}{'░' * (BAR - filled)}▏ {line}")
        elif done == self.total or time.monotonic() - self.shown >= PLAIN_EVERY:
            self.shown = time.monotonic()
            print(f"tether: {line}", file=self.out, flush=True)

    def end(self) -> None:
        if self.drawn:
            self.out.write("\n")
            self.out.flush()
            self.drawn = False

    def _draw(self, text: str) -> None:
        self.out.write(f"\r\x1b[K{text}")
        self.out.flush()
        self.drawn = True


def add_experiment_command(sub: Any, store_help: str) -> None:

    p = sub.add_parser("experiment", help="run a task many times and report with intervals")
    p.add_argument("task")
    p.add_argument("--model", required=True, help="as for `tether run`")
    p.add_argument("--tools", **TOOLS_ARGUMENT)
    p.add_argument("--system", default=None)
    p.add_argument("--runs", type=int, default=10, help="how many runs (default 10)")
    p.add_argument("--concurrency", type=int, default=4, help="runs at once (default 4)")
    p.add_argument("--max-steps", type=int, default=50)
    p.add_argument("--confidence", type=float, default=0.95, help="of the intervals (default 0.95)")
    p.add_argument("--store", default=None, help=store_help)
    p.add_argument("--json", action="store_true")


async def cmd_experiment(args: argparse.Namespace) -> int:
    from tether.experiment import run_experiment

    # Everything the user named is checked before the store is touched.
    for name, value in (("runs", args.runs), ("concurrency", args.concurrency)):
        if value < 1:
            raise CliError(f"--{name} must be at least 1, not {value}")
    if args.max_steps <= 0:
        raise CliError(f"--max-steps must be positive, not {args.max_steps}")
    if not 0 < args.confidence < 1:
        raise CliError(f"--confidence must be between 0 and 1, not {args.confidence}")
    try:
        model = resolve_model(args.model)
    except TetherError as exc:
        raise CliError(f"--model {args.model}: {exc}") from exc
    tools = load_tools(args.tools)
    store = store_from(args.store)
    agent = Agent(
        model,
        tools=tools,
        system=args.system,
        limits=Limits(max_steps=args.max_steps),
        store=store,
        metadata={"cli": {"model": args.model, "tools": list(args.tools), "mcp": None}},
    )
    progress = Progress(sys.stderr, args.runs)
    so_far: list[Report] = []

    def on_progress(report: Report) -> None:
        so_far[:] = [report]
        progress.update(report)

    try:
        report = await run_experiment(
            agent,
            args.task,
            args.runs,
            concurrency=args.concurrency,
            confidence=args.confidence,
            on_progress=on_progress,
        )
    except asyncio.CancelledError:  # Ctrl-C: what the runs that ended say, then 130
        progress.end()
        print_partial(so_far[0] if so_far else None, args)
        raise
    finally:
        progress.end()
        await agent.close()
    print(json.dumps(report.to_json()) if args.json else render_report(report))
    errored = sum(r.stop_reason == "error" for r in report.runs)
    if errored:
        print(f"tether: {errored} of {len(report.runs)} runs ended in error", file=sys.stderr)
        return 1
    return 0


def print_partial(report: Report | None, args: argparse.Namespace) -> None:
    """The report of the runs that ended before the experiment was interrupted."""
    if report is None:
        print(f"tether: interrupted before any of the {args.runs} runs ended", file=sys.stderr)
        return
    ended = len(report.runs)
    if args.json:
        print(json.dumps({**report.to_json(), "interrupted": True, "runs_asked": args.runs}))
    else:
        print(f"interrupted: a partial report of the {ended} of {args.runs} runs that ended")
        print(render_report(report))
