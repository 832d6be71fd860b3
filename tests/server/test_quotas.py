"""Per-tenant quotas from the tokens file, over a real `tether serve`: past one, 429
`quota_exceeded` with Retry-After, nothing created, and other tenants unaffected."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.support import ACME, GLOBEX, TOKENS, serve
from tether.errors import ConfigError, QuotaExceeded
from tether.limits import Limits
from tether.runtime.base import CapabilityRefused, SessionSpec
from tether.runtime.local import LocalRuntime
from tether.runtime.quotas import Quota, TenantLoad
from tether.runtime.spend import DAY, SpendWindow
from tether.server.auth import Tokens
from tether.store.memory import MemoryStore
from tether.testing.runtime_conformance import Observer
from tether.testing.runtime_fixtures import MODEL


def tokens_with(tmp_path: Path, **quota: object) -> Path:
    path = tmp_path / "quota-tokens.json"
    tenants = {"acme": {"tokens": TOKENS["acme"], **quota}, "globex": TOKENS["globex"]}
    path.write_text(json.dumps({"tenants": tenants}))
    return path


async def start(client: httpx.AsyncClient, token: str, task: str = "hang") -> httpx.Response:
    return await client.post(
        "/v1/sessions",
        headers={"authorization": f"Bearer {token}"},
        json={"model": MODEL, "task": task},
    )


async def count(client: httpx.AsyncClient, token: str) -> int:
    listed = await client.get(
        "/v1/sessions?limit=500", headers={"authorization": f"Bearer {token}"}
    )
    return len(listed.json()["sessions"])


async def test_the_51st_running_session_of_a_tenant_with_max_running_50_is_refused(
    tmp_path: Path,
) -> None:
    tokens = tokens_with(tmp_path, max_running=50)
    # No workers: every session stays pending, with its turn open, so all 50 are running.
    with serve(tmp_path, "--workers", "0", "--tokens", str(tokens)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            for _ in range(50):
                assert (await start(client, ACME)).status_code == 201
            over = await start(client, ACME)
            acme_sessions = await count(client, ACME)
            other = await start(client, GLOBEX)
    assert over.status_code == 429, over.text
    assert over.json()["error"]["code"] == "quota_exceeded"
    assert "limit is 50" in over.json()["error"]["message"]
    assert int(over.headers["retry-after"]) >= 1
    assert acme_sessions == 50  # the refused start created nothing
    assert other.status_code == 201  # another tenant is unaffected


async def test_starts_per_minute_refuses_a_burst_past_it_with_the_wait(tmp_path: Path) -> None:
    tokens = tokens_with(tmp_path, starts_per_minute=2)
    with serve(tmp_path, "--workers", "0", "--tokens", str(tokens)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            first, second, third = [await start(client, ACME, "echo hi") for _ in range(3)]
            made = await count(client, ACME)
    assert first.status_code == second.status_code == 201
    assert third.status_code == 429
    assert 1 <= int(third.headers["retry-after"]) <= 30  # one start comes back in 30 s
    assert made == 2


async def test_an_output_cap_over_the_tenants_is_refused_and_none_gets_the_cap(
    tmp_path: Path,
) -> None:
    tokens = tokens_with(tmp_path, max_output_tokens=1000)
    headers = {"authorization": f"Bearer {ACME}"}
    with serve(tmp_path, "--workers", "0", "--tokens", str(tokens)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            over = await client.post(
                "/v1/sessions",
                headers=headers,
                json={"model": MODEL, "task": "x", "limits": {"max_output_tokens": 1001}},
            )
            capped = await start(client, ACME, "echo hi")
            sid = capped.json()["session_id"]
            created = (await client.get(f"/v1/sessions/{sid}/events", headers=headers)).json()
    assert over.status_code == 422
    assert "cap of 1000" in over.json()["error"]["message"]
    assert created["events"][0]["data"]["limits"]["max_output_tokens"] == 1000


async def test_a_session_that_ends_frees_its_place() -> None:
    async with LocalRuntime(MemoryStore(), workers=2, poll_interval=0.02) as rt:
        acme = rt.for_tenant("acme", Quota(max_running=1))
        first = await acme.start(SessionSpec(model=MODEL, task="echo one", end_after_turn=True))
        await Observer(acme, first).until("the end", lambda s: s.terminal)
        second = await acme.start(SessionSpec(model=MODEL, task="hang"))
        with pytest.raises(QuotaExceeded):
            await acme.start(SessionSpec(model=MODEL, task="hang"))
        await acme.cancel(second)


async def test_a_message_that_reopens_an_idle_session_counts_as_running() -> None:
    async with LocalRuntime(MemoryStore(), workers=2, poll_interval=0.02) as rt:
        acme = rt.for_tenant("acme", Quota(max_running=1))
        idle = await acme.start(SessionSpec(model=MODEL, task="echo one"))
        await Observer(acme, idle).until("idle", lambda s: s.state == "idle")
        busy = await acme.start(SessionSpec(model=MODEL, task="hang"))
        with pytest.raises(QuotaExceeded):
            await acme.send(idle, "echo two")
        await acme.cancel(busy)


async def test_two_runtimes_on_one_store_keep_one_max_running() -> None:
    # Each runtime has its own admission, as two server processes do: the store counts.
    store = MemoryStore()
    async with LocalRuntime(store, workers=0) as one, LocalRuntime(store, workers=0) as two:
        here, there = (rt.for_tenant("acme", Quota(max_running=2)) for rt in (one, two))
        await here.start(SessionSpec(model=MODEL, task="hang"))
        kept = await there.start(SessionSpec(model=MODEL, task="hang"), idempotency_key="k")
        for rt in (here, there):
            with pytest.raises(QuotaExceeded, match=r"has 2 sessions running, its limit is 2"):
                await rt.start(SessionSpec(model=MODEL, task="hang"))
        # A retried start is the session it made, not one more: at the quota, it is answered.
        again = await here.start(SessionSpec(model=MODEL, task="hang"), idempotency_key="k")
        assert again == kept
        await one.for_tenant("globex", Quota(max_running=2)).start(
            SessionSpec(model=MODEL, task="hang")
        )  # another tenant's count is its own


async def test_another_runtimes_idle_session_is_not_woken_past_max_running() -> None:
    store = MemoryStore()
    async with (
        LocalRuntime(store, workers=2, poll_interval=0.02) as one,
        LocalRuntime(store, workers=0) as two,
    ):
        here, there = (rt.for_tenant("acme", Quota(max_running=1)) for rt in (one, two))
        idle = await here.start(SessionSpec(model=MODEL, task="echo one"))
        await Observer(here, idle).until("idle", lambda s: s.state == "idle")
        busy = await there.start(SessionSpec(model=MODEL, task="hang"))
        with pytest.raises(QuotaExceeded, match=r"\(max_running\)") as refused:
            await here.send(idle, "echo two")
        assert refused.value.retry_after >= 1
        assert (await here.poll(idle)).view.state == "idle"  # the refused message was not added
        await there.cancel(busy)
        await Observer(there, busy).until("the end", lambda s: s.terminal)
        await here.send(idle, "echo two")  # room again


async def test_spending_another_runtime_ran_is_counted() -> None:
    store = MemoryStore()
    async with (
        LocalRuntime(store, workers=1, poll_interval=0.02) as one,
        LocalRuntime(store, workers=0) as two,
    ):
        ran = one.for_tenant("acme")
        ref = await ran.start(SessionSpec(model=MODEL, task="echo hi", end_after_turn=True))
        await Observer(ran, ref).until("the end", lambda s: s.terminal)
        spent = two.for_tenant("acme", Quota(max_tokens_per_day=30))
        with pytest.raises(QuotaExceeded, match=r"its limit is 30 \(max_tokens_per_day\)"):
            await spent.start(SessionSpec(model=MODEL, task="hang"))


def test_the_start_bucket_refills_evenly() -> None:
    now = [0.0]
    load = TenantLoad(clock=lambda: now[0])
    for _ in range(3):
        load.take_start("acme", 3)
    with pytest.raises(QuotaExceeded) as refused:
        load.take_start("acme", 3)
    assert refused.value.retry_after == pytest.approx(20.0)
    now[0] = 20.0
    load.take_start("acme", 3)
    load.take_start("globex", 3)  # a bucket per tenant


def test_the_tokens_file_takes_quotas_beside_the_list_form(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(
        json.dumps(
            {
                "tenants": {
                    "acme": {"tokens": [ACME], "max_running": 3, "starts_per_minute": 60},
                    "globex": [GLOBEX],
                }
            }
        )
    )
    tokens = Tokens.load(str(path))
    assert tokens.tenant(f"Bearer {ACME}") == "acme"
    assert tokens.quota("acme") == Quota(max_running=3, starts_per_minute=60)
    assert tokens.quota("globex") == Quota()  # no quota: nothing limited


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"tokens": [ACME], "max_runing": 3}, "unknown key 'max_runing'"),
        ({"tokens": [ACME], "max_running": 0}, "max_running must be a positive"),
        ({"tokens": [ACME], "max_running": 2.5}, "whole number"),
        ({"tokens": [ACME], "starts_per_minute": "many"}, "starts_per_minute"),
        ({"max_running": 3}, "needs a list of tokens"),
    ],
)
def test_a_bad_quota_is_refused_by_name(tmp_path: Path, entry: object, problem: str) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tenants": {"acme": entry}}))
    with pytest.raises(ConfigError, match=problem):
        Tokens.load(str(path))


async def test_an_unscoped_runtime_has_no_quota() -> None:
    async with LocalRuntime(MemoryStore(), workers=0) as rt:
        for _ in range(3):
            await rt.start(SessionSpec(model=MODEL, task="hang"))
        with pytest.raises(CapabilityRefused):
            await rt.for_tenant("acme", Quota(max_output_tokens=10)).start(
                SessionSpec(model=MODEL, task="x", limits=Limits(max_output_tokens=11))
            )


# -- what costs money: threads, ceilings on a session's limits, spending per day ---------------

HEADERS = {"authorization": f"Bearer {ACME}"}
SUBAGENT_TESTS = str(Path(__file__).resolve().parents[1])  # `runtime.subagent_models`
PARENT = "python:runtime.subagent_models:parent"


async def state_of(client: httpx.AsyncClient, sid: str, until: tuple[str, ...]) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            status = (await client.get(f"/v1/sessions/{sid}", headers=HEADERS)).json()
            if status["state"] in until:
                return dict(status)
            await asyncio.sleep(0.05)


async def thread_opened(client: httpx.AsyncClient, sid: str) -> None:
    async with asyncio.timeout(30):
        while True:
            page = (await client.get(f"/v1/sessions/{sid}/events", headers=HEADERS)).json()
            if any(e["type"] == "thread.started" for e in page["events"]):
                return
            await asyncio.sleep(0.05)


async def test_a_tenant_at_max_threads_starts_no_more_threads_and_sub_agents_say_why(
    tmp_path: Path,
) -> None:
    tokens = tokens_with(tmp_path, max_threads=3)
    agents = {"helper": {"model": MODEL}}
    args = ("--workers", "4", "--tokens", str(tokens), "--allow-code", "runtime.subagent_models:*")
    with serve(tmp_path, *args, env={"PYTHONPATH": SUBAGENT_TESTS}) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            body = {"model": PARENT, "task": "ask helper hang", "agents": agents}
            first = (await client.post("/v1/sessions", headers=HEADERS, json=body)).json()
            await thread_opened(client, first["session_id"])  # 2 threads: it and its helper
            body = {**body, "task": "ask helper echo hi", "end_after_turn": True}
            second = await client.post("/v1/sessions", headers=HEADERS, json=body)
            assert second.status_code == 201, second.text  # the third thread
            ended = await state_of(client, second.json()["session_id"], ("completed", "failed"))
            third = await start(client, ACME)  # the second ended: room for one more
            over = await start(client, ACME)
            other = await start(client, GLOBEX)
            for made in (first, third.json()):
                await client.post(f"/v1/sessions/{made['session_id']}/cancel", headers=HEADERS)
                await state_of(client, made["session_id"], ("canceled",))
            freed = await start(client, ACME)
    assert ended["state"] == "completed"
    assert ended["last_output"] == (
        "helper said: sub-agent helper was not started: tenant acme has 3 threads running "
        "(sessions and their sub-agents), its limit is 3 (max_threads)"
    )
    assert third.status_code == 201, third.text
    assert over.status_code == 429 and "(max_threads)" in over.json()["error"]["message"]
    assert "has 3 threads running" in over.json()["error"]["message"]
    assert other.status_code == 201  # another tenant's threads are its own
    assert freed.status_code == 201, freed.text  # the cancelled ones gave theirs back


async def test_a_start_over_the_tenants_ceilings_is_refused_and_one_without_gets_them(
    tmp_path: Path,
) -> None:
    tokens = tokens_with(tmp_path, max_tokens=1000, max_cost_usd=5)
    with serve(tmp_path, "--workers", "0", "--tokens", str(tokens)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            refused = []
            for limits, agents in (
                ({"max_tokens": 10**15}, {}),
                ({"max_cost_usd": 5.5}, {}),
                ({}, {"helper": {"model": MODEL, "limits": {"max_tokens": 1001}}}),
            ):
                body = {"model": MODEL, "task": "hang", "limits": limits, "agents": agents}
                answer = await client.post("/v1/sessions", headers=HEADERS, json=body)
                refused.append((answer.status_code, answer.json()["error"]["message"]))
            given = await start(client, ACME)
            sid = given.json()["session_id"]
            created = (await client.get(f"/v1/sessions/{sid}/events", headers=HEADERS)).json()
            made = await count(client, ACME)
    assert refused == [
        (422, "limits.max_tokens 1000000000000000 is over this tenant's cap of 1000 (max_tokens)"),
        (422, "limits.max_cost_usd 5.5 is over this tenant's cap of 5 (max_cost_usd)"),
        (
            422,
            "agents.helper.limits.max_tokens 1001 is over this tenant's cap of 1000 (max_tokens)",
        ),
    ]
    limits = created["events"][0]["data"]["limits"]
    assert (limits["max_tokens"], limits["max_cost_usd"]) == (1000, 5)
    assert made == 1  # the refused starts created nothing


async def test_a_tenant_that_spent_its_day_is_refused_new_starts(tmp_path: Path) -> None:
    # The runtime fixtures' model bills 20 + 10 per message in and 5 + a quarter of its text
    # out: one answer to "echo hi" is more than 30 tokens.
    tokens = tokens_with(tmp_path, max_tokens_per_day=30)
    with serve(tmp_path, "--workers", "2", "--tokens", str(tokens)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            body = {"model": MODEL, "task": "echo hi", "end_after_turn": True}
            first = (await client.post("/v1/sessions", headers=HEADERS, json=body)).json()
            done = await state_of(client, first["session_id"], ("completed", "failed"))
            over = await start(client, ACME)
            other = await start(client, GLOBEX)
    assert done["state"] == "completed" and done["usage"]["input_tokens"] > 0
    assert over.status_code == 429, over.text
    message = over.json()["error"]["message"]
    assert "in the last 24 hours, its limit is 30 (max_tokens_per_day)" in message
    assert 1 <= int(over.headers["retry-after"]) <= 86_400 + 60
    assert other.status_code == 201


def test_spending_leaves_the_window_a_minute_at_a_time() -> None:
    window = SpendWindow()
    window.add("acme", 100, 1.0, at=1_000.0)  # the bucket of minute 960
    window.add("acme", 50, 0.5, at=4_600.0)
    window.add("acme", 7, 0.0, at=500.0)  # late news (a seed) of an earlier minute
    assert window.spent("acme", 4_600.0) == (157, 1.5)
    assert window.spent("globex", 4_600.0) == (0, 0.0)
    # Under 120 tokens once the buckets of minutes 480 and 960 have left the day.
    assert window.wait("acme", 4_600.0, 120, "tokens") == 960 + 60 + DAY - 4_600
    assert window.spent("acme", 960 + 60 + DAY) == (50, 0.5)


async def test_spending_is_read_from_the_catalog_after_a_restart(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'spent.db'}"
    async with LocalRuntime(store, workers=1, poll_interval=0.02) as rt:
        acme = rt.for_tenant("acme")
        ref = await acme.start(SessionSpec(model=MODEL, task="echo hi", end_after_turn=True))
        await Observer(acme, ref).until("the end", lambda s: s.terminal)
    async with LocalRuntime(store, workers=0) as restarted:
        acme = restarted.for_tenant("acme", Quota(max_tokens_per_day=30))
        with pytest.raises(QuotaExceeded, match=r"\(max_tokens_per_day\)"):
            await acme.start(SessionSpec(model=MODEL, task="hang"))
        globex = restarted.for_tenant("globex", Quota(max_tokens_per_day=30))
        await globex.start(SessionSpec(model=MODEL, task="hang"))  # its own spending: none


def test_the_tokens_file_takes_the_new_quotas(tmp_path: Path) -> None:
    path = tokens_with(
        tmp_path, max_threads=8, max_tokens=10**6, max_cost_usd=2.5, max_cost_usd_per_day=100
    )
    assert Tokens.load(str(path)).quota("acme") == Quota(
        max_threads=8, max_tokens=10**6, max_cost_usd=2.5, max_cost_usd_per_day=100
    )
    path = tokens_with(tmp_path, max_threads=1.5)
    with pytest.raises(ConfigError, match="max_threads must be a positive whole number"):
        Tokens.load(str(path))


async def test_every_thread_the_gate_counted_is_given_back_nested_ones_too() -> None:
    from tether.runtime.base import AgentSpec

    async with LocalRuntime(MemoryStore(), workers=2, poll_interval=0.02) as rt:
        acme = rt.for_tenant("acme", Quota(max_threads=5))
        agents = {
            "researcher": AgentSpec(model=PARENT, agents=("helper",)),
            "helper": AgentSpec(model=MODEL),
        }
        for _ in range(3):
            spec = SessionSpec(
                model=PARENT,
                task="ask researcher ask helper echo hi",
                agents=agents,
                end_after_turn=True,
            )
            ref = await acme.start(spec)
            status = await Observer(acme, ref).until("the end", lambda s: s.terminal)
            assert status.view.last_output == "researcher said: helper said: echo: hi"
        load = rt._core.admission.load
        assert load.threads.get("acme") == 0  # each of the six threads was given back
