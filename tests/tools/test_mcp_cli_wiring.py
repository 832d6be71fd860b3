"""How `tether run --mcp` and `tether chat --mcp` wire their MCP servers, through the real
commands: OAuth tokens are kept in the `--store` database (not `$TETHER_STORE`'s, not
`tether.db`), and a chat, like a run, keeps the servers' tools current and takes the
instructions of a server that opts in."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tether.cli import main
from tether.events import Event, SessionCreated, ToolFinished
from tether.store import open_store
from tether.store.credentials import open_credentials

try:
    from .mcp_servers.harness import CATALOG, PYTHON, no_orphan_servers
    from .mcp_servers.oauth_server import MACHINE_ID, MACHINE_SECRET, OAuthServer
except ImportError:
    from mcp_servers.harness import CATALOG, PYTHON, no_orphan_servers
    from mcp_servers.oauth_server import MACHINE_ID, MACHINE_SECRET, OAuthServer


@pytest.fixture(autouse=True)
def secret_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """The key OAuth tokens kept in a store are sealed with (without one they are refused)."""
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    monkeypatch.setenv("TETHER_SECRET_KEY", key)
    return key


__all__ = ["no_orphan_servers"]

SECRET_VAR = "TETHER_TEST_MACHINE_SECRET"
GROWING_MODEL = """
from tether.testing import ScriptedModel, call


def model():
    return ScriptedModel([call("grow", name="shiny"), call("shiny"), "done"])
"""
INSTRUCTIONS = "Always call lookup before answering questions about the catalog."


def oauth_config(path: Path, url: str) -> Path:
    auth = {"type": "oauth", "grant": "client_credentials", "clientId": MACHINE_ID,
            "clientSecret": "${" + SECRET_VAR + "}"}  # fmt: skip
    path.write_text(json.dumps({"mcpServers": {"guarded": {"url": url, "auth": auth}}}))
    return path


def kept_tokens(db: Path, url: str) -> str | None:
    key = f"mcp-oauth:{url}#client={MACHINE_ID}:tokens"
    return asyncio.run(open_credentials(f"sqlite:///{db}").get(key))


def chat(cwd: Path, lines: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`tether chat` in `cwd` with its stdin `lines` (ended there), no `$TETHER_STORE`."""
    env = {k: v for k, v in os.environ.items() if k not in ("TETHER_STORE", "FORCE_COLOR")}
    return subprocess.run(
        [sys.executable, "-m", "tether", "chat", *args],
        cwd=cwd, env={**env, SECRET_VAR: MACHINE_SECRET}, input=lines,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def events(db: Path) -> list[Event]:
    async def read() -> list[Event]:
        store = open_store(str(db))
        try:
            (info,) = await store.sessions(limit=2)
            return await store.read(info.session_id)
        finally:
            await store.close()

    return asyncio.run(read())


def test_run_keeps_the_oauth_tokens_of_its_mcp_servers_in_its_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TETHER_STORE", raising=False)
    monkeypatch.setenv(SECRET_VAR, MACHINE_SECRET)
    db = tmp_path / "mine.db"
    with OAuthServer() as server:
        mcp = oauth_config(tmp_path / "mcp.json", server.url)
        code = main(["run", "hi", "--model", "scripted:demo", "--mcp", str(mcp),
                     "--store", f"sqlite:///{db}", "--json"])  # fmt: skip
        assert code == 0
        assert server.state.counts["client_credentials"] == 1
    assert kept_tokens(db, server.url) is not None
    assert not (tmp_path / "tether.db").exists()  # the default store was never made


def test_chat_keeps_the_oauth_tokens_of_its_mcp_servers_in_its_store(tmp_path: Path) -> None:
    db = tmp_path / "mine.db"
    with OAuthServer() as server:
        mcp = oauth_config(tmp_path / "mcp.json", server.url)
        done = chat(tmp_path, "hi\n", "--model", "scripted:demo", "--mcp", str(mcp),
                    "--store", f"sqlite:///{db}")  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert server.state.counts["client_credentials"] == 1
    assert kept_tokens(db, server.url) is not None
    assert not (tmp_path / "tether.db").exists()


def test_chat_keeps_the_mcp_tools_current_and_takes_opted_in_instructions(tmp_path: Path) -> None:
    (tmp_path / "growing_model.py").write_text(GROWING_MODEL, encoding="utf-8")
    server = {"command": PYTHON, "args": [str(CATALOG)], "protocol": "legacy",
              "use_instructions": True}  # fmt: skip
    mcp = tmp_path / "mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {"catalog": server}}), encoding="utf-8")
    db = tmp_path / "chat.db"
    done = chat(tmp_path, "grow a tool and use it\n", "--model", "python:growing_model:model",
                "--mcp", str(mcp), "--store", str(db), "--system", "Base.")  # fmt: skip
    assert done.returncode == 0, done.stderr
    log = events(db)
    finished = [(e.payload.outcome, e.payload.content) for e in log if isinstance(e.payload, ToolFinished)]  # fmt: skip
    # the tool the server added mid-turn was offered and called at the next step
    assert finished == [("ok", "added shiny"), ("ok", "I am shiny")]
    created = log[0].payload
    assert isinstance(created, SessionCreated)
    assert created.system == f"Base.\n\nInstructions from the MCP server 'catalog':\n{INSTRUCTIONS}"
