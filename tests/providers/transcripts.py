"""The neutral transcripts behind the reference request files, one per dialect's example."""

from __future__ import annotations

from tether.messages import Message, ToolCall, ToolResult, assistant, tool_results, user
from tether.providers.base import ModelRequest, ToolSpec

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["location"],
}
WEATHER = ToolSpec("get_weather", "Get the current weather in a given location", WEATHER_SCHEMA)

SF = ToolCall(
    "toolu_01A09q90qw90lq917835lq9",
    "get_weather",
    {"location": "San Francisco, CA", "unit": "celsius"},
)
PARIS = ToolCall(
    "toolu_01B8rj2kx7cVz3mNq1PaLw4e",
    "get_weather",
    {"location": "Paris, France", "unit": "celsius"},
)
QUESTION = "What is the weather like in San Francisco and in Paris?"

ANTHROPIC_TURN: tuple[Message, ...] = (
    user(QUESTION),
    assistant("I'll check both cities.", [SF, PARIS]),
    tool_results(
        [
            ToolResult(SF.id, "15 degrees, foggy"),
            ToolResult(PARIS.id, "ConnectionError: weather service unavailable (HTTP 500)", True),
        ]
    ),
)


def request(
    messages: tuple[Message, ...], tools: tuple[ToolSpec, ...] = (), **kw: object
) -> ModelRequest:
    return ModelRequest(
        model="m", system=kw.pop("system", None), messages=messages, tools=tools, **kw
    )  # type: ignore[arg-type]
