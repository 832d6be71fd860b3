"""`@modelcontextprotocol/server-filesystem` (a reference server nobody here wrote, pinned by
`.ci/mcp-conformance/package-lock.json`) over stdio, configured as users write it: a file
read comes back once, `enabled_tools` and `disabled_tools` decide what the model is offered,
and `${VAR:-default}` in `args` is expanded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tether import Agent
from tether.events import ToolFinished
from tether.providers.base import ModelRequest, ModelResponse
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call
from tether.tools.mcp import McpToolSource, parse_mcp_config

try:
    from .mcp_servers.harness import no_orphan_servers
    from .mcp_servers.reference import filesystem, no_reference_servers_left
except ImportError:
    from mcp_servers.harness import no_orphan_servers
    from mcp_servers.reference import filesystem, no_reference_servers_left

__all__ = ["no_orphan_servers", "no_reference_servers_left"]

# Quotes, tabs and newlines (JSON escapes them), 10,800 characters as in issue 19's report.
FILE_TEXT = ('line "one"\n\tline two\n' * 600)[:10_800]
WRITES = ["write_file", "edit_file", "move_file", "create_directory"]


class RecordingModel(ScriptedModel):
    """A scripted model that keeps the names of the tools each request offered it."""

    def __init__(self, replies: list[Any]) -> None:
        super().__init__(replies)
        self.offered: list[list[str]] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.offered.append([spec.name for spec in request.tools])
        return await super().complete(request)


def servers(root: Path, **entry: object) -> dict[str, object]:
    """An `mcpServers` mapping with one server-filesystem allowed to work in `root`."""
    server = filesystem()
    settings = {"command": server.node, "args": [server.entry, str(root)], **entry}
    return {"mcpServers": {"files": settings}}


async def run(config: dict[str, object], model: ScriptedModel) -> list[ToolFinished]:
    store = MemoryStore()
    async with McpToolSource(parse_mcp_config(config)) as source:
        tools = await source.list_tools()
        result = await Agent(model, tools=tools, store=store).run("work with the files")
    assert result.stop_reason == "end_turn"
    return [
        e.payload
        for e in await store.read(result.session_id)
        if isinstance(e.payload, ToolFinished)
    ]


async def test_a_file_read_through_server_filesystem_comes_back_once(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text(FILE_TEXT, encoding="utf-8")
    model = RecordingModel([call("read_text_file", path=str(notes)), "done"])
    (read,) = await run(servers(tmp_path), model)
    assert read.outcome == "ok"
    # The tool declares an output schema ({content: string}): the model is shown the
    # structured content alone, the file's text in it once, not a text copy beside it.
    assert json.loads(read.content) == {"content": FILE_TEXT}
    assert len(read.content) == len(json.dumps({"content": FILE_TEXT}, ensure_ascii=False))
    assert read.content.count("line two") == FILE_TEXT.count("line two")


async def test_disabled_tools_are_never_offered_to_the_model_nor_run(tmp_path: Path) -> None:
    target = tmp_path / "created.txt"
    model = RecordingModel(
        [call("write_file", path=str(target), content="should not exist"), "done"]
    )
    (refused,) = await run(servers(tmp_path, disabled_tools=WRITES), model)
    assert len(model.offered) == 2 and all(o == model.offered[0] for o in model.offered)
    offered = set(model.offered[0])
    assert not offered & set(WRITES)
    assert {"read_text_file", "list_directory", "search_files"} <= offered
    assert refused.outcome == "unknown_tool"
    assert not target.exists()  # nothing reached the server


async def test_enabled_tools_offer_the_model_exactly_those(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a", encoding="utf-8")
    model = RecordingModel([call("list_directory", path=str(tmp_path)), "done"])
    enabled = ["list_directory", "read_text_file"]
    (listed,) = await run(servers(tmp_path, enabledTools=enabled), model)
    assert [sorted(o) for o in model.offered] == [sorted(enabled)] * 2
    assert (listed.outcome, listed.content) == ("ok", json.dumps({"content": "[FILE] a.txt"}))


async def test_env_references_with_defaults_in_args_reach_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given, defaulted = tmp_path / "given", tmp_path / "defaulted"
    given.mkdir()
    defaulted.mkdir()
    monkeypatch.setenv("TETHER_TEST_FS_GIVEN", str(given))
    monkeypatch.delenv("TETHER_TEST_FS_UNSET", raising=False)
    config = servers(tmp_path)
    entry: Any = config["mcpServers"]
    entry["files"]["args"] = [
        entry["files"]["args"][0],
        "${TETHER_TEST_FS_GIVEN:-/nonexistent/given}",  # set: the default is not used
        f"${{TETHER_TEST_FS_UNSET:-{defaulted}}}",  # unset: the default is
    ]
    model = RecordingModel([call("list_allowed_directories"), "done"])
    (allowed,) = await run(config, model)
    assert allowed.outcome == "ok"
    directories = json.loads(allowed.content)["content"].splitlines()[1:]
    assert directories == [str(given.resolve()), str(defaulted.resolve())]
