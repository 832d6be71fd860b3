"""The report of an experiment that compares: each variant's pass rate (Wilson interval)
and means (bootstrap intervals, unknown figures counted apart), and `compare`, the paired
difference of two variants with a verdict. Pure: built from records, reads no store."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from tether.errors import UsageError
from tether.experiment.plan import Cell, Plan
from tether.experiment.records import HIGHER_IS_BETTER, METRICS, MatrixRun
from tether.experiment.stats import (
    Interval,
    Summary,
    check_confidence,
    paired_bootstrap,
    summarize,
    wilson,
)
from tether.messages import JSONObject

Verdict = Literal["better", "worse", "within_noise"]


@dataclass(frozen=True, slots=True)
class Comparison:
    """`a` against `b` on `metric`: the mean of the paired differences `a - b` over the
    (task, repeat) cells both ran, its interval, and the verdict: `better` when the whole
    interval lies on `a`'s good side of 0 (above for pass rate and score, below for steps,
    tokens, cost and time), `worse` on the other, `within_noise` when it holds 0.
    `unpaired`: cells with a figure on one side only, left out. `paired_by`: `task`, or
    `source session` when every run is a replay (`Task.from_session`): each such task is one
    recorded session and point, so the pairs are two variants from the same real start."""

    a: str
    b: str
    metric: str
    confidence: float
    a_mean: float
    b_mean: float
    difference: float
    interval: Interval
    pairs: int
    unpaired: int
    verdict: Verdict
    paired_by: str = "task"

    def to_json(self) -> JSONObject:
        return {
            "a": self.a,
            "b": self.b,
            "metric": self.metric,
            "confidence": self.confidence,
            "a_mean": self.a_mean,
            "b_mean": self.b_mean,
            "difference": self.difference,
            "interval": self.interval.to_json(),
            "pairs": self.pairs,
            "unpaired": self.unpaired,
            "verdict": self.verdict,
            "paired_by": self.paired_by,
        }


def verdict(interval: Interval, metric: str) -> Verdict:
    sign = 1 if metric in HIGHER_IS_BETTER else -1
    low, high = sorted((sign * interval.low, sign * interval.high))
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    return "within_noise"


@dataclass(frozen=True, slots=True)
class VariantSummary:
    """A variant over its counted runs: how many passed (Wilson interval of the rate), how
    they ended, each metric's summary (None when no run knows it), how many checks raised,
    and how many runs' checks were not run (`unchecked`: their pass is unknown, and the
    rate and its interval are over the other runs)."""

    name: str
    runs: int
    passed: int
    pass_interval: Interval | None
    outcomes: dict[str, int]
    metrics: dict[str, Summary | None]
    check_errors: int
    unchecked: int = 0

    @property
    def pass_rate(self) -> float | None:
        known = self.runs - self.unchecked
        return self.passed / known if known else None

    def to_json(self) -> JSONObject:
        return {
            "runs": self.runs,
            "passed": self.passed,
            "pass_rate": self.pass_rate,
            "pass_interval": None if self.pass_interval is None else self.pass_interval.to_json(),
            "outcomes": dict(self.outcomes),
            "metrics": {m: None if s is None else s.to_json() for m, s in self.metrics.items()},
            "check_errors": self.check_errors,
            "unchecked": self.unchecked,
        }


@dataclass(frozen=True, slots=True)
class MatrixReport:
    """`runs`: one counted run per cell that has one, in the plan's order; `aside`: the
    abandoned runs (a process died or was interrupted mid-run) and duplicates, kept for the
    record and never counted. `ran`: how many runs the call that made the report ran
    (0 for a report read from the store). `halted`: why that call started no more runs,
    when it stopped before the plan was done."""

    experiment_id: str
    plan: Plan
    confidence: float
    runs: tuple[MatrixRun, ...]
    aside: tuple[MatrixRun, ...] = ()
    ran: int = 0
    halted: str | None = None

    def missing(self) -> list[Cell]:
        done = {r.cell for r in self.runs}
        return [c for c in self.plan.cells() if c not in done]

    @property
    def spent_usd(self) -> float:
        """The known cost of every session of the experiment, abandoned ones included."""
        return sum(r.cost_usd or 0.0 for r in (*self.runs, *self.aside))

    @property
    def unknown_costs(self) -> int:
        return sum(r.cost_usd is None and r.steps > 0 for r in (*self.runs, *self.aside))

    def stop_note(self) -> str | None:
        """Why cells are missing, or None when every cell has its run."""
        missing = len(self.missing())
        if not missing:
            return None
        cap = self.plan.max_cost_usd
        if self.halted is not None:
            why = self.halted
        elif cap is not None and self.spent_usd >= cap:
            why = f"the spend cap was reached (${self.spent_usd:.6f} of ${cap:.6f})"
        else:
            why = "stopped before the end; run it again with the same id to complete it"
        return f"incomplete: {missing} of {len(self.plan.cells())} runs missing; {why}"

    def of(self, variant: str) -> list[MatrixRun]:
        if variant not in self.plan.variants:
            raise UsageError(
                f"no variant {variant!r} in experiment {self.experiment_id}; "
                f"its variants: {', '.join(self.plan.variants)}"
            )
        return [r for r in self.runs if r.variant == variant]

    def variant(self, name: str) -> VariantSummary:
        runs = self.of(name)
        known = [r for r in runs if r.checked]
        passed = sum(r.passed for r in known)
        seed = f"{self.plan.seed}/{self.experiment_id}/{name}"
        return VariantSummary(
            name,
            len(runs),
            passed,
            wilson(passed, len(known), self.confidence) if known else None,
            dict(Counter(r.stop_reason for r in runs).most_common()),
            {
                m: summarize([r.value(m) for r in runs], self.confidence, seed=f"{seed}/{m}")
                for m in METRICS
                if m != "pass_rate"
            },
            sum(r.check_error is not None for r in runs),
            len(runs) - len(known),
        )

    def compare(
        self, a: str, b: str, metric: str = "pass_rate", *, confidence: float | None = None
    ) -> Comparison:
        """`a` against `b`, paired by (task, repeat), at `confidence` (the report's by
        default). `UsageError` for an unknown variant or metric, or no pair to compare."""
        if metric not in METRICS:
            raise UsageError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
        level = self.confidence if confidence is None else confidence
        check_confidence(level)
        runs_a, runs_b = self.of(a), self.of(b)
        left = {(r.task, r.repeat): r.value(metric) for r in runs_a}
        right = {(r.task, r.repeat): r.value(metric) for r in runs_b}
        replays = all(r.source for r in (*runs_a, *runs_b))
        keys = sorted(k for k in left.keys() & right.keys())
        pairs = [(x, y) for k in keys if (x := left[k]) is not None and (y := right[k]) is not None]
        unpaired = len(left.keys() | right.keys()) - len(pairs)
        if not pairs:
            raise UsageError(
                f"{a} and {b} have no (task, repeat) with a {metric} figure on both sides"
            )
        seed = f"{self.plan.seed}/{self.experiment_id}/{a}/{b}/{metric}"
        interval = paired_bootstrap(pairs, level, seed=seed)
        n = len(pairs)
        a_mean, b_mean = sum(p[0] for p in pairs) / n, sum(p[1] for p in pairs) / n
        return Comparison(
            a, b, metric, level, a_mean, b_mean, a_mean - b_mean, interval, n, unpaired,
            verdict(interval, metric), "source session" if replays else "task",
        )  # fmt: skip

    def to_json(self) -> JSONObject:
        return {
            "experiment_id": self.experiment_id,
            "plan": self.plan.to_json(),
            "confidence": self.confidence,
            "variants": {v: self.variant(v).to_json() for v in self.plan.variants},
            "cost": {"spent_usd": self.spent_usd, "unknown": self.unknown_costs},
            "missing": len(self.missing()),
            "incomplete": self.stop_note(),
            "ran": self.ran,
            "runs": [r.to_json() for r in self.runs],
            "aside": [r.to_json() for r in self.aside],
        }


def ordered(plan: Plan, counted: dict[Cell, MatrixRun]) -> tuple[MatrixRun, ...]:
    """The counted runs in the plan's order (cells outside the plan are left out)."""
    return tuple(counted[c] for c in plan.cells() if c in counted)
