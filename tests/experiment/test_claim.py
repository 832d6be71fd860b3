"""One experiment id runs in one process at a time: the second is refused with one line naming
the holder, a holder that died on this machine is taken over at once, one that died elsewhere
when its claim runs out; the claim is renewed while the experiment runs and let go at its end."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from experiment.test_cli import STALLING, as_json, command, env, finished_and_hanging
from tether import Agent, tool
from tether.errors import ExperimentRunning, UsageError
from tether.experiment import Task, run_matrix
from tether.experiment.claim import CLAIM_PREFIX
from tether.store import MemoryStore, SQLiteStore
from tether.store.base import Lease, Store
from tether.testing import ScriptedModel, call
from tether.testing.scripted import Hang

GO = Task("go", name="go")
# A claim as a process on another machine holds it: never taken over, only run out.
ELSEWHERE = "elsewhere:41:0123456789ab:abcdef"


def answering(store: Store) -> dict[str, Agent]:
    return {"a": Agent(ScriptedModel(["done"]), store=store)}


def hanging(store: Store) -> dict[str, Agent]:
    return {"a": Agent(ScriptedModel([Hang()]), store=store)}


async def held(store: Store, experiment_id: str, deadline: float = 30.0) -> Lease:
    """The experiment's claim, once someone holds it."""
    ends = time.monotonic() + deadline
    while (lease := await store.current_lease(CLAIM_PREFIX + experiment_id)) is None:
        assert time.monotonic() < ends, f"nobody claimed experiment {experiment_id}"
        await asyncio.sleep(0.02)
    return lease


