"""Overhead of one MCP call over stdio beyond the server's own work.

The same `echo` function is called three ways, N times each, one call at a time:
in-process as a tether tool (the baseline: what the runner costs with no MCP at all), over
stdio with the SDK client alone, and over stdio as a tether MCP tool (runner + SDK + pipe +
server). The server does no work beyond returning its argument, so the difference to the
baseline is the MCP overhead. Also printed: the time to start the server and list its tools.

    .venv/bin/python bench/bench_mcp.py [N]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

TOY = Path(__file__).resolve().parent.parent / "tests" / "tools" / "mcp_servers" / "toy_server.py"


def summary(label: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    return f"{label:<38} median {statistics.median(ms):8.3f} ms   p95 {p95:8.3f} ms   n={len(ms)}"


async def timed(n: int, once: Callable[[], Awaitable[object]]) -> list[float]:
    for _ in range(min(20, n)):  # warm up: imports, first-call paths, the server's caches
        await once()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await once()
        samples.append(time.perf_counter() - started)
    return samples


async def main(n: int) -> None:
    from mcp import Client, StdioServerParameters

    from tether.messages import ToolCall
    from tether.tools import tool
    from tether.tools.mcp import McpServerConfig, McpToolSource
    from tether.tools.run import execute

    @tool(effect="read")
    async def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    call = ToolCall("c1", "echo", {"text": "hello"})
    baseline = await timed(n, lambda: execute(echo, call, "bench"))

    params = StdioServerParameters(command=sys.executable, args=[str(TOY), "stdio"])
    async with Client(params) as client:
        sdk = await timed(n, lambda: client.call_tool("echo", {"text": "hello"}))

    config = McpServerConfig("toy", command=sys.executable, args=(str(TOY), "stdio"))
    async with McpToolSource([config]) as source:
        started = time.perf_counter()
        tools = {t.name: t for t in await source.list_tools()}
        startup = time.perf_counter() - started
        mcp = await timed(n, lambda: execute(tools["echo"], call, "bench"))

    print(
        f"MCP call overhead over stdio ({n} sequential calls of echo; python {sys.version.split()[0]})"
    )
    print(summary("in-process tether tool (baseline)", baseline))
    print(summary("SDK client over stdio", sdk))
    print(summary("tether MCP tool over stdio", mcp))
    overhead = statistics.median(mcp) - statistics.median(baseline)
    print(f"{'overhead of MCP beyond the baseline':<38} median {overhead * 1000:8.3f} ms per call")
    print(f"{'tether layer beyond the SDK client':<38} median "
          f"{(statistics.median(mcp) - statistics.median(sdk)) * 1000:8.3f} ms per call")  # fmt: skip
    print(
        f"{'server start + handshake + tools/list':<38} {startup * 1000:8.1f} ms (once per server)"
    )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 500))
