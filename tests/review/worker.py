"""A review worker process for the crash tests: starts or resumes one scripted review on a
SQLite file, and SIGKILLs itself right after committing the event with seq `CRASH_AT_SEQ`.

    python worker.py DB start            # a new review
    python worker.py DB resume SESSION   # go on with it, waiting out a dead lease

It prints JSON lines as `tests/crash/worker.py` does: {"prefix", "pid"} first, {"committed"}
for each event it appends, then {"result"}. The participants record their model calls in
`$REVIEW_CALLS` (see `review.participants`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from crash import kit
from review import participants as p
from tether import Event
from tether.review import resume_review, review
from tether.session.log import _ID_PREFIX
from tether.store import SQLiteStore

OWN = f"ev_{_ID_PREFIX}_"


def say(**fact: Any) -> None:
    print(json.dumps(fact), flush=True)


def on_event(event: Event) -> None:
    if not event.id.startswith(OWN):
        return  # folded in from another process
    say(committed=event.id, seq=event.seq, type=event.type, thread=event.thread)
    if event.seq == int(os.environ.get("CRASH_AT_SEQ", "0")):
        kit.die()


async def main(db: str, command: str, session_id: str | None) -> int:
    store = SQLiteStore(db)
    proposer = p.agent(p.shortening, "writer")
    critics = [p.agent(p.stubborn, "stubborn"), p.agent(p.wordy, "wordy")]
    ttl = float(os.environ.get("WORKER_TTL", "0.5"))
    say(prefix=_ID_PREFIX, pid=os.getpid())
    try:
        if command == "start":
            result = await review(
                p.ARTIFACT,
                proposer=proposer,
                critics=critics,
                stable_rounds=1,
                store=store,
                on_event=on_event,
                lease_ttl=ttl,
            )
        else:
            assert session_id is not None
            result = await resume_review(
                session_id,
                proposer=proposer,
                critics=critics,
                store=store,
                on_event=on_event,
                lease_wait=30,
                lease_ttl=ttl,
            )
    finally:
        await store.close()
    say(result=result.to_json())
    return 0


if __name__ == "__main__":
    db_path, cmd = sys.argv[1:3]
    sys.exit(asyncio.run(main(db_path, cmd, sys.argv[3] if len(sys.argv) > 3 else None)))
