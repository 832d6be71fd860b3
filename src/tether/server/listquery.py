"""What a `GET /v1/sessions` request asks for: its query parameters as `Runtime.sessions`'
options (`ListOptions`), which the runtime checks and answers from the catalog
(`runtime.listing`). Only the HTTP forms are read here: a repeated `metadata=KEY=VALUE`
parameter and `counts=true`; a refusal is an `ApiError` naming the parameter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tether.runtime.base import ListOptions
from tether.runtime.listing import MAX_ITEMS, MAX_TEXT
from tether.server.errors import ApiError

# The parameters passed on as they are written (a comma-separated list stays one string).
TEXTS = (
    "cursor", "state", "stop_reason", "model", "id_prefix", "q", "created_after",
    "created_before", "sort", "parent",
)  # fmt: skip


def list_options(params: Mapping[str, str], metadata: Sequence[str], counts: bool) -> ListOptions:
    """The options of a request; `metadata` is every value of its `metadata` parameter."""
    options = ListOptions(counts=counts)
    for name in TEXTS:
        if params.get(name):
            options[name] = params[name]  # type: ignore[literal-required]  # a ListOptions key
    if metadata:
        options["metadata"] = _pairs(metadata)
    return options


def _pairs(given: Sequence[str]) -> dict[str, str]:
    if len(given) > MAX_ITEMS:
        raise ApiError("invalid_request", f"at most {MAX_ITEMS} metadata parameters")
    pairs: dict[str, str] = {}
    for raw in given:
        key, equals, value = raw.partition("=")
        if not equals or not key or len(raw) > MAX_TEXT:
            raise ApiError(
                "invalid_request",
                f"query parameter metadata must be KEY=VALUE (at most {MAX_TEXT} "
                f"characters), not {raw[:40]!r}",
            )
        if pairs.get(key, value) != value:
            raise ApiError(
                "invalid_request",
                f"query parameter metadata gives {key[:40]!r} two values: no session has both",
            )
        pairs[key] = value
    return pairs
