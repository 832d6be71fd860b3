"""The scripted model: prepared replies, in order, with fault injection. For tests and demos;
it is never chosen implicitly.

It picks its reply from the transcript it is sent (the number of assistant turns so far),
not from a counter of its own, so a session resumed in a fresh process goes on where it
stopped.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from tether.errors import ProviderError, ScriptExhausted
from tether.messages import JSONValue, Message, Text, ToolCall, Usage
from tether.providers.base import Delta, DeltaObserver, ModelRequest, ModelResponse, StopKind

if TYPE_CHECKING:
    from tether.settings import ModelSettings

_CACHE_LIMIT = 4096
_WORDS = re.compile(r"\s*\S+")


def _stream(message: Message, on_delta: DeltaObserver) -> None:
    """Offer the answer as a streaming model would: its text a word at a time, then each
    call's arguments."""
    for word in _WORDS.findall(message.text):
        on_delta(Delta("text", word))
    for c in message.tool_calls:
        on_delta(Delta("tool_input", json.dumps(c.arguments), c.id))


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    name: str
    arguments: dict[str, JSONValue]


def call(name: str, /, **arguments: JSONValue) -> ScriptedCall:
    """One scripted tool call; a list of them is one turn of parallel calls."""
    return ScriptedCall(name, arguments)


@dataclass(frozen=True, slots=True)
class Say:
    """An answer with text and tool calls together, as a model that thinks aloud gives."""

    text: str
    calls: tuple[ScriptedCall, ...] = ()


def say(text: str, *calls: ScriptedCall) -> Say:
    """`say("checking the draft", call("lint", path="a.md"))`: text, then the calls."""
    return Say(text, calls)


@dataclass(frozen=True, slots=True)
class Fail:
    """Raise `error` instead of answering."""

    error: Exception


@dataclass(frozen=True, slots=True)
class Delay:
    """Answer `reply` after `seconds`."""

    seconds: float
    reply: Reply


@dataclass(frozen=True, slots=True)
class Hang:
    """Never answer (until cancelled)."""


@dataclass(frozen=True, slots=True)
class Truncated:
    """An answer cut by the output limit inside a tool call: text and an unusable call."""

    text: str = ""


Reply: TypeAlias = (
    str
    | Say
    | ScriptedCall
    | Sequence[ScriptedCall]
    | Fail
    | Delay
    | Hang
    | Truncated
    | Callable[[Sequence[Message]], "Reply"]
)


