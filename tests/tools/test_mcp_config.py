"""MCP configuration files and the pure parts of the tool source: names, effects, results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import types

from tether.errors import ConfigError
from tether.tools.mcp import (
    McpServerConfig,
    McpToolSource,
    effect_of,
    load_mcp_config,
    parse_mcp_config,
)
from tether.tools.mcp.source import exposed_names, render_result


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_json_mcp_servers_file_gives_stdio_and_http_servers(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "mcp.json",
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
                    "remote": {
                        "type": "http",
                        "url": "https://example.test/mcp",
                        "headers": {"X-Team": "a"},
                        "needsApproval": ["delete"],
                        "timeout": 5,
                    },
                }
            }
        ),
    )
    time, remote = load_mcp_config(path)
    assert (time.name, time.transport, time.command, time.args, dict(time.env)) == (
        "time",
        "stdio",
        "uvx",
        ("mcp-server-time",),
        {"TZ": "UTC"},
    )
    assert (remote.transport, remote.url, dict(remote.headers), remote.timeout) == (
        "http",
        "https://example.test/mcp",
        {"X-Team": "a"},
        5.0,
    )
    assert remote.approval_for("delete") and not remote.approval_for("list")
    assert not time.approval_for("get_current_time")


def test_a_toml_file_with_mcp_servers_tables_is_read(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "mcp.toml",
        """
