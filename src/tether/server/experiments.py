"""Experiments over HTTP: a tenant's experiments, as the store's catalog knows them (its
own sessions tagged by `run_matrix`); an experiment's report (intervals, each variant
against the first, the runs) and its chart, from the runs the catalog finds by their tag. A
log is tenant input: a check it names is run only as `checks` allows (the operator's
`--allow-check`). Routes: `app`."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.errors import UsageError
from tether.events import Event, SessionCreated, SessionForked
from tether.experiment import MATRIX_METRICS, MatrixReport, chart_svg, matrix_report
from tether.experiment.plan import NAME, Plan
from tether.experiment.records import METRICS, StoredRun, find_runs
from tether.messages import JSONObject, JSONValue
from tether.runtime.local import LocalRuntime
from tether.server import checks
from tether.server.errors import ApiError
from tether.session.origin import setup_event
from tether.store.catalog import CatalogQuery, ExperimentEntry

LISTED_EXPERIMENTS = 100  # experiments a list shows, the most recently updated first
MAX_RUNS = 500  # sessions of one experiment a report folds (the newest)
MAX_EVENTS = 5_000  # a run with a longer log is left out of the report (and counted)
LISTED = 50  # variant and task names per experiment in the list
MAX_VARIANTS, MAX_CELLS = 20, 20_000  # a recorded plan larger than this is not reported on
# The chart is an image: it runs no script and loads nothing, even opened on its own.
SVG_CSP = "default-src 'none'; style-src 'unsafe-inline'; sandbox"


def _tag(first: Event | None) -> JSONObject:
    """The `experiment` tag of a run's `session.created` ({} when it has none)."""
    created = None if first is None else first.payload
    tag: JSONValue = (
        created.metadata.get("experiment")
        if isinstance(created, SessionCreated | SessionForked)
        else None
    )
    return tag if isinstance(tag, dict) else {}


async def summary(rt: LocalRuntime, entry: ExperimentEntry) -> JSONObject:
    """An experiment as the list shows it: its variants and tasks as its newest run's plan
    names them (what its runs' tags name, should that plan be malformed)."""
    query = CatalogQuery(tenant=rt.tenant, experiment=entry.experiment, sort="newest", limit=1)
    newest = await rt.store.catalog(query)
    first = await setup_event(rt.store, newest[0].session_id) if newest else None
    plan = _plan(_tag(first))
    variants = list(plan.variants) if plan else [r.variant for r in newest]
    tasks = [t.name for t in plan.tasks] if plan else [r.experiment_task for r in newest]
    return {
        "experiment_id": entry.experiment,
        "variants": list[JSONValue](variants[:LISTED]),
        "tasks": list[JSONValue](tasks[:LISTED]),
        "runs": entry.runs,
        "updated": entry.updated,
    }


def _plan(tag: JSONObject) -> Plan | None:
    try:
        return Plan.from_json(tag.get("plan"))
    except (UsageError, TypeError, ValueError):
        return None


async def list_experiments(request: Request, rt: LocalRuntime) -> Response:
    entries = await rt.store.catalog_experiments(rt.tenant, LISTED_EXPERIMENTS + 1)
    items = [await summary(rt, e) for e in entries[:LISTED_EXPERIMENTS]]
    bounds: JSONObject = {
        "limit": LISTED_EXPERIMENTS,
        "complete": len(entries) <= LISTED_EXPERIMENTS,
    }
    return JSONResponse({"experiments": items, "bounds": bounds})


async def build(rt: LocalRuntime, experiment_id: str) -> tuple[MatrixReport, JSONObject]:
    """The report of the tenant's experiment and what the server did to make it; 404 as for
    a session when the tenant has no session of it."""
    rows = (
        await find_runs(rt.store, experiment_id, rt.tenant) if NAME.fullmatch(experiment_id) else []
    )
    if not rows:
        raise ApiError("experiment_not_found", f"no experiment {experiment_id[:100]!r}")
    kept = rows[-MAX_RUNS:]  # the newest: the plan is the newest run's
    stored: list[StoredRun] = []
    too_long = 0
    for row in kept:
        events = await rt.store.read(row.session_id, limit=MAX_EVENTS + 1)
        tag = _tag(events[0] if events else None)
        if len(events) > MAX_EVENTS:
            too_long += 1
        elif isinstance(tag.get("variant"), str):  # a run `run_matrix` made
            stored.append(StoredRun(row.session_id, tag, events))
    if not stored:
        raise ApiError(
            "invalid_request", f"experiment {experiment_id}: every run's log is too long"
        )
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
        "runs": len(rows),
        "runs_limit": MAX_RUNS,
        "too_long": too_long,
        "events_limit": MAX_EVENTS,
        "complete": len(rows) <= MAX_RUNS and not too_long,
    }
    return report, {"checks": by_task, "bounds": bounds}


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
