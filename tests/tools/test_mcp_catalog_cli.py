"""`tether mcp tools|resources|prompts FILE` against real stdio MCP servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.cli import main

try:
    from .mcp_servers.harness import CATALOG, PAGED, PYTHON, no_orphan_servers, server_children
except ImportError:
    from mcp_servers.harness import CATALOG, PAGED, PYTHON, no_orphan_servers, server_children

__all__ = ["no_orphan_servers"]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "mcp.json"
    servers = {
        "catalog": {"command": PYTHON, "args": [str(CATALOG)]},
        "paged": {"command": PYTHON, "args": [str(PAGED)]},
    }
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def test_resources_lists_each_servers_resources_and_templates(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["mcp", "resources", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "catalog: memo://readme  (text/plain)  What this server is" in out
    assert "catalog: memo://notes/{topic}  (template)  A note on a topic" in out
    assert not any(line.startswith("paged") for line in out)
    assert not server_children()


def test_resources_read_prints_the_text_and_needs_a_server_when_there_are_several(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["mcp", "resources", str(config), "--server", "catalog", "--read", "memo://notes/tea"])
        == 0
    )
    assert capsys.readouterr().out == "Notes on tea.\n"
    assert main(["mcp", "resources", str(config), "--read", "memo://readme"]) == 2
    assert "--read needs --server NAME: the file has 2 servers" in capsys.readouterr().err


def test_prompts_lists_arguments_and_fills_a_prompt(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["mcp", "prompts", str(config), "--json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {p["name"] for p in listed} == {"review", "greet"}
    code = main(["mcp", "prompts", str(config), "--server", "catalog", "--get", "review",
                 "--arg", "code=x = 1", "--arg", "style=kind"])  # fmt: skip
    assert code == 0
    assert capsys.readouterr().out == "[user]\nReview this code (kind):\nx = 1\n"


def test_a_server_without_prompts_and_an_unknown_server_are_one_line_errors(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["mcp", "prompts", str(config), "--server", "paged", "--get", "review"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tether: error: ") and "MCP server 'paged' does not offer prompts" in err
    assert main(["mcp", "tools", str(config), "--server", "ghost"]) == 2
    assert "no MCP server is named 'ghost' (it has: catalog, paged)" in capsys.readouterr().err


def test_tools_lists_names_and_effects(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mcp", "tools", str(config), "--server", "catalog"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "lookup  [read]  Look an item up, logging as it goes." in out
