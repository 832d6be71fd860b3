"""The `tether` command: a thin adapter over `Agent` and the store.

Owns the parser and the dispatch, `tether run` and `demo`, and reading stored sessions
(`sessions ls/show/events/blob`), and what they print. Bad input is
a one-line error naming the problem and exit code 2; it is checked before anything is stored.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any, cast

import tether
from tether import documents
from tether.agent import Agent, RunResult, resolve_model
from tether.cli.args import COUNT, SECONDS, Parser, metadata_pair, nonblank, number
from tether.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    TIMELINE_HELP,
    TOOLS_ARGUMENT,
    AgentsFile,
    CliError,
    Kept,
    agent_tools,
    agents_record,
    error_text,
    existing_store,
    exit_code,
    failed,
    import_from_cwd,
    load_agents,
    load_mcp_tools,
    load_tools,
    retry_policy,
    store_from,
)
from tether.cli.fork import add_fork_commands, cmd_fork, cmd_rewind, lineage, render_lineage
from tether.cli.interrupts import Interrupts
from tether.cli.live import LiveView, Style
from tether.cli.secrets import add_secret_flags, keyring_from
from tether.cli.settings_args import add_settings_flags, settings_from
from tether.errors import SessionNotFound, TetherError, UsageError
from tether.events import Event
from tether.fold import Transcript, fold
from tether.limits import Limits
from tether.output import OutputMissing, OutputType
from tether.process import configure_gc
from tether.providers.base import Model
from tether.render import Timeline, render_runner, render_transcript, render_view, runner_json
from tether.retrying import DEFAULT_RETRY
from tether.runtime.base import ListOptions, SessionSummary
from tether.runtime.listing import MAX_LIMIT, list_sessions
from tether.session import snapshots
from tether.state import SessionView
from tether.store.base import Store
from tether.store.catalog import SORTS
from tether.store.open import DEFAULT_STORE_URL
from tether.tools.base import Tool, Toolbox


def _output_schema(path: str | None) -> OutputType | None:
    """`--output-schema FILE.json`: the output type a JSON schema file describes."""
    if path is None:
        return None
    try:
        schema = documents.read(path, "json")
    except (OSError, ValueError) as exc:
        raise CliError(f"--output-schema {path}: {error_text(exc)}") from exc
    if not isinstance(schema, dict):
        raise CliError(f"--output-schema {path}: a JSON schema is an object")
    try:
        return OutputType.from_schema(schema)
    except TetherError as exc:
        raise CliError(f"--output-schema {path}: {exc}") from exc


def _result_json(result: RunResult[object]) -> dict[str, Any]:
    return {
        "session_id": result.session_id,
        "output": result.output,
        "stop_reason": result.stop_reason,
        "stop_detail": result.stop_detail,
        "state": result.state,
        "usage": result.usage.to_json(),
        "cost_usd": result.cost_usd,
        "steps": result.steps,
    }


async def cmd_run(
    args: argparse.Namespace, *, task: str | None, model: str, tool_specs: Sequence[str]
) -> int:
    # Everything the user named is checked before the store is touched.
    try:
        resolved = resolve_model(model, stream=output_mode(args) == "live")
    except TetherError as exc:
        raise CliError(f"--model {model}: {exc}") from exc
    args.settings = settings_from(args, getattr(args, "recorded_settings", None))
    tools = load_tools(tool_specs)
    tools += _sub_agents(args, tools)
    # What `tether sessions resume` needs to rebuild this agent in another process.
    recorded: dict[str, Any] = {
        "model": model,
        "tools": list(tool_specs),
        "mcp": getattr(args, "mcp", None),
    }
    if args.agents_file is not None:
        recorded |= agents_record(args.agents_file)
    if getattr(args, "output_schema", None) is not None:
        recorded["output_schema"] = args.output_schema
    args.metadata = {"cli": recorded}
    if not getattr(args, "mcp", None):
        return await _run_agent(args, task, resolved, tools)
    # MCP servers start and list their tools here, before the store is touched.
    source, mcp_tools = await load_mcp_tools(
        args.mcp, [t.name for t in tools], store=args.store, keyring=keyring_from(args)
    )
    try:
        args.system = await source.system_prompt(args.system)  # servers' `use_instructions`
        args.mcp_source = source
        return await _run_agent(args, task, resolved, tools + mcp_tools)
    finally:
        await source.aclose()


def _sub_agents(args: argparse.Namespace, tools: list[Tool]) -> list[Tool]:
    """`--agents FILE` (or, resuming, the sub-agents the session recorded: `args.
    agents_loaded`): the tools that offer them to the main agent (none without either);
    what was loaded is kept in `args.agents_file` for its caps and its record."""
    path: str | None = getattr(args, "agents", None)
    loaded: AgentsFile | None = getattr(args, "agents_loaded", None)
    if loaded is None and path is not None:
        loaded = load_agents(path)
    args.agents_file = loaded
    if loaded is None:
        return []
    where = f"--agents {path}" if path is not None else "the session's recorded sub-agents"
    offered = agent_tools(loaded, where, getattr(args, "settings", None))
    try:
        Toolbox([*tools, *offered])
    except TetherError as exc:  # a sub-agent named as one of the --tools
        raise CliError(f"{where}: {exc}") from exc
    return offered


def output_mode(args: argparse.Namespace) -> str:
    """`json`: the result alone; `timeline`: one line per event, then the answer; `live`:
    the turn as it happens, the model's text as it streams (`cli.live`)."""
    if args.json:
        return "json"
    return "timeline" if getattr(args, "timeline", False) else "live"


