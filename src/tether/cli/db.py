"""`tether db migrate|status`: bring a store's schema up to date, or say where it stands;
`tether db rotate-secrets`: seal every stored secret with the current key;
`tether db rebuild-catalog`: fold every session's log again and write its catalog row
(`store.catalog.rebuild`, the same on every backend), printing progress.

A thin adapter over `tether.store.pg_schema`. Migrating is idempotent and safe while workers
run: each step takes one advisory lock and commits with its bookkeeping row. SQLite stores
create their schema when opened, so for them this only opens the file (`status`, only one
that is already a tether store).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from tether.cli.common import existing_store, store_from
from tether.cli.secrets import add_secret_flags, keyring_from
from tether.store import catalog
from tether.store.base import redact_url
from tether.store.credentials import open_rows, reseal
from tether.store.open import DEFAULT_STORE_URL
from tether.store.sealing import Keyring, key_id


def add_db_commands(sub: Any, store_help: str) -> None:
    db = sub.add_parser("db", help="the store's schema")
    dsub = db.add_subparsers(dest="db_command", required=True)
    for name, text in (
        ("migrate", "create or update the schema (idempotent)"),
        ("status", "the schema version the store is at"),
        ("rotate-secrets", "seal every stored secret with TETHER_SECRET_KEY (old keys in _OLD)"),
        ("rebuild-catalog", "write every session's catalog row again from its log"),
    ):
        p = dsub.add_parser(name, help=text)
        p.add_argument("--store", default=None, help=store_help)
        p.add_argument("--json", action="store_true")
    add_secret_flags(dsub.choices["rotate-secrets"])


async def cmd_db(args: argparse.Namespace) -> int:

    url = args.store or os.environ.get("TETHER_STORE") or DEFAULT_STORE_URL
    if args.db_command == "rotate-secrets":
        report = await _rotate_secrets(url, keyring_from(args))
    elif args.db_command == "rebuild-catalog":
        report = await _rebuild_catalog(url)
    elif url.startswith(("postgresql://", "postgres://")):
        report = await _postgres(url, migrate=args.db_command == "migrate")
    else:  # opening a SQLite file creates or checks its schema; status makes no new one
        store = store_from(url) if args.db_command == "migrate" else existing_store(url)
        await store.close()
        report = {"store": store.url, "applied": [], "detail": "schema checked when opened"}
    print(json.dumps(report) if args.json else _line(report))
    return 0


async def _postgres(url: str, *, migrate: bool) -> dict[str, Any]:
    from tether.store import pg_schema
    from tether.store.postgres import PostgresStore

    store = PostgresStore(url, pool_size=1, auto_migrate=False)
    try:
        async with store.pool.connection() as conn:
            applied = await pg_schema.migrate(conn) if migrate else []
            version = await pg_schema.schema_version(conn)
    finally:
        await store.close()
    return {
        "store": redact_url(url),
        "version": version,
        "latest": pg_schema.SCHEMA_VERSION,
        "applied": [{"version": m.version, "description": m.description} for m in applied],
    }


async def _rotate_secrets(url: str, keyring: Keyring) -> dict[str, Any]:
    rows = open_rows(url)
    changed = await reseal(rows, keyring)
    assert keyring.current is not None  # reseal refuses without it
    detail = f"{changed} secrets sealed again with key id {key_id(keyring.current)}"
    return {"store": rows.where, "resealed": changed, "detail": detail}


async def _rebuild_catalog(url: str) -> dict[str, Any]:
    store = existing_store(url)

    def progress(done: int, total: int) -> None:
        # On stderr: stdout keeps the one report line (or its JSON).
        print(f"rebuilt {done} of {total} sessions", file=sys.stderr, flush=True)

    try:
        seen = await catalog.rebuild(store, progress)
    finally:
        await store.close()
    detail = (
        f"catalog rebuilt from the logs of {seen} sessions (a row an append moved "
        "meanwhile was left as that append wrote it)"
    )
    return {"store": redact_url(store.url), "sessions": seen, "detail": detail}


def _line(report: dict[str, Any]) -> str:
    if "version" not in report:
        return f"{report['store']}: {report['detail']}"
    done = ", ".join(f"{a['version']} ({a['description']})" for a in report["applied"])
    where = f"{report['store']}: schema version {report['version']} of {report['latest']}"
    if done:
        return f"{where}; applied {done}"
    if report["version"] < report["latest"]:
        return f"{where}; run `tether db migrate`"
    return f"{where}; up to date"
