"""The credentials table (`store/credentials.py`) on a real SQLite file and in memory (the
same checks run on PostgreSQL in `tests/postgres/test_credentials.py`): records kept per
tenant, sealed at rest (the file holds no secret in plain text, a sealed value moved to
another tenant's row does not open), a clear refusal without a key and a clear error with the
wrong one, key rotation, the migration of the unscoped table of before, and the turn to
refresh taken by one holder at a time."""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tether.errors import ConfigError
from tether.store import open_store
from tether.store.credentials import (
    DEFAULT_TENANT,
    Credentials,
    open_credentials,
    open_rows,
    reseal,
)
from tether.store.sealing import (
    Keyring,
    PlaintextSecret,
    SecretKeyMismatch,
    SecretKeyMissing,
    key_id,
)

SERVER = "mcp-oauth:https://mcp.example.com/mcp#client=tether:tokens"


def new_key() -> bytes:
    return secrets.token_bytes(32)


def as_text(key: bytes) -> str:
    return base64.b64encode(key).decode()


def secret() -> str:
    return f"tok-{secrets.token_hex(16)}"


async def check_two_tenants_stay_apart(url: str) -> None:
    creds = open_credentials(url, Keyring(new_key()))
    acme, globex = creds.for_tenant("acme"), creds.for_tenant("globex")
    await acme.put(SERVER, "acme's tokens")
    assert await globex.get(SERVER) is None  # one server URL, another tenant: nothing
    assert await creds.get(SERVER) is None  # nor the default tenant (the CLI's)
    await globex.put(SERVER, "globex's tokens")
    await creds.put(SERVER, "the CLI's tokens")
    assert await acme.get(SERVER) == "acme's tokens"
    assert await globex.get(SERVER) == "globex's tokens"
    assert await creds.get(SERVER) == "the CLI's tokens"
    await acme.delete(SERVER)
    assert await acme.get(SERVER) is None
    assert await globex.get(SERVER) == "globex's tokens"


async def check_a_wrong_key_is_a_clear_error(url: str) -> None:
    right, wrong = new_key(), new_key()
    await open_credentials(url, Keyring(right)).put(SERVER, secret())
    with pytest.raises(SecretKeyMismatch) as caught:
        await open_credentials(url, Keyring(wrong)).get(SERVER)
    text = str(caught.value)
    assert text.startswith("the secret key does not match: secrets in ")
    assert f"sealed with key id {key_id(right)}" in text and key_id(wrong) in text
    assert "\n" not in text


async def check_no_key_refuses_to_store_and_stores_nothing(url: str) -> None:
    creds = open_credentials(url, Keyring())
    with pytest.raises(SecretKeyMissing, match=r"^refusing to store OAuth tokens unsealed in "):
        creds.check_can_store()
    with pytest.raises(SecretKeyMissing, match="set TETHER_SECRET_KEY"):
        await creds.put(SERVER, secret())
    assert await creds.get(SERVER) is None
    plain = open_credentials(url, Keyring(plaintext_allowed=True))
    await plain.put(SERVER, "plain by choice")
    assert await plain.get(SERVER) == "plain by choice"


async def check_a_sealed_value_opens_only_in_its_own_row(url: str) -> None:
    """What an attacker with the database but not the key could try: copy another tenant's
    sealed tokens into its own row."""
    creds = open_credentials(url, Keyring(new_key()))
    await creds.for_tenant("acme").put(SERVER, "acme's tokens")
    await creds.for_tenant("globex").put(SERVER, "globex's tokens")
    rows = creds.rows
    acme_row = await rows.get("acme", SERVER)
    globex_row = await rows.get("globex", SERVER)
    assert acme_row is not None and globex_row is not None
    assert await rows.replace("globex", SERVER, globex_row.value, acme_row.value)
    with pytest.raises(SecretKeyMismatch, match="copied from another row or tenant"):
        await creds.for_tenant("globex").get(SERVER)
    assert await rows.replace("globex", SERVER, acme_row.value, '{"token": "planted"}')
    with pytest.raises(PlaintextSecret, match="is stored in plain text"):
        await creds.for_tenant("globex").get(SERVER)  # nor plain text planted without the key


