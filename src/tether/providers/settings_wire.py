"""What every codec shares in encoding `ModelSettings`: the output cap, the checked
`tool_choice`, and the one wording of a refusal. Each codec module decides its own wire
names and which settings it refuses.
"""

from __future__ import annotations

from tether.errors import UsageError
from tether.providers.base import ModelRequest
from tether.settings import ModelSettings, check_tool_choice, tighter


def output_cap(request: ModelRequest) -> int | None:
    """The tighter of the request's cap (the loop's: `Limits.max_output_tokens`) and the
    settings' own."""
    settings = request.settings
    return tighter(
        request.max_output_tokens, settings.max_output_tokens if settings is not None else None
    )


def cache_key(request: ModelRequest) -> str | None:
    """What OpenAI's `prompt_cache_key` is set to: the session, so that its requests, which
    share their prefix, are routed where that prefix is cached (None: caching is off, or
    the request names no session)."""
    if request.caller is None or (request.settings is not None and not request.settings.cache):
        return None
    return request.caller.session_id


def tool_choice(settings: ModelSettings, request: ModelRequest) -> str | None:
    """The `tool_choice` to encode: None when none is set or no tool is offered (then only
    "auto" and "none" are allowed, and both mean no call). A choice naming a tool not
    offered, or "required" with no tools, is refused."""
    check_tool_choice(settings, (t.name for t in request.tools))
    return settings.tool_choice if request.tools else None


def unsupported(provider: str, setting: str, hint: str = "") -> UsageError:
    return UsageError(
        f"the {provider} API has no {setting} setting: leave it unset for this model"
        + (f"; {hint}" if hint else "")
    )
