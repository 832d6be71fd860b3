"""Experiments over HTTP: a tenant's experiments, found among the store's newest sessions
as its own sessions tagged by `run_matrix`; an experiment's report (intervals, each variant
against the first, the runs) and its chart. A log is tenant input: a check it names is run
only as `checks` allows (the operator's `--allow-check`). Routes: `app`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.errors import UsageError
from tether.events import SessionCreated
from tether.experiment import MATRIX_METRICS, MatrixReport, chart_svg, matrix_report
from tether.experiment.plan import NAME, Plan
from tether.experiment.records import METRICS, StoredRun
from tether.messages import JSONObject, JSONValue
from tether.runtime.local import LocalRuntime
from tether.server import checks
from tether.server.errors import ApiError

SCAN = 2_000  # the newest sessions of the store a request looks through
MAX_RUNS = 500  # sessions of one experiment a report folds (the newest)
MAX_EVENTS = 5_000  # a run with a longer log is left out of the report (and counted)
LISTED = 50  # variant and task names per experiment in the list
MAX_VARIANTS, MAX_CELLS = 20, 20_000  # a recorded plan larger than this is not reported on
# The chart is an image: it runs no script and loads nothing, even opened on its own.
SVG_CSP = "default-src 'none'; style-src 'unsafe-inline'; sandbox"


@dataclass(frozen=True, slots=True)
class Tagged:
    """A session of the tenant's that `run_matrix` tagged: its id, its tag, its creation."""

    session_id: str
    tag: JSONObject
    created: str


@dataclass(frozen=True, slots=True)
class Scan:
    by_id: dict[str, list[Tagged]]  # experiment id -> its sessions, newest first
    scanned: int
    complete: bool  # False: the store has more sessions than a request looks through

    def to_json(self) -> JSONObject:
        return {"sessions": self.scanned, "limit": SCAN, "complete": self.complete}


async def scan(rt: LocalRuntime) -> Scan:
    """The tenant's tagged sessions among the store's `SCAN` most recently updated."""
    infos = await rt.store.sessions(limit=SCAN)
    by_id: dict[str, list[Tagged]] = {}
    for info in infos:
        first = await rt.store.read(info.session_id, limit=1)
        created = first[0].payload if first else None
        if not isinstance(created, SessionCreated):
            continue
        if rt.tenant is not None and created.metadata.get("tenant") != rt.tenant:
            continue  # another tenant's: never counted, named or read further
        tag: JSONValue = created.metadata.get("experiment")
        if not isinstance(tag, dict) or not isinstance(tag.get("variant"), str):
            continue
        exp = tag.get("id")
        if isinstance(exp, str) and NAME.fullmatch(exp):
            by_id.setdefault(exp, []).append(Tagged(info.session_id, tag, first[0].time))
    return Scan(by_id, len(infos), len(infos) < SCAN)


def summary(experiment_id: str, sessions: Sequence[Tagged]) -> JSONObject:
    newest = max(sessions, key=lambda s: s.created)
    plan = _plan(newest.tag)
    variants = list(plan.variants) if plan else _seen(sessions, "variant")
    tasks = [t.name for t in plan.tasks] if plan else _seen(sessions, "task")
    return {
        "experiment_id": experiment_id,
        "variants": list[JSONValue](variants[:LISTED]),
        "tasks": list[JSONValue](tasks[:LISTED]),
        "runs": len(sessions),
        "updated": newest.created,
    }


def _seen(sessions: Sequence[Tagged], key: str) -> list[str]:
    return list(dict.fromkeys(v for s in sessions if isinstance(v := s.tag.get(key), str)))


def _plan(tag: JSONObject) -> Plan | None:
    try:
        return Plan.from_json(tag.get("plan"))
    except (UsageError, TypeError, ValueError):
        return None


async def list_experiments(request: Request, rt: LocalRuntime) -> Response:
    found = await scan(rt)
    items = [summary(exp, sessions) for exp, sessions in found.by_id.items()]
    items.sort(key=lambda e: str(e["updated"]), reverse=True)
    return JSONResponse({"experiments": items, "scanned": found.to_json()})