async def check_rotation_reseals_with_the_new_key(url: str) -> None:
    old, new = new_key(), new_key()
    before = open_credentials(url, Keyring(old))
    for tenant in ("acme", "globex", DEFAULT_TENANT):
        await before.for_tenant(tenant).put(SERVER, f"{tenant} tokens")
    rotating = Keyring(new, old=(old,))
    assert await open_credentials(url, rotating, tenant="acme").get(SERVER) == "acme tokens"
    row = await before.rows.get("acme", SERVER)  # read once: sealed again with the new key
    assert row is not None and f":{key_id(new)}:" in row.value
    assert await reseal(before.rows, rotating) == 2  # the other two
    assert await reseal(before.rows, rotating) == 0
    after = open_credentials(url, Keyring(new))  # the old key retired
    for tenant in ("acme", "globex", DEFAULT_TENANT):
        assert await after.for_tenant(tenant).get(SERVER) == f"{tenant} tokens"
    with pytest.raises(SecretKeyMismatch):
        await open_credentials(url, Keyring(old)).get(SERVER)


async def check_one_holder_has_the_turn_to_refresh(url: str) -> None:
    creds = open_credentials(url, Keyring(new_key()), tenant="acme")
    version = await creds.put(SERVER, "v1")
    assert await creds.claim(SERVER, version, "first", 30)
    assert not await creds.claim(SERVER, version, "second", 30)  # its turn is running
    kept = await creds.read(SERVER)
    assert kept is not None and kept.claimed and kept.version == version
    await creds.release(SERVER, "second")  # not its turn: nothing changes
    assert not await creds.claim(SERVER, version, "second", 30)
    await creds.release(SERVER, "first")
    assert await creds.claim(SERVER, version, "second", 30)
    newer = await creds.put(SERVER, "v2")  # a write ends the turn
    assert newer == version + 1
    assert not await creds.claim(SERVER, version, "third", 30)  # the version moved on
    assert await creds.claim(SERVER, newer, "third", 0.0)  # expired at once
    assert await creds.claim(SERVER, newer, "fourth", 30)


CHECKS = [
    check_two_tenants_stay_apart,
    check_a_wrong_key_is_a_clear_error,
    check_no_key_refuses_to_store_and_stores_nothing,
    check_a_sealed_value_opens_only_in_its_own_row,
    check_rotation_reseals_with_the_new_key,
    check_one_holder_has_the_turn_to_refresh,
]
AT_REST = CHECKS[1:5]  # sealing: not for memory, where nothing is at rest


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
async def test_on_sqlite(check: object, tmp_path: Path) -> None:
    await check(f"sqlite:///{tmp_path / 'tether.db'}")  # type: ignore[operator]


@pytest.mark.parametrize(
    "check", [c for c in CHECKS if c not in AT_REST], ids=lambda c: c.__name__[6:]
)
async def test_in_memory(check: object) -> None:
    await check("memory:")  # type: ignore[operator]


async def test_the_sqlite_file_and_its_wal_hold_no_secret_in_plain_text(tmp_path: Path) -> None:
    db = tmp_path / "tether.db"
    store = open_store(f"sqlite:///{db}")  # open, as under `tether serve`: the WAL stays
    try:
        creds = open_credentials(f"sqlite:///{db}", Keyring(new_key()))
        token = secret()
        await creds.for_tenant("acme").put(SERVER, f'{{"access_token": "{token}"}}')
        assert await creds.for_tenant("acme").get(SERVER) == f'{{"access_token": "{token}"}}'
        wal = tmp_path / "tether.db-wal"
        assert b"acme" in wal.read_bytes()  # the row is in the WAL (its tenant is no secret)
        assert token.encode() not in wal.read_bytes()
        assert token.encode() not in db.read_bytes()
    finally:
        await store.close()
    assert token.encode() not in db.read_bytes()  # nor once the WAL is checkpointed into it


async def test_the_unscoped_table_of_before_becomes_the_default_tenants(tmp_path: Path) -> None:
    db = tmp_path / "tether.db"
    with sqlite3.connect(db) as old:
        old.execute(
            "CREATE TABLE tether_credentials "
            "(key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL)"
        )
        old.execute("INSERT INTO tether_credentials VALUES (?, '{\"old\": 1}', 0)", (SERVER,))
    old.close()
    await check_the_unscoped_rows_of_before(f"sqlite:///{db}")


