"""A thread's transcript a page at a time: `GET /v1/sessions/{id}/transcript` for the web view.

The transcript is the fold's (`Folder.messages`): the conversation as the model saw it, a
compacted range as its summary and a cleared result as its marker (the events keep the
rest). A page holds at most `limit` messages from `after` (a message index) and stops
once it passes `PAGE_BYTES` (one message at least), so a session of any length is read in
bounded answers; each text is cut at `clip` characters (0: whole), its whole length said, so
a long one is fetched whole on demand (`after=INDEX&limit=1&clip=0`). Each tool call names
the sub-agent thread it started, whose transcript is another page of this route
(`?thread=`). Pure: it reads a fold, never a store.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable

from tether.fold import Folder
from tether.messages import (
    Image,
    JSONObject,
    JSONValue,
    Message,
    Part,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
)
from tether.state import ThreadNode

LIMIT = 50  # messages of a page unless asked
MAX_LIMIT = 200
CLIP = 2_000  # characters of a text kept unless asked
PAGE_BYTES = 1_000_000  # a page stops after the message that passes this (JSON characters)


def cut(text: str, clip: int) -> JSONObject:
    """A text as a page carries it: cut at `clip` characters (0: whole), with its length."""
    kept = text if clip == 0 or len(text) <= clip else text[:clip]
    return {"text": kept, "chars": len(text), "cut": len(kept) < len(text)}


def part_json(part: Part, clip: int, threads: dict[str, str]) -> JSONObject:
    """What a page says of one part. A call's arguments are pretty JSON text, cut like any
    text; a reasoning block keeps its text (a summary, when the provider gives one) and
    leaves its opaque payload out; an image is named, never sent."""
    if isinstance(part, Text):
        return {"type": "text", **cut(part.text, clip)}
    if isinstance(part, Thinking):
        return {"type": "thinking", "provider": part.provider, **cut(part.text, clip)}
    if isinstance(part, ToolCall):
        arguments = part.raw_arguments
        if arguments is None:
            arguments = json.dumps(part.arguments, indent=2, ensure_ascii=False)
        out: JSONObject = {"type": "tool_call", "id": part.id, "name": part.name}
        out.update(cut(arguments, clip))
        if part.id in threads:
            out["thread"] = threads[part.id]
        return out
    if isinstance(part, ToolResult):
        out = {"type": "tool_result", "call_id": part.call_id, "is_error": part.is_error}
        out.update(cut(part.content, clip))
        if part.images:
            out["images"] = [i.media_type or "image" for i in part.images]
        return out
    assert isinstance(part, Image)
    return {"type": "image", "media_type": part.media_type or "", "url": part.url is not None}


def started_threads(
    messages: list[Message], after: int, end: int, children: Iterable[ThreadNode]
) -> list[dict[str, str]]:
    """For each message from `after` to `end`, the sub-agent threads its calls started, by
    call id. A model may give the same call id in two answers: the n-th call of an id
    started the n-th thread that names it, so the calls before `after` are counted (only
    then)."""
    by_call: dict[str, list[str]] = {}
    for node in children:
        if node.parent_call_id is not None:
            by_call.setdefault(node.parent_call_id, []).append(node.thread)
    seen: dict[str, int] = {}

    def count(message: Message) -> dict[str, str]:
        found: dict[str, str] = {}
        for call in message.tool_calls:
            threads = by_call.get(call.id)
            if threads is None:
                continue
            n = seen.get(call.id, 0)
            seen[call.id] = n + 1
            if n < len(threads):
                found[call.id] = threads[n]
        return found

    if any(len(threads) > 1 for threads in by_call.values()):
        for message in itertools.islice(messages, after):
            count(message)
    return [count(messages[i]) if by_call else {} for i in range(after, end)]


def page(folder: Folder, after: int, limit: int, clip: int) -> JSONObject:
    """A page of `folder`'s transcript (see the module's docstring)."""
    messages = folder.messages
    stop = min(len(messages), after + limit)
    children = [n for n in folder.thread_nodes.values() if n.parent == folder.thread]
    threads = started_threads(messages, after, stop, children)
    out: list[JSONValue] = []
    size = 0
    for offset, index in enumerate(range(after, stop)):
        message = messages[index]
        item: JSONObject = {
            "index": index,
            "seq": folder.message_seqs[index],
            "role": message.role,
            "parts": [part_json(p, clip, threads[offset]) for p in message.parts],
        }
        out.append(item)
        size += len(json.dumps(item, ensure_ascii=False))
        if size > PAGE_BYTES:
            break
    end = after + len(out)
    return {
        "session_id": folder.session_id,
        "thread": folder.thread,
        "agent": folder.agent,
        "model": folder.model,
        "system": None if folder.system is None else cut(folder.system, clip),
        "total": len(folder.messages),
        "compactions": folder.compactions,
        "last_seq": folder.last_seq,
        "messages": out,
        "next": end if end < len(folder.messages) else None,
        "threads": [
            {
                "thread": n.thread,
                "agent": n.agent,
                "parent_call_id": n.parent_call_id,
                "status": n.status,
                "stop_reason": n.stop_reason,
                "handoff": n.handoff,
            }
            for n in children
        ],
    }
