"""What the gateway tests share: requests, scripted replies in call order, a call log."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from tether.messages import Message, user
from tether.providers.base import ModelRequest
from tether.testing.scripted import Reply


def request(text: str = "hi", max_output_tokens: int | None = 100) -> ModelRequest:
    return ModelRequest("m", None, [user(text)], max_output_tokens=max_output_tokens)


def in_order(*replies: Reply, then: Reply | None = None) -> Callable[[Sequence[Message]], Reply]:
    """A scripted reply that answers each call with the next of `replies`, then `then`: the
    scripted model picks replies by turn, and a retried request is the same turn."""
    queue = list(replies)

    def next_reply(messages: Sequence[Message]) -> Reply:
        if queue:
            return queue.pop(0)
        assert then is not None, "more calls than scripted replies"
        return then

    return next_reply


def logged(
    log: list[float], reply: Callable[[Sequence[Message]], Reply]
) -> Callable[[Sequence[Message]], Reply]:
    """The same replies, noting the virtual time of each call the backend receives."""

    def note(messages: Sequence[Message]) -> Reply:
        log.append(asyncio.get_running_loop().time())
        return reply(messages)

    return note