[mcp_servers.time]
command = "mcp-server-time"
args = ["--local-timezone", "UTC"]
needs_approval = true
startup_timeout_sec = 12
""",
    )
    (server,) = load_mcp_config(path)
    assert server.args == ("--local-timezone", "UTC")
    assert server.needs_approval is True and server.approval_for("anything")
    assert server.startup_timeout == 12.0


def test_env_and_header_values_may_name_environment_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_TEST_TOKEN", "s3cret")
    (server,) = parse_mcp_config(
        {
            "mcpServers": {
                "api": {
                    "url": "http://127.0.0.1:9/mcp",
                    "headers": {"Authorization": "Bearer ${TETHER_TEST_TOKEN}"},
                }
            }
        }
    )
    assert server.headers["Authorization"] == "Bearer s3cret"
    assert "s3cret" not in server.describe()


def test_an_unset_variable_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETHER_TEST_MISSING", raising=False)
    with pytest.raises(ConfigError, match=r"api.*TETHER_TEST_MISSING"):
        parse_mcp_config(
            {"mcpServers": {"api": {"command": "x", "env": {"K": "${TETHER_TEST_MISSING}"}}}}
        )


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"command": "x", "url": "http://127.0.0.1/mcp"}, "exactly one of 'command'"),
        ({}, "exactly one of 'command'"),
        ({"command": "x", "needsAproval": True}, "unknown key 'needsAproval'"),
        ({"command": "x", "timeout": -1}, "'timeout' must be a positive number"),
        ({"command": "x", "args": "--flag"}, "'args' must be a list of strings"),
        ({"url": "ftp://host/mcp"}, "must start with http"),
        ({"type": "websocket", "url": "ws://127.0.0.1/ws"}, "type 'websocket' is not supported"),
        ({"type": "sse", "command": "x"}, "the sse transport need a 'url'"),
        ({"url": "http://h/mcp", "auth": {"type": "basic"}}, "'auth.type' must be \"oauth\""),
        ({"url": "http://h/mcp", "auth": {"clientID": "x"}}, "unknown key 'auth.clientID'"),
        ({"url": "http://h/mcp", "auth": {"grant": "client_credentials"}}, "needs client_id"),
        ({"url": "http://h/mcp", "auth": {"redirect_port": 70000}}, "must be a TCP port"),
        ({"url": "http://h/mcp", "auth": {"private_key": "k"}}, "'auth.private_key' is for grant"),
        ({"command": "x", "needsApproval": "yes"}, "'needsApproval' must be"),
        ({"command": "x", "protocol": "2024-01-01"}, "'protocol' must be one of"),
    ],
)
def test_a_bad_server_entry_is_an_error_naming_the_server_and_the_problem(
    entry: dict[str, object], problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_mcp_config({"mcpServers": {"broken": entry}}, source="cfg.json")
    assert "'broken'" in str(caught.value) and problem in str(caught.value)
    assert str(caught.value).startswith("cfg.json: ")


def test_a_file_that_is_not_json_or_lacks_the_mapping_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"bad\.json: not valid JSON"):
        load_mcp_config(write(tmp_path, "bad.json", "{nope"))
    with pytest.raises(ConfigError, match="no 'mcpServers'"):
        load_mcp_config(write(tmp_path, "empty.json", "{}"))
    with pytest.raises(ConfigError, match="cannot read MCP config"):
        load_mcp_config(tmp_path / "absent.json")


def test_disabled_servers_and_other_clients_keys_are_left_out_quietly() -> None:
    servers = parse_mcp_config(
        {
            "mcpServers": {
                "on": {"command": "a", "autoApprove": ["x"]},
                "off": {"command": "b", "disabled": True},
            }
        }
    )
    assert [s.name for s in servers] == ["on"]


def test_two_servers_with_one_name_are_refused() -> None:
    with pytest.raises(ConfigError, match="two MCP servers are named 'a'"):
        McpToolSource([McpServerConfig("a", command="x"), McpServerConfig("a", command="y")])


def test_effects_come_from_annotations_and_absent_ones_are_the_pessimistic_write() -> None:
    assert effect_of(None) == "write"
    assert effect_of(types.ToolAnnotations()) == "write"
    assert effect_of(types.ToolAnnotations(read_only_hint=True, idempotent_hint=True)) == "read"
    assert effect_of(types.ToolAnnotations(idempotent_hint=True)) == "idempotent"
    assert effect_of(types.ToolAnnotations(read_only_hint=False, destructive_hint=False)) == "write"


def test_only_colliding_names_are_prefixed_with_their_server() -> None:
    names = exposed_names(
        [("a", "search"), ("b", "search"), ("b", "fetch"), ("c", "run")], taken=["run"]
    )
    assert names == {
        ("a", "search"): "a__search",
        ("b", "search"): "b__search",
        ("b", "fetch"): "fetch",
        ("c", "run"): "c__run",
    }


def test_names_are_made_safe_and_short_for_model_apis() -> None:
    names = exposed_names([("s", "files.read"), ("s", "x" * 100)])
    assert names[("s", "files.read")] == "files_read"
    long = names[("s", "x" * 100)]
    assert len(long) == 64 and long != names[("s", "files.read")]


def test_a_result_shows_its_structured_content_only_when_an_output_schema_declares_it() -> None:
    both = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="two items"),
            types.ImageContent(type="image", data="AAAA", mime_type="image/png"),
        ],
        structured_content={"items": [1, 2]},
    )
    assert render_result(both) == "two items\n[image image/png, 3 bytes]"
    assert (
        render_result(both, output_schema=True) == '{"items": [1, 2]}\n[image image/png, 3 bytes]'
    )
    alone = types.CallToolResult(content=[], structured_content={"total": 3})
    assert render_result(alone) == '{"total": 3}'
    wrapped = types.CallToolResult(
        content=[types.TextContent(type="text", text="hi")], structured_content={"result": "hi"}
    )
    assert render_result(wrapped, output_schema=True) == "hi"


def test_variables_with_defaults_are_expanded_in_every_string_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_TEST_DIR", "/srv/files")
    monkeypatch.setenv("TETHER_TEST_EMPTY", "")
    monkeypatch.delenv("TETHER_TEST_UNSET", raising=False)
    local, remote = parse_mcp_config(
        {
            "mcpServers": {
                "local": {
                    "command": "${TETHER_TEST_UNSET:-npx}",
                    "args": [
                        "-y",
                        "server-filesystem",
                        "${TETHER_TEST_DIR}",
                        "${TETHER_TEST_EMPTY:-.}",
                    ],
                    "env": {"MODE": "${TETHER_TEST_UNSET:-fast}"},
                    "cwd": "${TETHER_TEST_DIR:-/tmp}",
                },
                "remote": {
                    "url": "http://${TETHER_TEST_UNSET:-127.0.0.1}:${TETHER_TEST_UNSET:-8080}/mcp",
                    "headers": {"X-Dir": "${TETHER_TEST_DIR:-none}"},
                },
            }
        }
    )
    assert local.command == "npx"
    assert local.args == ("-y", "server-filesystem", "/srv/files", ".")
    assert (local.env["MODE"], local.cwd) == ("fast", "/srv/files")
    assert remote.url == "http://127.0.0.1:8080/mcp"
    assert remote.headers["X-Dir"] == "/srv/files"


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"command": "${TETHER_TEST_UNSET}"}, "command"),
        ({"command": "x", "args": ["a", "${TETHER_TEST_UNSET}"]}, "args[1]"),
        ({"url": "http://${TETHER_TEST_UNSET}/mcp"}, "url"),
        ({"url": "http://h/mcp", "headers": {"A": "${TETHER_TEST_UNSET}"}}, "headers.A"),
    ],
)
def test_an_unset_variable_without_a_default_names_the_server_and_field(
    monkeypatch: pytest.MonkeyPatch, entry: dict[str, object], field: str
) -> None:
    monkeypatch.delenv("TETHER_TEST_UNSET", raising=False)
    with pytest.raises(ConfigError) as caught:
        parse_mcp_config({"mcpServers": {"srv": entry}}, source="cfg.json")
    message = str(caught.value)
    assert f"'srv': {field} refers to ${{TETHER_TEST_UNSET}}" in message
    assert "${TETHER_TEST_UNSET:-default}" in message


@pytest.mark.parametrize(
    ("text", "where"),
    [("${", 1), ("--root=${", 8), ("${1}", 1), ("${HOME", 1), ("$${X} then ${", 12)],
)
def test_a_dollar_brace_that_starts_no_variable_is_refused_by_position(
    text: str, where: int
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_mcp_config({"mcpServers": {"srv": {"command": "x", "args": [text]}}})
    assert f"'srv': args[0]: the ${{ at character {where} starts no ${{VAR}}" in str(caught.value)


def test_a_doubled_dollar_is_a_literal_dollar_brace() -> None:
    (server,) = parse_mcp_config({"mcpServers": {"s": {"command": "sh", "args": ["$${1}", "$$"]}}})
    assert server.args == ("${1}", "$$")


def test_enabled_and_disabled_tools_are_read_and_checked() -> None:
    (server,) = parse_mcp_config(
        {
            "mcpServers": {
                "s": {"command": "x", "enabled_tools": ["a", "b"], "disabled_tools": ["b"]}
            }
        }
    )
    assert server.enabled_tools == {"a", "b"} and server.disabled_tools == {"b"}
    assert [server.offers(n) for n in ("a", "b", "c")] == [True, False, False]
    with pytest.raises(ConfigError, match=r"'s'.*'disabled_tools' must be a list of strings"):
        parse_mcp_config({"mcpServers": {"s": {"command": "x", "disabled_tools": "b"}}})
    with pytest.raises(ConfigError, match="unknown key 'disabled_tool'"):
        parse_mcp_config({"mcpServers": {"s": {"command": "x", "disabled_tool": ["b"]}}})
