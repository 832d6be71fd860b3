"""A fold as bytes and back: `encode(folder)` and `decode(data)`, so that a session is taken
up from its newest snapshot and the events after it instead of its whole log. Pure.

Data only: JSON, read back by one typed decoder per `Folder` attribute. Never pickle: a
snapshot comes from the database, and a row written there must never become code run by
the worker that reads it. A snapshot whose bytes do not decode is `DamagedSnapshot`.

`VERSION` names the code that folded and encoded: the package's version, `CODEC`, the
names of `Folder`'s attributes and a digest of the modules whose code decides what a fold
holds. A reader ignores a snapshot of any other version and folds the log again, so a
changed fold never starts from a snapshot an older one wrote.

When you change `Folder`: give each attribute you add an entry in `_FIELDS` (`encode`
refuses a folder holding an attribute it has no entry for, and `tests/test_snapshot.py`
holds the table and the class equal), and drop the entries of those you remove. VERSION
changes by itself with the attribute names and the code; raise `CODEC` when you change how
an attribute is written without changing that code's modules.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from tether.events import (
    ApprovalDecided,
    InputAnswered,
    InputRequested,
    Payload,
    SamplingAnswered,
    SessionForked,
    ThreadFinished,
    payload_from_json,
    payload_to_json,
)
from tether.fold import Folder
from tether.messages import Message, Part, Role, Text, ToolCall, ToolResult, part_from_json
from tether.state import ThreadNode

CODEC = "1"


class DamagedSnapshot(ValueError):
    """Bytes that are not a snapshot this code wrote (damaged, truncated, or not one)."""


@dataclass(frozen=True, slots=True)
class _Field:
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


def _same(kind: type | tuple[type, ...]) -> _Field:
    def check(value: Any) -> Any:
        if not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool):
            raise DamagedSnapshot(f"expected {kind}, found {type(value).__name__}")
        return value

    return _Field(lambda v: v, check)


def _optional(field: _Field) -> _Field:
    return _Field(
        lambda v: None if v is None else field.encode(v),
        lambda v: None if v is None else field.decode(v),
    )


def _list_of(field: _Field) -> _Field:
    return _Field(
        lambda v: [field.encode(x) for x in v], lambda v: [field.decode(x) for x in _list(v)]
    )


def _dict_of(field: _Field) -> _Field:
    """A dict with string keys, in its order (a view lists some of them in that order)."""
    return _Field(
        lambda v: [[k, field.encode(x)] for k, x in v.items()],
        lambda v: {_STR.decode(k): field.decode(x) for k, x in map(_pair, _list(v))},
    )


def _pair_dict_of(field: _Field) -> _Field:
    """A dict keyed by (str, str) pairs, in its order."""
    return _Field(
        lambda v: [[a, b, field.encode(x)] for (a, b), x in v.items()],
        lambda v: {
            (_STR.decode(a), _STR.decode(b)): field.decode(x) for a, b, x in map(_triple, _list(v))
        },
    )


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise DamagedSnapshot(f"expected a list, found {type(value).__name__}")
    return value


def _pair(value: Any) -> list[Any]:
    if len(_list(value)) != 2:
        raise DamagedSnapshot("expected a pair")
    return value  # type: ignore[no-any-return]


def _triple(value: Any) -> list[Any]:
    if len(_list(value)) != 3:
        raise DamagedSnapshot("expected a triple")
    return value  # type: ignore[no-any-return]


def _payload(kind: type[Payload]) -> _Field:
    name = kind.type

    def decode(value: Any) -> Payload:
        if not isinstance(value, dict):
            raise DamagedSnapshot(f"a {name} must be an object")
        payload = payload_from_json(name, value)
        if not isinstance(payload, kind):
            raise DamagedSnapshot(f"expected a {name}")
        return payload

    return _Field(payload_to_json, decode)


def _part(kind: type) -> _Field:
    def decode(value: Any) -> Any:
        part = part_from_json(value)
        if not isinstance(part, kind):
            raise DamagedSnapshot(f"expected a {kind.__name__}")
        return part

    return _Field(lambda v: v.to_json(), decode)


# Messages are most of a fold: written short, and read back with one type test per part. A
# text part is its string; a call or a result without images a list; any other part its JSON
# object. (Message.from_json, checking every key, took most of a decode.)
_ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant", "tool": "tool"}


def _message_json(message: Message) -> list[Any]:
    parts: list[Any] = []
    for part in message.parts:
        kind = type(part)
        if kind is Text:
            parts.append(part.text)  # type: ignore[union-attr]
        elif kind is ToolCall:
            call: ToolCall = part  # type: ignore[assignment]
            parts.append([call.id, call.name, call.arguments, call.raw_arguments])
        elif kind is ToolResult and not part.images:  # type: ignore[union-attr]
            result: ToolResult = part  # type: ignore[assignment]
            parts.append([result.call_id, result.content, result.is_error])
        else:
            parts.append(part.to_json())
    return [message.role, parts]


def _message(value: Any) -> Message:
    # Type tests written inline: this loop is most of a decode's time.
    if type(value) is not list or len(value) != 2 or type(value[1]) is not list:
        raise DamagedSnapshot("a message must be [role, parts]")
    role, raw = value
    parts: list[Part] = []
    for part in raw:
        kind = type(part)
        if kind is str:
            parts.append(Text(part))
        elif kind is list and len(part) == 4:
            call_id, name, arguments, raw_arguments = part
            if (
                type(call_id) is not str
                or type(name) is not str
                or type(arguments) is not dict
                or (raw_arguments is not None and type(raw_arguments) is not str)
            ):
                raise DamagedSnapshot("a tool call of the wrong shape")
            parts.append(ToolCall(call_id, name, arguments, raw_arguments))
        elif kind is list and len(part) == 3:
            call_id, content, is_error = part
            if type(call_id) is not str or type(content) is not str or type(is_error) is not bool:
                raise DamagedSnapshot("a tool result of the wrong shape")
            parts.append(ToolResult(call_id, content, is_error))
        else:
            parts.append(part_from_json(part))
    return Message(_ROLES[role], tuple(parts))


def _thread_node(value: Any) -> ThreadNode:
    thread, agent, call_id, status, stop_reason, handoff = _list(value)
    return ThreadNode(
        _STR.decode(thread),
        _STR.decode(agent),
        _OPT_STR.decode(call_id),
        _STR.decode(status),
        _OPT_STR.decode(stop_reason),
        _BOOL.decode(handoff),
    )


def _offered(value: Any) -> tuple[tuple[str, ...], str]:
    names, digest = _pair(value)
    return tuple(_STR.decode(n) for n in _list(names)), _STR.decode(digest)


def _int_pair(value: Any) -> tuple[int, int]:
    a, b = _pair(value)
    return _INT.decode(a), _INT.decode(b)


_STR = _same(str)
_OPT_STR = _optional(_STR)
_INT = _same(int)
_BOOL = _same(bool)
_OBJECT = _same(dict)
_INTS = _list_of(_INT)
_STRS = _list_of(_STR)
_FINISHED = _optional(_payload(ThreadFinished))

# One entry per `Folder` attribute: how it is written, and read back checked.
_FIELDS: dict[str, _Field] = {
    "thread": _STR,
    "_below": _STR,
    "session_id": _STR,
    "model": _STR,
    "system": _OPT_STR,
    "tools": _OBJECT,
    "_offered": _Field(
        lambda v: None if v is None else [list(v[0]), v[1]],
        lambda v: None if v is None else _offered(v),
    ),
    "_created": _BOOL,
    "limits": _OBJECT,
    "metadata": _OBJECT,
    "messages": _Field(
        lambda v: [_message_json(m) for m in v], lambda v: [_message(m) for m in _list(v)]
    ),
    "state": _STR,
    "stop_reason": _OPT_STR,
    "stop_detail": _OPT_STR,
    "_tokens": _INTS,
    "cost_usd": _optional(_same((float, int))),
    "_cost_unknown": _BOOL,
    "steps": _INT,
    "turn_steps": _INT,
    "turns": _INT,
    "last_seq": _INT,
    "created": _STR,
    "updated": _STR,
    "task": _STR,
    "last_output": _STR,
    "open_calls": _list_of(_part(ToolCall)),
    "results": _dict_of(_part(ToolResult)),
    "started": _Field(sorted, lambda v: set(_STRS.decode(v))),
    "pending_approvals": _STRS,
    "decisions": _dict_of(_payload(ApprovalDecided)),
    "cancel_scope": _OPT_STR,
    "pending_inputs": _dict_of(_payload(InputRequested)),
    "input_answers": _pair_dict_of(_payload(InputAnswered)),
    "samplings": _pair_dict_of(_payload(SamplingAnswered)),
    "model_request_open": _BOOL,
    "asked_seq": _INT,
    "turn_open": _BOOL,
    "transcript_chars": _INT,
    "has_thinking": _BOOL,
    "message_seqs": _INTS,
    "message_chars": _INTS,
    "compactions": _INT,
    "calibration": _Field(
        lambda v: None if v is None else list(v), lambda v: None if v is None else _int_pair(v)
    ),
    "_request_chars": _INT,
    "transcript_hash": _STR,
    "agent": _STR,
    "finished": _FINISHED,
    "call_threads": _dict_of(_STR),
    "children_started": _INT,
    "thread_nodes": _dict_of(
        _Field(
            lambda n: [n.thread, n.agent, n.parent_call_id, n.status, n.stop_reason, n.handoff],
            _thread_node,
        )
    ),
    "handoff": _FINISHED,
    "forked": _optional(_payload(SessionForked)),
}


def _source_digest() -> str:
    """A digest of the code that decides what a fold holds and how it is written. A module
    whose source cannot be read (an install without sources) counts by its name alone: the
    package version still tells its releases apart."""
    digest = hashlib.sha256(",".join(sorted(_FIELDS)).encode())
    for name in ("tether.fold", "tether.events", "tether.messages", "tether.state", __name__):
        module = sys.modules[name]
        digest.update(name.encode())
        with contextlib.suppress(OSError):
            digest.update(Path(str(module.__file__)).read_bytes())
    return digest.hexdigest()[:16]


def _package_version() -> str:
    try:
        return metadata.version("tether")
    except metadata.PackageNotFoundError:
        return "0"


VERSION = f"{_package_version()}+{CODEC}+{_source_digest()}"


def encode(folder: Folder) -> bytes:
    """The fold as bytes `decode` reads back equal, attribute for attribute."""
    body: dict[str, Any] = {}
    for name, value in vars(folder).items():
        field = _FIELDS.get(name)
        if field is None:
            raise TypeError(f"snapshot: Folder.{name} has no entry in snapshot._FIELDS")
        body[name] = field.encode(value)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _loads(data: bytes) -> Any:
    collecting = gc.isenabled()
    gc.disable()  # as in `decode`
    try:
        return json.loads(data)
    finally:
        if collecting:
            gc.enable()


def decode(data: bytes) -> Folder:
    """The fold `encode` wrote; `DamagedSnapshot` when `data` is anything else."""
    try:
        body = _loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedSnapshot(f"a snapshot that is not JSON: {exc}") from None
    if not isinstance(body, Mapping) or set(body) != set(_FIELDS):
        raise DamagedSnapshot("a snapshot whose attributes are not a fold's")
    folder = Folder.__new__(Folder)
    attributes = vars(folder)
    collecting = gc.isenabled()
    gc.disable()  # a decode makes many objects and no cycles: the collector would only slow it
    try:
        for name, field in _FIELDS.items():
            attributes[name] = field.decode(body[name])
    except DamagedSnapshot:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise DamagedSnapshot(f"a snapshot whose {name} does not decode: {exc}") from None
    finally:
        if collecting:
            gc.enable()
    return folder
