"""Reading the participants' answers: the JSON a critic or the proposer was asked for, or a
`Malformed` naming what is wrong with it (which the chair tells the participant once).

Pure: text in, values or an error out. What the answers mean for the ledger is `ledger`'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

Disposition = Literal["accepted", "rejected", "deferred"]
DISPOSITIONS: tuple[Disposition, ...] = ("accepted", "rejected", "deferred")

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


class Malformed(ValueError):
    """A participant's answer that cannot be used, and why (said back to it on the retry)."""


@dataclass(frozen=True, slots=True)
class Raised:
    """One objection as a critic stated it: `id` when it repeats one from the ledger."""

    text: str
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """The proposer's dispositions by objection id, and the revised artifact (None: kept)."""

    dispositions: dict[str, tuple[Disposition, str | None]]
    artifact: str | None


def json_object(text: str) -> dict[str, object]:
    """The JSON object in an answer: the whole text, a fenced block, or the span from the
    first `{` to the last `}` (models wrap JSON in prose and fences)."""
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return cast(dict[str, object], value)
    raise Malformed("it is not a JSON object")


def objections(text: str) -> list[Raised]:
    """A critic's answer: `{"objections": [{"id": ..., "text": ...}, ...]}`."""
    data = json_object(text)
    items = data.get("objections")
    if not isinstance(items, list):
        raise Malformed('it has no "objections" list')
    out: list[Raised] = []
    for i, item in enumerate(cast(list[object], items)):
        if isinstance(item, str) and item.strip():  # a bare text is a new objection
            out.append(Raised(item.strip()))
            continue
        if not isinstance(item, dict):
            raise Malformed(f"objection {i + 1} is not an object with a text")
        entry = cast(dict[str, object], item)
        text_value, id_value = entry.get("text"), entry.get("id")
        if not isinstance(text_value, str) or not text_value.strip():
            raise Malformed(f'objection {i + 1} has no "text"')
        if id_value is not None and not isinstance(id_value, str):
            raise Malformed(f'objection {i + 1} has an "id" that is not a string')
        out.append(Raised(text_value.strip(), (id_value or "").strip() or None))
    return out


def answer(text: str, asked: Sequence[str]) -> Answer:
    """The proposer's answer: one disposition for each objection in `asked`, a reason for
    each rejection, and the revised artifact or null."""
    data = json_object(text)
    items = data.get("dispositions")
    if not isinstance(items, list):
        raise Malformed('it has no "dispositions" list')
    found: dict[str, tuple[Disposition, str | None]] = {}
    for i, item in enumerate(cast(list[object], items)):
        if not isinstance(item, dict):
            raise Malformed(f"disposition {i + 1} is not an object")
        entry = cast(dict[str, object], item)
        oid, kind, reason = entry.get("id"), entry.get("disposition"), entry.get("reason")
        if oid not in asked:
            raise Malformed(f"disposition {i + 1} names {oid!r}, which is not an objection asked")
        assert isinstance(oid, str)
        if oid in found:
            raise Malformed(f"{oid} has two dispositions")
        if kind not in DISPOSITIONS:
            raise Malformed(f'{oid}: "disposition" must be one of {", ".join(DISPOSITIONS)}')
        if reason is not None and not isinstance(reason, str):
            raise Malformed(f'{oid}: "reason" must be a string')
        if kind == "rejected" and not (reason or "").strip():
            raise Malformed(f'{oid} is rejected without a "reason"')
        found[oid] = (kind, (reason or "").strip() or None)
    missing = [oid for oid in asked if oid not in found]
    if missing:
        raise Malformed(f"no disposition for {', '.join(missing)}")
    artifact = data.get("artifact")
    if artifact is not None and not isinstance(artifact, str):
        raise Malformed('"artifact" must be the whole revised text, or null')
    return Answer(found, artifact if artifact else None)
