"""Per-tenant quotas from the tokens file, over a real `tether serve`: past one, 429
`quota_exceeded` with Retry-After, nothing created, and other tenants unaffected."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from server.support import ACME, GLOBEX, TOKENS, serve
from tether.errors import ConfigError, QuotaExceeded
from tether.limits import Limits
from tether.runtime.base import CapabilityRefused, SessionSpec
from tether.runtime.local import LocalRuntime
from tether.runtime.quotas import Quota, TenantLoad
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