async def check_the_unscoped_rows_of_before(url: str) -> None:
    """After a store of before got `tether_credentials (key, value, updated_at)` and a row."""
    key = new_key()
    creds = open_credentials(url, Keyring(key))
    with pytest.raises(PlaintextSecret, match="seal it with `tether db rotate-secrets`"):
        await creds.get(SERVER)  # a plain row is not taken where plain text is not allowed
    allowed = open_credentials(url, Keyring(plaintext_allowed=True))
    assert await allowed.get(SERVER) == '{"old": 1}'  # the default tenant's, as it was
    assert await allowed.for_tenant("acme").get(SERVER) is None
    assert await reseal(creds.rows, Keyring(key)) == 1
    assert await creds.get(SERVER) == '{"old": 1}'
    row = await creds.rows.get(DEFAULT_TENANT, SERVER)
    assert row is not None and row.version == 1 and f":{key_id(key)}:" in row.value  # sealed


def test_rotate_secrets_through_the_cli_reseals_every_row(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tether.db'}"
    old, new = new_key(), new_key()

    async def write() -> None:
        writer = open_credentials(url, Keyring(old))
        await writer.for_tenant("acme").put(SERVER, "acme tokens")
        await writer.put(SERVER, "cli tokens")

    asyncio.run(write())
    key_file = tmp_path / "secret.key"
    key_file.write_text(as_text(new) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_SECRET_KEY")}
    command = [sys.executable, "-m", "tether", "db", "rotate-secrets", "--store", url]
    refused = subprocess.run(
        [*command, "--secret-key-file", str(key_file)], env=env, capture_output=True, text=True
    )
    assert refused.returncode == 2  # the old key is needed to open them
    assert refused.stderr.startswith("tether: error: the secret key does not match: ")
    assert len(refused.stderr.splitlines()) == 1
    done = subprocess.run(
        [*command, "--secret-key-file", str(key_file)],
        env={**env, "TETHER_SECRET_KEY_OLD": as_text(old)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(f": 2 secrets sealed again with key id {key_id(new)}")

    async def check() -> None:
        rows = open_rows(url)
        for tenant, text in (("acme", "acme tokens"), (DEFAULT_TENANT, "cli tokens")):
            row = await rows.get(tenant, SERVER)
            assert row is not None and f":{key_id(new)}:" in row.value
            assert await Credentials(rows, Keyring(new), tenant).get(SERVER) == text

    asyncio.run(check())


def test_a_key_that_is_not_32_bytes_of_base64_is_refused_by_name(tmp_path: Path) -> None:
    short = as_text(secrets.token_bytes(16))
    with pytest.raises(ConfigError, match=r"^TETHER_SECRET_KEY decodes to 16 bytes: it must be 32"):
        Keyring.from_env({"TETHER_SECRET_KEY": short})
    with pytest.raises(ConfigError, match=r"^TETHER_SECRET_KEY is not base64"):
        Keyring.from_env({"TETHER_SECRET_KEY": "not a key!"})
    with pytest.raises(ConfigError, match="not both"):
        Keyring.from_env({"TETHER_SECRET_KEY": as_text(new_key()), "TETHER_SECRET_KEY_FILE": "x"})
    missing = tmp_path / "no.key"
    with pytest.raises(ConfigError, match=rf"^cannot read --secret-key-file {missing}: No such"):
        Keyring.from_env({}, key_file=str(missing))
    (tmp_path / "short.key").write_text(short)
    with pytest.raises(ConfigError, match=r"^TETHER_SECRET_KEY_FILE .*short.key decodes to 16"):
        Keyring.from_env({"TETHER_SECRET_KEY_FILE": str(tmp_path / "short.key")})
    key = new_key()
    urlsafe = base64.urlsafe_b64encode(key).decode().rstrip("=")
    assert Keyring.from_env({"TETHER_SECRET_KEY": urlsafe}).current == key
    assert Keyring.from_env({"TETHER_INSECURE_PLAINTEXT_SECRETS": "1"}).plaintext_allowed
    assert not Keyring.from_env({}).plaintext_allowed