def start_busy(cwd: Path) -> subprocess.Popen[str]:
    """Experiment `busy` in a process of its own, whose model calls all hang."""
    return subprocess.Popen(
        command("run", "stalling.toml", "--id", "busy", "--json"),
        cwd=cwd, env=env(EXPERIMENT_HANG_AFTER="0"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def run_busy(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command("run", "stalling.toml", "--id", "busy", "--json"),
        cwd=cwd, env=env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


async def test_a_second_process_is_refused_and_a_holder_killed_here_is_taken_over_at_once(
    tmp_path: Path,
) -> None:
    (tmp_path / "stalling.toml").write_text(STALLING)
    first = start_busy(tmp_path)
    try:
        deadline = time.monotonic() + 60
        while await finished_and_hanging(tmp_path / "e.db") != (0, 2):
            assert time.monotonic() < deadline, "the first process never started its runs"
            assert first.poll() is None, first.communicate()
            await asyncio.sleep(0.05)

        second = await asyncio.to_thread(run_busy, tmp_path)
        assert second.returncode == 2 and second.stdout == ""
        [line] = second.stderr.splitlines()
        assert line.startswith(
            f"tether: error: experiment busy is being run by process {first.pid} on "
            f"{socket.gethostname()}: one process runs an experiment at a time; run it again "
            "once that one has ended (if it died, its claim runs out at "
        ), line
        # It ran nothing: the first process's two hanging runs are all there is.
        assert await finished_and_hanging(tmp_path / "e.db") == (0, 2)
        assert first.poll() is None

        first.send_signal(signal.SIGKILL)  # no release: its claim is left unexpired
        await asyncio.to_thread(first.communicate, timeout=60)
    finally:
        first.kill()
    store = SQLiteStore(str(tmp_path / "e.db"))
    try:
        assert (await store.current_lease(CLAIM_PREFIX + "busy")) is not None
    finally:
        await store.close()
    # Its process is gone from this machine: the claim is taken over without waiting.
    started = time.monotonic()
    report = as_json(await asyncio.to_thread(run_busy, tmp_path))
    assert report["ran"] == 10 and report["missing"] == 0
    assert time.monotonic() - started < 30  # not the claim's 30 s ttl


async def test_a_claim_held_elsewhere_refuses_until_it_runs_out(store: Store) -> None:
    await refused_until_it_runs_out(store)


async def refused_until_it_runs_out(store: Store) -> None:
    """A claim of a process on another machine: refused, nothing stored, until it runs out."""
    taken = await store.claim(CLAIM_PREFIX + "far", ELSEWHERE, 1.0)
    with pytest.raises(ExperimentRunning) as refused:
        await run_matrix(answering(store), [GO], 2, experiment_id="far")
    assert str(refused.value).startswith(
        "experiment far is being run by process 41 on elsewhere: one process runs an "
        "experiment at a time"
    )
    assert refused.value.experiment_id == "far" and refused.value.expires == taken.expires
    assert await store.sessions() == []  # refused before anything was stored
    ends = time.monotonic() + 30
    while await store.current_lease(CLAIM_PREFIX + "far") is not None:
        assert time.monotonic() < ends, "the claim never ran out"
        await asyncio.sleep(0.05)  # the store's own clock says when it ran out
    report = await run_matrix(answering(store), [GO], 2, experiment_id="far")
    assert report.ran == 2 and report.missing() == []
    assert await store.current_lease(CLAIM_PREFIX + "far") is None  # let go at the end


async def test_the_claim_is_renewed_while_it_runs_and_let_go_when_it_is_cancelled(
    store: Store,
) -> None:
    await renewed_then_let_go(store)


async def renewed_then_let_go(store: Store) -> None:
    """A run that lasts longer than its claim's ttl keeps it; cancelled, it lets it go."""
    running = asyncio.create_task(
        run_matrix(hanging(store), [GO], 1, experiment_id="long", lease_ttl=0.6)
    )
    try:
        first = await held(store, "long")
        ends = time.monotonic() + 30
        while (now := await held(store, "long")).expires <= first.expires:
            assert time.monotonic() < ends, "the claim was never renewed"
            await asyncio.sleep(0.02)
        assert (now.owner, now.generation) == (first.owner, first.generation)
        # In this process too: a second run of the id beside the first is refused.
        with pytest.raises(ExperimentRunning, match="experiment long is being run by process"):
            await run_matrix(answering(store), [GO], 1, experiment_id="long")
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    assert await store.current_lease(CLAIM_PREFIX + "long") is None
    report = await run_matrix(answering(store), [GO], 1, experiment_id="long")
    assert report.ran == 1 and [r.stop_reason for r in report.aside] == ["interrupted"]


@pytest.mark.parametrize("ttl", [0.0, -1.0, float("nan"), float("inf")])
async def test_a_claim_needs_a_positive_finite_ttl(ttl: float) -> None:
    store = MemoryStore()
    with pytest.raises(UsageError, match="lease_ttl must be positive and finite"):
        await run_matrix(answering(store), [GO], 1, lease_ttl=ttl)
    assert await store.sessions() == []


async def test_a_run_whose_claim_was_taken_over_starts_no_new_run(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    go = asyncio.Event()

    @tool
    async def wait() -> str:
        """Wait for the test."""
        await go.wait()
        return "went"

    agent = Agent(ScriptedModel([call("wait"), "done"]), tools=[wait], store=store)
    running = asyncio.create_task(
        run_matrix({"a": agent}, [GO], 3, concurrency=1, experiment_id="stall", lease_ttl=0.3)
    )
    # The holder stalls past its claim and another process takes it: as if it ran out.
    mine = await held(store, "stall")
    await store.release(mine)
    await store.claim(CLAIM_PREFIX + "stall", ELSEWHERE, 60.0)
    ends = time.monotonic() + 30
    while "the claim was taken over" not in caplog.text:
        assert time.monotonic() < ends and not running.done(), "the loss was never noticed"
        await asyncio.sleep(0.02)
    go.set()
    report = await running
    assert report.ran == 1 and len(report.missing()) == 2
    assert report.halted is not None and "another process took the experiment over" in (
        report.halted
    )
    # Its release at the end let go of nothing that was no longer its.
    now = await store.current_lease(CLAIM_PREFIX + "stall")
    assert now is not None and now.owner == ELSEWHERE
