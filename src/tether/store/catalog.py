"""The session catalog: one row per session, derived from its log, kept by the store in the
same transaction as the append that changes it, and read by everything that looks across
sessions (lists, search, counts, experiments, quotas, gauges) instead of any log.

A row is a projection of the session's fold (`row_of`): whoever appends through a
`SessionLog` holds that fold current and hands the row in with the batch, so the store
writes it without reading anything. An append made without one (a raw writer, a test) has
the store fold the session's whole log inside its transaction (`row_for_log`): slower, never
wrong. `rebuild` folds every log again and writes each row only if no append moved the
session meanwhile, so it is safe beside running workers and safe to kill.

`CatalogQuery` is what a page asks for; `matches` and `sort_key` are the rules every
backend answers by (the memory store applies them directly; the SQL stores turn them into
indexed queries, and the conformance suite holds each to the memory store's answers).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from tether.events import Event
from tether.fold import TASK_CHARS, Folder
from tether.messages import JSONObject, JSONValue

# How much of a session's words a row keeps: the task and each metadata value, to search
# and filter by; the keys of its metadata; and the part of the last output a list shows.
TEXT = TASK_CHARS
KEPT_KEYS = 100
OUTPUT = 300
# The metadata keys the runtime writes: kept out of a row's metadata, so never shown or
# filtered by as the caller's (`runtime.base.RESERVED_METADATA`, what a spec may not set, adds
# `model_settings`, which a row keeps, as it always kept `Agent`'s).
RESERVED = frozenset({"runner", "tenant", "idempotency"})
# The states in which a session holds nothing (no open turn to run).
RESTING = frozenset({"idle", "completed", "failed", "canceled"})

Sort = Literal["updated", "newest", "oldest", "tokens", "cost"]
SORTS: tuple[Sort, ...] = get_args(Sort)
# A row's place in its sort: (the sorted value, session id). Times are RFC 3339 strings of one
# fixed form, so they compare as text; tokens and cost are numbers (an unknown cost: -1).
Key = tuple[str | float, str]


# Not frozen: a frozen dataclass sets each of these fields through `object.__setattr__`,
# and a writer makes a row at every append. Treat it as immutable all the same.
@dataclass(slots=True)
class CatalogRow:
    """One session as the catalog holds it, as of `last_seq`."""

    session_id: str
    tenant: str  # "" for a session started without one
    parent: str  # the session it was forked from; "" for none
    created: str  # the time of its first event
    updated: str  # the time of its last event
    state: str
    stop_reason: str | None
    model: str
    steps: int
    turns: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float | None  # None: some price was unknown
    task: str  # the first user message's text, its first `TEXT` characters
    last_output: str  # its first `OUTPUT` characters
    metadata: tuple[tuple[str, str], ...]  # the caller's, values as text, bounded
    experiment: str  # `metadata.experiment.id` of an experiment's run; "" otherwise
    variant: str
    experiment_task: str
    repeat: int  # -1 when not an experiment's run
    threads_running: int  # sub-agent threads running now
    last_seq: int

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def running(self) -> bool:
        """A turn is open: what `max_running` counts."""
        return self.state not in RESTING

    @property
    def haystack(self) -> str:
        """What `q` is looked for in, lower case: the id, the task, the metadata's values."""
        return "\n".join([self.session_id, self.task, *(v for _, v in self.metadata)]).lower()

    def metadata_json(self) -> str:
        return json.dumps(dict(self.metadata), sort_keys=True, separators=(",", ":"))


def as_text(value: JSONValue) -> str:
    """A metadata value as the catalog keeps it: a string as it is, anything else as its
    canonical JSON; either cut at `TEXT` characters, the rest never encoded."""
    if isinstance(value, str):
        return value[:TEXT]
    pieces: list[str] = []
    written = 0
    for piece in _PIECES.iterencode(value):
        pieces.append(piece)
        written += len(piece)
        if written >= TEXT:
            break
    return "".join(pieces)[:TEXT]


