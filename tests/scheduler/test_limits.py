"""The limit state machines, told the time explicitly."""

from __future__ import annotations

import pytest

from tether.scheduler.limits import AIMDLimit, CircuitBreaker, InputCalibration, TokenBucket


def test_a_per_minute_bucket_starts_full_and_refills_at_a_sixtieth_a_second() -> None:
    bucket = TokenBucket.per_minute(600, now=0.0)
    assert bucket.wait_for(600, 0.0) == 0.0
    bucket.take(600, 0.0)
    assert bucket.wait_for(1, 0.0) == pytest.approx(0.1)
    assert bucket.available(5.0) == pytest.approx(50)
    assert bucket.available(1000.0) == 600  # never above capacity


def test_a_bucket_in_debt_waits_for_the_debt_too() -> None:
    bucket = TokenBucket(capacity=100, rate=10, level=0, updated=0.0)
    bucket.take(50, 0.0)  # usage came back larger than reserved
    assert bucket.wait_for(10, 0.0) == pytest.approx(6.0)


def test_more_than_the_capacity_waits_for_a_full_bucket_rather_than_forever() -> None:
    bucket = TokenBucket(capacity=100, rate=10, level=0, updated=0.0)
    assert bucket.wait_for(500, 0.0) == pytest.approx(10.0)


def test_given_back_tokens_are_usable_at_once_and_never_exceed_capacity() -> None:
    bucket = TokenBucket(capacity=100, rate=1, level=0, updated=0.0)
    bucket.give(40, 0.0)
    assert bucket.wait_for(40, 0.0) == 0.0
    bucket.give(1000, 0.0)
    assert bucket.available(0.0) == 100


def test_the_backends_remaining_count_lowers_our_level_but_never_raises_it() -> None:
    bucket = TokenBucket(capacity=100, rate=1, level=80, updated=0.0)
    bucket.observe(30, 0.0)
    assert bucket.available(0.0) == 30
    bucket.observe(90, 0.0)
    assert bucket.available(0.0) == 30


def test_a_new_limit_from_the_backend_resizes_the_bucket() -> None:
    bucket = TokenBucket.per_minute(600, 0.0)
    bucket.resize(60, 0.0)
    assert (bucket.capacity, bucket.rate, bucket.available(0.0)) == (60, 1.0, 60)


def test_aimd_halves_on_congestion_and_grows_by_one_per_window_of_successes() -> None:
    limit = AIMDLimit(ceiling=20)
    assert limit.allowed == 20
    assert limit.on_congestion(sent_at=0.0, now=1.0)
    assert limit.allowed == 10
    for _ in range(10):  # one window at limit 10
        limit.on_success()
    assert 10.9 < limit.limit < 11.0  # about +1 for a window of 10
    for _ in range(200):
        limit.on_success()
    assert limit.allowed == 20  # never above the ceiling


def test_aimd_cuts_once_for_a_burst_of_failures_sent_before_the_cut() -> None:
    limit = AIMDLimit(ceiling=16)
    assert limit.on_congestion(sent_at=0.0, now=2.0)
    # Requests that left before the cut at t=2 report their 429s afterwards.
    assert not limit.on_congestion(sent_at=1.0, now=2.5)
    assert not limit.on_congestion(sent_at=1.9, now=3.0)
    assert limit.allowed == 8
    assert limit.on_congestion(sent_at=2.1, now=3.0)  # sent after the cut: a new signal
    assert limit.allowed == 4


def test_aimd_never_goes_below_its_floor() -> None:
    limit = AIMDLimit(ceiling=4)
    for t in range(20):
        limit.on_congestion(sent_at=float(t), now=float(t))
    assert limit.allowed == 1


def test_the_circuit_opens_after_a_run_of_failures_and_only_then() -> None:
    circuit = CircuitBreaker(threshold=3, cooldown=5.0)
    circuit.on_failure(False, 0.0)
    circuit.on_failure(False, 0.0)
    circuit.on_success(False)  # a success breaks the run
    circuit.on_failure(False, 1.0)
    circuit.on_failure(False, 1.0)
    assert circuit.state(1.0) == "closed"
    circuit.on_failure(False, 1.0)
    assert circuit.state(1.0) == "open"
    assert circuit.blocked_until(2.0) == 6.0


def test_a_half_open_circuit_lets_one_probe_through_and_closes_on_its_success() -> None:
    circuit = CircuitBreaker(threshold=1, cooldown=5.0)
    circuit.on_failure(False, 0.0)
    assert circuit.state(5.0) == "half_open"
    assert circuit.may_probe(5.0)
    probe = circuit.on_sent(5.0)
    assert probe and not circuit.may_probe(5.0)
    circuit.on_success(probe)
    assert circuit.state(5.0) == "closed"


def test_a_failed_probe_reopens_the_circuit_for_twice_as_long() -> None:
    circuit = CircuitBreaker(threshold=1, cooldown=5.0)
    circuit.on_failure(False, 0.0)
    probe = circuit.on_sent(5.0)
    circuit.on_failure(probe, 6.0)
    assert circuit.blocked_until(6.0) == 16.0
    probe = circuit.on_sent(16.0)
    circuit.on_failure(probe, 16.0)
    assert circuit.blocked_until(16.0) == 36.0


def test_an_abandoned_probe_frees_its_place() -> None:
    circuit = CircuitBreaker(threshold=1, cooldown=1.0)
    circuit.on_failure(False, 0.0)
    probe = circuit.on_sent(2.0)
    circuit.on_abandoned(probe)
    assert circuit.may_probe(2.0) and circuit.state(2.0) == "half_open"


def test_calibration_reserves_for_the_largest_recent_ratio() -> None:
    calibration = InputCalibration(window=3)
    assert calibration.tokens(100) == 100
    for actual in (110, 125, 105):
        calibration.observe(100, actual)
    assert calibration.tokens(1000) == 1250
    calibration.observe(100, 100)  # the 1.25 sample leaves the window after three more
    calibration.observe(100, 100)
    calibration.observe(100, 100)
    assert calibration.tokens(1000) == 1000
    calibration.observe(0, 50)  # no estimate: nothing to learn
    assert calibration.tokens(1000) == 1000
