"""Reviews with scripted participants on real stores: objection ids stay stable across
rounds, each stop reason is reached by the path that names it, and the ledger is read back
from the log alone."""

from __future__ import annotations

import asyncio
import json

import pytest

from invariants import read_checked
from review import participants as p
from tether import Agent, Folder, Limits, tool
from tether.errors import ProviderError, UsageError
from tether.events import Event, ModelResponded, ThreadStarted
from tether.review import CriticCount, Headline, resume_review, review, review_from_log
from tether.session import control
from tether.store import MemoryStore, Store
from tether.testing import Fail, Hang, ScriptedModel, call


def minutes(events: list[Event]) -> list[dict[str, object]]:
    """The chair's notes: the text of each of its answers, as JSON."""
    return [
        json.loads(e.payload.message.text)
        for e in events
        if e.thread == "" and isinstance(e.payload, ModelResponded) and e.payload.message.text
    ]


def threads(events: list[Event]) -> list[str]:
    return [e.thread for e in events if isinstance(e.payload, ThreadStarted)]


async def test_a_repeated_objection_keeps_its_id_and_the_review_converges(store: Store) -> None:
    result = await review(
        p.ARTIFACT,
        proposer=p.agent(p.shortening, "writer"),
        critics=[p.agent(p.stubborn, "stubborn"), p.agent(p.wordy, "wordy")],
        stable_rounds=2,
        store=store,
    )

    assert (result.stop_reason, result.rounds) == ("converged", 3)
    assert result.artifact == "The plan: a short introduction, then the steps.\n"
    assert result.original == p.ARTIFACT
    assert [(o.id, o.critic, o.text, o.first_round, o.last_round) for o in result.ledger] == [
        ("stubborn#1", "stubborn", "The introduction is too long.", 1, 3),
        ("wordy#1", "wordy", "Missing tests.", 1, 3),
    ]
    assert [(o.disposition, o.reason) for o in result.ledger] == [
        ("accepted", None),
        ("rejected", "out of scope"),
    ]
    assert result.headline == Headline(open=0, rejected=1, accepted=1)
    assert result.critics == {
        "stubborn": CriticCount(raised=1, repeated=2, accepted=1, rejected=0, open=0),
        "wordy": CriticCount(raised=1, repeated=2, accepted=0, rejected=1, open=0),
    }
    assert result.cost_usd is not None and result.cost_usd > 0  # the participants' cost

    events = await read_checked(store, result.session_id)
    # Each round: both critics (in one answer, so in parallel), then the proposer.
    assert threads(events) == [
        f"{name}-{i}" for i, name in enumerate(["stubborn", "wordy", "writer"] * 3, start=1)
    ]
    notes = minutes(events)
    raised = [
        [(o["id"], o["new"]) for o in n["objections"]]  # type: ignore[attr-defined]
        for n in notes
        if "objections" in n
    ]
    assert (
        raised
        == [[("stubborn#1", True), ("wordy#1", True)]]
        + [[("stubborn#1", False), ("wordy#1", False)]] * 2
    )
    answered = [
        [(d["id"], d["disposition"], d["changed"]) for d in n["dispositions"]]  # type: ignore[attr-defined]
        for n in notes
        if "dispositions" in n
    ]
    assert (
        answered
        == [[("stubborn#1", "accepted", True), ("wordy#1", "rejected", True)]]
        + [[("stubborn#1", "accepted", False), ("wordy#1", "rejected", False)]] * 2
    )
    assert [n.get("stable_rounds") for n in notes if "dispositions" in n] == [0, 1, 2]
    assert notes[-1]["stop"] == "converged"
    assert notes[-1]["artifact"] == result.artifact
    # The log alone gives the same review.
    assert await review_from_log(store, result.session_id) == result


async def test_critics_that_keep_raising_new_objections_stop_at_max_rounds(store: Store) -> None:
    result = await review(
        p.ARTIFACT,
        proposer=p.agent(p.deferring, "writer"),
        critics=[p.agent(p.restless, "restless")],
        max_rounds=3,
        stable_rounds=1,
        store=store,
    )

    assert (result.stop_reason, result.rounds) == ("max_rounds", 3)
    assert [(o.id, o.text, o.disposition) for o in result.ledger] == [
        (f"restless#{n}", f"Problem number {n}.", "deferred") for n in (1, 2, 3)
    ]
    assert result.headline == Headline(open=3, rejected=0, accepted=0)
    assert result.artifact == p.ARTIFACT
    await read_checked(store, result.session_id)


