"""One task run many times on one agent (`run_experiment`), each run its own session, and
what varied between the runs, with intervals (`Report`, `render_report`). Comparing agents
is `matrix`'s; the statistics are `stats`'."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from tether.agent import Agent
from tether.errors import UsageError
from tether.experiment.stats import Interval, Summary, check_confidence, summarize, wilson
from tether.messages import JSONObject

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
        """Over the runs that know the figure, with how many do not (`Summary.unknown`);
        None when no run knows it (a model without prices: the cost)."""
        if metric not in METRICS:
            raise UsageError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
        values = [r.value(metric) for r in self.runs]
        return summarize(values, self.confidence, seed=self.experiment_id)

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
    check_confidence(confidence)
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
        lines.append(f"{metric:<9}{summary_text(metric, report.summary(metric), n)}")
    lines.append(f"sessions {' '.join(r.session_id for r in report.runs)}")
    return "\n".join(lines)


def summary_text(metric: str, s: Summary | None, n: int) -> str:
    """`mean … [low, high] median … range …`, and `k of n unknown` when some runs have no
    figure: the known mean is shown, never hidden by the runs without one."""
    if s is None:
        return f"unknown ({n} of {n} runs have no figure)"
    fmt = format_for(metric)
    text = (
        f"mean {fmt(s.mean)}   [{fmt(s.interval.low)}, {fmt(s.interval.high)}]"
        f"   median {fmt(s.median)}   range {fmt(s.low)}–{fmt(s.high)}"
    )
    return text + (f"   {s.unknown} of {n} unknown" if s.unknown else "")


def format_for(metric: str) -> Callable[[float], str]:
    if metric == "cost_usd":
        return lambda v: f"${v:.6f}"
    if metric == "seconds":
        return lambda v: f"{v:.3f} s"
    if metric in ("pass_rate", "score"):
        return lambda v: f"{v:.2f}"
    return lambda v: f"{v:,.1f}"
