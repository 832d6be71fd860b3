"""The attribute names tether writes (OpenTelemetry GenAI semantic conventions, and
`tether.*` for what they have no name for), and what a model string says about them."""

from __future__ import annotations

import os

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"  # the older name of the provider attribute; written beside it
REQUEST_MODEL = "gen_ai.request.model"
CONVERSATION = "gen_ai.conversation.id"
AGENT_NAME = "gen_ai.agent.name"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
TOKEN_TYPE = "gen_ai.token.type"  # of a metric point: input or output
FINISH_REASONS = "gen_ai.response.finish_reasons"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"
HTTP_STATUS = "http.response.status_code"

# Content (messages, arguments, results) is left out of spans unless the operator opts in,
# by the variable OpenTelemetry's GenAI instrumentations read.
CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def content_opted_in() -> bool:
    return os.environ.get(CONTENT_VARIABLE, "").strip().lower() in ("true", "1", "yes")


def provider_and_model(model: str) -> tuple[str, str]:
    """`anthropic:claude-x` → (`anthropic`, `claude-x`); a name with no provider part (the
    scripted model) is its own provider."""
    provider, sep, name = model.partition(":")
    return (provider, name) if sep else (model, model)