async def _run_agent(
    args: argparse.Namespace, task: str | None, resolved: Model, tools: list[Tool]
) -> int:
    """Run `task` in a new session, or with `args.session_id` set, resume that session.
    The exit code says how the turn ended (`exit_code`)."""
    limits = Limits(
        max_steps=args.max_steps,
        max_tokens=getattr(args, "max_tokens", None),
        max_seconds=getattr(args, "max_seconds", None),
    )
    store = store_from(args.store)
    mode = output_mode(args)
    timeline = Timeline()
    view = LiveView(sys.stdout, Style.for_stream(sys.stdout))
    interrupts: Interrupts = getattr(args, "interrupts", None) or Interrupts()
    kept: Kept = getattr(args, "kept", None) or Kept()
    caps = getattr(args, "agents_file", None) or AgentsFile({})  # the sub-agents' caps

    def show(event: Event) -> None:
        interrupts.session_id = event.session_id
        kept.saw(event)
        if mode == "timeline":
            print(timeline.line(event), flush=True)
        elif mode == "live":
            view.on_event(event)

    agent = Agent(
        resolved,
        tools=tools,
        system=args.system,
        limits=limits,
        store=store,
        on_event=show,
        on_delta=view.on_delta if mode == "live" else None,
        metadata=getattr(args, "metadata", None),
        retry=retry_policy(getattr(args, "retries", None)),
        max_depth=caps.max_depth,
        max_threads=caps.max_threads,
        output_type=getattr(args, "output", None),
        settings=args.settings,
    )
    if (mcp := getattr(args, "mcp_source", None)) is not None:
        mcp.keep_current(agent.toolbox)  # tools a server adds mid-run reach its next step
    session_id = getattr(args, "session_id", None)
    result: RunResult[object]
    try:
        # A damaged file is refused before anything is written (a large one by its newest pages).
        await store.check_integrity(whole=False)
        try:
            if session_id is None:
                result = await agent.run(task)
            else:
                if task is None and mode == "live":  # a turn that goes on: its calls' arguments
                    view.know((await agent.view(session_id)).open_calls)
                result = await agent.run(task, session_id=session_id, lease_wait=args.lease_wait)
        except OutputMissing as exc:  # the turn ended without a valid answer: say how
            result = cast(RunResult[object], exc.result)
        waiting = (await agent.view(result.session_id)).pending_approvals
    finally:
        view.end()
        await agent.close()
    structured = agent.output is not None
    if mode == "json":
        print(json.dumps(_result_json(result), ensure_ascii=False))
    else:
        if structured and result.output is not None:
            print(f"\n{json.dumps(result.output, ensure_ascii=False, indent=2)}\n")
        elif mode == "timeline":
            print(f"\n{result.output}\n")
        print(view.style(f"\n{result_line(result)}\nstore {store.url}", "dim"))
    if result.stop_reason == "awaiting_approval":
        _print_approval_hint(result.session_id, waiting, args.store)
    if result.stop_reason == "output_invalid":
        return EXIT_ERROR
    return exit_code(result.stop_reason)


