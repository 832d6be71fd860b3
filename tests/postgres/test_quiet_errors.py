"""An id no session can have, on a real `tether serve` over PostgreSQL (which refuses a NUL
in text): the 404 an unknown id gets, naming nothing of the database (its user, host, port
or name), as on SQLite (`tests/server/test_quiet_errors.py`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from server.support import serve
from server.test_quiet_errors import check_invalid_ids


async def test_an_invalid_session_id_is_a_404_that_names_nothing_of_the_database(
    pg_url: str, tmp_path: Path
) -> None:
    parts = urlsplit(pg_url)
    words = ("postgres", "psycopg", "store", "nul", parts.hostname or "", parts.path.strip("/"))
    words += (parts.username or "", f":{parts.port}") if parts.username else (f":{parts.port}",)
    with serve(tmp_path, "--workers", "0", store=pg_url) as server:
        await check_invalid_ids(server, tuple(w.lower() for w in words if w))
