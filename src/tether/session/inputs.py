"""A running call's questions, answered through its session's log (`tools.inputs.SessionAsker`).

An elicitation is `input.requested`, waited on until anyone appends its `input.answered`
(`control.answer`, from any process; the watcher folds it in); a call run again after a
restart that asks the same question again gets the recorded answer at once. A sampling
request is served by the session's own model, within the limits of the turn and of every
turn it runs inside, and recorded as `sampling.answered`. Owns those waits and charges;
not the MCP wire (`tools/mcp/asking.py`) nor the checks of an answer (`control.answer`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tether.errors import ProviderError
from tether.events import Event, InputAnswered, InputRequested, SamplingAnswered
from tether.limits import check_before_request, estimate_input_tokens
from tether.messages import JSONObject
from tether.providers.base import ModelRequest
from tether.retrying import complete
from tether.tools.inputs import (
    InputAnswer,
    SamplingAnswer,
    SamplingRefused,
    SamplingRequest,
    input_key,
    sampling_key,
)

if TYPE_CHECKING:  # loop imports this module; it needs the turn's fields only
    from tether.loop import TurnContext


class LogAsker:
    """The session of one turn's calls, as their MCP servers reach it."""

    def __init__(self, ctx: TurnContext) -> None:
        self.ctx = ctx

    async def elicit(
        self, call_id: str, server: str, message: str, schema: JSONObject
    ) -> InputAnswer:
        log = self.ctx.log
        folder = log.folder
        key = input_key(server, message, schema)
        answered = folder.input_answers.get((call_id, key))
        if answered is None:
            answered = await self._wait(
                call_id, InputRequested(call_id, server, message, schema, key)
            )
        content = dict(answered.content) if answered.action == "accept" else {}
        return InputAnswer(answered.action, content)

    async def _wait(self, call_id: str, asked: InputRequested) -> InputAnswered:
        """Ask (unless a gone runner asked the same already) and wait for the answer: the
        call's own deadline bounds the wait."""
        log = self.ctx.log
        root = log.root
        got: asyncio.Future[InputAnswered] = asyncio.get_running_loop().create_future()

        def observe(event: Event) -> None:
            p = event.payload
            if (
                isinstance(p, InputAnswered)
                and event.thread == log.thread
                and p.call_id == call_id
                and p.key == asked.key
                and not got.done()
            ):
                got.set_result(p)

        root.observers = (*root.observers, observe)
        try:
            waiting = log.folder.pending_inputs.get(call_id)
            if waiting is None or waiting.key != asked.key:
                await log.append(asked)
            answered = log.folder.input_answers.get((call_id, asked.key))
            return answered if answered is not None else await got
        finally:
            root.observers = tuple(o for o in root.observers if o is not observe)

    async def sample(self, call_id: str, server: str, request: SamplingRequest) -> SamplingAnswer:
        ctx = self.ctx
        key = sampling_key(server, request)
        recorded = ctx.log.folder.samplings.get((call_id, key))
        if recorded is not None:  # asked again by a call run again: answered already
            return SamplingAnswer(recorded.text, recorded.model, recorded.stop)
        model = ctx.engine.model
        refused = self._over_budget(request)
        if refused is None:
            cap = ctx.engine.limits.max_output_tokens
            if request.max_tokens is not None:
                cap = min(cap or request.max_tokens, request.max_tokens)
            asked = ModelRequest(
                model=model.name,
                system=request.system,
                messages=request.messages,
                max_output_tokens=cap,
                caller=ctx.caller,
            )
            try:
                response = await complete(model, asked, ctx.engine.retry)
            except ProviderError as exc:
                refused = f"the model failed: {exc.kind}: {exc}"
            else:
                text = response.message.text
                await ctx.log.append(
                    SamplingAnswered(
                        call_id,
                        server,
                        model.name,
                        text,
                        response.stop,
                        response.usage,
                        response.cost_usd,
                        key=key,
                    )
                )
                return SamplingAnswer(text, model.name, response.stop)
        await ctx.log.append(
            SamplingAnswered(call_id, server, model.name, refused=refused, key=key)
        )
        raise SamplingRefused(f"sampling refused: {refused}")

    def _over_budget(self, request: SamplingRequest) -> str | None:
        """Why the request may not go (tokens or cost spent, here or in a turn above), or
        None. Steps and time are the turn's own and are not counted against a server."""
        chars = sum(len(m.canonical()) for m in request.messages)
        estimate = estimate_input_tokens(chars, request.system, 0)
        estimate_cost = getattr(self.ctx.engine.model, "estimate_cost", None)
        cost_estimate = estimate_cost(estimate) if callable(estimate_cost) else None
        turn: TurnContext | None = self.ctx
        while turn is not None:
            counted = turn.log.folder
            stop = check_before_request(
                turn.engine.limits,
                turn_steps=0,
                tokens_used=counted.total_tokens + turn.reserved_tokens,
                cost_usd=(counted.cost_usd or 0.0) + turn.reserved_cost,
                cost_known=counted.cost_known,
                input_estimate=estimate,
                input_cost_estimate=cost_estimate,
                elapsed_seconds=0.0,
            )
            if stop is not None:
                return stop.detail or stop.reason
            turn = turn.parent
        return None
