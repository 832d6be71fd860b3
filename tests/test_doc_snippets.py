"""The documentation's Python snippets run as they are when pasted into a file: each block is
run by itself, in its own process, from an empty folder (the MCP ones with an `mcp.json`
there). Every Python block of the README runs; in `docs/`, a page opts a block in by putting
`<!-- snippet: runs -->` on the line before it (a fragment that needs what the page built
before, or a key, stays unmarked)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- snippet: runs -->"
PYTHON_BLOCK = r"^```python\n(.*?)^```$"


def _readme_blocks() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [("README.md", block) for block in re.findall(PYTHON_BLOCK, text, re.M | re.S)]


def _marked_blocks() -> list[tuple[str, str]]:
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        marked = re.findall(rf"^{re.escape(MARKER)}\n{PYTHON_BLOCK}", text, re.M | re.S)
        assert text.count(MARKER) == len(marked), f"{page}: a marker not right above ```python"
        found += [(str(page.relative_to(ROOT)), block) for block in marked]
    return found


BLOCKS = _readme_blocks() + _marked_blocks()
# The reference time server, run by this interpreter (whatever PATH says).
MCP_JSON = {"mcpServers": {"time": {"command": sys.executable,
                                    "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}}}  # fmt: skip


def test_the_pages_have_their_snippets() -> None:
    """What moved from the README into docs/ is still run: a page losing its marker fails."""
    pages = [page for page, _ in BLOCKS]
    assert pages.count("README.md") >= 1
    expected = {
        "docs/how-to/agents.md": 2,
        "docs/how-to/mcp.md": 1,
        "docs/how-to/gateway.md": 1,
        "docs/how-to/http-api.md": 1,
        "docs/concepts/leases.md": 1,
        "docs/how-to/experiments.md": 2,
        "docs/how-to/fork.md": 3,
        "docs/tutorial.md": 4,
    }
    for page, count in expected.items():
        assert pages.count(page) >= count, f"{page} runs {pages.count(page)} snippets"
    assert sum("asyncio.run(main())" in block for _, block in BLOCKS) >= 3


def _name(item: tuple[str, str]) -> str:
    page, block = item
    return f"{page}:{block.split(chr(10), 1)[0][:40]}"


@pytest.mark.parametrize("item", BLOCKS, ids=[_name(item) for item in BLOCKS])
def test_a_snippet_runs_as_pasted(tmp_path: Path, item: tuple[str, str]) -> None:
    _, block = item
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
