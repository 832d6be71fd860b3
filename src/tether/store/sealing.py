"""Sealing secrets at rest: AES-256-GCM (`cryptography`) under a key the operator provides,
with the record's place (tenant and key) as associated data, so a sealed value copied into
another row, another tenant's included, does not open.

Owns reading the keys (`TETHER_SECRET_KEY` or `TETHER_SECRET_KEY_FILE`, the old ones of a
rotation in `TETHER_SECRET_KEY_OLD`), the sealed text's format and the errors a missing or
wrong key reads as. Which rows hold what is `credentials`'.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether.errors import ConfigError

if TYPE_CHECKING:  # an extra's: imported when a secret is sealed or opened
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

# `tether-sealed:v1:KEY_ID:BASE64(nonce + ciphertext + tag)`. A JSON record (what tether
# stored before sealing) never starts with it, so an older plain row is told apart.
SEALED_PREFIX = "tether-sealed:v1:"
KEY_BYTES = 32  # AES-256
_NONCE_BYTES = 12
_KEY_ID_SALT = b"tether secret key id\x00"
MAKE_A_KEY = "32 random bytes in base64, e.g. from `openssl rand -base64 32`"


class SecretKeyMissing(ConfigError):
    """A secret would be stored unsealed, or a sealed one read, with no key given."""


class SecretKeyMismatch(ConfigError):
    """A sealed secret does not open with the keys given."""


class PlaintextSecret(ConfigError):
    """A secret stored in plain text, read where the operator did not allow plain text."""


def key_id(key: bytes) -> str:
    """A short public name of a key (a salted hash: it tells keys apart, reveals nothing)."""
    return hashlib.sha256(_KEY_ID_SALT + key).hexdigest()[:12]


def parse_key(text: str, source: str) -> bytes:
    """A key from its base64 text (standard or URL-safe, padded or not)."""
    cleaned = "".join(text.split())
    padded = cleaned + "=" * (-len(cleaned) % 4)
    try:
        key = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{source} is not base64: it must be {MAKE_A_KEY}") from None
    if len(key) != KEY_BYTES:
        raise ConfigError(f"{source} decodes to {len(key)} bytes: it must be {MAKE_A_KEY}")
    return key


@dataclass(frozen=True, slots=True)
class Keyring:
    """The key secrets are sealed with (`current`), older ones still accepted for opening
    (`old`, while a rotation re-seals), and whether, with no key, secrets may be stored in
    plain text (`plaintext_allowed`: the operator's explicit choice)."""

    current: bytes | None = None
    old: tuple[bytes, ...] = ()
    plaintext_allowed: bool = False

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        key_file: str | None = None,
        insecure_plaintext: bool = False,
    ) -> Keyring:
        """The keys the environment and the command's flags give: `key_file` (a command's
        `--secret-key-file`) else `TETHER_SECRET_KEY_FILE` else `TETHER_SECRET_KEY`; old keys
        in `TETHER_SECRET_KEY_OLD` (comma-separated); plain text allowed by
        `insecure_plaintext` or `TETHER_INSECURE_PLAINTEXT_SECRETS=1`."""
        env = os.environ if environ is None else environ
        inline = env.get("TETHER_SECRET_KEY") or None
        source = "--secret-key-file"
        if key_file is None:
            source, key_file = "TETHER_SECRET_KEY_FILE", env.get("TETHER_SECRET_KEY_FILE") or None
            if key_file is not None and inline is not None:
                raise ConfigError("set TETHER_SECRET_KEY or TETHER_SECRET_KEY_FILE, not both")
        current = None
        if key_file is not None:
            current = parse_key(_read_key_file(key_file, source), f"{source} {key_file}")
        elif inline is not None:
            current = parse_key(inline, "TETHER_SECRET_KEY")
        old = tuple(
            parse_key(text, "TETHER_SECRET_KEY_OLD")
            for text in (env.get("TETHER_SECRET_KEY_OLD") or "").split(",")
            if text.strip()
        )
        plain = insecure_plaintext or env.get("TETHER_INSECURE_PLAINTEXT_SECRETS", "") in (
            "1",
            "true",
            "yes",
        )
        return cls(current, old, plain)

    def check_can_store(self, where: str) -> None:
        """Raise `SecretKeyMissing` unless a secret stored in `where` would be sealed (or the
        operator allowed plain text)."""
        if self.current is None and not self.plaintext_allowed:
            raise SecretKeyMissing(
                f"refusing to store OAuth tokens unsealed in {where}: set TETHER_SECRET_KEY "
                f"({MAKE_A_KEY}) or TETHER_SECRET_KEY_FILE (or --secret-key-file), or allow "
                "plain text with --insecure-plaintext-secrets "
                "(TETHER_INSECURE_PLAINTEXT_SECRETS=1)"
            )

    def seal(self, plain: str, place: str, where: str) -> str:
        """`plain` sealed for `place` (the row it is kept in); plain text itself when no key
        is given and the operator allowed that."""
        if self.current is None:
            self.check_can_store(where)
            return plain
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = _aes_gcm(self.current).encrypt(nonce, plain.encode(), place.encode())
        body = base64.urlsafe_b64encode(nonce + sealed).decode()
        return f"{SEALED_PREFIX}{key_id(self.current)}:{body}"

    def open(
        self, stored: str, place: str, where: str, *, plain_ok: bool = False
    ) -> tuple[str, bool]:
        """The plain text of a stored value, and whether it should be sealed again with the
        current key (it was plain, or sealed with an old key). A plain value is refused unless
        the operator allowed plain text or `plain_ok` (re-sealing it): whoever can write the
        database but has no key could put one there."""
        if not stored.startswith(SEALED_PREFIX):
            if not (plain_ok or self.plaintext_allowed):
                raise PlaintextSecret(
                    f"a secret in {where} is stored in plain text (from before secrets were "
                    "sealed, or written without a key): seal it with `tether db "
                    "rotate-secrets`, or allow plain text with --insecure-plaintext-secrets"
                )
            return stored, self.current is not None
        kid, _, body = stored.removeprefix(SEALED_PREFIX).partition(":")
        keys = {
            key_id(k): k for k in (*self.old, *(() if self.current is None else (self.current,)))
        }
        key = keys.get(kid)
        if key is None:
            raise self._no_key_for(kid, where)
        cipher = _aes_gcm(key)
        from cryptography.exceptions import InvalidTag

        try:
            raw = base64.urlsafe_b64decode(body.encode())
            plain = cipher.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], place.encode())
        except (InvalidTag, ValueError, binascii.Error):
            raise SecretKeyMismatch(
                f"a sealed secret in {where} does not open with the key it names (key id "
                f"{kid}): it was altered, or copied from another row or tenant"
            ) from None
        return plain.decode(), self.current is not None and key != self.current

    def _no_key_for(self, kid: str, where: str) -> ConfigError:
        if self.current is None and not self.old:
            return SecretKeyMissing(
                f"{where} holds sealed secrets and no TETHER_SECRET_KEY is set "
                "(nor TETHER_SECRET_KEY_FILE, --secret-key-file)"
            )
        given = ", ".join(key_id(k) for k in (*([self.current] if self.current else []), *self.old))
        return SecretKeyMismatch(
            f"the secret key does not match: secrets in {where} are sealed with key id {kid}, "
            f"and the keys given are {given} (TETHER_SECRET_KEY is the wrong key; during a "
            "rotation, the previous key goes in TETHER_SECRET_KEY_OLD)"
        )


def _aes_gcm(key: bytes) -> AESGCM:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise ConfigError(
            "sealing secrets needs the cryptography package: pip install 'tether[mcp]'"
        ) from None
    return AESGCM(key)


def _read_key_file(path: str, source: str) -> str:
    try:
        with open(path, encoding="ascii") as file:
            return file.read(4096)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not ASCII text"
        raise ConfigError(f"cannot read {source} {path}: {reason}") from None