async def build(rt: LocalRuntime, experiment_id: str) -> tuple[MatrixReport, JSONObject]:
    """The report of the tenant's experiment and what the server did to make it; 404 as for
    a session when the tenant has no session of it."""
    found = await scan(rt)
    sessions = found.by_id.get(experiment_id) if NAME.fullmatch(experiment_id) else None
    if not sessions:
        raise ApiError("experiment_not_found", f"no experiment {experiment_id[:100]!r}")
    kept = sessions[:MAX_RUNS]
    stored: list[StoredRun] = []
    for s in kept:
        events = await rt.store.read(s.session_id, limit=MAX_EVENTS + 1)
        if 0 < len(events) <= MAX_EVENTS:
            stored.append(StoredRun(s.session_id, s.tag, events))
    if not stored:
        raise ApiError(
            "invalid_request", f"experiment {experiment_id}: every run's log is too long"
        )
    stored.sort(key=lambda s: (s.events[0].time, s.session_id))
    plan = _plan(stored[-1].tag)
    if plan is None:
        raise ApiError("invalid_request", f"experiment {experiment_id}: its plan is malformed")
    if len(plan.variants) > MAX_VARIANTS or len(plan.variants) * len(plan.tasks) * plan.runs > (
        MAX_CELLS
    ):
        raise ApiError(
            "invalid_request",
            f"experiment {experiment_id}: its plan is larger than the server reports on "
            f"({MAX_VARIANTS} variants, {MAX_CELLS} runs); use tether experiment report",
        )
    runnable, decided = await checks.resolve(rt.code, [t.check for t in plan.tasks if t.check])
    report = await matrix_report(stored, experiment_id, find_check=runnable.get)
    by_task: JSONObject = {
        t.name: "none" if t.check is None else decided.get(t.check, "run") for t in plan.tasks
    }
    bounds: JSONObject = {
        **found.to_json(),
        "runs": len(kept),
        "runs_limit": MAX_RUNS,
        "too_long": len(kept) - len(stored),
        "events_limit": MAX_EVENTS,
        "complete": found.complete and len(sessions) <= MAX_RUNS and len(stored) == len(kept),
    }
    return report, {"checks": by_task, "scanned": bounds}


def comparisons(report: MatrixReport) -> list[JSONValue]:
    """Each variant against the first, on every metric that has pairs to compare."""
    first, *others = report.plan.variants or ("",)
    out: list[JSONValue] = []
    for other in others:
        for metric in MATRIX_METRICS:
            try:
                out.append(report.compare(other, first, metric).to_json())
            except UsageError as exc:  # no pair with a figure on both sides
                out.append({"a": other, "b": first, "metric": metric, "verdict": None,
                            "note": str(exc)[:300]})  # fmt: skip
    return out


def report_json(report: MatrixReport, made: JSONObject) -> JSONObject:
    return {**report.to_json(), **made, "comparisons": comparisons(report)}


async def get_experiment(request: Request, rt: LocalRuntime) -> Response:
    report, made = await build(rt, str(request.path_params["experiment_id"]))
    # The bootstrap is CPU work: off the event loop, so other requests go on meanwhile.
    return JSONResponse(await asyncio.to_thread(report_json, report, made))


def chart_metric(report: MatrixReport) -> str:
    """The pass rate, unless no variant has one (its checks were not run): then steps."""
    known = any(report.variant(v).pass_rate is not None for v in report.plan.variants)
    return "pass_rate" if known else "steps"


async def get_chart(request: Request, rt: LocalRuntime) -> Response:
    """`?metric=`: any of the report's metrics; by default `chart_metric`'s choice."""
    asked = request.query_params.get("metric")
    if asked is not None and asked not in METRICS:
        raise ApiError(
            "invalid_request",
            f"query parameter metric must be one of {', '.join(METRICS)}, not {asked[:40]!r}",
        )
    report, _ = await build(rt, str(request.path_params["experiment_id"]))
    metric = asked or chart_metric(report)
    svg = await asyncio.to_thread(lambda: chart_svg(report, metric))
    return Response(
        svg,
        media_type="image/svg+xml",
        headers={"Content-Security-Policy": SVG_CSP, "Cache-Control": "no-store"},
    )
