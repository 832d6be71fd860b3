"""The SQLite file under a real `tether serve`, deleted, replaced or damaged: nothing is
acknowledged that is not in the file the path names, a replacement keeps its own sessions, and
a damaged file is unready, serves its sound sessions and quotes nothing stored."""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import httpx

from server.support import ACME, GLOBEX, TETHER, Server, serve
from tether.testing.runtime_fixtures import MODEL

WORKERS = ("--workers", "1")
TERMINAL = ("idle", "ended", "error", "canceled")
TOKENS_BY = {"acme": ACME, "globex": GLOBEX}


def _start(client: httpx.Client, task: str) -> httpx.Response:
    return client.post("/v1/sessions", json={"model": MODEL, "task": task})


def _settled(client: httpx.Client, session_id: str) -> dict[str, object]:
    deadline = time.monotonic() + 30
    while True:
        polled = client.get(f"/v1/sessions/{session_id}")
        assert polled.status_code == 200, polled.text
        status: dict[str, object] = polled.json()
        if status["state"] in TERMINAL:
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


def _settled_sessions(client: httpx.Client, tasks: list[str]) -> dict[str, dict[str, object]]:
    """Each task started and run to its end, one after another: what the server acknowledged."""
    out = {}
    for task in tasks:
        started = _start(client, task)
        assert started.status_code == 201, started.text
        sid = started.json()["session_id"]
        out[sid] = _settled(client, sid)
    return out


def _refuses_writes(client: httpx.Client, path: Path) -> None:
    """Every later start is 503, never 201, and so is `/readyz`; neither names the file (what
    went wrong is the server log's to say, not a tenant's or an unauthenticated prober's)."""
    for n in range(5):
        refused = _start(client, f"echo after {n}")
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "store_unavailable"
        assert str(path) not in refused.text, refused.text
    ready = client.get("/readyz")
    assert ready.status_code == 503, ready.text
    assert ready.json()["error"]["code"] == "store_unavailable"
    assert str(path) not in ready.text, ready.text


def _still_there(server: Server, acknowledged: dict[str, dict[str, object]]) -> None:
    with httpx.Client(base_url=server.url) as client:
        assert client.get("/readyz").status_code == 200
        for sid, status in acknowledged.items():
            polled = client.get(f"/v1/sessions/{sid}")
            assert polled.status_code == 200, polled.text
            now = polled.json()
            assert (now["state"], now["last_seq"]) == (status["state"], status["last_seq"])


def test_a_deleted_file_refuses_every_later_write_and_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    path = tmp_path / "serve.db"
    with serve(tmp_path, *WORKERS, auth=False) as server, httpx.Client(base_url=server.url) as c:
        acknowledged = _settled_sessions(c, [f"echo kept {n}" for n in range(3)])
        os.link(path, tmp_path / "kept.db")  # the original file, as a backup would keep it
        for name in ("serve.db", "serve.db-wal", "serve.db-shm"):
            (tmp_path / name).unlink()
        _refuses_writes(c, path)
    os.link(tmp_path / "kept.db", path)  # back at its path: a restart finds everything
    with serve(tmp_path, *WORKERS, auth=False) as server:
        _still_there(server, acknowledged)


