"""The runtime over HTTP: start a real `tether serve` on a free loopback port, then start,
watch and read a session through `HttpRuntime`, as an application would.

    python examples/serve.py
    TETHER_EXAMPLE_MODEL=anthropic:claude-sonnet-4-5 python examples/serve.py

Needs the server extra (from a clone: `pip install -e '.[server]'`). The session's model is a string and
its tools a `MODULE:ATTR`, because the server's workers, not this process, run it; the
server may load only the code it was told it may (`--allow-code`). With the variable set, the
server calls the real model with the key in its own environment.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile

from tether.runtime import SessionSpec
from tether.runtime.http import HttpRuntime

TASK = "Where should we have a picnic on Saturday: Paris, Atlantis or Lisbon?"


def start_server(directory: str, token: str) -> tuple[subprocess.Popen[str], str]:
    command = [
        sys.executable, "-m", "tether", "serve",
        "--host", "127.0.0.1", "--port", "0",  # 0: any free port; the server prints it
        "--store", f"sqlite:///{directory}/serve.db",
        "--allow-code", "tether.demo:*",
    ]  # fmt: skip
    env = {**os.environ, "TETHER_TOKENS": f"example={token}"}
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    line = server.stdout.readline() if server.stdout else ""
    found = re.search(r"listening on (http://\S+)", line)
    if found is None:
        server.kill()
        raise SystemExit(f"tether serve did not start: {line!r}")
    print(line.strip())
    return server, found.group(1)


async def drive(url: str, token: str) -> int:
    runtime = HttpRuntime(url, token=token)
    try:
        spec = SessionSpec(
            model=os.environ.get("TETHER_EXAMPLE_MODEL") or "scripted:demo",
            task=TASK,
            tools=("tether.demo:tools",),
            end_after_turn=True,
        )
        ref = await runtime.start(spec, idempotency_key="picnic-1")
        print(f"started {ref.session_id}")
        async for event in runtime.events(ref, timeout=60):  # ends with the session
            print(f"  {event.seq:>3} {event.type}")
        status = await runtime.poll(ref)
        print(f"state: {status.state}, stop reason: {status.stop_reason}")
        print(f"answer: {status.view.last_output}")
        listed = await runtime.sessions(limit=10)
        print(f"the tenant's sessions: {[s.session_id for s in listed]}")
        return 0 if status.stop_reason == "end_turn" else 1
    finally:
        await runtime.close()


def main() -> int:
    token = secrets.token_urlsafe(24)  # a token has at least 16 characters
    with tempfile.TemporaryDirectory() as directory:
        server, url = start_server(directory, token)
        try:
            return asyncio.run(drive(url, token))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
            print("tether serve stopped")


if __name__ == "__main__":
    sys.exit(main())