def result_line(result: RunResult[object]) -> str:
    cost = "unknown" if result.cost_usd is None else f"${result.cost_usd:.6f}"
    usage = result.usage
    return (
        f"session {result.session_id} · {result.state} · stop: {result.stop_reason} · "
        f"{result.steps} steps · {usage.input_tokens}+{usage.output_tokens} tokens · cost {cost}"
    )


def _print_approval_hint(session_id: str, calls: Sequence[str], store_arg: str | None) -> None:
    """On stderr, so `--json` output stays one document: the commands that decide."""
    store = f" --store {store_arg}" if store_arg else ""
    print(f"tether: waiting for approval of {len(calls)} call(s); to decide:", file=sys.stderr)
    for call_id in calls:
        print(f"  tether sessions approve {session_id} {call_id}{store}", file=sys.stderr)
        print(f"  tether sessions deny {session_id} {call_id}{store}", file=sys.stderr)
    print(f"then: tether sessions resume {session_id}{store}", file=sys.stderr)


async def cmd_sessions(args: argparse.Namespace) -> int:
    store = existing_store(args.store)
    try:
        if args.sessions_command == "ls":
            return await _sessions_ls(store, args)
        if args.sessions_command == "show" and not args.thread:
            # The main thread's fold: from the session's snapshot and the events after it.
            folder, _, _ = await snapshots.start(store, args.id, kept=False)
            if not folder.last_seq:
                raise SessionNotFound(args.id)
            await _show(store, args, folder.view(), folder.transcript(), "")
            return 0
        events = await store.read(args.id)
        if not events:
            raise SessionNotFound(args.id)
        thread = args.thread or ""
        if thread and not any(e.thread == thread for e in events):
            known = sorted({e.thread for e in events} - {""})
            raise CliError(
                f"--thread {thread}: no such thread in {args.id} "
                f"(threads: {', '.join(known) or 'none'})"
            )
        if args.sessions_command == "events":
            _print_events([e for e in events if not thread or e.thread == thread], args.json)
        else:
            await _show(store, args, fold(events)[1], fold(events, thread)[0], thread)
        return 0
    finally:
        await store.close()


async def _show(
    store: Store,
    args: argparse.Namespace,
    view: SessionView,
    transcript: Transcript,
    thread: str,
) -> None:
    """The session's view (with its thread tree) and runner, then the transcript of the main
    thread or, with `--thread`, of that sub-agent's thread."""
    lease = None if view.terminal else await store.current_lease(args.id)
    queued = None if view.terminal or lease else await store.queued(args.id)
    forks = await lineage(store, args.id)
    forked = None if view.forked is None else view.forked.to_json()
    if args.json:
        shown = {
            "view": view.to_json(),
            "forked": forked,
            "forks": forks,
            "runner": runner_json(lease, queued),
            "thread": thread,
            "transcript": transcript.to_json(),
        }
        print(json.dumps(shown, ensure_ascii=False))
        return
    print(render_view(view))
    if lines := render_lineage(forked, forks, args.id):
        print(lines)
    print(render_runner(lease, queued))
    print(f"\ntranscript of thread {thread}" if thread else "")
    print(render_transcript(transcript))


async def _sessions_ls(store: Store, args: argparse.Namespace) -> int:
    """A page of the store's sessions (every tenant's) from its catalog, filtered and sorted
    as `GET /v1/sessions` is (`runtime.listing`): a header row, a row per session, and the
    `--cursor` of the next page when there is one. No session's log is read."""
    options = ListOptions(sort=args.sort)
    for name in ("state", "model", "q", "cursor", "parent"):
        if getattr(args, name):
            options[name] = getattr(args, name)
    if args.metadata:
        options["metadata"] = dict(args.metadata)
    rows: list[SessionSummary] = []
    cursor: str | None = None
    try:
        while True:  # a --limit past one page's 500 is read a page at a time
            page = await list_sessions(store, None, min(args.limit - len(rows), MAX_LIMIT), options)
            rows += page
            cursor = page.next_cursor
            if cursor is None or len(rows) >= args.limit:
                break
            options["cursor"] = cursor
    except UsageError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps([s.to_json() for s in rows], ensure_ascii=False))
    elif not rows:
        print(f"no sessions in {store.url}" if not _filtered(args) else "no session matches")
    else:
        print(LS_ROW.format(*LS_HEADER))
        for s in rows:
            cost = "unknown" if s.cost_usd is None else f"${s.cost_usd:.4f}"
            shown = (s.session_id, s.state, s.stop_reason or "-", s.steps, s.tokens, cost,
                     s.updated, _one_line(s.task, 50))  # fmt: skip
            print(LS_ROW.format(*shown))
    if cursor is not None:  # said apart from the rows, so `--json` stays one document
        print(f"more: --cursor {cursor}", file=sys.stderr if args.json else sys.stdout)
    return 0


