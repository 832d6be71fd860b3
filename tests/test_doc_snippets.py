"""The README's Python snippets run as they are when pasted into a file: each block is run by
itself, in its own process, from an empty folder (the MCP one with an `mcp.json` there)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", README.read_text(encoding="utf-8"), re.M | re.S)
# The reference time server, run by this interpreter (whatever PATH says).
MCP_JSON = {"mcpServers": {"time": {"command": sys.executable,
                                    "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}}}  # fmt: skip


def test_the_readme_has_its_snippets() -> None:
    assert len(BLOCKS) >= 4
    assert sum("asyncio.run(main())" in block for block in BLOCKS) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.split("\n", 1)[0][:40])
def test_a_snippet_runs_as_pasted(tmp_path: Path, block: str) -> None:
    if "McpToolSource" in block:
        pytest.importorskip("mcp_server_time")
        (tmp_path / "mcp.json").write_text(json.dumps(MCP_JSON))
    (tmp_path / "snippet.py").write_text(block)
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    out = subprocess.run(
        [sys.executable, "snippet.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip(), "a snippet shows what it did"
