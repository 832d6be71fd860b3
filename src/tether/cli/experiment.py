"""`tether experiment`: experiments from the command line (`tether.experiment`).

- `tether experiment TASK --model MODEL --runs N`: one task run N times on one agent.
- `tether experiment run SPEC.toml [--id ID]`: the variants x tasks x runs of a spec file;
  the same `--id` again runs only the missing runs.
- `tether experiment report ID` and `compare ID A B`: rebuilt from the store alone.

The first word picks the form: `run`, `report` and `compare` are subcommands; a task that is
one of those words is given as `--task WORD`. A progress bar with the running tally goes to
stderr while runs run; Ctrl-C prints the report of the runs that ended (exit 130).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from tether.agent import Agent, resolve_model
from tether.cli.common import (
    EXIT_ERROR,
    EXIT_LIMIT,
    CliError,
    existing_store,
    load_tools,
    store_from,
)
from tether.cli.experiment_args import FORMS
from tether.errors import TetherError, UsageError
from tether.experiment import (
    Comparison,
    MatrixReport,
    Report,
    chart_svg,
    read_matrix,
    render_comparison,
    render_matrix,
    render_report,
)
from tether.limits import Limits

PLAIN_EVERY = 2.0  # seconds between progress lines when stderr is not a terminal
BAR = 20  # characters of the progress bar
SUBCOMMANDS = tuple(FORMS)


class Progress:
    """The running tally: on a terminal one line redrawn in place, with a bar; elsewhere a
    plain line as runs end, at most every `PLAIN_EVERY` seconds, and one for the last."""

    def __init__(self, out: TextIO, total: int, done: int = 0) -> None:
        self.out = out
        self.total = total
        self.tty = out.isatty()
        self.started = time.monotonic()
        self.shown = float("-inf")  # the first run to end is shown at once
        self.drawn = False
        if self.tty:
            self._draw(f"{self._bar(done)}▏ {done}/{total} runs")

    def update(self, done: int, tally: str) -> None:
        line = f"{done}/{self.total} runs · {tally} · {time.monotonic() - self.started:.1f} s"
        if self.tty:
            self._draw(f"{self._bar(done)}▏ {line}")
        elif done == self.total or time.monotonic() - self.shown >= PLAIN_EVERY:
            self.shown = time.monotonic()
            print(f"tether: {line}", file=self.out, flush=True)

    def end(self) -> None:
        if self.drawn:
            self.out.write("\n")
            self.out.flush()
            self.drawn = False

    def _bar(self, done: int) -> str:
        filled = round(BAR * done / self.total) if self.total else BAR
        return f"{'█' * filled}{'░' * (BAR - filled)}"

    def _draw(self, text: str) -> None:
        self.out.write(f"\r\x1b[K{text}")
        self.out.flush()
        self.drawn = True


async def cmd_experiment(args: argparse.Namespace) -> int:
    words: list[str] = args.words
    if args.task is not None:
        if words:
            raise CliError(f"--task and a positional task ({words[0]!r}): give one of them")
        return await cmd_one_task(args, args.task)
    if not words:
        raise CliError("tether experiment needs a TASK, or run SPEC, report ID, compare ID A B")
    form, rest = words[0], words[1:]
    if form not in SUBCOMMANDS:
        if rest:
            raise CliError(f"one TASK, not {len(words)} words: quote the task")
        if not form.strip():
            raise CliError("the TASK must not be empty")
        return await cmd_one_task(args, form)
    if args.model is not None or args.tools or args.system is not None:
        raise CliError(f"--model, --tools and --system are the TASK form's; {form} reads a spec")
    arity = {"run": 1, "report": 1, "compare": 3}[form]
    if len(rest) != arity:
        usage = {"run": "run SPEC.toml", "report": "report ID", "compare": "compare ID A B"}
        raise CliError(f"usage: tether experiment {usage[form]}")
    asked = (args.id, args.max_cost, args.runs, args.concurrency, args.tenant)
    if form != "run" and asked != (None,) * 5:
        raise CliError("--id, --max-cost, --runs, --concurrency and --tenant are for `run`")
    if form == "compare" and args.chart is not None:
        raise CliError("--chart is for `run` and `report`")
    if args.chart is not None and not args.chart.endswith(".svg"):
        raise CliError(
            f"--chart {args.chart}: only SVG is written (a PNG would need matplotlib, "
            "which tether does not depend on)"
        )
    if form == "run":
        return await cmd_run_spec(args, rest[0])
    return await cmd_read(args, form, rest)


async def cmd_one_task(args: argparse.Namespace, task: str) -> int:
    """`tether experiment TASK --model MODEL`: the task run `--runs` times on one agent."""
    from tether.experiment import run_experiment

    if args.model is None:
        raise CliError("tether experiment TASK needs --model (or: run SPEC.toml)")
    if (args.id, args.max_cost, args.chart, args.tenant) != (None,) * 4:
        raise CliError(
            "--id, --max-cost, --chart and --tenant are for `tether experiment run SPEC`"
        )
    runs = 10 if args.runs is None else args.runs
    confidence = 0.95 if args.confidence is None else args.confidence
    try:
        model = resolve_model(args.model)
    except TetherError as exc:
        raise CliError(f"--model {args.model}: {exc}") from exc
    tools = load_tools(args.tools)
    agent = Agent(
        model,
        tools=tools,
        system=args.system,
        limits=Limits(max_steps=args.max_steps),
        store=store_from(args.store),
        metadata={"cli": {"model": args.model, "tools": list(args.tools), "mcp": None}},
    )
    progress = Progress(sys.stderr, runs)
    so_far: list[Report] = []

    def on_progress(report: Report) -> None:
        so_far[:] = [report]
        tally = " · ".join(f"{reason} {n}" for reason, (n, _) in report.outcomes().items())
        progress.update(len(report.runs), tally)

    try:
        report = await run_experiment(
            agent,
            task,
            runs,
            concurrency=4 if args.concurrency is None else args.concurrency,
            confidence=confidence,
            on_progress=on_progress,
        )
    except asyncio.CancelledError:  # Ctrl-C: what the runs that ended say, then 130
        progress.end()
        print_partial(so_far[0] if so_far else None, runs, args.json)
        raise
    finally:
        progress.end()
        await agent.close()
    print(json.dumps(report.to_json()) if args.json else render_report(report))
    errored = sum(r.stop_reason == "error" for r in report.runs)
    if errored:
        print(f"tether: {errored} of {len(report.runs)} runs ended in error", file=sys.stderr)
        return EXIT_ERROR
    return 0


def print_partial(report: Report | None, runs: int, as_json: bool) -> None:
    """The report of the runs that ended before the experiment was interrupted."""
    if report is None:
        print(f"tether: interrupted before any of the {runs} runs ended", file=sys.stderr)
        return
    ended = len(report.runs)
    if as_json:
        print(json.dumps({**report.to_json(), "interrupted": True, "runs_asked": runs}))
    else:
        print(f"interrupted: a partial report of the {ended} of {runs} runs that ended")
        print(render_report(report))


async def cmd_run_spec(args: argparse.Namespace, path: str) -> int:
    """`tether experiment run SPEC.toml`: the spec's variants x tasks x runs, continued
    when `--id` (or the spec's `id`) names an experiment already in the store."""
    from tether.experiment import run_matrix
    from tether.experiment.matrix import new_experiment_id
    from tether.experiment.spec import load_spec

    try:
        spec = load_spec(path)  # its errors name the file
    except TetherError as exc:
        raise CliError(str(exc)) from exc
    try:
        tasks = spec.built_tasks()
        agents = spec.agents(lambda: store_from(args.store), args.tenant)
    except TetherError as exc:
        raise CliError(f"{path}: {exc}") from exc
    store = next(iter(agents.values())).store
    experiment_id = args.id or spec.id or new_experiment_id()
    runs = spec.runs if args.runs is None else args.runs
    total = len(spec.variants) * len(tasks) * runs
    progress: Progress | None = None
    so_far: list[MatrixReport] = []

    def on_start(report: MatrixReport) -> None:
        # Said once the experiment is this process's: a refusal is then the only line.
        nonlocal progress
        print(f"tether: experiment {experiment_id} · {total} runs planned", file=sys.stderr)
        progress = Progress(sys.stderr, total, len(report.runs))  # continued: part-done

    def on_progress(report: MatrixReport) -> None:
        so_far[:] = [report]
        if progress is not None:
            progress.update(len(report.runs), _tally(report))

    try:
        report = await run_matrix(
            agents,
            tasks,
            runs,
            concurrency=args.concurrency or spec.concurrency,
            seed=spec.seed,
            experiment_id=experiment_id,
            max_cost_usd=args.max_cost or spec.max_cost_usd,
            confidence=args.confidence or spec.confidence,
            on_progress=on_progress,
            on_start=on_start,
        )
    except asyncio.CancelledError:
        if progress is not None:
            progress.end()
        if so_far:
            _print_matrix(so_far[0], args)
        print(
            f"tether: interrupted; `tether experiment run {path} --id {experiment_id}` "
            "runs what is missing",
            file=sys.stderr,
        )
        raise
    except TetherError as exc:
        raise CliError(str(exc)) from exc
    finally:
        if progress is not None:
            progress.end()
        await store.close()
    _print_matrix(report, args)
    return _exit_code(report)


def _tally(report: MatrixReport) -> str:
    """Each variant's passes so far (counted, not summarised: no intervals per run)."""
    parts = []
    for name in report.plan.variants:
        runs = report.of(name)
        parts.append(f"{name} {sum(r.passed for r in runs)}/{len(runs)} passed")
    return " · ".join(parts)


def _exit_code(report: MatrixReport) -> int:
    """1 when a run ended in error or a check raised; 3 when runs are missing (the spend
    cap); else 0."""
    if any(r.stop_reason == "error" or r.check_error for r in report.runs):
        return EXIT_ERROR
    return EXIT_LIMIT if report.missing() else 0


def _print_matrix(report: MatrixReport, args: argparse.Namespace) -> None:
    comparisons = _against_the_first(report, args.metric)
    if args.chart is not None:
        Path(args.chart).write_text(chart_svg(report, args.metric), encoding="utf-8")
    if args.json:
        body = {**report.to_json(), "comparisons": [c.to_json() for c in comparisons]}
        print(json.dumps(body))
        return
    print(render_matrix(report))
    for comparison in comparisons:
        print()
        print(render_comparison(comparison))


def _against_the_first(report: MatrixReport, metric: str) -> list[Comparison]:
    """Every other variant against the first (none where no cell has a figure on both)."""
    first, *others = report.plan.variants
    comparisons = []
    for other in others:
        try:
            comparisons.append(report.compare(first, other, metric))
        except UsageError:
            continue
    return comparisons


async def cmd_read(args: argparse.Namespace, form: str, rest: Sequence[str]) -> int:
    """`report ID` and `compare ID A B`, from the store alone (the checks re-imported by
    the `MODULE:ATTR` each task recorded)."""
    store = existing_store(args.store)
    try:
        report = await read_matrix(
            store, rest[0], confidence=0.95 if args.confidence is None else args.confidence
        )
        if form == "report":
            _print_matrix(report, args)
            return 0
        comparison = report.compare(rest[1], rest[2], args.metric)
    except TetherError as exc:
        raise CliError(str(exc)) from exc
    finally:
        await store.close()
    print(json.dumps(comparison.to_json()) if args.json else render_comparison(comparison))
    return 0