LS_HEADER = ("SESSION", "STATE", "STOP", "STEPS", "TOKENS", "COST", "UPDATED", "TASK")
LS_ROW = "{:<30} {:<16} {:<17} {:>5} {:>9} {:>9}  {:<27} {}"


def _one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _filtered(args: argparse.Namespace) -> bool:
    return bool(args.state or args.model or args.q or args.metadata or args.cursor or args.parent)


def _print_events(events: list[Event], as_json: bool) -> None:
    if as_json:
        for event in events:
            print(event.canonical())
        return
    timeline = Timeline()
    for event in events:
        print(timeline.line(event))


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tether", description="A durable agent runtime.")
    parser.add_argument("--version", action="version", version=f"tether {tether.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    store_help = f"event store URL (default: $TETHER_STORE or {DEFAULT_STORE_URL})"

    run = sub.add_parser("run", help="run a task in a new session")
    run.add_argument("task", type=nonblank)
    run.add_argument(
        "--model", required=True, help="e.g. scripted:demo, anthropic:MODEL, openai:MODEL"
    )
    run.add_argument("--tools", **TOOLS_ARGUMENT)
    run.add_argument(
        "--mcp",
        default=None,
        metavar="FILE",
        help="MCP servers: a JSON or TOML file with mcpServers",
    )
    add_secret_flags(run)
    run.add_argument(
        "--agents",
        default=None,
        metavar="FILE",
        help="sub-agents: a TOML or JSON file with [agents.NAME] model, tools, system, ...",
    )
    run.add_argument("--system", default=None)
    run.add_argument("--store", default=None, help=store_help)
    run.add_argument("--max-steps", type=COUNT, default=50)
    run.add_argument("--max-tokens", type=COUNT, default=None, metavar="N", help="token budget")
    run.add_argument(
        "--max-seconds", type=SECONDS, default=None, metavar="S", help="wall time of the run"
    )
    run.add_argument(
        "--retries",
        type=number(int, at_least=0),
        default=None,
        metavar="N",
        help=f"retries of a failed model call (default {DEFAULT_RETRY.max_attempts - 1}; 0: none)",
    )
    run.add_argument(
        "--output-schema",
        default=None,
        metavar="FILE.json",
        help="the answer must be JSON valid against this JSON schema; it is printed as JSON",
    )
    add_settings_flags(run)
    run.add_argument("--json", action="store_true")
    run.add_argument("--timeline", action="store_true", help=TIMELINE_HELP)

    demo = sub.add_parser("demo", help="run the demo session (scripted model, no API key)")
    demo.add_argument("--store", default=None, help=store_help)
    demo.add_argument("--json", action="store_true")

    sessions = sub.add_parser("sessions", help="inspect stored sessions")
    ssub = sessions.add_subparsers(dest="sessions_command", required=True)
    ls = ssub.add_parser("ls", help="list sessions, most recently updated first")
    ls.add_argument("--limit", type=COUNT, default=50, help="rows to print (default 50)")
    ls.add_argument("--state", default=None, help="only these states (comma-separated)")
    ls.add_argument("--model", default=None, help="only these models (comma-separated)")
    ls.add_argument("--q", default=None, metavar="TEXT",
                    help="only sessions whose id, task or a metadata value holds TEXT")  # fmt: skip
    ls.add_argument("--metadata", action="append", type=metadata_pair, metavar="K=V",
                    help="only sessions whose start metadata has K=V (repeat: all must hold)")  # fmt: skip
    ls.add_argument("--sort", default="updated", choices=SORTS, help="default: updated")
    ls.add_argument("--cursor", default=None, help="the page after the one that printed it")
    ls.add_argument("--parent", default=None, metavar="ID", help="only the forks of session ID")
    for name, text in (
        ("show", "state, stop reason, usage and transcript"),
        ("events", "the event log"),
    ):
        p = ssub.add_parser(name, help=text)
        p.add_argument("id")
        p.add_argument(
            "--thread", default=None, metavar="T", help="a sub-agent's thread, e.g. researcher-1"
        )
    blob = ssub.add_parser("blob", help="the full text of a tool output cut at its cap")
    blob.add_argument("id")
    blob.add_argument("hash", help="the sha256 its marker names (blob sha256:HEX)")
    add_steering_commands(ssub)
    add_fork_commands(ssub)
    add_trace_command(ssub)
    add_runtime_commands(sub, store_help)
    for p in ssub.choices.values():
        p.add_argument("--store", default=None, help=store_help)
        p.add_argument("--json", action="store_true")
    add_db_commands(sub, store_help)
    add_experiment_command(sub, store_help)
    add_review_command(sub, store_help)
    add_chat_command(sub, store_help)
    add_mcp_commands(sub)
    add_log_options(parser)  # before the command and after it, in every command
    return parser


async def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        args.output = _output_schema(args.output_schema)
        return await cmd_run(args, task=args.task, model=args.model, tool_specs=args.tools)
    if args.command == "db":
        return await cmd_db(args)
    if args.command == "experiment":
        return await cmd_experiment(args)
    if args.command == "review":
        return await cmd_review(args)
    if args.command == "chat":
        return await cmd_chat(args)
    if args.command == "mcp":
        return await cmd_mcp(args)
    if args.command == "demo":
        from tether.demo import DEMO_TASK

        # The demo shows the log itself: every event as it is committed.
        args.system, args.max_steps, args.timeline = "You plan picnics.", 10, True
        return await cmd_run(
            args, task=DEMO_TASK, model="scripted:demo", tool_specs=["tether.demo:tools"]
        )
    if args.command in RUNTIME_COMMANDS:
        return await RUNTIME_COMMANDS[args.command](args)
    if args.sessions_command == "fork":
        return await cmd_fork(args)
    if args.sessions_command == "rewind":
        return await cmd_rewind(args)
    if args.sessions_command in STEERING_COMMANDS:
        return await STEERING_COMMANDS[args.sessions_command](args)
    if args.sessions_command in TRACE_COMMANDS:
        return await TRACE_COMMANDS[args.sessions_command](args)
    if args.sessions_command == "blob":
        return await cmd_blob(args)
    return await cmd_sessions(args)


async def cmd_blob(args: argparse.Namespace) -> int:
    from tether.context.blobs import read_blob

    store = existing_store(args.store)
    try:
        data = await read_blob(store, args.id, args.hash)
    finally:
        await store.close()
    if args.json:
        text = data.decode("utf-8", "surrogatepass")
        print(json.dumps({"session_id": args.id, "size": len(data), "content": text}))
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


async def _main(args: argparse.Namespace) -> int:
    task = asyncio.current_task()
    if args.command not in RUNTIME_COMMANDS and task is not None:
        args.interrupts.install(task)
    return await _dispatch(args)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # a usage error (2, said in one line), --help or --version (0)
        return exc.code if isinstance(exc.code, int) else 2
    args.interrupts = Interrupts()
    args.kept = Kept()
    try:
        configure_logs(args)
        import_from_cwd()
        configure_gc()
        return asyncio.run(_main(args))
    except (CliError, TetherError) as exc:
        return failed(exc, args.kept, getattr(args, "store", None))
    except (KeyboardInterrupt, asyncio.CancelledError):
        # The first Ctrl-C cancelled the command, which closed what it ran (the second one
        # exits at once, in `Interrupts`).
        print(args.interrupts.summary(), file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`tether sessions events ID | head`): not an error of ours.
        sys.stderr.close()
        return 0


from tether.cli.chat import add_chat_command, cmd_chat  # noqa: E402
from tether.cli.db import add_db_commands, cmd_db  # noqa: E402
from tether.cli.experiment import cmd_experiment  # noqa: E402
from tether.cli.experiment_args import add_experiment_command  # noqa: E402
from tether.cli.mcp import add_mcp_commands, cmd_mcp  # noqa: E402
from tether.cli.observe import TRACE_COMMANDS, add_log_options, add_trace_command, configure_logs  # noqa: E402
from tether.cli.review import add_review_command, cmd_review  # noqa: E402
from tether.cli.serve import RUNTIME_COMMANDS, add_runtime_commands  # noqa: E402
from tether.cli.steer import STEERING_COMMANDS, add_steering_commands  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
