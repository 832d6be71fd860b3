"""The flags that say how a command seals the secrets it stores (`--secret-key-file`,
`--insecure-plaintext-secrets`) and the `Keyring` they make with the environment's keys.

Owns nothing else: sealing is `store.sealing`'s, the rows `store.credentials`'.
"""

from __future__ import annotations

import argparse
from typing import Any

from tether.store.sealing import Keyring


def add_secret_flags(parser: Any) -> None:
    parser.add_argument(
        "--secret-key-file",
        default=None,
        metavar="PATH",
        help="the key OAuth tokens are sealed with (32 random bytes in base64); "
        "default: $TETHER_SECRET_KEY_FILE, else $TETHER_SECRET_KEY",
    )
    parser.add_argument(
        "--insecure-plaintext-secrets",
        action="store_true",
        help="with no key, store OAuth tokens in plain text (else they are refused)",
    )


def keyring_from(args: argparse.Namespace) -> Keyring:
    return Keyring.from_env(
        key_file=getattr(args, "secret_key_file", None),
        insecure_plaintext=getattr(args, "insecure_plaintext_secrets", False),
    )
