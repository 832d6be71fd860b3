"""Experiments that compare: `run_matrix` runs every (variant, task, repeat) cell of a plan
as a session of its own, tagged so that the same experiment id run again runs only the
cells still missing; `read_matrix` rebuilds the report from the store alone. The records
are `records`'; the statistics `report`'s."""

from __future__ import annotations

import asyncio
import copy
import random
import secrets
from collections.abc import Callable, Mapping, Sequence

from tether.agent import Agent
from tether.errors import UsageError
from tether.events import SessionForked
from tether.experiment.claim import ExperimentClaim, claiming
from tether.experiment.plan import NAME, Cell, Check, Plan, Task, import_check, make_plan
from tether.experiment.records import (
    MatrixRun,
    StoredRun,
    counted_and_abandoned,
    read_sessions,
    record_of,
)
from tether.experiment.report import MatrixReport, ordered
from tether.experiment.stats import check_confidence
from tether.messages import JSONObject
from tether.session.fork import KEEP
from tether.session.origin import setup_in
from tether.session.replay import replay, source_point
from tether.store.base import Store

Progress = Callable[[MatrixReport], None]
FindCheck = Callable[[str], Check | None]  # a recorded MODULE:QUALNAME -> its check, or None


async def run_matrix(
    variants: Mapping[str, Agent],
    tasks: Sequence[Task],
    runs: int,
    *,
    concurrency: int = 4,
    seed: int = 0,
    experiment_id: str | None = None,
    max_cost_usd: float | None = None,
    confidence: float = 0.95,
    on_progress: Progress | None = None,
    on_start: Progress | None = None,
    lease_ttl: float = 30.0,
) -> MatrixReport:
    """Run each task `runs` times on each variant, at most `concurrency` runs at once, each
    run a new session (ended with its turn) whose `session.created` metadata `experiment`
    names the experiment, variant, task and repeat. The cells run repeat by repeat, in an
    order shuffled by `seed` within each repeat; `seed` also seeds the report's intervals.

    `experiment_id` names the experiment (a new `exp_...` when None). Given the id of one in
    the variants' store, it is continued: only the cells without a finished run are run.
    A run whose turn never ended (its process died) or ended `interrupted` is *abandoned*:
    kept in the store and in `report.aside`, never counted, and its cell run again in a
    new session. A variant must be the same agent as before (model, system, tools and
    limits), else `UsageError`: a continuation must not mix two agents under one name.

    `max_cost_usd` caps the experiment's spend, over all its sessions: once the known cost
    reaches it, or a run's cost is unknown (so it cannot be kept), no new run starts (the
    runs under way finish) and the report says so. `on_start` is told the report of the runs
    done before, once the experiment is this process's and before any run starts;
    `on_progress` the report so far as each run ends. All variants must share one store
    object.

    Earlier runs are those of the variants' tenant (their metadata's `tenant`), if any.
    One process runs an experiment at a time: the run holds a claim on the experiment id in
    the store for as long as it runs, and raises `ExperimentRunning` (naming the holder)
    when another process holds it. A holder that died lets its claim run out `lease_ttl`
    seconds after its last renewal, or at once when it died on this machine (`claim`)."""
    if concurrency < 1:
        raise UsageError(f"concurrency must be at least 1, not {concurrency}")
    check_confidence(confidence)
    plan = make_plan(list(variants), list(tasks), runs, seed, max_cost_usd)
    experiment_id = _experiment_id(experiment_id)
    store = _one_store(variants)
    # Taken before anything of the experiment is read: what is missing is this process's.
    tenant = _tenant(variants)
    for task in tasks:  # a source that is not there fails now, not at its first run
        if task.source is not None:
            await source_point(store, task.source.session_id, task.source.at, tenant)
    async with claiming(store, experiment_id, lease_ttl) as claim:
        by_name = {t.key: t for t in tasks}
        checks = {t.key: t.check for t in tasks}
        earlier = await read_sessions(store, experiment_id, tenant)
        for stored in earlier:
            _check_same_agent(stored, variants, experiment_id)
        records = await _records(earlier, plan, checks)
        tag: JSONObject = {"id": experiment_id, "plan": plan.to_json()}
        agents = {name: _tagged_copies(agent) for name, agent in variants.items()}

        state = _Live(experiment_id, plan, confidence, records, claim)
        todo = iter(_order(state.todo(), seed))
        if on_start is not None:
            on_start(state.report())

        async def worker() -> None:
            while True:
                # No await between the check of the cap and the take of the next cell: no other
                # worker can take one in between.
                cell = None if state.halted() is not None else next(todo, None)
                if cell is None:
                    return
                task = by_name[cell.task]
                agent = agents[cell.variant](
                    {**tag, "variant": cell.variant, "task": cell.task, "repeat": cell.repeat}
                )
                session_id = await _run_cell(agent, task, tenant)
                stored = StoredRun(session_id, {}, await store.read(session_id))
                state.add(await record_of(stored, cell, task.check, task.pass_at))
                if on_progress is not None:
                    on_progress(state.report())

        try:
            # A task group: cancelled, it returns once every run has closed its turn.
            async with asyncio.TaskGroup() as group:
                for _ in range(min(concurrency, len(plan.cells()))):
                    group.create_task(worker())
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None  # the first run that raised, as itself
        return state.report()


