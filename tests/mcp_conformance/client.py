"""The client the MCP conformance harness runs: `python client.py SERVER_URL`, the scenario's
name in `MCP_CONFORMANCE_SCENARIO` (`@modelcontextprotocol/conformance client --command ...`).

Does what an agent does with an MCP server, through tether's own client: `McpToolSource`
connects (the handshake), lists the tools and calls each one as the model would, by its
`Tool`. What each scenario checks is the harness's; this only supplies arguments its tools
need, and the session a call runs in (`tether.tools.inputs.ASKER`, which the loop sets),
with a user who accepts every elicitation without filling anything in. For the auth/
scenarios the server is configured with OAuth (`auth`), as a user would: client credentials
where the scenario is about them, else the authorization code grant, with the client id and
secret the harness passes (`MCP_CONFORMANCE_CONTEXT`) when it pre-registered one; the person
signing in is played by fetching the authorization URL and following its redirect to the
loopback listener. Exits 1 when a call fails, printing why, so the harness shows the reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2

from tether.messages import JSONObject
from tether.store.credentials import MemoryCredentials
from tether.tools.inputs import (
    ASKER,
    InputAnswer,
    SamplingAnswer,
    SamplingRefused,
    SamplingRequest,
)
from tether.tools.mcp import McpServerConfig, McpToolSource
from tether.tools.mcp.auth_config import McpOAuth
from tether.tools.schema import ToolContext

# Arguments for the scenarios' tools that take any; every other tool is called with none.
ARGUMENTS: dict[str, dict[str, Any]] = {"add_numbers": {"a": 5, "b": 3}}
TIMEOUT = 20.0  # under the harness's own 30 s, so a hung call is reported here
# The URL client id the harness's auth/basic-cimd scenario expects (SEP-991).
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


async def run(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "?")
    config = McpServerConfig(
        name="conformance",
        url=url,
        timeout=TIMEOUT,
        startup_timeout=TIMEOUT,
        auth=oauth(scenario) if scenario.startswith("auth/") else None,
    )
    failed = 0
    source = McpToolSource([config], credentials=MemoryCredentials(), on_authorize=sign_in)
    async with source:
        tools = await source.list_tools()
        print(f"{scenario}: tools {[t.name for t in tools]}")
        for i, tool in enumerate(tools):
            arguments = dict(ARGUMENTS.get(tool.name, {}))
            if tool.context_param is not None:
                arguments[tool.context_param] = ToolContext("conformance", f"call-{i}")
            try:
                with accepting():
                    result = await tool.fn(**arguments)
            except Exception as exc:
                failed += 1
                print(f"{scenario}: {tool.name} failed: {exc}")
            else:
                print(f"{scenario}: {tool.name} -> {result!r}")
    return 1 if failed else 0


def oauth(scenario: str) -> McpOAuth:
    """The `auth` a user would configure for the scenario's server."""
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    client_id, secret = context.get("client_id"), context.get("client_secret")
    if "client-credentials" in scenario:
        return McpOAuth(
            grant="client_credentials",
            client_id=client_id,
            client_secret=secret,
            private_key=context.get("private_key_pem"),
            signing_algorithm=context.get("signing_algorithm", "RS256"),
        )
    return McpOAuth(
        client_id=client_id, client_secret=secret, client_metadata_url=CLIENT_METADATA_URL
    )


async def sign_in(server: str, url: str) -> None:
    """The person at the browser: the harness's authorization server approves at once, so
    following its redirect brings the code to the loopback listener."""
    async with httpx2.AsyncClient(follow_redirects=True, timeout=TIMEOUT) as http:
        await http.get(url)


class User:
    """The session's user, as the harness's reference client plays it: accepts every
    elicitation without filling anything in (the client must supply the schema's defaults,
    SEP-1034), and has no model to sample with."""

    async def elicit(
        self, call_id: str, server: str, message: str, schema: JSONObject
    ) -> InputAnswer:
        print(f"elicitation from {server} during {call_id}: {message}")
        return InputAnswer("accept", {})

    async def sample(self, call_id: str, server: str, request: SamplingRequest) -> SamplingAnswer:
        raise SamplingRefused("the conformance client has no model")


@contextmanager
def accepting() -> Iterator[None]:
    """Calls made inside are a session's, whose user is `User`."""
    token = ASKER.set(User())
    try:
        yield
    finally:
        ASKER.reset(token)


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: client.py SERVER_URL (the conformance harness adds it)", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(sys.argv[-1]))
    except Exception as exc:
        print(f"failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
