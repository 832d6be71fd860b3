"""One of the processes of the refresh-rotation test: `python refresh_client.py URL STORE`
prints `ready` once its MCP source is made, waits for a line on stdin (the test's barrier),
then calls the guarded server's `echo`, which first refreshes the expired access token kept
in STORE. Prints the answer; exits 3 if it was asked to sign in (its refresh token was used
up by the other process), 0 otherwise."""

from __future__ import annotations

import asyncio
import sys

from tether.messages import ToolCall
from tether.tools.mcp import McpServerConfig, McpToolSource
from tether.tools.mcp.auth_config import McpOAuth
from tether.tools.run import execute


class SignInAsked(Exception):
    pass


async def refuse_sign_in(server: str, url: str) -> None:
    raise SignInAsked(f"{server} asked for a sign-in")


async def main(url: str, store: str) -> int:
    config = McpServerConfig("guarded", url=url, auth=McpOAuth(), startup_timeout=60)
    source = McpToolSource([config], credentials=store, on_authorize=refuse_sign_in)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    try:
        async with source:
            (echo,) = [t for t in await source.list_tools() if t.name == "echo"]
            call = ToolCall("call_1", "echo", {"text": "after the refresh"})
            result = await execute(echo, call, "ses_refresh")
    except Exception as exc:
        print(f"failed: {exc}", flush=True)
        return 3 if "asked for a sign-in" in str(exc) else 1
    print(f"answer: {result.outcome} {result.content}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
