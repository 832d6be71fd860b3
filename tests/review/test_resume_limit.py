"""A review stopped by a limit of its own turn stays open and is continued with a larger one
(`resume_review(..., limits={...})` and `tether review --resume ID --max-steps N`, run for
real with scripted participants): it ends as the same review run without the limit does,
and a resume that names what a review cannot change, or a review that is not there, is
refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

import pytest

from invariants import read_checked
from review import participants as p
from review.test_cli_review import M, plan, tether
from tether import Agent, Limits
from tether.errors import UsageError
from tether.review import resume_review, review
from tether.store import MemoryStore

__all__ = ["plan"]


class Cast(TypedDict):
    proposer: Agent
    critics: list[Agent]


def cast() -> Cast:
    return Cast(
        proposer=p.agent(p.shortening, "writer"),
        critics=[p.agent(p.stubborn, "stubborn"), p.agent(p.wordy, "wordy")],
    )


async def state(store: MemoryStore, session_id: str) -> str:
    row = await store.catalog_row(session_id)
    assert row is not None
    return row.state


async def test_a_review_stopped_by_a_limit_goes_on_with_a_larger_one_as_if_never_stopped() -> None:
    whole = await review(p.ARTIFACT, store=MemoryStore(), **cast())
    assert whole.stop_reason == "converged"

    store = MemoryStore()
    stopped = await review(
        p.ARTIFACT,
        limits=Limits(max_steps=4),
        store=store,
        **cast(),
    )
    assert stopped.stop_reason == "budget"
    assert await state(store, stopped.session_id) == "idle"  # open: it can be continued

    # Two more steps: not enough, stopped again, still open.
    again = await resume_review(
        stopped.session_id,
        store=store,
        limits={"max_steps": 2},
        **cast(),
    )
    assert again.stop_reason == "budget" and "max_steps=2" in (again.detail or "")
    done = await resume_review(
        stopped.session_id,
        store=store,
        limits={"max_steps": 50},
        **cast(),
    )
    assert done.stop_reason == "converged"
    assert (done.artifact, done.ledger, done.critics) == (
        whole.artifact,
        whole.ledger,
        whole.critics,
    )
    assert await state(store, stopped.session_id) == "completed"
    await read_checked(store, stopped.session_id)

    # Ended: read back as it is, nothing run.
    seq = await store.last_seq(stopped.session_id)
    read_back = await resume_review(stopped.session_id, store=store, **cast())
    assert read_back.stop_reason == "converged"
    assert await store.last_seq(stopped.session_id) == seq


async def test_a_limit_the_review_does_not_have_is_refused() -> None:
    store = MemoryStore()
    stopped = await review(
        p.ARTIFACT,
        limits=Limits(max_steps=4),
        store=store,
        **cast(),
    )
    seq = await store.last_seq(stopped.session_id)
    with pytest.raises(UsageError, match="no limit 'max_rounds'"):
        await resume_review(
            stopped.session_id,
            store=store,
            limits={"max_rounds": 9},
            **cast(),
        )
    assert await store.last_seq(stopped.session_id) == seq


def test_tether_review_resume_continues_a_review_stopped_by_max_steps(plan: Path) -> None:
    participants = (
        "--proposer", f"{M}shortening_model",
        "--critic", f"{M}stubborn_model", "--critic", f"{M}wordy_model",
        "--store", "sqlite:///r.db", "--json",
    )  # fmt: skip
    first = tether("review", "plan.md", *participants, "--max-steps", "3", cwd=plan.parent)
    assert first.returncode == 3, first.stderr
    stopped = json.loads(first.stdout)
    assert stopped["stop_reason"] == "budget"

    resumed = tether(
        "review", "--resume", stopped["session_id"], *participants, "--max-steps", "50",
        "--out", "revised.md", cwd=plan.parent,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    done = json.loads(resumed.stdout)
    assert (done["session_id"], done["stop_reason"]) == (stopped["session_id"], "converged")
    assert [(o["id"], o["disposition"]) for o in done["ledger"]] == [
        ("critic1#1", "accepted"),
        ("critic2#1", "rejected"),
    ]
    revised = (plan.parent / "revised.md").read_text()
    assert revised == "The plan: a short introduction, then the steps.\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--resume", "ses_nothere"], "ses_nothere"),
        (["plan.md", "--resume", "ses_x", "--max-rounds", "9"], "--max-rounds and --stable-rounds"),
        ([], "tether review needs a FILE to review (or --resume ID)"),
    ],
)
def test_a_bad_resume_is_one_line(plan: Path, args: list[str], message: str) -> None:
    # A store to find nothing in.
    made = tether(
        "review", "plan.md", "--proposer", f"{M}shortening_model", "--critic",
        f"{M}garbled_model", "--store", "sqlite:///r.db", cwd=plan.parent,
    )  # fmt: skip
    assert made.returncode == 1, made.stderr
    out = tether(
        "review", *args, "--proposer", f"{M}shortening_model", "--critic", f"{M}stubborn_model",
        "--store", "sqlite:///r.db", cwd=plan.parent,
    )  # fmt: skip
    assert out.returncode in (1, 2), out.stderr
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
