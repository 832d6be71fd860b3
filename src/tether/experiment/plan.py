"""What an experiment that compares is asked to run: its `Task`s (a prompt, or a recorded
session to replay from a point, and a check), its `Plan` (variants x tasks x repeats, the
seed, the spend cap) and the cells of that grid; and how a check is named, found again and
applied to a run's result. Runs nothing."""

from __future__ import annotations

import importlib
import inspect
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeAlias

from tether.agent import RunResult
from tether.errors import UsageError
from tether.messages import JSONObject, JSONValue
from tether.session.fork import ForkPoint
from tether.tools.cassette import Live, check_live

CheckValue: TypeAlias = bool | int | float
Check: TypeAlias = Callable[[RunResult], CheckValue | Awaitable[CheckValue]]

# Stop reasons of a turn that did not finish its task: such a run never passes, whatever a
# check would say. `end_turn` and a custom stop condition's own reason are finished.
INCOMPLETE = frozenset(
    {
        "",
        "awaiting_approval",
        "turn_limit",
        "budget",
        "time_limit",
        "output_limit",
        "interrupted",
        "error",
    }
)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


POINTS = ("seq", "turn", "after_turn")


@dataclass(frozen=True, slots=True)
class ReplaySource:
    """A recorded session, the point its replays start from, and which calls that repeat
    no recorded one they run live (`session/replay.py`)."""

    session_id: str
    at: ForkPoint
    live: Live = "reads"

    @property
    def label(self) -> str:
        """`SESSION@turn2`: the task's name when it is given none."""
        where = next(((k, v) for k in POINTS if (v := getattr(self.at, k)) is not None), None)
        return f"{self.session_id}@{'end' if where is None else f'{where[0]}{where[1]}'}"

    def to_json(self) -> JSONObject:
        at: JSONObject = {k: v for k in POINTS if (v := getattr(self.at, k)) is not None}
        return {"session": self.session_id, "at": at, "live": self.live}

    @staticmethod
    def from_json(data: JSONValue) -> ReplaySource:
        at = data.get("at") if isinstance(data, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("session"), str):
            raise UsageError(f"an experiment's recorded replay source is malformed: {data!r}")
        return ReplaySource(
            str(data["session"]), fork_point(at), check_live(str(data.get("live", "reads")))
        )


def fork_point(data: JSONValue) -> ForkPoint:
    """`{"turn": N}`, `{"seq": N}`, `{"after_turn": N}` or `{}` (the end) as a `ForkPoint`
    (`UsageError`, saying what is wrong, for anything else)."""
    if not isinstance(data, dict) or set(data) - set(POINTS):
        raise UsageError(f"a fork point is {{turn|seq|after_turn: N}}, not {data!r}")
    given: dict[str, int] = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"a fork point's {key} is a whole number from 1, not {value!r}")
        given[key] = value
    return ForkPoint(given.get("seq"), given.get("turn"), given.get("after_turn"))


@dataclass(frozen=True, slots=True)
class Task:
    """`Task(prompt, check=fn)`: `check` is given a finished run's `RunResult` and returns
    pass/fail (a bool) or a score (a number; the run passes at `pass_at` or above). Without
    one, a run passes when it finished (`end_turn` or a custom stop). `name` identifies the
    task across runs of the experiment (by default, the prompt itself). A task made by
    `from_session` replays a recorded session instead of sending a prompt."""

    prompt: str
    check: Check | None = None
    name: str | None = None
    pass_at: float = 1.0
    source: ReplaySource | None = None

    @property
    def key(self) -> str:
        if self.name is not None:
            return self.name
        return self.prompt if self.source is None else self.source.label

    @staticmethod
    def from_session(
        session_id: str,
        *,
        at: ForkPoint,
        check: Check | None = None,
        name: str | None = None,
        pass_at: float = 1.0,
        live: Live = "reads",
    ) -> Task:
        """A task that replays session `session_id` (in the variants' store) from `at`: each
        run is a replay of its remainder by the variant (`session.replay.replay`, its tool
        results a cassette, `live` the policy for the calls that repeat none), tagged with
        its source, so two variants' runs of the task pair by source session. Without a
        check, a run passes when every replayed turn finished; a check is given the
        replay's last turn's result (its steps, tokens and cost count all its turns)."""
        return Task("", check, name, pass_at, ReplaySource(session_id, at, check_live(live)))


@dataclass(frozen=True, slots=True)
class PlannedTask:
    """A task as the experiment records it: its key, its check as `MODULE:QUALNAME` (found
    again by import to rebuild the report from the store), and its pass mark."""

    name: str
    check: str | None
    pass_at: float
    source: ReplaySource | None = None

    def to_json(self) -> JSONObject:
        out: JSONObject = {"name": self.name, "check": self.check, "pass_at": self.pass_at}
        if self.source is not None:  # a prompt's task records what it always did
            out["source"] = self.source.to_json()
        return out


@dataclass(frozen=True, slots=True)
class Cell:
    variant: str
    task: str
    repeat: int


