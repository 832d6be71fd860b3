"""An event's summary: what a timeline shows of it on one line, in a few hundred bytes.

`?summary=true` on the event stream and the events page sends these instead of whole events,
so a session with large tool results is shown without sending them; its full event is one
`GET /v1/sessions/{id}/events/{seq}` away (`app`). Pure: it reads the event's JSON only.
"""

from __future__ import annotations

from typing import Any, TypedDict

from tether.events import Event, payload_to_json
from tether.messages import JSONObject, canonical_json

TEXT = 160  # characters of a string kept, the rest cut and marked with "…"
ITEMS = 12  # items of a list or keys of an object kept
DEPTH = 6  # levels of nesting kept; deeper values become "…"
MARK = "…"


class Summary(TypedDict):
    seq: int
    time: str
    thread: str
    type: str
    data: JSONObject
    size: int  # bytes of the whole event's canonical JSON
    clipped: bool  # whether anything of `data` was cut


class _Clip:
    """Cuts one event's data, noting whether it cut anything."""

    def __init__(self) -> None:
        self.cut = False

    def value(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            if len(value) <= TEXT:
                return value
            self.cut = True
            return value[: TEXT - 1] + MARK
        if isinstance(value, dict | list) and depth >= DEPTH:
            self.cut = True
            return MARK
        if isinstance(value, dict):
            return self.mapping(value, depth)
        if isinstance(value, list):
            if len(value) > ITEMS:
                self.cut = True
            kept = [self.value(v, depth + 1) for v in value[:ITEMS]]
            return [*kept, MARK] if len(value) > ITEMS else kept
        return value

    def mapping(self, value: dict[str, Any], depth: int) -> dict[str, Any]:
        if len(value) > ITEMS:
            self.cut = True
        return {k: self.value(v, depth + 1) for k, v in list(value.items())[:ITEMS]}


def summarise(event: Event) -> Summary:
    whole = event.to_json()
    clip = _Clip()
    data = clip.mapping(payload_to_json(event.payload), 0)
    return Summary(
        seq=event.seq,
        time=event.time,
        thread=event.thread,
        type=event.type,
        data=data,
        size=len(canonical_json(whole).encode()),
        clipped=clip.cut,
    )


def summary_json(event: Event) -> str:
    return canonical_json(summarise(event))
