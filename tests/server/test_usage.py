"""`GET /v1/usage` and the web view's usage page of a real `tether serve`: each tenant's tokens
and cost by model and UTC day (a session counted on the day of its last event), equal to
sums made from the sessions' logs, never another tenant's; bad days refused with 422; the
page in Chromium shows the tenant's models and days and not another's."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.support import ACME, ACME_HEADERS, GLOBEX, Server, check_documented, serve
from server.test_web_view import WAIT_MS, WATCH_VIOLATIONS, browser, give_token
from tether.events import (
    Event,
    ModelResponded,
    Payload,
    SessionCreated,
    TurnEnded,
    UserMessage,
)
from tether.messages import Message, Text, Usage, user
from tether.store import open_store

__all__ = ["browser"]

# (tenant, model, days ago of the first event, days ago of the last, usages and costs)
SESSIONS: list[tuple[str, str, int, int, list[tuple[Usage, float | None]]]] = [
    ("acme", "m-small", 1, 1, [(Usage(100, 20, 10, 5), 0.01), (Usage(50, 5), 0.002)]),
    ("acme", "m-small", 1, 1, [(Usage(7, 3), 0.1)]),
    ("acme", "m-large", 3, 2, [(Usage(1000, 200, 300), 0.5)]),  # spans two days: counted on 2
    ("acme", "m-large", 2, 2, [(Usage(10, 1), None)]),  # a price unknown
    ("acme", "m-small", 5, 5, [(Usage(1, 1), 0.25)]),
    ("acme", "m-small", 40, 40, [(Usage(9, 9), 9.0)]),  # outside the default 30 days
    ("globex", "g-only", 1, 1, [(Usage(555, 55), 5.0)]),
    ("globex", "m-small", 2, 2, [(Usage(3, 3), 0.03)]),
]


def _time(days_ago: int, second: int) -> str:
    moment = datetime.now(UTC).replace(hour=12, minute=0, second=second, microsecond=0)
    return (moment - timedelta(days=days_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def logs() -> list[list[Event]]:
    made = []
    for n, (tenant, model, first, last, calls) in enumerate(SESSIONS):
        payloads: list[Payload] = [
            SessionCreated(model=model, metadata={"tenant": tenant}),
            UserMessage(user("go")),
        ]
        for usage, cost in calls:
            reply = Message("assistant", (Text("ok"),))
            payloads.append(ModelResponded(reply, usage=usage, cost_usd=cost))
        payloads.append(TurnEnded("end_turn"))
        session_id = f"ses_usage{n:03d}"
        made.append(
            [
                Event(
                    session_id,
                    seq,
                    f"{session_id}-{seq}",
                    _time(first if seq == 1 else last, seq),
                    p,
                )
                for seq, p in enumerate(payloads, start=1)
            ]
        )
    return made


def sums(
    events_of: list[list[Event]], tenant: str, first: date, last: date
) -> list[dict[str, Any]]:
    """What /v1/usage must answer, summed from the logs themselves (no catalog, no fold)."""
    groups: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: dict.fromkeys(
            ("sessions", "input_tokens", "output_tokens", "cache_read_tokens",
             "cache_write_tokens", "cost_usd", "cost_unknown_sessions"), 0,
        )
    )  # fmt: skip
    for events in events_of:
        created = events[0].payload
        assert isinstance(created, SessionCreated)
        day = events[-1].time[:10]
        if created.metadata.get("tenant") != tenant or not first <= date.fromisoformat(day) <= last:
            continue
        g = groups[(day, created.model)]
        g["sessions"] += 1
        unknown = False
        for e in events:
            if isinstance(e.payload, ModelResponded):
                u = e.payload.usage
                g["input_tokens"] += u.input_tokens
                g["output_tokens"] += u.output_tokens
                g["cache_read_tokens"] += u.cache_read_tokens
                g["cache_write_tokens"] += u.cache_write_tokens
                if e.payload.cost_usd is None:
                    unknown = True
                else:
                    g["cost_usd"] += e.payload.cost_usd
        if unknown:  # the whole session's cost is unknown, as its row says
            g["cost_unknown_sessions"] += 1
            g["cost_usd"] -= sum(
                e.payload.cost_usd or 0.0 for e in events if isinstance(e.payload, ModelResponded)
            )
    return [{"day": d, "model": m, **g} for (d, m), g in sorted(groups.items())]


async def filled(server: Server) -> list[list[Event]]:
    made = logs()
    store = open_store(server.store)
    try:
        for events in made:
            await store.append(events[0].session_id, events, 0)
    finally:
        await store.close()
    return made


def same(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert [{**g, "cost_usd": 0} for g in got] == [{**w, "cost_usd": 0} for w in want]
    for g, w in zip(got, want, strict=True):
        assert g["cost_usd"] == pytest.approx(w["cost_usd"], rel=1e-9, abs=1e-12)


async def test_each_tenant_sees_its_own_usage_by_model_and_day_as_its_logs_sum(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, "--workers", "0") as server:
        made = await filled(server)
        today = datetime.now(UTC).date()
        async with httpx.AsyncClient(base_url=server.url) as client:
            for token, tenant in ((ACME, "acme"), (GLOBEX, "globex")):
                headers = {"authorization": f"Bearer {token}"}
                got = (await client.get("/v1/usage", headers=headers)).json()
                check_documented(got, "UsageReport")
                assert got["tenant"] == tenant
                last = date.fromisoformat(got["to"])
                assert last in (today, today + timedelta(days=1))  # the server's today
                assert last - date.fromisoformat(got["from"]) == timedelta(days=29)
                same(got["usage"], sums(made, tenant, last - timedelta(days=29), last))
                assert got["bounds"] == {"limit": 10_000, "complete": True}
            # A window that holds the old session, and one day alone.
            for first, last in (
                (today - timedelta(days=60), today),
                (today - timedelta(days=2),) * 2,
            ):
                asked = {"from": first.isoformat(), "to": last.isoformat()}
                got = (await client.get("/v1/usage", params=asked, headers=ACME_HEADERS)).json()
                same(got["usage"], sums(made, "acme", first, last))
            acme = (await client.get("/v1/usage", headers=ACME_HEADERS)).json()
            assert "g-only" not in {g["model"] for g in acme["usage"]}
            assert (await client.get("/v1/usage")).status_code == 401


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ({"from": "2026-13-01"}, "query parameter from must be a UTC day as YYYY-MM-DD"),
        ({"to": "2026-W49-4"}, "query parameter to must be a UTC day as YYYY-MM-DD"),
        ({"from": "2026-02-02", "to": "2026-02-01"}, "from 2026-02-02 is after to 2026-02-01"),
        ({"from": "2024-01-01", "to": "2026-01-01"}, "ask for at most 366"),
        ({"tenant": "globex"}, "unknown query parameter 'tenant'"),
    ],
)
def test_a_bad_window_is_refused_in_one_line(
    server: Server, query: dict[str, str], said: str
) -> None:
    got = httpx.get(f"{server.url}/v1/usage", params=query, headers=ACME_HEADERS)
    assert got.status_code == 422
    assert said in got.json()["error"]["message"]


async def test_the_usage_page_shows_the_tenants_models_and_days(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    with serve(tmp_path, "--workers", "0") as server:
        await filled(server)
        page = await browser.new_page()
        await page.add_init_script(WATCH_VIOLATIONS)
        await page.goto(f"{server.url}/ui")
        await give_token(page, ACME)
        await page.click("#to-usage")
        small = page.locator('#usage-models tr[data-model="m-small"]')
        # m-small in the last 30 days: 3 sessions, 158 input, 29 output, $0.362.
        await expect(small).to_contain_text("3", timeout=WAIT_MS)
        await expect(small).to_contain_text("158")
        await expect(small).to_contain_text("$0.362000")
        large = page.locator('#usage-models tr[data-model="m-large"]')
        await expect(large).to_contain_text("$0.500000 (+1 unknown)")
        assert await page.locator('#usage-models tr[data-model="g-only"]').count() == 0
        two_days_ago = (datetime.now(UTC).date() - timedelta(days=2)).isoformat()
        day = page.locator(f'#usage-days tr[data-day="{two_days_ago}"][data-model="m-large"]')
        await expect(day).to_contain_text("1010")
        # Another window: the old session is in it.
        await page.fill("#usage-from", (datetime.now(UTC).date() - timedelta(days=60)).isoformat())
        await page.click("#usage-show")
        await expect(small).to_contain_text("$9.362000", timeout=WAIT_MS)
        assert await page.evaluate("window.__violations") == []


async def test_the_usage_page_passes_axe_and_fits_a_phone(tmp_path: Path, browser: object) -> None:
    from playwright.async_api import Browser, expect

    from server.test_web_view_a11y import WIDTHS, axe_source, layout_problems, serious_violations

    assert isinstance(browser, Browser)
    source = axe_source()
    with serve(tmp_path, "--workers", "0") as server:
        await filled(server)
        for width in WIDTHS:
            page = await browser.new_page(viewport={"width": width, "height": 800})
            await page.goto(f"{server.url}/ui#/usage")
            await give_token(page, ACME)
            rows = page.locator("#usage-days tr")
            await expect(rows).to_have_count(3, timeout=WAIT_MS)  # (day, model) groups in 30 days
            assert await serious_violations(page, source) == [], width
            assert await layout_problems(page) == [], width
            await page.close()
