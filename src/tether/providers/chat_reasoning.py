"""Reasoning in the Chat Completions dialects: the message fields `reasoning_content`
(DeepSeek, vLLM), `reasoning` and `reasoning_details` (OpenRouter), whole or streamed, as one
`Thinking` part whose data holds the fields as received; and the same fields set again on an
assistant message for the provider that wrote them. The messages themselves are
`openai_chat`'s.
"""

from __future__ import annotations

from tether.messages import JSONObject, JSONValue, Message, Thinking, sorted_copy
from tether.providers.base import Delta, DeltaObserver
from tether.providers.common import is_obj, text

# The text fields; `reasoning_details` is a list of typed blocks (text, summary, encrypted).
TEXT_FIELDS = ("reasoning_content", "reasoning")
DETAILS = "reasoning_details"
# A detail's readable text, by its type; `reasoning.encrypted` has none.
DETAIL_TEXT = {"reasoning.text": "text", "reasoning.summary": "summary"}


def decode_thinking(fields: JSONObject, provider: str) -> Thinking | None:
    """The reasoning a message (or a whole stream's fields) carries, or None. A text field
    counts even when empty: DeepSeek wants `reasoning_content` back on a tool-call turn
    whatever it held."""
    data: JSONObject = {}
    for name in TEXT_FIELDS:
        if isinstance(fields.get(name), str):
            data[name] = fields[name]
    details = fields.get(DETAILS)
    if isinstance(details, list) and details:
        data[DETAILS] = sorted_copy(details)
    if not data:
        return None
    said = next((v for n in TEXT_FIELDS if isinstance(v := data.get(n), str) and v), "")
    return Thinking(said or details_text(details), provider, dict(sorted(data.items())))


def details_text(details: JSONValue) -> str:
    if not isinstance(details, list):
        return ""
    return "".join(
        text(d, DETAIL_TEXT.get(text(d, "type") or "", "text")) or "" for d in details if is_obj(d)
    )


def encode_thinking(message: Message, provider: str) -> JSONObject:
    """The reasoning fields to set on `message`'s wire form: its own provider's, as they
    came; another's are left out (the loop counts them)."""
    fields: JSONObject = {}
    for part in message.thinking:
        if part.provider == provider:
            fields.update(part.data)
    return fields


class ReasoningAssembler:
    """Gathers the reasoning fields of stream deltas: text fields are concatenated, and
    `reasoning_details` fragments are merged by their `index` (text pieces concatenated,
    the rest, a signature, taken as they come). Readable pieces go to the observer."""

    def __init__(self, provider: str, on_delta: DeltaObserver | None) -> None:
        self._provider = provider
        self._on_delta = on_delta
        self._texts: dict[str, list[str]] = {}
        self._details: list[JSONObject] = []
        self._by_index: dict[int, JSONObject] = {}

    def feed(self, delta: JSONObject) -> None:
        offered = ""
        for name in TEXT_FIELDS:
            piece = delta.get(name)
            if isinstance(piece, str):
                self._texts.setdefault(name, []).append(piece)
                offered = offered or piece
        fragments = delta.get(DETAILS)
        if isinstance(fragments, list):
            for fragment in fragments:
                if is_obj(fragment):
                    self._merge(fragment)
            offered = offered or details_text(fragments)
        if offered and self._on_delta is not None:
            self._on_delta(Delta("reasoning", offered))

    def _merge(self, fragment: JSONObject) -> None:
        index = fragment.get("index")
        known = self._by_index.get(index) if isinstance(index, int) else None
        if known is None:
            known = {}
            self._details.append(known)
            if isinstance(index, int):
                self._by_index[index] = known
        for key, value in fragment.items():
            before = known.get(key)
            if key in ("text", "summary", "data") and isinstance(before, str):
                known[key] = before + value if isinstance(value, str) else before
            elif value is not None or key not in known:
                known[key] = value

    def finish(self) -> tuple[Thinking, ...]:
        fields: JSONObject = {name: "".join(parts) for name, parts in self._texts.items()}
        if self._details:
            fields[DETAILS] = list(self._details)
        thinking = decode_thinking(fields, self._provider)
        return () if thinking is None else (thinking,)