async def test_a_critic_that_never_answers_in_json_stops_the_review_malformed(
    store: Store,
) -> None:
    result = await review(
        p.ARTIFACT,
        proposer=p.agent(p.shortening, "writer"),
        critics=[p.agent(p.satisfied, "happy"), p.agent(p.garbled, "garbled")],
        store=store,
    )

    assert result.stop_reason == "malformed"
    assert result.detail == (
        "garbled's answer could not be used after a retry: it is not a JSON object"
    )
    assert result.ledger == ()
    events = await read_checked(store, result.session_id)
    # Only the critic whose answer was unusable is asked again, told what was wrong.
    assert threads(events) == ["happy-1", "garbled-2", "garbled-3"]
    retry = [e for e in events if e.thread == "garbled-3" and e.type == "user.message"]
    assert "could not be used: it is not a JSON object" in retry[0].payload.message.text  # type: ignore[attr-defined]
    assert "I think it is fine, mostly." in retry[0].payload.message.text  # type: ignore[attr-defined]
    assert minutes(events)[0]["unreadable"] == {"garbled": "it is not a JSON object"}


async def test_a_proposer_that_answers_no_objection_stops_the_review_malformed(
    store: Store,
) -> None:
    result = await review(
        p.ARTIFACT,
        proposer=p.agent(p.forgetful, "writer"),
        critics=[p.agent(p.stubborn, "stubborn")],
        store=store,
    )

    assert result.stop_reason == "malformed"
    assert (
        result.detail
        == "writer's answer could not be used after a retry: no disposition for stubborn#1"
    )
    # The objection stands in the ledger, unanswered: open.
    assert [(o.id, o.disposition) for o in result.ledger] == [("stubborn#1", None)]
    assert result.headline == Headline(open=1, rejected=0, accepted=0)
    assert threads(await read_checked(store, result.session_id)) == [
        "stubborn-1",
        "writer-2",
        "writer-3",
    ]


async def test_an_answer_that_parses_on_its_retry_lets_the_review_go_on(store: Store) -> None:
    result = await review(
        p.ARTIFACT,
        proposer=p.agent(p.deferring, "writer"),
        critics=[p.agent(p.garbled_once, "picky")],
        stable_rounds=1,
        store=store,
    )

    assert (result.stop_reason, result.rounds) == ("converged", 2)
    assert [(o.id, o.disposition, o.last_round) for o in result.ledger] == [
        ("picky#1", "deferred", 2)
    ]
    assert result.critics["picky"] == CriticCount(1, 1, 0, 0, 1)


async def test_a_limit_of_the_whole_review_stops_it_budget(store: Store) -> None:
    result = await review(
        p.ARTIFACT,
        proposer=p.agent(p.shortening, "writer"),
        critics=[p.agent(p.stubborn, "stubborn"), p.agent(p.wordy, "wordy")],
        limits=Limits(max_steps=4),  # the chair's two steps and the critics' two: no proposer
        store=store,
    )

    assert result.stop_reason == "budget"
    assert result.detail is not None and "max_steps=4" in result.detail
    # What the critics raised is in the ledger; nobody answered it.
    assert [(o.id, o.disposition) for o in result.ledger] == [
        ("stubborn#1", None),
        ("wordy#1", None),
    ]
    await read_checked(store, result.session_id)


async def test_a_cancelled_review_stops_interrupted_and_can_be_resumed() -> None:
    store = MemoryStore()
    started = asyncio.Event()
    session: list[str] = []

    def on_event(event: Event) -> None:
        session[:] = [event.session_id]
        if isinstance(event.payload, ThreadStarted):
            started.set()

    hanging = Agent(ScriptedModel([Hang()]), name="slow")
    running = asyncio.create_task(
        review(
            p.ARTIFACT,
            proposer=p.agent(p.shortening, "writer"),
            critics=[hanging],
            store=store,
            on_event=on_event,
        )
    )
    await asyncio.wait_for(started.wait(), 10)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running

    result = await review_from_log(store, session[0])
    assert result.stop_reason == "interrupted"
    assert result.ledger == ()
    await read_checked(store, session[0])

    # Resumed, the round the interrupt cut off is asked again (the critic answers now).
    done = await resume_review(
        session[0],
        proposer=p.agent(p.shortening, "writer"),
        critics=[p.agent(p.stubborn, "slow")],
        store=store,
    )
    assert (done.stop_reason, done.rounds) == ("converged", 3)
    assert [(o.id, o.first_round) for o in done.ledger] == [("slow#1", 1)]
    events = await read_checked(store, session[0])
    assert threads(events) == [
        "slow-1",
        "slow-2",
        "writer-3",
        "slow-4",
        "writer-5",
        "slow-6",
        "writer-7",
    ]


