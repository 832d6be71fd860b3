"""The reference MCP servers nobody here wrote (`@modelcontextprotocol/server-everything`
and `server-filesystem`), as `.ci/mcp-conformance.sh` installs them: where they are, and
server-everything over streamable HTTP as a real Node process on 127.0.0.1.

Without the script's variables the tests skip, saying how to get them; under CI that is a
failure. Each HTTP server runs in a process group of its own, killed whole at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tether.tools.mcp import McpServerConfig

try:
    from .harness import wait_until
except ImportError:
    from mcp_servers.harness import wait_until

HOW = 'install Node 22 and the servers with: eval "$(bash .ci/mcp-conformance.sh)"'
# Binds a server that names only a port (express's app.listen(PORT)) to 127.0.0.1.
LOOPBACK = Path(__file__).with_name("loopback.cjs")


@dataclass(frozen=True, slots=True)
class Node:
    """Node 22 and one server's entry point (a JavaScript file)."""

    node: str
    entry: str

    def argv(self, *args: str) -> list[str]:
        return [self.node, "--require", str(LOOPBACK), self.entry, *args]


def installed(variable: str) -> Node:
    """The server `variable` names, run by `TETHER_TEST_NODE`; a skip (a failure under CI)
    when either is unset or missing."""
    node = os.environ.get("TETHER_TEST_NODE", "")
    entry = os.environ.get(variable, "")
    missing = [
        name
        for name, path in (("TETHER_TEST_NODE", node), (variable, entry))
        if not path or not Path(path).is_file()
    ]
    if missing:
        why = f"{' and '.join(missing)} not set or not a file: {HOW}"
        if os.environ.get("CI"):
            pytest.fail(f"in CI, {why}")
        pytest.skip(why)
    return Node(node, entry)


def everything() -> Node:
    return installed("TETHER_TEST_MCP_EVERYTHING")


def filesystem() -> Node:
    return installed("TETHER_TEST_MCP_FILESYSTEM")


def everything_stdio(name: str = "everything", **settings: object) -> McpServerConfig:
    server = everything()
    argv = server.argv("stdio")
    return McpServerConfig(name, command=argv[0], args=tuple(argv[1:]), **settings)  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def reference_children() -> list[str]:
    """The command lines of live reference servers this test process started (stdio
    servers are its children; an HTTP server's group is checked by its fixture)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(child.cmdline())
        except psutil.NoSuchProcess:
            continue
        if "@modelcontextprotocol/server-" in cmdline:
            found.append(cmdline)
    return found


@pytest.fixture(scope="module", autouse=True)
def no_reference_servers_left() -> Iterator[None]:
    """After a module's tests, none of the reference servers they started is alive."""
    yield
    assert wait_until(lambda: not reference_children()), reference_children()


class EverythingHttp:
    """server-everything's streamable HTTP transport on a port of 127.0.0.1. `restart()`
    kills it (SIGKILL, the whole group) and starts a new one on the same port: every session
    the old one held is gone."""

    def __init__(self, server: Node, log: Path) -> None:
        self.server = server
        self.log = log
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.pids: list[int] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.server.argv("streamableHttp"),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env={**os.environ, "PORT": str(self.port)},
                start_new_session=True,
            )
        self.pids.append(self.process.pid)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.kill()
        tail = self.log.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise RuntimeError(f"server-everything did not listen on {self.port}: {tail}")

    def kill(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def restart(self) -> int:
        """Kill the server and start another on the same port; the new one's pid."""
        self.kill()
        self.start()
        assert self.process is not None
        return self.process.pid


@pytest.fixture
def everything_http(tmp_path: Path) -> Iterator[EverythingHttp]:
    http = EverythingHttp(everything(), tmp_path / "everything.log")
    http.start()
    try:
        yield http
    finally:
        http.kill()
        # Each server's group (node and anything it started) is gone: no leftovers.
        assert not [pid for pid in http.pids if group_alive(pid)]