class ScriptedModel:
    """`ScriptedModel(["final answer"])`, `ScriptedModel([call("add", a=1, b=2), "3"])`.

    `repeat_last=True` answers with the last reply forever (a model that never stops asking
    for tools). `delay` sleeps before every answer, as a network would. `price_per_million`
    (input, output) makes the cost known; otherwise it is None, never a made-up 0. With an
    `on_delta` observer on the request, the answer is also offered as deltas. Settings are
    not acted on; `last_settings` is the last request's, for tests to read."""

    def __init__(
        self,
        replies: Sequence[Reply],
        *,
        name: str = "scripted",
        repeat_last: bool = False,
        delay: float = 0.0,
        price_per_million: tuple[float, float] | None = None,
    ) -> None:
        self._replies = list(replies)
        self._name = name
        self._repeat_last = repeat_last
        self._delay = delay
        self._price = price_per_million
        # id of a transcript list -> (its length, assistant turns in it, its last message):
        # counting only the new tail keeps a long session's cost per step flat. The last
        # message, compared by identity, tells a list that grew from one that was replaced.
        self._counts: dict[int, tuple[int, int, Message]] = {}
        # turn -> the message of a fixed reply (text or calls): built once, as messages are
        # immutable, so the double costs the runtime under test as little as it can.
        self._built: dict[int, Message] = {}
        self.last_settings: ModelSettings | None = None

    @property
    def name(self) -> str:
        return self._name

    def estimate_cost(self, input_tokens: int) -> float | None:
        return None if self._price is None else input_tokens * self._price[0] / 1e6

    def _assistant_turns(self, messages: Sequence[Message]) -> int:
        size = len(messages)
        seen, count = 0, 0
        cached = self._counts.get(id(messages))
        if cached is not None and 0 < cached[0] <= size and messages[cached[0] - 1] is cached[2]:
            seen, count = cached[0], cached[1]
        for i in range(seen, size):
            if messages[i].role == "assistant":
                count += 1
        if size:
            if len(self._counts) >= _CACHE_LIMIT:
                self._counts.clear()
            self._counts[id(messages)] = (size, count, messages[size - 1])
        return count

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.last_settings = request.settings
        turn = self._assistant_turns(request.messages)
        if turn < len(self._replies):
            reply = self._replies[turn]
        elif self._repeat_last and self._replies:
            reply = self._replies[-1]
        else:
            raise ScriptExhausted(
                f"the scripted model has {len(self._replies)} replies and was asked for reply {turn + 1}"
            )
        if self._delay:
            await asyncio.sleep(self._delay)
        return await self._answer(reply, turn, request)

    async def _answer(
        self, reply: Reply, turn: int, request: ModelRequest, fixed: bool = True
    ) -> ModelResponse:
        """`fixed`: `reply` is the script's own for this turn (not a function's answer), so
        its message can be built once."""
        if isinstance(reply, Fail):
            raise reply.error
        if isinstance(reply, Delay):
            await asyncio.sleep(reply.seconds)
            return await self._answer(reply.reply, turn, request, fixed)
        if isinstance(reply, Hang):
            await asyncio.Event().wait()
            raise AssertionError("unreachable: a hung reply never answers")
        if callable(reply) and not isinstance(reply, ScriptedCall):
            return await self._answer(reply(request.messages), turn, request, fixed=False)
        if isinstance(reply, Truncated):
            cut = ToolCall(f"call_{turn}_0", "unfinished", {}, raw_arguments='{"partial": ')
            parts = ((Text(reply.text),) if reply.text else ()) + (cut,)
            return self._response(
                Message("assistant", parts), "max_tokens", incomplete=True, request=request
            )
        message = self._built.get(turn) if fixed else None
        if message is None:
            message = self._build(reply, turn)
            if fixed:
                if len(self._built) >= _CACHE_LIMIT:
                    self._built.clear()
                self._built[turn] = message
        if request.on_delta is not None:
            _stream(message, request.on_delta)
        return self._response(
            message, "tool_calls" if message.tool_calls else "end_turn", request=request
        )

    @staticmethod
    def _build(reply: Reply, turn: int) -> Message:
        if isinstance(reply, str):
            return Message("assistant", (Text(reply),))
        if isinstance(reply, Say):
            said = ScriptedModel._build(list(reply.calls), turn).parts if reply.calls else ()
            return Message("assistant", ((Text(reply.text),) if reply.text else ()) + said)
        calls: list[object] = [reply] if isinstance(reply, ScriptedCall) else list(reply)  # type: ignore[arg-type]
        if not all(isinstance(c, ScriptedCall) for c in calls):
            raise ProviderError(
                f"scripted reply {turn + 1} is not a str, a call or a list of calls"
            )
        tool_calls = tuple(
            ToolCall(f"call_{turn}_{i}", c.name, dict(c.arguments))
            for i, c in enumerate(calls)
            if isinstance(c, ScriptedCall)
        )
        return Message("assistant", tool_calls)

    def _response(
        self, message: Message, stop: str, *, request: ModelRequest, incomplete: bool = False
    ) -> ModelResponse:
        # Deterministic usage that grows with the conversation, as a real model's would.
        usage = Usage(20 + 10 * len(request.messages), 5 + len(message.text) // 4)
        cost = None
        if self._price is not None:
            cost = (
                usage.input_tokens * self._price[0] + usage.output_tokens * self._price[1]
            ) / 1e6
        end: StopKind = "tool_calls" if stop == "tool_calls" else "end_turn"
        kind: StopKind = "max_tokens" if incomplete else end
        return ModelResponse(message, kind, stop, usage, cost, incomplete)
