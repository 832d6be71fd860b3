"""How the SQL stores read a fork's log (`base.Forks`): which stored rows of which session
make each stretch of it. Pure planning, no I/O: the SQLite and PostgreSQL stores run the
queries.

A fork stores only its own events (at seqs from its link's `at + 1`); its prefix is its
parent's log up to `at`, which may itself begin in the parent's parent. A fork's *chain* is
its own link, then its parent's, and so on to a session that is not a fork. Links never
change once written, so a chain read once is kept (`Chains`) and planning a read costs no
query. A session that is not a fork is never asked for its chain: its own rows start at the
seq after the one read from, and only a gap there (a fork read from before its fork point)
sends a store to look its chain up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether.errors import UsageError
from tether.events import Event
from tether.store.base import ForkLink, check_batch
from tether.store.catalog import CatalogRow

Chain = tuple[ForkLink, ...]

# Past this many chains kept, forget them all: a server forking without end must not grow.
_KEPT_MAX = 100_000


def check_fork(session_id: str, link: ForkLink, events: Sequence[Event], row: CatalogRow) -> None:
    """Refuse (`UsageError`) a fork's batch that is malformed whatever is stored: its events
    not numbered from `at + 1`, or a row that is not of the child at its last seq."""
    check_batch(session_id, events, link.at)
    if row.session_id != session_id or row.last_seq != link.at + len(events):
        raise UsageError(
            f"session {session_id}: the catalog row handed in is session {row.session_id} "
            f"at seq {row.last_seq}, not the fork's last seq {link.at + len(events)}"
        )


@dataclass(frozen=True, slots=True)
class Stretch:
    """The events `lo < seq <= hi` of a log are `source`'s own rows (`hi` None: no end)."""

    source: str
    lo: int
    hi: int | None


def stretches(session_id: str, chain: Chain) -> list[Stretch]:
    """The stretches of `session_id`'s log, in seq order: the oldest ancestor's first. An
    ancestor forked past the point its child was forked at gives nothing beyond that point;
    one whose own rows all lie past it gives nothing at all."""
    out: list[Stretch] = []
    source, hi = session_id, None
    for link in (*chain, None):
        lo = 0 if link is None else link.at
        if hi is None or lo < hi:
            out.append(Stretch(source, lo, hi))
        if link is None:
            break
        hi = link.at if hi is None else min(hi, link.at)
        source = link.parent
    out.reverse()
    return out


def plan(
    session_id: str, chain: Chain, after_seq: int, limit: int | None
) -> list[tuple[Stretch, int]]:
    """The stretches a read after `after_seq` touches, each with the seq to read after. The
    caller reads them in order, each up to what is left of `limit`."""
    out: list[tuple[Stretch, int]] = []
    for s in stretches(session_id, chain):
        if s.hi is not None and s.hi <= after_seq:
            continue
        out.append((s, max(s.lo, after_seq)))
    return out if limit != 0 else []


def needs_chain(rows: Sequence[Sequence[object]], after_seq: int) -> bool:
    """Whether a session's own rows read after `after_seq` leave a gap before them: then it
    is a fork read from before its fork point (or a damaged log, which has no chain)."""
    return bool(rows) and rows[0][1] != after_seq + 1


class Chains:
    """The chains read so far, by session id. Only forks' chains are kept (a session stored
    as a fork stays one; a session not yet stored may become one)."""

    def __init__(self) -> None:
        self._kept: dict[str, Chain] = {}

    def get(self, session_id: str) -> Chain | None:
        return self._kept.get(session_id)

    def clear(self) -> None:
        self._kept.clear()

    def keep(self, session_id: str, chain: Chain) -> None:
        if not chain:
            return
        if len(self._kept) >= _KEPT_MAX:
            self._kept.clear()  # always safe: a chain forgotten is read again
        self._kept[session_id] = chain


def chain_of(session_id: str, links: Sequence[tuple[str, str, int]]) -> Chain:
    """The chain of `session_id` from rows of (session id, parent, at) holding its links and
    its ancestors' (in any order, and perhaps others'), followed from the session up."""
    by_child = {child: ForkLink(parent, int(at)) for child, parent, at in links}
    out: list[ForkLink] = []
    seen = {session_id}
    link = by_child.get(session_id)
    while link is not None and link.parent not in seen:  # a cycle cannot be written; still
        out.append(link)
        seen.add(link.parent)
        link = by_child.get(link.parent)
    return tuple(out)


# The links of a session and of every ancestor, in one recursive query. `{p}` is the
# driver's placeholder; the depth bound stops a damaged table from looping.
CHAIN_QUERY = """
WITH RECURSIVE chain(session_id, parent, at, depth) AS (
    SELECT session_id, parent, at, 1 FROM {forks} WHERE session_id = {p}
    UNION ALL
    SELECT f.session_id, f.parent, f.at, c.depth + 1
    FROM {forks} f JOIN chain c ON f.session_id = c.parent WHERE c.depth < 10000
)
SELECT session_id, parent, at FROM chain
"""
