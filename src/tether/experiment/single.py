"""Experiments: one task run many times, each run its own session, and what varied between
the runs, with intervals.

A model's answers vary from run to run, so one run says little about a prompt, a model or a
set of tools. `run_experiment` runs the task `runs` times (up to `concurrency` at once) on
one agent; every run is a session of its own in the agent's store, tagged with the
experiment's id in `session.created`, so any run can be looked at afterwards. The report
gives how the runs ended (each stop reason's share, with a Wilson score interval) and the
mean of their steps, tokens, cost and wall time (with a bootstrap interval of the mean).
"""

from __future__ import annotations

import asyncio
import math
import random
import secrets
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tether.agent import Agent
from tether.errors import UsageError
from tether.messages import JSONObject

BOOTSTRAP_RESAMPLES = 2_000
METRICS = ("steps", "tokens", "cost_usd", "seconds")


@dataclass(frozen=True, slots=True)
class RunRecord:
    session_id: str
    stop_reason: str
    steps: int
    tokens: int  # input and output
    cost_usd: float | None
    seconds: float

    def value(self, metric: str) -> float | None:
        value: float | int | None = getattr(self, metric)
        return None if value is None else float(value)


@dataclass(frozen=True, slots=True)
class Interval:
    low: float
    high: float

    def to_json(self) -> JSONObject:
        return {"low": self.low, "high": self.high}


@dataclass(frozen=True, slots=True)
class Summary:
    """The mean over the runs, the interval it lies in at the report's confidence, and the
    median and range for the shape."""

    mean: float
    interval: Interval
    median: float
    low: float
    high: float

    def to_json(self) -> JSONObject:
        return {
            "mean": self.mean,
            "interval": self.interval.to_json(),
            "median": self.median,
            "min": self.low,
            "max": self.high,
        }


@dataclass(frozen=True, slots=True)
class Report:
    experiment_id: str
    task: str
    model: str
    confidence: float
    runs: tuple[RunRecord, ...]

    def outcomes(self) -> dict[str, tuple[int, Interval]]:
        """Each stop reason: how many runs ended so, and the interval of its share."""
        counts = Counter(r.stop_reason for r in self.runs)
        n = len(self.runs)
        return {
            reason: (count, wilson(count, n, self.confidence))
            for reason, count in counts.most_common()
        }

    def summary(self, metric: str) -> Summary | None:
        """None when some run does not know the figure (a model without prices: the cost)."""
        if metric not in METRICS:
            raise UsageError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
        values = [r.value(metric) for r in self.runs]
        known = [v for v in values if v is not None]
        if not known or len(known) < len(values):
            return None
        return Summary(
            statistics.fmean(known),
            bootstrap_mean(known, self.confidence, seed=self.experiment_id),
            statistics.median(known),
            min(known),
            max(known),
        )

    def to_json(self) -> JSONObject:
        summaries = {m: self.summary(m) for m in METRICS}
        return {
            "experiment_id": self.experiment_id,
            "task": self.task,
            "model": self.model,
            "runs": len(self.runs),
            "confidence": self.confidence,
            "outcomes": {
                reason: {"count": count, "share": count / len(self.runs), **share.to_json()}
                for reason, (count, share) in self.outcomes().items()
            },
            "metrics": {m: None if s is None else s.to_json() for m, s in summaries.items()},
            "sessions": [r.session_id for r in self.runs],
        }


def wilson(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """The Wilson score interval of a share: unlike the normal approximation it stays within
    [0, 1] and says something even at 0 or n successes."""
    if n <= 0 or not 0 <= successes <= n:
        raise UsageError(f"a share needs 0 <= successes <= n and n > 0, not {successes}/{n}")
    z = _z(confidence)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # At 0 or n successes the bound is exactly 0 or 1; rounding would leave a speck.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(low, high)


def bootstrap_mean(
    values: Sequence[float], confidence: float = 0.95, *, seed: int | str = 0
) -> Interval:
    """The percentile bootstrap interval of the mean: no assumption about the shape of the
    values (run times and token counts are skewed), and the same for the same `seed`."""
    if not values:
        raise UsageError("a bootstrap interval needs at least one value")
    _z(confidence)  # checks it
    rng = random.Random(seed)
    n = len(values)
    means = sorted(statistics.fmean(rng.choices(values, k=n)) for _ in range(BOOTSTRAP_RESAMPLES))
    tail = (1 - confidence) / 2
    low = means[int(tail * (BOOTSTRAP_RESAMPLES - 1))]
    high = means[math.ceil((1 - tail) * (BOOTSTRAP_RESAMPLES - 1))]
    return Interval(low, high)


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise UsageError(f"confidence must be between 0 and 1, not {confidence}")
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2)


