"""Anthropic's prompt cache as its documentation describes it, for a fake to bill with: the
request is a sequence of blocks (tools, then system, then each message's content blocks);
a block marked `cache_control` writes the prefix that ends with it to the cache; a later
request whose prefix up to one of its breakpoints starts with a written prefix reads that
much from the cache (looking back at most 20 blocks from the breakpoint). Prefixes shorter
than the minimum (1,024 tokens) are never cached. Tokens are counted as JSON chars / 4."""

from __future__ import annotations

import hashlib
import json
from typing import Any

MIN_TOKENS = 1_024
LOOKBACK = 20


def _blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = list(body.get("tools", []))
    system = body.get("system")
    if isinstance(system, str):
        out.append({"type": "text", "text": system})
    elif isinstance(system, list):
        out.extend(system)
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            out.append({"type": "text", "text": content, "role": message["role"]})
        else:
            out.extend({**b, "role": message["role"]} for b in content)
    return out


def _tokens(block: dict[str, Any]) -> int:
    plain = {k: v for k, v in block.items() if k != "cache_control"}
    return max(1, len(json.dumps(plain, sort_keys=True)) // 4)


class PromptCache:
    """`usage(body)` bills one request and remembers what it wrote."""

    def __init__(self) -> None:
        self.written: set[str] = set()

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        blocks = _blocks(body)
        hashes: list[str] = []
        sizes: list[int] = []
        digest = hashlib.sha256(body["model"].encode())
        running = 0
        for block in blocks:
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            digest.update(json.dumps(plain, sort_keys=True).encode())
            hashes.append(digest.copy().hexdigest())
            running += _tokens(block)
            sizes.append(running)
        total = sizes[-1] if sizes else 0
        marks = [i for i, b in enumerate(blocks) if "cache_control" in b]
        read = 0
        for mark in marks:
            for i in range(mark, max(-1, mark - LOOKBACK), -1):
                if hashes[i] in self.written:
                    read = max(read, sizes[i])
                    break
        write = 0
        for mark in marks:
            if sizes[mark] >= MIN_TOKENS and hashes[mark] not in self.written:
                self.written.add(hashes[mark])
                write = max(write, sizes[mark] - read)
        return {
            "input_tokens": total - read - write,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
        }