def test_a_replaced_file_refuses_every_later_write_and_keeps_its_own_sessions(
    tmp_path: Path,
) -> None:
    path, other = tmp_path / "serve.db", tmp_path / "other" / "other.db"
    other.parent.mkdir()
    with (
        serve(other.parent, *WORKERS, store=f"sqlite:///{other}", auth=False) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        theirs = _settled_sessions(client, ["echo the replacement's own"])
    with serve(tmp_path, *WORKERS, auth=False) as server, httpx.Client(base_url=server.url) as c:
        ours = _settled_sessions(c, [f"echo old {n}" for n in range(3)])  # in the WAL still
        os.replace(other, path)  # `mv other.db serve.db` under the running server
        _refuses_writes(c, path)
    with serve(tmp_path, *WORKERS, auth=False) as server:
        _still_there(server, theirs)
        with httpx.Client(base_url=server.url) as client:
            listed = client.get("/v1/sessions").json()["sessions"]
            assert [s["session_id"] for s in listed] == list(theirs)
            for sid in ours:  # the old file's WAL was never read into the replacement
                assert client.get(f"/v1/sessions/{sid}").status_code == 404


# -- a damaged file --------------------------------------------------------------------------

MARK = "quetzal-7781"  # stored text that no answer may quote
# A task whose mark lies past what the catalog keeps of a task (its first 2,000 characters)
# and of an output (300): the pages torn are the log's, never the catalog's, so the lists,
# which read only the catalog, still list the session from its row.
TORN = "echo " + "filler " * 400 + f"{MARK} " * 2000


def _damage(path: Path, mark: bytes) -> int:
    """Random bytes over every page of the file that holds `mark`; how many pages."""
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    pages = {at // page for at in _find_all(data, mark)}
    assert pages and 0 not in pages, pages
    noise = random.Random(7)
    for number in pages:
        data[number * page : (number + 1) * page] = noise.randbytes(page)
    path.write_bytes(bytes(data))
    return len(pages)


def _find_all(data: bytearray, mark: bytes) -> list[int]:
    found, at = [], data.find(mark)
    while at >= 0:
        found.append(at)
        at = data.find(mark, at + 1)
    return found


def test_a_damaged_file_is_unready_serves_its_sound_sessions_and_quotes_nothing_stored(
    tmp_path: Path,
) -> None:
    path = tmp_path / "serve.db"
    spacer = "echo " + "spacer " * 1500  # rows of their own between the sound and the damaged
    with serve(tmp_path, *WORKERS, auth=False) as server, httpx.Client(base_url=server.url) as c:
        sound = _settled_sessions(c, ["echo sound b", "echo sound c"])
        _settled_sessions(c, [spacer])
        damaged = list(_settled_sessions(c, [TORN]))
        _settled_sessions(c, [spacer])
        sound |= _settled_sessions(c, ["echo sound d"])
    assert not (tmp_path / "serve.db-wal").exists()  # a clean stop checkpointed everything
    assert _damage(path, MARK.encode()) >= 2
    bodies: list[str] = []
    with serve(tmp_path, *WORKERS, auth=False) as server, httpx.Client(base_url=server.url) as c:

        def get(url: str) -> httpx.Response:
            response = c.get(url)
            bodies.append(response.text)
            return response

        ready = get("/readyz")
        assert ready.status_code == 503, ready.text
        assert ready.json()["error"]["code"] == "store_unavailable"
        for sid, status in sound.items():
            polled = get(f"/v1/sessions/{sid}")
            assert polled.status_code == 200, polled.text
            assert polled.json()["last_seq"] == status["last_seq"]
            assert get(f"/v1/sessions/{sid}/events").status_code == 200
        listed = get("/v1/sessions?limit=500")
        assert listed.status_code == 200, listed.text
        # Every session is listed from its catalog row, the damaged one too: nothing that
        # lists reads a log. Polling the damaged one says it cannot be read.
        assert set(sound) | {damaged[0]} <= {s["session_id"] for s in listed.json()["sessions"]}
        for url in (f"/v1/sessions/{damaged[0]}", f"/v1/sessions/{damaged[0]}/events"):
            refused = get(url)
            assert refused.status_code == 500, refused.text
            error = refused.json()["error"]
            assert error["code"] == "session_unreadable" and damaged[0] in error["message"]
        assert get("/readyz").status_code == 503
    assert all(MARK not in body for body in bodies)
    # The command line alike: `sessions ls` lists every session from the catalog; `tether run`
    # refuses the file before it writes anything.
    store = f"sqlite:///{path}"
    listed_cli = subprocess.run(
        [*TETHER, "sessions", "ls", "--store", store, "--limit", "500"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed_cli.returncode == 0, listed_cli.stderr
    lines = listed_cli.stdout.splitlines()
    assert lines[0].startswith("SESSION ")
    assert all(any(line.startswith(sid) for line in lines) for sid in [*sound, *damaged]), lines
    assert MARK not in listed_cli.stdout + listed_cli.stderr
    ran = subprocess.run(
        [*TETHER, "run", "echo more", "--model", MODEL, "--store", store, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode != 0 and ran.stdout == "", (ran.stdout, ran.stderr)
    assert "damaged" in ran.stderr and len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    assert MARK not in ran.stderr


def test_a_session_whose_first_events_are_torn_is_listed_to_its_own_tenant_only(
    tmp_path: Path,
) -> None:
    """With tenants: a session whose first events are torn is still its tenant's in the
    catalog, so its tenant's list shows it (from its row) and no other tenant's does; polled,
    it cannot be read; each tenant's sound sessions are listed."""
    path = tmp_path / "serve.db"
    spacer = "echo " + "spacer " * 1500
    tenants = {name: {"Authorization": f"Bearer {token}"} for name, token in TOKENS_BY.items()}
    with serve(tmp_path, *WORKERS) as server:
        with httpx.Client(base_url=server.url, headers=tenants["globex"]) as globex:
            theirs = _settled_sessions(globex, ["echo globex's own"])
        with httpx.Client(base_url=server.url, headers=tenants["acme"]) as acme:
            _settled_sessions(acme, [spacer])
            torn = list(_settled_sessions(acme, [TORN]))
            _settled_sessions(acme, [spacer])
            mine = _settled_sessions(acme, ["echo acme's own"])
    _damage(path, MARK.encode())
    with serve(tmp_path, *WORKERS) as server:
        for name, own in (("acme", mine), ("globex", theirs)):
            with httpx.Client(base_url=server.url, headers=tenants[name]) as client:
                listed = client.get("/v1/sessions", params={"limit": 500})
                assert listed.status_code == 200, listed.text
                body = listed.json()
                listed_ids = {s["session_id"] for s in body["sessions"]}
                assert set(own) <= listed_ids and MARK not in listed.text
                assert (torn[0] in listed_ids) == (name == "acme"), (name, listed_ids)
                polled = client.get(f"/v1/sessions/{torn[0]}")
                assert polled.status_code in (404, 500) and MARK not in polled.text
                if name == "acme":
                    assert polled.json()["error"]["code"] == "session_unreadable", polled.text