async def _run_cell(agent: Agent, task: Task, tenant: str | None) -> str:
    """Run one cell, ended with its last turn: the task's prompt in a new session, or its
    replay (with the variant's system prompt, else the source's); its session id."""
    if task.source is None:
        return (await agent.run(task.prompt, end_session=True)).session_id
    source = task.source
    system = KEEP if agent.system is None else agent.system
    done = await replay(
        agent, source.session_id, source.at, system=system, live=source.live, tenant=tenant
    )
    return done.session_id


async def read_matrix(
    store: Store,
    experiment_id: str,
    *,
    checks: Mapping[str, Check] | None = None,
    confidence: float = 0.95,
    find_check: FindCheck | None = None,
) -> MatrixReport:
    """The report of an experiment from the store alone: its plan as its newest session
    recorded it, every run folded from its log and checked again. A check is found by the
    `MODULE:QUALNAME` recorded for its task, unless `checks` gives it (by task name): so a
    check must depend on the run's result alone, and a fixed check re-scores old runs.
    `find_check` replaces the import of a recorded check (`matrix_report`)."""
    check_confidence(confidence)
    stored = await read_sessions(store, experiment_id)
    if not stored:
        raise UsageError(f"no experiment {experiment_id!r} in store {store.url}")
    return await matrix_report(
        stored, experiment_id, checks=checks, confidence=confidence, find_check=find_check
    )


async def matrix_report(
    stored: Sequence[StoredRun],
    experiment_id: str,
    *,
    checks: Mapping[str, Check] | None = None,
    confidence: float = 0.95,
    find_check: FindCheck | None = None,
) -> MatrixReport:
    """The report of an experiment's stored runs (oldest first; at least one), as
    `read_matrix` makes it. `find_check(ref)` turns a recorded `MODULE:QUALNAME` into its
    check (default: `import_check`); when it returns None, that task's finished runs are
    not checked and their pass and score are unknown (`MatrixRun.checked`): how a caller
    that must not import what a log names (a server) still reports the rest."""
    check_confidence(confidence)
    plan = Plan.from_json(stored[-1].tag.get("plan"))
    given = checks or {}
    find = import_check if find_check is None else find_check
    found: dict[str, Check | None] = {}
    unrun: set[str] = set()
    for t in plan.tasks:
        check = given.get(t.name) or (find(t.check) if t.check else None)
        if check is None and t.check and t.name not in given:
            unrun.add(t.name)
        found[t.name] = check
    records = await _records(stored, plan, found, unrun)
    counted, aside = counted_and_abandoned(records)
    return MatrixReport(experiment_id, plan, confidence, ordered(plan, counted), tuple(aside))


class _Live:
    """The records of a running experiment, and whether it may start another run."""

    def __init__(
        self,
        experiment_id: str,
        plan: Plan,
        confidence: float,
        records: list[MatrixRun],
        claim: ExperimentClaim,
    ) -> None:
        self.experiment_id, self.plan, self.confidence = experiment_id, plan, confidence
        self.records = records
        self.claim = claim
        self.ran = 0

    def add(self, record: MatrixRun) -> None:
        self.records.append(record)
        self.ran += 1

    def todo(self) -> list[Cell]:
        counted, _ = counted_and_abandoned(self.records)
        return [c for c in self.plan.cells() if c not in counted]

    def halted(self) -> str | None:
        if self.claim.lost:
            return "another process took the experiment over (this one stalled past its claim)"
        cap = self.plan.max_cost_usd
        if cap is None:
            return None
        unknown = sum(r.cost_usd is None and r.steps > 0 for r in self.records)
        if unknown:
            return f"a run's cost is unknown ({unknown} of {len(self.records)}), so the spend cap cannot be kept"
        spent = sum(r.cost_usd or 0.0 for r in self.records)
        if spent >= cap:
            return f"the spend cap was reached (${spent:.6f} of ${cap:.6f})"
        return None

    def report(self) -> MatrixReport:
        counted, aside = counted_and_abandoned(self.records)
        return MatrixReport(
            self.experiment_id,
            self.plan,
            self.confidence,
            ordered(self.plan, counted),
            tuple(aside),
            self.ran,
            self.halted(),
        )


