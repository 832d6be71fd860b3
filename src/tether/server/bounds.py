"""What a tenant's request may hold, beyond its body's size: the texts of a start and of a
message, and a start's metadata (keys, key length, each value's size, the total, nesting).
The operator sets them (`tether serve --limit NAME=VALUE`); a request past one is refused
with the limit named (413 for a size, 422 for a count or a shape) before anything is
created. Every cache a process keeps is bounded too (`tether.bounded`): these keep any one
request small, those keep all of them together small."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tether.messages import JSONValue, canonical_json
from tether.server.errors import ApiError
from tether.server.schemas import AnswerBody, StartBody

KIB = 1 << 10


@dataclass(frozen=True, slots=True)
class InputLimits:
    """`body_bytes`: a request body; `text_bytes`: a start's task, its system prompt and each
    sub-agent's, a message, an answer's data (UTF-8); `metadata_keys`, `metadata_key_chars`:
    how many top-level keys a start's metadata has and how long each is;
    `metadata_value_bytes`, `metadata_bytes`: one value's and the whole metadata's canonical
    JSON; `metadata_depth`: objects and lists nested in a value; `metadata_items`: the values
    at every depth together."""

    body_bytes: int = 1 << 20
    text_bytes: int = 256 * KIB
    metadata_keys: int = 64
    metadata_key_chars: int = 128
    metadata_value_bytes: int = 4 * KIB
    metadata_bytes: int = 16 * KIB
    metadata_depth: int = 8
    metadata_items: int = 1_024

    def __post_init__(self) -> None:
        for name, value in self.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"input limit {name} must be a positive whole number")

    def items(self) -> list[tuple[str, int]]:
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]

    @staticmethod
    def parse(given: list[str]) -> InputLimits:
        """From `NAME=VALUE` pairs (`tether serve --limit`); an unknown name or a bad value
        is a `ValueError` that names it and the known ones."""
        known = {f.name for f in dataclasses.fields(InputLimits)}
        values: dict[str, int] = {}
        for pair in given:
            name, sep, raw = pair.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in known:
                raise ValueError(
                    f"--limit {pair[:60]!r}: say NAME=VALUE, NAME one of {', '.join(sorted(known))}"
                )
            if not raw.strip().isdigit():
                raise ValueError(
                    f"--limit {name} must be a positive whole number, not {raw[:40]!r}"
                )
            values[name] = int(raw)
        return InputLimits(**values)

    # -- checks, each refusing with the limit's name ----------------------------------------
    def check_start(self, body: StartBody) -> None:
        """The texts of a validated start (its metadata: `check_metadata`, before that)."""
        self.check_text("task", body.task)
        if body.system is not None:
            self.check_text("system", body.system)
        for name, agent in body.agents.items():
            if agent.system is not None:
                self.check_text(f"agents.{name}.system", agent.system)

    def check_start_json(self, data: object) -> None:
        """The metadata of a start body as parsed, before it is validated: validating a
        mebibyte of small items costs the event loop most of a second, this walk stops at
        the first item past the limit."""
        metadata = data.get("metadata") if isinstance(data, dict) else None
        if isinstance(metadata, dict):
            self.check_metadata(metadata)

    def check_answer(self, body: AnswerBody) -> None:
        if body.data is not None:
            _over("data", len(canonical_json(body.data).encode()), self.text_bytes, "text_bytes")

    def check_text(self, where: str, text: str) -> None:
        # A character is at most 4 bytes: most texts pass without being encoded.
        if len(text) * 4 > self.text_bytes:
            _over(where, len(text.encode()), self.text_bytes, "text_bytes")

    def check_metadata(self, metadata: dict[str, JSONValue]) -> None:
        if len(metadata) > self.metadata_keys:
            raise ApiError(
                "invalid_request",
                f"metadata has {len(metadata)} keys; the limit is {self.metadata_keys} "
                "(metadata_keys)",
            )
        total, items = 2, 0
        for key, value in metadata.items():
            if not isinstance(key, str) or len(key) > self.metadata_key_chars:
                raise ApiError(
                    "invalid_request",
                    f"metadata key {str(key)[:40]!r}… has {len(str(key))} characters; the "
                    f"limit is {self.metadata_key_chars} (metadata_key_chars)",
                )
            items, chars = self._walk(key, value, items)
            where = f"metadata.{key[:40]}"
            if chars > self.metadata_value_bytes:  # its text alone is over: never encoded
                _over(where, chars, self.metadata_value_bytes, "metadata_value_bytes", "at least ")
            size = len(canonical_json(value).encode())
            _over(where, size, self.metadata_value_bytes, "metadata_value_bytes")
            total += size + len(key.encode()) + 4
        _over("metadata", total, self.metadata_bytes, "metadata_bytes")

    def _walk(self, key: str, value: JSONValue, items: int) -> tuple[int, int]:
        """The metadata's items so far (`items`) with this value's, and the characters its
        strings and keys hold (at most its JSON's bytes); walked without recursion and
        stopped at the first excess of depth or items: a value within the body's size can
        still be deep, or many small items that cost more decoded than as text."""
        chars = 0
        stack: list[tuple[JSONValue, int]] = [(value, 0)]
        while stack:
            item, depth = stack.pop()
            items += 1
            if isinstance(item, str):
                chars += len(item)
            elif isinstance(item, dict | list):
                if depth + 1 > self.metadata_depth:
                    raise ApiError(
                        "invalid_request",
                        f"metadata.{key[:40]} nests deeper than {self.metadata_depth} "
                        "(metadata_depth)",
                    )
                if items + len(item) > self.metadata_items:
                    raise ApiError(
                        "invalid_request",
                        f"metadata holds more than {self.metadata_items} values at "
                        f"metadata.{key[:40]} (metadata_items)",
                    )
                if isinstance(item, dict):
                    chars += sum(len(k) for k in item)
                    stack.extend((v, depth + 1) for v in item.values())
                else:
                    stack.extend((v, depth + 1) for v in item)
        return items, chars


def _over(where: str, size: int, limit: int, name: str, bound: str = "") -> None:
    if size > limit:
        raise ApiError(
            "payload_too_large", f"{where} has {bound}{size} bytes; the limit is {limit} ({name})"
        )
