"""The gateway's estimate of a request's input tokens, made before it is sent: characters of
the system prompt, the messages and the tool schemas over `CHARS_PER_TOKEN`. Coarse on
purpose; the gateway corrects it with the usage each answer reports.
"""

from __future__ import annotations

import json

from tether.limits import CHARS_PER_TOKEN
from tether.messages import Text, ToolCall, ToolResult
from tether.providers.base import ModelRequest


def estimate_request_tokens(request: ModelRequest) -> int:
    chars = len(request.system or "")
    for message in request.messages:
        for part in message.parts:
            if isinstance(part, Text):
                chars += len(part.text)
            elif isinstance(part, ToolCall):
                chars += len(part.name) + len(part.raw_arguments or json.dumps(part.arguments))
            elif isinstance(part, ToolResult):
                chars += len(part.content)
    for spec in request.tools:
        chars += len(spec.name) + len(spec.description) + len(json.dumps(spec.parameters))
    return chars // CHARS_PER_TOKEN + 1