async def test_participants_need_distinct_names_and_a_resume_the_same_ones() -> None:
    store = MemoryStore()
    with pytest.raises(UsageError, match="distinct names"):
        await review(
            p.ARTIFACT,
            proposer=p.agent(p.shortening, "same"),
            critics=[p.agent(p.stubborn, "same")],
            store=store,
        )
    # Unnamed agents go by their places.
    done = await review(
        p.ARTIFACT,
        proposer=Agent(p.model(p.deferring)),
        critics=[Agent(p.model(p.satisfied)), Agent(p.model(p.satisfied))],
        stable_rounds=1,
        store=store,
    )
    assert (done.stop_reason, list(done.critics)) == ("converged", ["critic1", "critic2"])
    with pytest.raises(UsageError, match="critics critic1, critic2, not proposer and critic1"):
        await resume_review(
            done.session_id,
            proposer=Agent(p.model(p.deferring)),
            critics=[Agent(p.model(p.satisfied))],
            store=store,
        )
    # The same participants: an ended review is read back as it is.
    again = await resume_review(
        done.session_id,
        proposer=Agent(p.model(p.deferring)),
        critics=[Agent(p.model(p.satisfied)), Agent(p.model(p.satisfied))],
        store=store,
    )
    assert again == done


async def test_a_session_that_is_not_a_review_is_not_read_as_one() -> None:
    store = MemoryStore()
    plain = await Agent(ScriptedModel(["hello"]), store=store).run("hi")
    with pytest.raises(UsageError, match="not a review session"):
        await review_from_log(store, plain.session_id)


async def test_a_participant_whose_model_fails_stops_the_review_error(store: Store) -> None:
    failing = Agent(ScriptedModel([Fail(ProviderError("the provider is down"))]), retry=None)
    result = await review(
        p.ARTIFACT,
        proposer=p.agent(p.shortening, "writer"),
        critics=[p.agent(p.stubborn, "stubborn"), failing],
        store=store,
    )

    assert result.stop_reason == "error"
    assert result.detail is not None
    assert result.detail.startswith("critic2: sub-agent critic2 stopped: error")
    assert "the provider is down" in result.detail
    await read_checked(store, result.session_id)


async def test_a_participant_stopped_by_its_own_limit_stops_the_review_budget(
    store: Store,
) -> None:
    @tool(effect="read")
    def look() -> str:
        """Look something up."""
        return "nothing"

    looping = Agent(
        ScriptedModel([call("look")], repeat_last=True),
        name="looper",
        tools=[look],
        limits=Limits(max_steps=2),
    )
    result = await review(
        p.ARTIFACT, proposer=p.agent(p.shortening, "writer"), critics=[looping], store=store
    )

    assert result.stop_reason == "budget"
    assert result.detail is not None and "looper stopped: turn_limit" in result.detail


async def test_a_critic_call_that_needs_approval_pauses_the_review_until_it_is_decided(
    store: Store,
) -> None:
    @tool(needs_approval=True)
    def fetch_policy() -> str:
        """Fetch the style policy."""
        return "no long introductions"

    def auditor() -> Agent:
        objection = p.objections({"text": "The introduction is long."})
        model = ScriptedModel(  # the policy is fetched in round 1 only
            [
                lambda m: call("fetch_policy") if p.round_of(m[0].text) == 1 else objection,
                lambda m: objection,
            ]
        )
        return Agent(model, name="auditor", tools=[fetch_policy])

    writer = p.agent(p.shortening, "writer")
    paused = await review(
        p.ARTIFACT, proposer=writer, critics=[auditor()], stable_rounds=1, store=store
    )
    assert paused.stop_reason == "awaiting_approval"
    events = await store.read(paused.session_id)
    (key,) = Folder().apply_all(events).pending_approvals
    assert key == "auditor-1:call_0_0"

    await control.decide(store, paused.session_id, key, True)
    done = await resume_review(
        paused.session_id,
        proposer=p.agent(p.shortening, "writer"),
        critics=[auditor()],
        store=store,
    )
    assert (done.stop_reason, done.rounds) == ("converged", 2)
    assert [(o.id, o.disposition) for o in done.ledger] == [("auditor#1", "accepted")]
    assert done.artifact == "The plan: a short introduction, then the steps.\n"
    await read_checked(store, done.session_id)
