"""`tether serve` started for a bench: a child process on a free loopback port, with the URL
it prints once it listens. Each bench adds its own flags (store, tokens, workers, code)."""

from __future__ import annotations

import re
import subprocess
import sys


def spawn_serve(*flags: str, quiet: bool = False) -> tuple[subprocess.Popen[str], str]:
    """The server process and its base URL; `SystemExit` with its last words if it did not
    start. `quiet`: its stderr is dropped (a bench that keeps it running for long)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--port", "0", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if quiet else subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline() if process.stdout else ""
    found = re.search(r"listening on (http://\S+)", line)
    if found is None:
        process.kill()
        said = process.communicate()[1] or ""
        raise SystemExit(f"tether serve did not start: {line!r} {said[-800:]}")
    return process, found.group(1)