_PIECES = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Origin:
    """What a row takes from `session.created`'s metadata, which never changes: worked out
    once per session by a writer (`origin_of`), not at every append."""

    tenant: str
    metadata: tuple[tuple[str, str], ...]
    experiment: str
    variant: str
    experiment_task: str
    repeat: int


def origin_of(meta: JSONObject) -> Origin:
    tenant = meta.get("tenant")
    # In key order: a log keeps its metadata as canonical JSON (keys sorted), so a dict read
    # back from a store is in that order whatever order the writer's had; the row must not
    # depend on which of the two was folded.
    caller = sorted(((k, v) for k, v in meta.items() if k not in RESERVED), key=lambda kv: kv[0])
    metadata = tuple((k[:TEXT], as_text(v)) for k, v in itertools.islice(caller, KEPT_KEYS))
    raw = meta.get("experiment")
    tag = raw if isinstance(raw, dict) else {}
    exp_id, variant, task, repeat = (tag.get(k) for k in ("id", "variant", "task", "repeat"))
    return Origin(
        tenant=tenant if isinstance(tenant, str) else "",
        metadata=metadata,
        experiment=exp_id if isinstance(exp_id, str) else "",
        variant=variant if isinstance(variant, str) else "",
        experiment_task=task if isinstance(task, str) else "",
        repeat=repeat if isinstance(repeat, int) and not isinstance(repeat, bool) else -1,
    )


def row_of(folder: Folder, origin: Origin | None = None, parent: str = "") -> CatalogRow:
    """The catalog row of the session whose main-thread fold `folder` is; `origin`, when the
    caller kept it, is `origin_of(folder.metadata)`."""
    o = origin_of(folder.metadata) if origin is None else origin
    if not parent and folder.forked is not None:
        parent = folder.forked.parent
    tokens = folder.tokens
    nodes = folder.thread_nodes
    return CatalogRow(
        folder.session_id,
        o.tenant,
        parent,
        folder.created,
        folder.updated,
        folder.state,
        folder.stop_reason,
        folder.model,
        folder.steps,
        folder.turns,
        tokens[0],
        tokens[1],
        tokens[2],
        tokens[3],
        folder.cost_usd if folder.cost_known else None,
        folder.task,
        folder.last_output[:OUTPUT],
        o.metadata,
        o.experiment,
        o.variant,
        o.experiment_task,
        o.repeat,
        sum(1 for n in nodes.values() if n.status == "running") if nodes else 0,
        folder.last_seq,
    )


def row_for_log(events: Sequence[Event]) -> CatalogRow:
    """The row of a whole log, folded from its first event: what a store writes for an append
    that came without a row, and what `rebuild` writes."""
    return row_of(Folder().apply_all(events))


@dataclass(frozen=True, slots=True)
class CatalogQuery:
    """A page of sessions: the filters (all must hold), the sort, the cursor (`after`: the key
    of the last row of the page before) and the page's size."""

    tenant: str | None = None  # None: every tenant's
    states: frozenset[str] = frozenset()
    stop_reasons: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()
    id_prefix: str = ""
    text: str = ""  # lower case: a substring of `CatalogRow.haystack`
    created_after: str | None = None  # event-time form, so it compares with `created`
    created_before: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()  # (key, value as text)
    experiment: str | None = None
    parent: str | None = None  # the forks of this session ("": sessions that are not forks)
    sort: Sort = "updated"
    after: Key | None = None
    limit: int = 50


def matches(row: CatalogRow, query: CatalogQuery, *, states: bool = True) -> bool:
    """Whether the row passes every filter of `query` (its states only with `states`)."""
    meta = dict(row.metadata)
    return (
        (query.tenant is None or row.tenant == query.tenant)
        and (not states or not query.states or row.state in query.states)
        and (not query.stop_reasons or (row.stop_reason or "") in query.stop_reasons)
        and (not query.models or row.model in query.models)
        and row.session_id.startswith(query.id_prefix)
        and (not query.text or query.text in row.haystack)
        and (query.created_after is None or row.created >= query.created_after)
        and (query.created_before is None or row.created < query.created_before)
        and all(meta.get(k) == v for k, v in query.metadata)
        and (query.experiment is None or row.experiment == query.experiment)
        and (query.parent is None or row.parent == query.parent)
    )


