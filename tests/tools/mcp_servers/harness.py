"""What the MCP tests share: server commands, a streamable HTTP toy server run as a real
subprocess on 127.0.0.1, and the check that no MCP server process outlives the tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tether.tools.mcp import McpServerConfig

HERE = Path(__file__).parent
TOY = HERE / "toy_server.py"
PAGED = HERE / "paged_server.py"
CATALOG = HERE / "catalog_server.py"
PYTHON = sys.executable
TIME_SERVER = str(Path(PYTHON).parent / "mcp-server-time")
SERVER_MARKERS = (
    "toy_server.py",
    "paged_server.py",
    "session_server.py",
    "catalog_server.py",
    "asking_server.py",
    "links_server.py",
    "mcp-server-time",
    "mcp_server_time",
)


def toy_stdio(name: str = "toy", **settings: object) -> McpServerConfig:
    return McpServerConfig(name, command=PYTHON, args=(str(TOY), "stdio"), **settings)  # type: ignore[arg-type]


def catalog_stdio(name: str = "catalog", **settings: object) -> McpServerConfig:
    return McpServerConfig(name, command=PYTHON, args=(str(CATALOG),), **settings)  # type: ignore[arg-type]


def time_stdio(name: str = "time", **settings: object) -> McpServerConfig:
    args = ("--local-timezone", "UTC")
    return McpServerConfig(name, command=TIME_SERVER, args=args, **settings)  # type: ignore[arg-type]


def server_children() -> list[psutil.Process]:
    """Live MCP server processes started by this test process."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(child.cmdline())
        except psutil.NoSuchProcess:
            continue
        if any(marker in cmdline for marker in SERVER_MARKERS):
            found.append(child)
    return found


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until(predicate: object, seconds: float = 15.0) -> bool:
    """Poll a condition with a generous deadline (process exit is not instantaneous)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return bool(predicate())  # type: ignore[operator]


@pytest.fixture(scope="session", autouse=True)
def no_orphan_servers() -> Iterator[None]:
    """After every MCP test has run, no MCP server process started by them is alive."""
    yield
    assert wait_until(lambda: not server_children()), (
        f"MCP server processes outlived the tests: {[' '.join(p.cmdline()) for p in server_children()]}"
    )


class HttpServer:
    """The toy server (or another of `script`'s, served as `script http PORT`) over streamable
    HTTP in a subprocess; `restart()` brings it back on the same port after it crashed."""

    def __init__(self, script: Path = TOY) -> None:
        self.script = script
        self.port = 0
        self.process: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [PYTHON, str(self.script), "http", str(self.port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # the server prints its port once it listens
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"{self.script.name} over HTTP did not start: {line!r}")
        self.port = int(line.split()[1])

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:  # uvicorn waits for requests in flight; a stubborn one is not worth waiting for
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    server = HttpServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def eventually(predicate: object, seconds: float = 15.0) -> bool:
    """`wait_until` for async tests: the event loop keeps running while it waits."""
    import asyncio

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.05)
    return bool(predicate())  # type: ignore[operator]
