"""`@tool`: the JSON schema and description a model is shown, derived from type hints and
docstrings; the tool's properties; and definitions refused with a clear `UsageError`."""

from __future__ import annotations

from typing import Any, Literal, Optional

import pytest
from pydantic import BaseModel

from invariants import payloads, read_checked
from tether import Agent, ToolContext, tool
from tether.errors import UsageError
from tether.events import ToolFinished
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call
from tether.tools import Tool


class Point(BaseModel):
    x: float
    y: float


@tool
def everything(
    count: int,
    label: str,
    ratio: float,
    enabled: bool,
    tags: list[str],
    limit: Optional[int] = None,  # noqa: UP045 — Optional is what many users write
    mode: Literal["fast", "careful"] = "fast",
    origin: Point | None = None,
) -> str:
    """Exercise every kind of parameter."""
    return "ok"


def props(t: Tool) -> dict[str, Any]:
    properties = t.parameters["properties"]
    assert isinstance(properties, dict)
    return properties


def test_each_type_hint_becomes_its_json_schema_type() -> None:
    p = props(everything)
    assert p["count"] == {"type": "integer"}
    assert p["label"] == {"type": "string"}
    assert p["ratio"] == {"type": "number"}
    assert p["enabled"] == {"type": "boolean"}
    assert p["tags"] == {"type": "array", "items": {"type": "string"}}
    assert p["limit"] == {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}
    assert p["mode"] == {"type": "string", "enum": ["fast", "careful"], "default": "fast"}
    assert p["origin"]["anyOf"][1] == {"type": "null"}
    ref = p["origin"]["anyOf"][0]["$ref"].rsplit("/", 1)[-1]
    point = everything.parameters["$defs"][ref]
    assert point["required"] == ["x", "y"]
    assert point["properties"]["x"]["type"] == "number"


def test_parameters_without_a_default_are_required_and_no_others_are_accepted() -> None:
    schema = everything.parameters
    assert schema["type"] == "object"
    assert schema["required"] == ["count", "label", "ratio", "enabled", "tags"]
    assert schema["additionalProperties"] is False


def test_a_tool_without_parameters_has_an_empty_object_schema() -> None:
    @tool
    def ping() -> str:
        return "pong"

    assert ping.parameters["type"] == "object"
    assert ping.parameters["properties"] == {}
    assert "required" not in ping.parameters


def test_the_name_and_description_come_from_the_function_and_can_be_overridden() -> None:
    @tool(name="find-files", description="Find files by pattern.")
    def find(pattern: str) -> str:
        """Not what the model sees."""
        return pattern

    assert (find.name, find.description) == ("find-files", "Find files by pattern.")
    assert (everything.name, everything.description) == (
        "everything",
        "Exercise every kind of parameter.",
    )


def test_google_style_args_describe_each_parameter_and_stay_out_of_the_description() -> None:
    @tool
    def search(query: str, limit: int = 10) -> str:
        """Search the archive.

        Matches are ranked by recency.

        Args:
            query: What to look for, e.g. "invoice 2024".
            limit (int): How many results to return,
                at most 100.

        Returns:
            The matches, one per line.
        """
        return query

    assert search.description == "Search the archive.\n\nMatches are ranked by recency."
    p = props(search)
    assert p["query"]["description"] == 'What to look for, e.g. "invoice 2024".'
    assert p["limit"]["description"] == "How many results to return, at most 100."
    assert p["limit"]["default"] == 10


def test_sphinx_params_describe_each_parameter_and_stay_out_of_the_description() -> None:
    @tool
    def move(src: str, dst: str) -> str:
        """Move a file.

        :param src: Where the file is now.
        :param str dst: Where it goes.
        :returns: The new path.
        """
        return dst

    assert move.description == "Move a file."
    p = props(move)
    assert p["src"]["description"] == "Where the file is now."
    assert p["dst"]["description"] == "Where it goes."


def test_properties_default_to_a_write_with_a_timeout_and_no_approval() -> None:
    assert everything.effect == "write"
    assert everything.timeout is not None and everything.timeout > 0
    assert everything.needs_approval is False

    @tool(effect="read", timeout=2.5, needs_approval=True, output_cap=500)
    def peek(path: str) -> str:
        return path

    assert (peek.effect, peek.timeout, peek.needs_approval, peek.output_cap) == (
        "read",
        2.5,
        True,
        500,
    )


def test_a_tool_context_parameter_is_injected_and_not_in_the_schema() -> None:
    @tool(effect="idempotent")
    def pay(amount: int, context: ToolContext) -> str:
        return str(amount)

    assert list(props(pay)) == ["amount"]
    assert pay.parameters["required"] == ["amount"]
    assert pay.context_param == "context"


