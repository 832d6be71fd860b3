"""Start bodies at and past `tether serve`'s input limits, for the tests and the benchmark of
what one tenant's large inputs cost a server (`bench/bench_tenant_memory.py`).

`near_limits` fills a start's metadata and task to just under the limits given (by default
those of `tether.server.bounds.InputLimits`, repeated here as plain numbers: this layer
does not import the server); `oversized` is the reproduction of a tenant sending about
1 MiB of metadata per start, in each of the shapes a limit refuses (`SHAPES`)."""

from __future__ import annotations

from tether.messages import JSONObject, JSONValue

MIB = 1 << 20


def near_limits(
    i: int,
    model: str,
    *,
    keys: int = 64,
    key_chars: int = 128,
    metadata_bytes: int = 16 << 10,
    text_bytes: int = 256 << 10,
) -> JSONObject:
    """A start whose metadata has `keys` keys of `key_chars` characters and string values
    making its canonical JSON just under `metadata_bytes`, and whose task is just under
    `text_bytes`, each start's texts its own (`i`), so that no two share a string."""
    # Each item costs its key, its quoted value, a colon and a comma (`bounds` counts 4).
    per_key = (metadata_bytes - 2) // keys - key_chars - 4 - 2
    metadata: dict[str, JSONValue] = {}
    for k in range(keys):
        key = f"{i:05d}-{k:03d}-".ljust(key_chars, "k")
        metadata[key] = f"{i}-{k}-".ljust(per_key, "v")
    task = f"hang {i} ".ljust(text_bytes - 16, "t")
    return {"model": model, "task": task, "metadata": metadata}


# The limits the shapes of `oversized` pass, in its order.
SHAPES = (
    "metadata_value_bytes", "metadata_keys", "metadata_key_chars", "metadata_depth",
    "metadata_items", "metadata_bytes",
)  # fmt: skip


def oversized(i: int, model: str) -> tuple[JSONObject, str]:
    """A start of about 1 MiB of metadata (under the 1 MiB body limit), and the limit it
    passes, in the shape `SHAPES[i % 6]` names: one large value, many keys, a long key,
    deep nesting, many small items, many values just under the value limit."""
    size = MIB - 4_096  # the rest of the body fits under the body limit
    shape = SHAPES[i % len(SHAPES)]
    metadata: dict[str, JSONValue]
    if shape == "metadata_value_bytes":
        metadata = {"blob": f"{i}".ljust(size, "x")}
    elif shape == "metadata_keys":  # "k0-12345":"vvvvvvvv", is 23 bytes
        metadata = {f"k{i}-{n}": "v" * 8 for n in range(size // 30)}
    elif shape == "metadata_key_chars":
        metadata = {f"{i}".ljust(size, "k"): 1}
    elif shape == "metadata_depth":
        metadata = {"deep": _nested(64), "pad": f"{i}".ljust(size // 2, "p")}
    elif shape == "metadata_items":
        metadata = {"items": [[] for _ in range(size // 4)]}
    else:
        metadata = {f"p{n}": f"{i}".ljust(4_000, "v") for n in range(60)}
    return {"model": model, "task": f"hang {i}", "metadata": metadata}, shape


def _nested(depth: int) -> JSONValue:
    value: JSONValue = "bottom"
    for _ in range(depth):
        value = {"in": value}
    return value
