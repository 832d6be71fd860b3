"""A tool that logs, for the structured-log tests (`--tools tests.telemetry.logging_tools:tools`)."""

from __future__ import annotations

import logging

from tether import tool

log = logging.getLogger("tether.tests.noisy")


@tool(effect="read")
async def noisy(text: str) -> str:
    """Log a warning about `text`, then say it back."""
    log.warning("looking at %s", text, extra={"call_id": "c-1"})
    return text


tools = [noisy]