async def test_a_pydantic_argument_arrives_as_its_model_and_a_bad_one_is_invalid_input() -> None:
    received: list[object] = []

    @tool
    def plot(at: Point) -> str:
        received.append(at)
        return f"{at.x},{at.y}"

    store = MemoryStore()
    model = ScriptedModel(
        [[call("plot", at={"x": 1.5, "y": 2}), call("plot", at={"x": 1})], "plotted"]
    )
    result = await Agent(model, tools=[plot], store=store).run("plot it")

    assert received == [Point(x=1.5, y=2.0)]
    events = await read_checked(store, result.session_id)
    first, second = sorted(payloads(events, ToolFinished), key=lambda f: f.call_id)
    assert (first.outcome, first.content) == ("ok", "1.5,2.0")
    assert second.outcome == "invalid_input" and "at.y" in second.content


def test_a_schema_hash_changes_with_the_schema_and_not_with_the_body() -> None:
    def make(kind: type[int] | type[str], answer: str) -> Tool:
        def lookup(key: kind) -> str:  # type: ignore[valid-type]
            return answer

        lookup.__annotations__["key"] = kind
        return tool(lookup)

    assert make(int, "a").schema_hash == make(int, "b").schema_hash
    assert make(int, "a").schema_hash != make(str, "a").schema_hash


# -- definitions refused -------------------------------------------------------------------


def test_a_parameter_without_a_type_hint_is_refused_by_name() -> None:
    def untyped(path, mode: str) -> str:  # type: ignore[no-untyped-def]
        return str(path)

    with pytest.raises(UsageError, match=r"tool untyped: parameter 'path' needs a type hint"):
        tool(untyped)


def test_star_args_and_star_star_kwargs_are_refused() -> None:
    def spread(*paths: str) -> str:
        return ""

    def options(**flags: bool) -> str:
        return ""

    with pytest.raises(UsageError, match=r"tool spread: \*args and \*\*kwargs"):
        tool(spread)
    with pytest.raises(UsageError, match=r"tool options: \*args and \*\*kwargs"):
        tool(options)


def test_an_unknown_effect_is_refused_naming_the_choices() -> None:
    def wipe() -> str:
        return ""

    with pytest.raises(
        UsageError, match=r"effect must be one of read, idempotent, write, not 'delete'"
    ):
        tool(effect="delete")(wipe)  # type: ignore[call-overload]


def test_a_timeout_that_is_not_positive_is_refused() -> None:
    def wait() -> str:
        return ""

    with pytest.raises(UsageError, match="timeout must be positive"):
        tool(timeout=0)(wait)


def test_a_name_a_model_cannot_call_is_refused() -> None:
    def anything() -> str:
        return ""

    with pytest.raises(UsageError, match="must be letters, digits"):
        tool(name="rm -rf")(anything)
    with pytest.raises(UsageError, match="must be letters, digits"):
        tool(lambda: "")


def test_a_hint_naming_nothing_is_refused_with_the_missing_name() -> None:
    def broken(x: Undefined) -> str:  # type: ignore[name-defined]  # noqa: F821
        return ""

    with pytest.raises(UsageError, match=r"tool broken: cannot read its type hints.*Undefined"):
        tool(broken)


def test_a_type_with_no_json_schema_is_refused_naming_the_parameter() -> None:
    class Connection:
        pass

    def query(sql: str, conn: Connection) -> str:
        return sql

    query.__annotations__["conn"] = Connection  # a real class, not a string to resolve
    with pytest.raises(UsageError, match=r"tool query: parameter 'conn'.*Connection"):
        tool(query)


def test_two_tools_of_one_name_are_refused_when_an_agent_is_made() -> None:
    @tool(name="same")
    def first() -> str:
        return ""

    @tool(name="same")
    def second() -> str:
        return ""

    with pytest.raises(UsageError, match="two tools are named 'same'"):
        Agent(ScriptedModel(["x"]), tools=[first, second], store=MemoryStore())


async def test_a_plain_function_given_as_a_tool_is_made_into_one() -> None:
    def shout(text: str) -> str:
        """Say it loudly."""
        return text.upper()

    store = MemoryStore()
    agent = Agent(ScriptedModel([call("shout", text="hi"), "done"]), tools=[shout], store=store)
    result = await agent.run("shout")
    events = await read_checked(store, result.session_id)
    assert [f.content for f in payloads(events, ToolFinished)] == ["HI"]
