"""`tether mcp tools|resources|prompts FILE`: what the MCP servers of a config file offer, and
a resource read (`--read URI`) or a prompt filled (`--get NAME --arg K=V`); `tether mcp logout
FILE` forgets the OAuth tokens kept for its servers (`--tenant T`: those of a tenant of
`tether serve --mcp`, whose served sessions use them).

A thin adapter over `McpToolSource`. It stores only what OAuth keeps (tokens, sealed, in
`--store`'s database); a server that needs a sign-in prints the URL to open. The servers are
stopped when it ends.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from tether.cli.common import CliError, store_url
from tether.cli.secrets import add_secret_flags, keyring_from
from tether.errors import TetherError
from tether.store.credentials import DEFAULT_TENANT, open_credentials

if TYPE_CHECKING:  # the MCP SDK is an extra: imported when a command runs
    from tether.tools.mcp import McpServerConfig, McpToolSource

Command = Callable[["McpToolSource", argparse.Namespace], Awaitable[None]]


def add_mcp_commands(sub: Any) -> None:
    mcp = sub.add_parser("mcp", help="what the MCP servers of a config file offer")
    msub = mcp.add_subparsers(dest="mcp_command", required=True)
    tools = msub.add_parser("tools", help="the tools the servers offer, as the model sees them")
    resources = msub.add_parser("resources", help="resources and templates, or read one")
    resources.add_argument("--read", default=None, metavar="URI", help="print this resource")
    prompts = msub.add_parser("prompts", help="prompts and their arguments, or fill one")
    prompts.add_argument("--get", default=None, metavar="NAME", help="print this prompt filled")
    prompts.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an argument of the prompt (repeatable)",
    )
    logout = msub.add_parser("logout", help="forget the OAuth tokens kept for the servers")
    for p in (tools, resources, prompts, logout):
        p.add_argument("file", metavar="FILE", help="a JSON or TOML file with mcpServers")
        p.add_argument(
            "--server", default=None, metavar="NAME", help="only this server (needed to read/get)"
        )
        p.add_argument("--json", action="store_true")
        p.add_argument(
            "--store",
            default=None,
            metavar="URL",
            help="where OAuth tokens are kept (default: $TETHER_STORE or sqlite:///tether.db)",
        )
        p.add_argument(
            "--tenant",
            default=None,
            metavar="NAME",
            help="keep and use the OAuth tokens of this tenant of `tether serve --mcp` (the "
            "sign-in its served sessions use); default: the CLI's own",
        )
        add_secret_flags(p)


async def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from tether.tools.mcp import McpToolSource, load_mcp_config
    except ImportError as exc:
        raise CliError(str(exc)) from exc
    try:
        configs = load_mcp_config(args.file)
    except TetherError as exc:
        raise CliError(str(exc)) from exc  # it names the file
    try:
        if args.server is not None:
            configs = [c for c in configs if c.name == args.server] or _unknown(args, configs)
        credentials = open_credentials(
            store_url(args.store), keyring_from(args), tenant=args.tenant or DEFAULT_TENANT
        )
        source = McpToolSource(configs, credentials=credentials)
    except TetherError as exc:
        raise CliError(f"{args.file}: {exc}") from exc
    try:
        await _COMMANDS[args.mcp_command](source, args)
    except TetherError as exc:
        raise CliError(f"{args.file}: {exc}") from exc
    finally:
        await source.aclose()
    return 0


def _unknown(args: argparse.Namespace, configs: list[McpServerConfig]) -> list[McpServerConfig]:
    known = ", ".join(c.name for c in configs) or "none"
    raise CliError(f"{args.file}: no MCP server is named {args.server!r} (it has: {known})")


async def _tools(source: McpToolSource, args: argparse.Namespace) -> None:
    tools = await source.list_tools()
    if args.json:
        for t in tools:
            print(json.dumps({"name": t.name, "description": t.description, "effect": t.effect,
                              "parameters": t.parameters}))  # fmt: skip
        return
    for t in tools:
        print(f"{t.name}  [{t.effect}]  {_first_line(t.description)}".rstrip())


async def _resources(source: McpToolSource, args: argparse.Namespace) -> None:
    if args.read is not None:
        content = await source.read_resource(_one_server(source, args, "--read"), args.read)
        if args.json:
            print(json.dumps({"server": content.server, "uri": content.uri, "text": content.text}))
        else:
            print(content.text)
        return
    resources = await source.list_resources()
    templates = await source.list_resource_templates()
    if args.json:
        for row in [asdict(r) for r in resources] + [asdict(t) for t in templates]:
            print(json.dumps(row))
        return
    for r in resources:
        print(_row(r.server, r.uri, r.mime_type, r.title or r.description or r.name))
    for t in templates:
        print(_row(t.server, t.uri_template, "template", t.title or t.description or t.name))


async def _prompts(source: McpToolSource, args: argparse.Namespace) -> None:
    if args.get is not None:
        arguments = dict(_pair(a) for a in args.arg)
        result = await source.get_prompt(_one_server(source, args, "--get"), args.get, arguments)
        if args.json:
            print(json.dumps(asdict(result)))
        else:
            for m in result.messages:
                print(f"[{m.role}]\n{m.text}")
        return
    if args.arg:
        raise CliError("--arg needs --get NAME")
    prompts = await source.list_prompts()
    if args.json:
        for p in prompts:
            print(json.dumps(asdict(p)))
        return
    for p in prompts:
        params = " ".join(a.name if a.required else f"[{a.name}]" for a in p.arguments)
        print(_row(p.server, f"{p.name} {params}".rstrip(), None, p.title or p.description))


def _one_server(source: McpToolSource, args: argparse.Namespace, flag: str) -> str:
    names = list(source.connections)
    if args.server is not None:
        return str(args.server)
    if len(names) == 1:
        return str(names[0])
    raise CliError(
        f"{flag} needs --server NAME: the file has {len(names)} servers ({', '.join(names)})"
    )


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise CliError(f"--arg takes KEY=VALUE, not {text!r}")
    return key, value


def _row(server: str, what: str, kind: str | None, about: str | None) -> str:
    parts = [f"{server}: {what}", f"({kind})" if kind else "", _first_line(about)]
    return "  ".join(p for p in parts if p)


def _first_line(text: str | None) -> str:
    return (text or "").strip().split("\n", 1)[0]


async def _logout(source: McpToolSource, args: argparse.Namespace) -> None:
    forgot = await source.forget_tokens()
    if args.json:
        print(json.dumps({"forgot": forgot}))
        return
    for name in forgot:
        print(f"{name}: OAuth tokens forgotten")
    if not forgot:
        print("no server of this file uses OAuth")


_COMMANDS: dict[str, Command] = {
    "tools": _tools,
    "resources": _resources,
    "prompts": _prompts,
    "logout": _logout,
}
