"""Large tool outputs kept whole as content-addressed blobs, read back from Python and with
`tether sessions blob ID HASH` (a real subprocess against a real SQLite file)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tether import Agent
from tether.context import blob_refs, read_blob
from tether.errors import SessionNotFound, UsageError
from tether.events import ToolFinished
from tether.store.base import Store
from tether.store.memory import MemoryStore
from tether.store.sqlite import SQLiteStore
from tether.testing import ScriptedModel, call
from tether.tools.base import tool

BIG = "".join(f"line {i}: é€ data\n" for i in range(20_000))  # ~440 KB, not ASCII


@tool(effect="read", output_cap=1_000)
def dump() -> str:
    """Dump everything."""
    return BIG


async def _session_with_a_big_output(store: Store) -> tuple[str, str]:
    agent = Agent(ScriptedModel([call("dump"), "seen"]), tools=[dump], store=store)
    result = await agent.run("dump it")
    (finished,) = [
        e.payload
        for e in await store.read(result.session_id)
        if isinstance(e.payload, ToolFinished)
    ]
    (digest,) = blob_refs(finished.content)
    return result.session_id, digest


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_blobs_are_stored_once_under_their_sha256(kind: str, tmp_path: Path) -> None:
    store: Store = MemoryStore() if kind == "memory" else SQLiteStore(str(tmp_path / "b.db"))
    data = b"\x00\xffsome bytes"
    digest = await store.put_blob(data)
    assert digest == hashlib.sha256(data).hexdigest()
    assert await store.put_blob(data) == digest
    assert await store.get_blob(digest) == data
    assert await store.get_blob("0" * 64) is None
    await store.close()


async def test_a_cut_output_is_readable_whole_from_python_through_its_session(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(str(tmp_path / "t.db"))
    session_id, digest = await _session_with_a_big_output(store)
    assert await read_blob(store, session_id, digest) == BIG.encode()
    assert await read_blob(store, session_id, f"sha256:{digest}") == BIG.encode()
    with pytest.raises(UsageError, match="names no blob"):
        await read_blob(store, session_id, hashlib.sha256(b"other").hexdigest())
    with pytest.raises(SessionNotFound):
        await read_blob(store, "ses_missing", digest)
    with pytest.raises(UsageError, match="not a blob hash"):
        await read_blob(store, session_id, "abc")
    await store.close()


def _tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    return subprocess.run(
        [sys.executable, "-m", "tether", *args], cwd=cwd, env=env, capture_output=True, timeout=120
    )


async def test_the_cli_prints_a_blob_of_a_session_byte_for_byte(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = SQLiteStore(str(db))
    session_id, digest = await _session_with_a_big_output(store)
    await store.close()
    store_arg = f"sqlite:///{db}"

    out = _tether("sessions", "blob", session_id, digest, "--store", store_arg, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == BIG.encode()

    as_json = _tether(
        "sessions", "blob", session_id, digest, "--store", store_arg, "--json", cwd=tmp_path
    )
    assert json.loads(as_json.stdout) == {
        "session_id": session_id,
        "size": len(BIG.encode()),
        "content": BIG,
    }

    other = hashlib.sha256(b"x").hexdigest()
    refused = _tether("sessions", "blob", session_id, other, "--store", store_arg, cwd=tmp_path)
    assert refused.returncode == 2 and b"names no blob" in refused.stderr
    bad = _tether("sessions", "blob", session_id, "nothex", "--store", store_arg, cwd=tmp_path)
    assert bad.returncode == 2 and b"not a blob hash" in bad.stderr
