"""Large tool outputs kept whole: the transcript holds the first `output_cap` characters and a
marker naming the blob (`blob sha256:HEX`); the store holds the full text under its sha256.
Reading one back goes through its session, which must name it.

Owns blob hashing, the references in a result's text and reading a session's blob. The
stores own `put_blob`/`get_blob`; cutting the output is `tools.run`'s.
"""

from __future__ import annotations

import hashlib
import re

from tether.errors import SessionNotFound, UsageError
from tether.events import ToolFinished
from tether.store.base import Store

BLOB_REF = re.compile(r"blob sha256:([0-9a-f]{64})")
_HASH = re.compile(r"(?:sha256:)?([0-9a-f]{64})")


def encode_output(text: str) -> bytes:
    # surrogatepass: a tool may return any str, and its blob must still be storable.
    return text.encode("utf-8", "surrogatepass")


def blob_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_refs(text: str) -> list[str]:
    """The blob hashes a result's text names."""
    return BLOB_REF.findall(text)


async def keep_output(store: Store, full_output: str) -> str:
    """Store a cut output whole; its hash is the one the marker in the transcript names."""
    return await store.put_blob(encode_output(full_output))


def parse_hash(text: str) -> str:
    match = _HASH.fullmatch(text.strip().lower())
    if match is None:
        raise UsageError(f"{text!r} is not a blob hash (64 hex digits, optionally sha256:...)")
    return match.group(1)


async def read_blob(store: Store, session_id: str, digest: str) -> bytes:
    """The blob `digest` as session `session_id` refers to it. A hash the session's results
    never named is refused, even when another session stored it."""
    digest = parse_hash(digest)
    events = await store.read(session_id)
    if not events:
        raise SessionNotFound(session_id)
    named = any(
        isinstance(e.payload, ToolFinished) and digest in blob_refs(e.payload.content)
        for e in events
    )
    if not named:
        raise UsageError(f"session {session_id} names no blob {digest}")
    data = await store.get_blob(digest)
    if data is None:
        raise UsageError(f"blob {digest} of session {session_id} is not in store {store.url}")
    return data