def sort_key(row: CatalogRow, sort: Sort) -> Key:
    if sort == "tokens":
        return (float(row.tokens), row.session_id)
    if sort == "cost":
        return (-1.0 if row.cost_usd is None else row.cost_usd, row.session_id)
    if sort == "updated":
        return (row.updated, row.session_id)
    return (row.created, row.session_id)  # newest, oldest


def ascending(sort: Sort) -> bool:
    return sort == "oldest"


def after(key: Key, cursor: Key | None, sort: Sort) -> bool:
    """Whether a row with `key` comes after the cursor's row in the sort."""
    if cursor is None:
        return True
    return _below(cursor, key) if ascending(sort) else _below(key, cursor)


def _below(a: Key, b: Key) -> bool:
    if isinstance(a[0], str) or isinstance(b[0], str):
        return (str(a[0]), a[1]) < (str(b[0]), b[1])
    return (a[0], a[1]) < (b[0], b[1])


def page_of(rows: Sequence[CatalogRow], query: CatalogQuery) -> list[CatalogRow]:
    """The reference answer: the rows `query` lets through, after its cursor, in its sort,
    at most `limit` of them. The memory store answers with it; the SQL stores must agree."""
    found = [r for r in rows if matches(r, query)]
    found = [r for r in found if after(sort_key(r, query.sort), query.after, query.sort)]
    found.sort(key=lambda r: sort_key(r, query.sort), reverse=not ascending(query.sort))
    return found[: query.limit]


def counts_of(rows: Sequence[CatalogRow], query: CatalogQuery) -> dict[str, int]:
    """Sessions per state among those every filter but the states lets through."""
    out: dict[str, int] = {}
    for row in rows:
        if matches(row, query, states=False):
            out[row.state] = out.get(row.state, 0) + 1
    return out


@dataclass(frozen=True, slots=True)
class ExperimentEntry:
    """One experiment as the catalog knows it: its runs (sessions tagged with its id) and when
    the first began and the last changed."""

    experiment: str
    runs: int
    created: str
    updated: str


def experiments_of(
    rows: Sequence[CatalogRow], tenant: str | None, limit: int
) -> list[ExperimentEntry]:
    """The reference answer of `Store.catalog_experiments`: the tenant's experiments (every
    tenant's with None), the most recently updated first, at most `limit`."""
    found: dict[str, ExperimentEntry] = {}
    for r in rows:
        if not r.experiment or (tenant is not None and r.tenant != tenant):
            continue
        e = found.get(r.experiment)
        found[r.experiment] = (
            ExperimentEntry(r.experiment, 1, r.created, r.updated)
            if e is None
            else ExperimentEntry(
                e.experiment, e.runs + 1, min(e.created, r.created), max(e.updated, r.updated)
            )
        )
    listed = sorted(found.values(), key=lambda e: (e.updated, e.experiment), reverse=True)
    return listed[:limit]


@dataclass(frozen=True, slots=True)
class UsageEntry:
    """What the sessions of one model whose last event fell on one UTC day spent, as their
    rows hold it: each session's whole spending is dated at its last update (`updated`)."""

    day: str  # YYYY-MM-DD, UTC
    model: str
    sessions: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float  # the known costs summed
    cost_unknown: int  # sessions whose cost is unknown (some price was): not in `cost_usd`

    def to_json(self) -> JSONObject:
        return {
            "day": self.day,
            "model": self.model,
            "sessions": self.sessions,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_usd": self.cost_usd,
            "cost_unknown_sessions": self.cost_unknown,
        }


DAY = 10  # characters of an event time that name its UTC day: `2026-12-03`