async def run_experiment(
    agent: Agent,
    task: str,
    runs: int,
    *,
    concurrency: int = 4,
    confidence: float = 0.95,
    on_progress: Callable[[Report], None] | None = None,
) -> Report:
    """Run `task` `runs` times on `agent`, each in a new session, at most `concurrency` at
    once; the sessions carry `metadata.experiment` (its id and task), so the agent should run
    nothing else meanwhile. A run that raises (a store failure) fails the experiment: a
    report must not be quietly about fewer runs than asked for.

    `on_progress` is told, as each run ends, the report of the runs ended so far (in the
    order they ended): a running tally, and what is left to report should the experiment be
    cancelled (its unfinished runs end `interrupted` and are not in it)."""
    if runs < 1:
        raise UsageError(f"an experiment needs at least 1 run, not {runs}")
    if concurrency < 1:
        raise UsageError(f"concurrency must be at least 1, not {concurrency}")
    _z(confidence)
    experiment_id = f"exp_{secrets.token_hex(6)}"
    saved = agent.metadata
    agent.metadata = {**saved, "experiment": {"id": experiment_id, "task": task}}
    gate = asyncio.Semaphore(concurrency)
    ended: list[RunRecord] = []

    async def one() -> RunRecord:
        async with gate:
            started = time.perf_counter()
            result = await agent.run(task)
            usage = result.usage
            record = RunRecord(
                result.session_id,
                result.stop_reason or "-",
                result.steps,
                usage.input_tokens + usage.output_tokens,
                result.cost_usd,
                time.perf_counter() - started,
            )
        ended.append(record)
        if on_progress is not None:
            on_progress(Report(experiment_id, task, agent.model.name, confidence, tuple(ended)))
        return record

    try:
        # A task group, not gather: cancelled, it returns only once every run has closed
        # its turn, so the caller may close the agent's store then.
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one()) for _ in range(runs)]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None  # the first run that raised, as itself
    finally:
        agent.metadata = saved
    records = tuple(t.result() for t in tasks)
    return Report(experiment_id, task, agent.model.name, confidence, records)


def render_report(report: Report) -> str:
    n = len(report.runs)
    level = f"{report.confidence:.0%}"
    lines = [
        f"experiment {report.experiment_id} · {n} run(s) of {report.task!r} on "
        f"{report.model} · {level} intervals"
    ]
    for i, (reason, (count, share)) in enumerate(report.outcomes().items()):
        label = "ended" if i == 0 else ""
        lines.append(
            f"{label:<9}{reason:<16}{count:>5}/{n:<5}{count / n:>6.0%}   "
            f"[{share.low:.0%}, {share.high:.0%}]"
        )
    for metric in METRICS:
        s = report.summary(metric)
        if s is None:
            lines.append(f"{metric:<9}unknown (some run has no figure)")
            continue
        fmt = _format(metric)
        lines.append(
            f"{metric:<9}mean {fmt(s.mean)}   [{fmt(s.interval.low)}, {fmt(s.interval.high)}]"
            f"   median {fmt(s.median)}   range {fmt(s.low)}–{fmt(s.high)}"
        )
    lines.append(f"sessions {' '.join(r.session_id for r in report.runs)}")
    return "\n".join(lines)


def _format(metric: str) -> Callable[[float], str]:
    if metric == "cost_usd":
        return lambda v: f"${v:.6f}"
    if metric == "seconds":
        return lambda v: f"{v:.3f} s"
    return lambda v: f"{v:,.1f}"
