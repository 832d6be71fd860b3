"""`tether experiment TASK --model MODEL --runs N`: the task run N times, each run a session
of its own, and how the runs ended and what they cost, with intervals (`tether.experiment`).
Exits 1 when any run ended in error (the report is printed all the same).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tether.agent import Agent, resolve_model
from tether.errors import TetherError
from tether.limits import Limits


def add_experiment_command(sub: Any, store_help: str) -> None:
    from tether.cli import TOOLS_ARGUMENT

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
    from tether.cli import CliError, _store, load_tools
    from tether.experiment import render_report, run_experiment

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
    store = _store(args.store)
    agent = Agent(
        model,
        tools=tools,
        system=args.system,
        limits=Limits(max_steps=args.max_steps),
        store=store,
        metadata={"cli": {"model": args.model, "tools": list(args.tools), "mcp": None}},
    )
    try:
        report = await run_experiment(
            agent, args.task, args.runs, concurrency=args.concurrency, confidence=args.confidence
        )
    finally:
        await agent.close()
    print(json.dumps(report.to_json()) if args.json else render_report(report))
    errored = sum(r.stop_reason == "error" for r in report.runs)
    if errored:
        print(f"tether: {errored} of {len(report.runs)} runs ended in error", file=sys.stderr)
        return 1
    return 0
