"""One record per run of an experiment that compares (`MatrixRun`), made the same way live
and later: from the run's session log, folded, and its check applied. Also finding an
experiment's sessions in a store by their tag, from its catalog (`find_runs`), and reading
their logs (`read_sessions`). Does not decide what to run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from tether.agent import RunResult
from tether.events import Event, TurnEnded
from tether.experiment.plan import INCOMPLETE, Cell, Check, Checked, apply_check
from tether.fold import Folder
from tether.messages import JSONObject, JSONValue
from tether.session.origin import Setup, setup_event_in, setup_in
from tether.store.base import Store
from tether.store.catalog import CatalogQuery, CatalogRow, sort_key

# The catalog rows asked for at once while finding an experiment's runs (all are found).
PAGE = 500

METRICS = ("pass_rate", "score", "steps", "tokens", "cost_usd", "seconds")
HIGHER_IS_BETTER = frozenset({"pass_rate", "score"})


@dataclass(frozen=True, slots=True)
class MatrixRun:
    """A run of one cell. `stop_reason` is "" while its turn never ended (its process died);
    such a run and an `interrupted` one are *abandoned*: kept, never counted, and their
    cell is run again. `checked` is False when the run finished but its check was not run
    (a server that may not import the check): its pass and score are then unknown."""

    session_id: str
    variant: str
    task: str
    repeat: int
    created: str
    stop_reason: str
    passed: bool
    score: float
    check_error: str | None
    steps: int
    tokens: int  # input and output
    cost_usd: float | None
    seconds: float | None  # from session.created to turn.ended, by the log's clock
    checked: bool = True
    source: str = ""  # a replay's: the recorded session it replayed

    @property
    def cell(self) -> Cell:
        return Cell(self.variant, self.task, self.repeat)

    @property
    def abandoned(self) -> bool:
        return self.stop_reason in ("", "interrupted")

    def value(self, metric: str) -> float | None:
        if metric in ("pass_rate", "score") and not self.checked:
            return None
        if metric == "pass_rate":
            return float(self.passed)
        value: float | int | None = getattr(self, metric)
        return None if value is None else float(value)

    def to_json(self) -> JSONObject:
        out: JSONObject = {
            "session_id": self.session_id,
            "variant": self.variant,
            "task": self.task,
            "repeat": self.repeat,
            "stop_reason": self.stop_reason or None,
            "passed": self.passed if self.checked else None,
            "score": self.score if self.checked else None,
            "check_error": self.check_error,
            "steps": self.steps,
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
            "seconds": self.seconds,
        }
        if self.source:  # a replay's
            out["source"] = self.source
        return out


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A session of the experiment as the store holds it: its tag and its log."""

    session_id: str
    tag: JSONObject  # session.created's metadata.experiment
    events: list[Event]

    @property
    def cell(self) -> Cell | None:
        variant, task, repeat = (self.tag.get(k) for k in ("variant", "task", "repeat"))
        if isinstance(variant, str) and isinstance(task, str) and isinstance(repeat, int):
            return Cell(variant, task, repeat)
        return None


async def find_runs(
    store: Store, experiment_id: str, tenant: str | None = None
) -> list[CatalogRow]:
    """Every session the catalog tags with the experiment (`tenant`'s only, unless None),
    oldest first: a page of the index at a time, never a log."""
    rows: list[CatalogRow] = []
    query = CatalogQuery(tenant=tenant, experiment=experiment_id, sort="oldest", limit=PAGE)
    while True:
        page = await store.catalog(query)
        rows.extend(page)
        if len(page) < PAGE:
            return rows
        query = replace(query, after=sort_key(page[-1], "oldest"))


async def read_sessions(
    store: Store, experiment_id: str, tenant: str | None = None
) -> list[StoredRun]:
    """The sessions whose `session.created` names the experiment (as `run_matrix` tags
    them), oldest first, with their logs: found in the catalog (`find_runs`), so only the
    experiment's own logs are read."""
    found: list[StoredRun] = []
    for row in await find_runs(store, experiment_id, tenant):
        events = await store.read(row.session_id)
        tag = _tag(setup_in(events))
        if tag is not None and tag.get("id") == experiment_id and "variant" in tag:
            found.append(StoredRun(row.session_id, tag, events))
    return found


def _tag(payload: Setup | None) -> JSONObject | None:
    if payload is None:
        return None
    tag: JSONValue = payload.metadata.get("experiment")
    return tag if isinstance(tag, dict) else None


async def record_of(
    stored: StoredRun, cell: Cell, check: Check | None, pass_at: float, *, run_check: bool = True
) -> MatrixRun:
    """The run's record: its result folded from the log, its check applied (not for an
    abandoned run, nor one that did not finish). `run_check=False`: a finished run's check
    is not run, and its pass and score are unknown (`checked` False).

    A replay's (`Task.from_session`) steps, tokens and cost are its own turns', never its
    source's; it finished when its last turn ended its session, or stopped at a turn that
    did not finish; one whose process died between its turns is abandoned."""
    folder = Folder().apply_all(stored.events)
    view = folder.view()
    result = replace(RunResult.from_view(view), steps=view.steps)
    start = setup_event_in(stored.events) or stored.events[0]
    ended = next((e for e in reversed(stored.events) if isinstance(e.payload, TurnEnded)), None)
    if ended is not None and ended.seq < start.seq:
        ended = None  # a turn of the source's
    stop = result.stop_reason if ended is not None else ""
    replayed = folder.forked is not None and folder.forked.kind == "replay"
    if replayed and stop not in INCOMPLETE and not folder.terminal:
        stop = ""  # its later turns never ran
    unknown = not run_check and result.stop_reason not in INCOMPLETE
    checked = Checked(False, 0.0) if unknown else await apply_check(check, pass_at, result)
    usage = result.usage
    return MatrixRun(
        stored.session_id,
        cell.variant,
        cell.task,
        cell.repeat,
        start.time,
        stop,
        checked.passed,
        checked.score,
        checked.error,
        result.steps,
        usage.input_tokens + usage.output_tokens,
        result.cost_usd,
        None if ended is None else _seconds(start.time, ended.time),
        not unknown,
        folder.forked.parent if replayed and folder.forked is not None else "",
    )


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def counted_and_abandoned(
    records: Sequence[MatrixRun],
) -> tuple[dict[Cell, MatrixRun], list[MatrixRun]]:
    """One counted record per cell (the first created that was not abandoned), and the
    rest: abandoned runs, and duplicates should two processes have run the same cell."""
    counted: dict[Cell, MatrixRun] = {}
    aside: list[MatrixRun] = []
    for record in sorted(records, key=lambda r: (r.created, r.session_id)):
        if record.abandoned or record.cell in counted:
            aside.append(record)
        else:
            counted[record.cell] = record
    return counted, aside