async def _records(
    stored: Sequence[StoredRun],
    plan: Plan,
    checks: Mapping[str, Check | None],
    unrun: frozenset[str] | set[str] = frozenset(),
) -> list[MatrixRun]:
    """The records of the stored runs whose cell is in the plan; the checks of the tasks
    in `unrun` are not run."""
    records = []
    for run in stored:
        cell = run.cell
        if cell is None or cell.variant not in plan.variants or cell.task not in checks:
            continue
        task = plan.task(cell.task)
        records.append(
            await record_of(
                run, cell, checks[cell.task], task.pass_at, run_check=cell.task not in unrun
            )
        )
    return records


def _order(cells: list[Cell], seed: int) -> list[Cell]:
    """Repeat by repeat, shuffled within each: any prefix holds the variants about equally,
    and neither always runs first (a rate limit or a warm cache would favour it)."""
    rng = random.Random(seed)
    blocks: dict[int, list[Cell]] = {}
    for cell in cells:
        blocks.setdefault(cell.repeat, []).append(cell)
    for block in blocks.values():
        rng.shuffle(block)
    return [c for r in sorted(blocks) for c in blocks[r]]


def new_experiment_id() -> str:
    return f"exp_{secrets.token_hex(6)}"


def _experiment_id(given: str | None) -> str:
    if given is None:
        return new_experiment_id()
    if not NAME.fullmatch(given):
        raise UsageError(f"experiment id {given!r}: letters, digits, '.', '_' and '-' only")
    return given


def _one_store(variants: Mapping[str, Agent]) -> Store:
    stores = {id(agent.store): agent.store for agent in variants.values()}
    if len(stores) != 1:
        raise UsageError(
            "the variants of an experiment must share one store object "
            "(Agent(..., store=store) for each): its runs are looked up there"
        )
    return next(iter(stores.values()))


def _tenant(variants: Mapping[str, Agent]) -> str | None:
    """The tenant the variants' runs belong to (their metadata's `tenant`), whose runs of
    the experiment are the ones continued; None (every tenant's) when they name none."""
    named = {agent.metadata.get("tenant") for agent in variants.values()}
    tenant = named.pop() if len(named) == 1 else None
    return tenant if isinstance(tenant, str) else None


def _tagged_copies(agent: Agent) -> Callable[[JSONObject], Agent]:
    """A maker of copies of `agent` that differ only in the `experiment` tag of their
    metadata: runs under way at once each need their own tag. The copies share the agent's
    store and its runs (made here, before copying), so closing the agent closes theirs."""
    agent.store, agent.runs  # noqa: B018  (made once, shared by the copies)

    def tagged(tag: JSONObject) -> Agent:
        one = copy.copy(agent)
        one.metadata = {**agent.metadata, "experiment": tag}
        return one

    return tagged


def _fingerprint(agent: Agent) -> JSONObject:
    return {
        "model": agent.model.name,
        "system": agent.system,
        "tools": {t.name: t.schema_hash for t in agent.toolbox},
        "limits": agent.limits.to_json(),
    }


def _check_same_agent(stored: StoredRun, variants: Mapping[str, Agent], exp: str) -> None:
    cell = stored.cell
    if cell is None or cell.variant not in variants:
        return
    created = setup_in(stored.events)
    recorded: JSONObject = {
        "model": getattr(created, "model", None),
        "system": getattr(created, "system", None),
        "tools": getattr(created, "tools", None),
        "limits": getattr(created, "limits", None),
    }
    agent = variants[cell.variant]
    now = _fingerprint(agent)
    if isinstance(created, SessionForked) and agent.system is None:
        del recorded["system"], now["system"]  # a replay without one keeps its source's
    if recorded != now:
        differ = [k for k in now if recorded.get(k) != now[k]]
        raise UsageError(
            f"variant {cell.variant!r} of experiment {exp} ran as another agent before "
            f"(its {', '.join(differ)} differ, session {stored.session_id}): "
            "give the changed agent a new variant name, or start a new experiment"
        )
