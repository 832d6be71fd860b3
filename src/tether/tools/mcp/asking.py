"""What one MCP server asks of its client mid-call: elicitation and sampling, each passed on to
the session of the tool call it belongs to (`tools.inputs.ASKER`).

Owns attributing a server's request to a call and translating MCP's shapes to tether's and
back. Recording a question, waiting for its answer and serving it with the session's model
are the session's (`session/inputs.py`).

Attribution: the SDK tells a callback no related request id. A request made inside a call's
own task (the 2026-07-28 input-required rounds) is that call's; one that arrives on the
connection (the older protocol) belongs to the one call in flight on it. With several calls
in flight an elicitation is declined and a sampling request refused, with a logged reason.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from mcp import types as mcp_types
from mcp.client.session import ClientRequestContext

from tether.errors import TetherError
from tether.messages import Message, Text
from tether.tools.inputs import ASKER, SamplingRequest, SessionAsker

logger = logging.getLogger("tether.mcp")

_STOPS = {"end_turn": "endTurn", "max_tokens": "maxTokens", "stop_sequence": "stopSequence"}


@dataclass(frozen=True, slots=True, eq=False)
class _Call:
    call_id: str
    asker: SessionAsker


# The call whose task is running (a request made inside it is surely its).
_CURRENT: ContextVar[_Call | None] = ContextVar("tether_mcp_call", default=None)


class ServerRequests:
    """The elicitation and sampling callbacks of one server's connection, and the calls in
    flight on it that may be asked."""

    def __init__(self, server: str, roots: tuple[str, ...] = ()) -> None:
        self.server = server
        self._roots = [_root(r) for r in roots]
        self._calls: list[_Call] = []

    @contextmanager
    def calling(self, call_id: str | None) -> Iterator[None]:
        """Around one `tools/call`: the call a request of the server may belong to. A call
        made outside a session's run (no asker) can be asked nothing."""
        asker = ASKER.get()
        if asker is None or call_id is None:
            yield
            return
        call = _Call(call_id, asker)
        self._calls.append(call)
        token = _CURRENT.set(call)
        try:
            yield
        finally:
            _CURRENT.reset(token)
            self._calls.remove(call)

    def _call_for(self, what: str) -> _Call | None:
        current = _CURRENT.get()
        if current is not None:
            return current
        if len(self._calls) == 1:
            return self._calls[0]
        why = (
            "no call of a session's run is in flight on this connection"
            if not self._calls
            else f"{len(self._calls)} calls are in flight and the request names none"
        )
        logger.warning("MCP server %s: %s refused: %s", self.server, what, why)
        return None

    async def elicit(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        call = self._call_for("an elicitation")
        if call is None:
            return mcp_types.ElicitResult(action="decline")
        if not isinstance(params, mcp_types.ElicitRequestFormParams):
            logger.warning(
                "MCP server %s: a URL elicitation declined (only forms are answered)", self.server
            )
            return mcp_types.ElicitResult(action="decline")
        schema = dict(params.requested_schema)
        answer = await call.asker.elicit(call.call_id, self.server, params.message, schema)
        if answer.action != "accept":
            return mcp_types.ElicitResult(action=answer.action)
        content = {**_defaults(schema), **answer.content}
        return mcp_types.ElicitResult(action="accept", content=content)  # type: ignore[arg-type]

    async def sample(
        self, context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.ErrorData:
        call = self._call_for("a sampling request")
        if call is None:
            return mcp_types.ErrorData(
                code=mcp_types.INVALID_REQUEST,
                message="sampling is served only for a call of a running session",
            )
        request = SamplingRequest(
            tuple(_message(m) for m in params.messages), params.system_prompt, params.max_tokens
        )
        try:
            answer = await call.asker.sample(call.call_id, self.server, request)
        except TetherError as exc:
            return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=str(exc))
        return mcp_types.CreateMessageResult(
            role="assistant",
            content=mcp_types.TextContent(type="text", text=answer.text),
            model=answer.model,
            stop_reason=_STOPS.get(answer.stop, answer.stop),
        )

    async def roots(self, context: ClientRequestContext) -> mcp_types.ListRootsResult:
        """The config's roots, the same for every call."""
        return mcp_types.ListRootsResult(roots=self._roots)


def _root(root: str) -> mcp_types.Root:
    """A root as MCP names it: a `file://` URI (a path made absolute), named by its last part."""
    uri = root if root.startswith("file://") else Path(root).expanduser().resolve().as_uri()
    name = uri.rstrip("/").rpartition("/")[2] or uri
    return mcp_types.Root(uri=uri, name=name)  # type: ignore[arg-type]


def _defaults(schema: dict[str, object]) -> dict[str, object]:
    """The `default` of each field of a requested schema that has one (SEP-1034): a form
    shows them filled in, so an accepted answer that leaves a field out means its default."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return {}
    return {
        name: field["default"]
        for name, field in properties.items()
        if isinstance(field, dict) and "default" in field
    }


def _message(message: mcp_types.SamplingMessage) -> Message:
    """A sampling message as text: what is not text is named, not sent."""
    blocks = message.content if isinstance(message.content, list) else [message.content]
    texts = [
        b.text if isinstance(b, mcp_types.TextContent) else f"[{b.type} content left out]"
        for b in blocks
    ]
    return Message(message.role, (Text("\n".join(texts)),))