@dataclass(frozen=True, slots=True)
class Plan:
    variants: tuple[str, ...]
    tasks: tuple[PlannedTask, ...]
    runs: int
    seed: int = 0
    max_cost_usd: float | None = None

    def cells(self) -> list[Cell]:
        """Every (variant, task, repeat), repeat by repeat, so that any prefix of the grid
        holds the variants about equally."""
        return [
            Cell(v, t.name, r) for r in range(self.runs) for t in self.tasks for v in self.variants
        ]

    def task(self, name: str) -> PlannedTask:
        return next(t for t in self.tasks if t.name == name)

    def to_json(self) -> JSONObject:
        return {
            "variants": list(self.variants),
            "tasks": [t.to_json() for t in self.tasks],
            "runs": self.runs,
            "seed": self.seed,
            "max_cost_usd": self.max_cost_usd,
        }

    @staticmethod
    def from_json(data: JSONValue) -> Plan:
        if not isinstance(data, dict):
            raise UsageError(f"an experiment's recorded plan is not an object: {data!r}")
        tasks = data.get("tasks")
        variants = data.get("variants")
        runs, seed, cap = data.get("runs"), data.get("seed", 0), data.get("max_cost_usd")
        if (
            not isinstance(tasks, list)
            or not isinstance(variants, list)
            or not isinstance(runs, int)
            or not isinstance(seed, int)
        ):
            raise UsageError(f"an experiment's recorded plan is malformed: {data!r}")
        planned = []
        for t in tasks:
            if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                raise UsageError(f"an experiment's recorded task is malformed: {t!r}")
            check, pass_at, source = t.get("check"), t.get("pass_at", 1.0), t.get("source")
            planned.append(
                PlannedTask(
                    str(t["name"]),
                    check if isinstance(check, str) else None,
                    float(pass_at) if isinstance(pass_at, int | float) else 1.0,
                    None if source is None else ReplaySource.from_json(source),
                )
            )
        return Plan(
            tuple(str(v) for v in variants),
            tuple(planned),
            runs,
            seed,
            float(cap) if isinstance(cap, int | float) else None,
        )


def make_plan(
    variants: list[str], tasks: list[Task], runs: int, seed: int, max_cost_usd: float | None
) -> Plan:
    """The plan of `run_matrix`'s arguments, refused (`UsageError`) when malformed."""
    if not variants:
        raise UsageError("an experiment needs at least one variant")
    for name in variants:
        if not NAME.fullmatch(name):
            raise UsageError(f"variant name {name!r}: letters, digits, '.', '_' and '-' only")
    if not tasks:
        raise UsageError("an experiment needs at least one task")
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise UsageError("two tasks have the same name (or prompt): give each a distinct name")
    if runs < 1:
        raise UsageError(f"an experiment needs at least 1 run, not {runs}")
    if max_cost_usd is not None and not (max_cost_usd > 0 and math.isfinite(max_cost_usd)):
        raise UsageError(f"max_cost_usd must be positive, not {max_cost_usd}")
    planned = tuple(
        PlannedTask(t.key, None if t.check is None else check_ref(t.check), t.pass_at, t.source)
        for t in tasks
    )
    return Plan(tuple(variants), planned, runs, seed, max_cost_usd)


def check_ref(check: Check) -> str:
    """`MODULE:QUALNAME` of a check: how the report finds it again (a lambda or a nested
    function has a name that does not import; `import_check` says so, and the report must
    then be given the check)."""
    module = getattr(check, "__module__", None) or "?"
    name = getattr(check, "__qualname__", None) or type(check).__qualname__
    return f"{module}:{name}"


def import_check(ref: str) -> Check:
    """The check a `MODULE:ATTR` names (`ATTR` may be dotted); `UsageError` if it does not
    import to a callable."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr or "<" in attr:
        raise UsageError(
            f"check {ref}: not importable as MODULE:ATTR (a lambda or a nested function); "
            "pass the checks to the report yourself"
        )
    try:
        value: object = importlib.import_module(module_name)
    except Exception as exc:
        raise UsageError(
            f"check {ref}: cannot import {module_name}: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr.split("."):
        if not hasattr(value, part):
            raise UsageError(f"check {ref}: {module_name} has no attribute {attr!r}")
        value = getattr(value, part)
    if not callable(value):
        raise UsageError(f"check {ref}: {value!r} is not callable")
    return value


@dataclass(frozen=True, slots=True)
class Checked:
    """What a check made of a run: passed, its score (1 or 0 for pass/fail), or the error
    the check raised or the value it should not have returned (then not passed)."""

    passed: bool
    score: float
    error: str | None = None


async def apply_check(check: Check | None, pass_at: float, result: RunResult) -> Checked:
    """A run that did not finish never passes, and is not shown to its check."""
    if result.stop_reason in INCOMPLETE:
        return Checked(False, 0.0)
    if check is None:
        return Checked(True, 1.0)
    try:
        value = check(result)
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:  # the check's own bug: recorded on the run, and reported
        return Checked(False, 0.0, f"{type(exc).__name__}: {exc}"[:300])
    if isinstance(value, bool):
        return Checked(value, float(value))
    if isinstance(value, int | float) and math.isfinite(value):
        return Checked(value >= pass_at, float(value))
    return Checked(False, 0.0, f"returned {value!r}, not a bool or a number"[:300])
