"""Reading the JSON and TOML that people write (config files, command-line values): UTF-8
text, parsed with a bound on how deep arrays and tables nest, and no NaN or infinity (TOML
has both; JSON's parser takes `NaN`, `Infinity` and `1e999`).

One reader for every file and flag a user gives, so a deep or binary document is one
`DocumentError` naming the problem, not a RecursionError here or in whatever walks it later.
What the document means is its caller's to check.
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from pathlib import Path
from typing import Literal

Kind = Literal["json", "toml"]
# Far deeper than any config or schema a person writes; far shallower than Python's
# recursion limit, which the parsers and every walk over the value lean on.
MAX_NESTING = 64


class DocumentError(ValueError):
    """What is wrong with a document, in one line; its caller names where it came from."""


def read(path: str | os.PathLike[str], kind: Kind) -> object:
    """The document in the file at `path`: `OSError` when it cannot be read, else a
    `DocumentError` when it is not UTF-8 text of its `kind` (`parse`)."""
    return decode(Path(path).read_bytes(), kind)


def decode(data: bytes, kind: Kind) -> object:
    """The document in `data` (UTF-8 text, as `parse` reads it)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"not UTF-8 text (byte {exc.start}: {data[exc.start]:#04x})") from None
    return parse(text, kind)


def parse(text: str, kind: Kind) -> object:
    """The value `text` holds, JSON or TOML, checked by `check_value`."""
    try:
        if kind == "json":
            value: object = json.loads(text)
        else:
            value = tomllib.loads(text)
    except RecursionError:  # the parsers recurse once per level: far past MAX_NESTING
        raise DocumentError(f"it nests deeper than {MAX_NESTING} levels") from None
    except ValueError as exc:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise DocumentError(f"not valid {kind.upper()}: {exc}") from None
    check_value(value)
    return value


def check_value(value: object, limit: int = MAX_NESTING) -> None:
    """`DocumentError` when lists and dicts in `value` nest deeper than `limit`, or a number
    in it is not finite (walked without recursion, so any depth is measured)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise DocumentError(f"numbers must be finite, not {item}")
        if not isinstance(item, dict | list):
            continue
        if depth > limit:
            raise DocumentError(f"it nests deeper than {limit} levels")
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
