"""The fork crash test on PostgreSQL (`tests/crash/test_fork_crash.py` runs the whole of it
on SQLite): a parent started through the runtime runs three turns in worker processes; forks
of it have their first worker SIGKILLed right after claiming them, and the next inside a
call of the fork's turn, after a write's effect or before an idempotent call's; a fresh
worker finishes each. Every fork passes `forking.check`: the parent's log and its effects in
the ledger unchanged, each of the fork's writes at most once, the fork's log well formed
with the parent's prefix.

One schema holds them all, so the forks run one after the other (a worker takes whatever
is runnable), each checked against the ledger as it was just before it.
"""

from __future__ import annotations

from pathlib import Path

from crash import kit
from crash.forking import (
    ON_CLAIM,
    World,
    assert_claimed_and_killed,
    assert_killed_in_call,
    check,
    run_fork,
    run_parent,
)
from tether.session.fork import ForkPoint

AT = ForkPoint(after_turn=2)
IN_CALL = ("call_6_0:after", "call_7_1:before")  # the write after its effect; idempotent


def test_forks_killed_after_the_fork_and_in_a_call_on_postgres(pg_url: str, tmp_path: Path) -> None:
    parent = run_parent(World(tmp_path, pg_url))
    reference = run_fork(parent, parent.world, AT, [])
    check(reference, reference, 3)
    for spec in IN_CALL:
        run = run_fork(parent, parent.world, AT, [ON_CLAIM, {kit.CRASH_CALL_ENV: spec}])
        try:
            assert_claimed_and_killed(run)
            assert_killed_in_call(run, spec)
            check(run, reference, 3)
        except AssertionError as exc:
            raise AssertionError(f"killed after the claim, then at {spec}: {exc}") from exc
