"""A process that opens a SQLite file owing a catalog backfill and SIGKILLs itself part way,
for the catalog's crash tests.

    python backfill_worker.py DB row N     # dies writing the N-th row (inside a chunk)
    python backfill_worker.py DB chunk N   # dies once the N-th chunk has committed

Chunks are `CHUNK` sessions. It prints "opened" and exits 0 if it was not killed.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from crash import kit
from tether.store import SQLiteStore, sqlite_backfill, sqlite_catalog

CHUNK = 10


class _DieAtChunk(logging.Handler):
    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.chunks = 0

    def emit(self, record: logging.LogRecord) -> None:
        # Logged after each chunk's COMMIT.
        if "catalog backfill," in record.getMessage():
            self.chunks += 1
            if self.chunks == self.at:
                kit.die()


def main(db: str, mode: str, at: int) -> int:
    sqlite_backfill.BACKFILL_CHUNK = CHUNK
    if mode == "row":
        rewrite = sqlite_catalog.rewrite
        written = 0

        def dying(*args: Any, **kwargs: Any) -> None:
            nonlocal written
            written += 1
            if written == at:
                kit.die()  # inside the chunk's transaction: none of it may land
            rewrite(*args, **kwargs)

        sqlite_catalog.rewrite = dying  # type: ignore[assignment]
    else:
        logger = logging.getLogger("tether.store")
        logger.setLevel(logging.INFO)
        logger.addHandler(_DieAtChunk(at))
    SQLiteStore(db)
    print("opened", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