def usage_of(
    rows: Sequence[CatalogRow], tenant: str | None, since: str, until: str, limit: int
) -> list[UsageEntry]:
    """The reference answer of `Store.catalog_usage`: the sessions of `tenant` (every
    tenant's with None) last updated in [`since`, `until`) (event-time strings), summed by
    the day of that update and model, in (day, model) order, at most `limit` entries."""
    sums: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if (tenant is not None and r.tenant != tenant) or not since <= r.updated < until:
            continue
        s = sums.setdefault((r.updated[:DAY], r.model), [0, 0, 0, 0, 0, 0.0, 0])
        s[0] += 1
        s[1] += r.input_tokens
        s[2] += r.output_tokens
        s[3] += r.cache_read_tokens
        s[4] += r.cache_write_tokens
        if r.cost_usd is None:
            s[6] += 1
        else:
            s[5] += r.cost_usd
    return [usage_entry(day, model, s) for (day, model), s in sorted(sums.items())[: max(limit, 0)]]


def usage_entry(day: str, model: str, sums: Sequence[Any]) -> UsageEntry:
    """An entry from its sums in `UsageEntry`'s order (sessions, the four token counts, the
    known cost, the sessions of unknown cost), as a store's aggregate reads them."""
    n, i, o, cr, cw, cost, unknown = sums
    return UsageEntry(
        day, model, int(n), int(i), int(o), int(cr), int(cw), float(cost), int(unknown)
    )


@dataclass(frozen=True, slots=True)
class Admit:
    """A quota checked in the transaction of the append that makes a session run (a start, a
    message to an idle session): the store refuses the append with `QuotaExceeded` when the
    tenant already has `max_running` running sessions (other than this one), counted in
    the catalog under a lock that makes concurrent admissions of one tenant take turns."""

    tenant: str
    max_running: int


# A refused start cannot know when a running session will end: it is told to try this later.
RUNNING_RETRY_AFTER = 5.0


def refusal(admit: Admit, running: int) -> str:
    return (
        f"tenant {admit.tenant} has {running} sessions running, its limit is "
        f"{admit.max_running} (max_running); start more when some have ended"
    )


class Progress(Protocol):
    def __call__(self, done: int, total: int) -> None: ...


class Rebuildable(Protocol):
    """What `rebuild` needs of a store."""

    async def session_ids(self, after: str = "", limit: int = 1000) -> list[str]: ...

    async def read(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]: ...

    async def put_catalog_row(self, row: CatalogRow) -> bool: ...

    async def count_sessions(self) -> int: ...


async def rebuild(
    store: Rebuildable, progress: Progress | None = None, *, batch: int = 1000
) -> int:
    """Fold every session's log again and write its row (only where the log still ends at
    the row's `last_seq`: an append since wrote a newer one). Every session's log is read
    once; a kill leaves each row either as it was or rebuilt. Returns the sessions seen."""
    total = await store.count_sessions()
    done = 0
    cursor = ""
    while True:
        ids = await store.session_ids(cursor, batch)
        if not ids:
            return done
        for session_id in ids:
            events = await store.read(session_id)
            if events:
                await store.put_catalog_row(row_for_log(events))
            done += 1
        cursor = ids[-1]
        if progress is not None:
            progress(done, total)


ProgressFn = Callable[[int, int], None]


def describe(row: CatalogRow) -> JSONObject:
    """The row as a session list shows it (`GET /v1/sessions`, `tether sessions ls`)."""
    return {
        "session_id": row.session_id,
        "state": row.state,
        "stop_reason": row.stop_reason,
        "model": row.model,
        "steps": row.steps,
        "turns": row.turns,
        "created": row.created,
        "updated": row.updated,
        "last_output": row.last_output,
        "task": row.task[:OUTPUT],
        "tokens": row.tokens,
        "cost_usd": row.cost_usd,
        "metadata": {k: v[:OUTPUT] for k, v in row.metadata[:20]},
        "parent": row.parent or None,
    }
