"""The statistics of comparisons, pure and fast: the paired bootstrap's coverage checked by
simulation, its verdicts, Student's t quantiles, and unknown figures kept apart."""

from __future__ import annotations

import random

import pytest

from tether.experiment import Interval, Report, RunRecord, paired_bootstrap, render_report
from tether.experiment.report import verdict
from tether.experiment.stats import t_quantile

REPEATS = 200


def coverage(rate_a: float, rate_b: float, pairs: int, seed: int) -> float:
    """The share of `REPEATS` simulated experiments (pass/fail per pair, independent sides)
    whose 95% interval holds the true difference."""
    held = 0
    for repeat in range(REPEATS):
        rng = random.Random(f"{seed}/{repeat}")
        sample = [
            (float(rng.random() < rate_a), float(rng.random() < rate_b)) for _ in range(pairs)
        ]
        held += paired_bootstrap(sample, 0.95, seed=repeat).contains(rate_a - rate_b)
    return held / REPEATS


def test_the_paired_interval_holds_the_true_difference_at_least_93_percent_of_the_time() -> None:
    assert coverage(0.9, 0.5, 40, seed=1) >= 0.93


def test_the_paired_interval_holds_a_zero_difference_as_often() -> None:
    assert coverage(0.7, 0.7, 40, seed=2) >= 0.93


def test_pairing_cancels_what_the_pairs_share() -> None:
    # Tasks of very different difficulty, the same gain on each: paired, no doubt at all.
    rng = random.Random(0)
    pairs = [(base + 0.1, base) for base in (rng.uniform(0, 100) for _ in range(20))]
    interval = paired_bootstrap(pairs, seed=1)
    assert interval.low == pytest.approx(0.1) and interval.high == pytest.approx(0.1)
    assert paired_bootstrap(pairs, seed=1) == interval


def test_the_verdict_reads_the_interval_by_which_way_is_good() -> None:
    assert verdict(Interval(0.1, 0.3), "pass_rate") == "better"
    assert verdict(Interval(-0.3, -0.1), "pass_rate") == "worse"
    assert verdict(Interval(-0.1, 0.3), "pass_rate") == "within_noise"
    assert verdict(Interval(0.0, 0.0), "score") == "within_noise"
    # Steps, tokens, cost and time: less is better.
    assert verdict(Interval(0.1, 0.3), "cost_usd") == "worse"
    assert verdict(Interval(-3.0, -1.0), "steps") == "better"


def test_student_t_quantiles_match_the_tables() -> None:
    for freedom, table in ((5, 2.570582), (10, 2.228139), (20, 2.085963), (39, 2.022691)):
        assert t_quantile(0.975, freedom) == pytest.approx(table, abs=3e-3)
    assert t_quantile(0.975, 39) == pytest.approx(2.022691, abs=1e-5)


def test_the_known_mean_is_shown_beside_how_many_runs_have_no_cost() -> None:
    runs = [RunRecord(f"ses_{i}", "end_turn", 1, 10, 0.000499, 0.1) for i in range(41)]
    runs += [RunRecord(f"ses_u{i}", "end_turn", 1, 10, None, 0.1) for i in range(9)]
    report = Report("exp_x", "go", "m", 0.95, tuple(runs))
    cost = report.summary("cost_usd")
    assert cost is not None and cost.mean == pytest.approx(0.000499)
    assert (cost.known, cost.unknown) == (41, 9)
    assert "cost_usd mean $0.000499" in render_report(report)
    assert "9 of 50 unknown" in render_report(report)
    assert report.to_json()["metrics"]["cost_usd"]["unknown"] == 9  # type: ignore[index]
