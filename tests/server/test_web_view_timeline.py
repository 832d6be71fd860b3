"""The web view's session timeline in a real Chromium against a real `tether serve`: a 41-step
session whose tool results are large is shown from the stream's summaries (the bytes counted
by the browser), each event's whole JSON fetched only when its line is opened; the waterfall
of steps with model and tool time, tokens and cost; errors marked and filtered; a compaction
said as what it cleared or summarised; sub-agent threads folded away from the tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from server.support import ACME, serve
from server.test_web_view import (
    THREADED_MODULE,
    WAIT_MS,
    browser,
    give_token,
    refreshed,
    tab_to,
)
from tether.runtime.base import SessionSpec
from tether.runtime.http import HttpRuntime
from tether.testing.runtime_conformance import Observer

__all__ = ["browser"]  # the fixture, shared with the sessions' browser tests

# A reader that fetches 40 pages of 20,000 characters, one step each, then answers: 41 steps.
# Page 7 fails (an error in the timeline). Loaded by the server's worker from the test's folder.
READER_MODULE = '''
from tether import model_factory, tool
from tether.testing import ScriptedModel, call

PAGES = 40


@tool(effect="read")
def fetch(page: int) -> str:
    """Fetch a page."""
    if page == 7:
        raise RuntimeError("page 7 is gone")
    return f"page {page}: " + ("lorem ipsum dolor sit amet " * 800)[:20000]


def _reply(messages):
    done = sum(1 for m in messages if m.role == "tool")
    return call("fetch", page=done + 1) if done < PAGES else f"read {PAGES} pages"


tools = [fetch]


@model_factory
def model():
    return ScriptedModel(
        [_reply], repeat_last=True, name="claude-3-5-haiku-latest", price_per_million=(1.0, 5.0)
    )
'''


COMPACTIONS = """() => [
  {first_seq: 3, last_seq: 9, summary: null, cleared_call_ids: ["call_0_0", "call_1_0"]},
  {first_seq: 3, last_seq: 40, summary: "the pages so far say lorem ipsum",
   cleared_call_ids: [], model: "claude-3-5-haiku-latest", cost_usd: 0.00012},
].map((data) => describe({type: "context.compacted", data}))"""


async def bytes_counter(page: Any) -> dict[str, int]:
    """Bytes the page receives per API route, counted by Chromium as they arrive (a stream
    that stays open included): route -> bytes."""
    counts: dict[str, int] = {}
    urls: dict[str, str] = {}
    cdp = await page.context.new_cdp_session(page)
    await cdp.send("Network.enable")

    def sent(e: dict[str, Any]) -> None:
        urls[e["requestId"]] = e["request"]["url"]

    def received(e: dict[str, Any]) -> None:
        url = urls.get(e["requestId"], "")
        if "/v1/" in url:
            route = url.split("?")[0].split("/v1/")[1]
            counts[route] = counts.get(route, 0) + int(e["dataLength"])

    cdp.on("Network.requestWillBeSent", sent)
    cdp.on("Network.dataReceived", received)
    return counts


async def test_a_41_step_timeline_is_shown_from_summaries_and_opens_whole_events_on_demand(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    (tmp_path / "reader.py").write_text(READER_MODULE)
    env = {"PYTHONPATH": str(tmp_path)}
    with serve(tmp_path, "--workers", "2", "--allow-code", "reader:*", env=env) as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            reader = SessionSpec(model="python:reader:model", task="read", tools=("reader:tools",))
            ref = await rt.start(reader)
            status = await Observer(rt, ref).settled()
            assert status.view.steps == 41
            async with httpx.AsyncClient(
                base_url=server.url, headers={"authorization": f"Bearer {ACME}"}
            ) as client:
                whole = await client.get(
                    f"/v1/sessions/{ref.session_id}/events", params={"limit": "10000"}
                )
            full_bytes = len(whole.content)
            events = whole.json()["events"]
            last = events[-1]["seq"]

            page = await browser.new_page()
            await page.goto(f"{server.url}/ui")
            await give_token(page, ACME)
            counts = await bytes_counter(page)
            await page.evaluate("(id) => { location.hash = '#/s/' + id; }", ref.session_id)
            lines = page.locator("#timeline li")
            await expect(lines).to_have_count(last, timeout=WAIT_MS)
            sid = ref.session_id
            # The transcript panel is bounded on its own: a page of 50 messages at most,
            # each text cut at 2,000 characters (transcript.js).
            told = f"sessions/{sid}/transcript"
            shown = sum(
                n for r, n in counts.items() if r.startswith(f"sessions/{sid}") and r != told
            )
            print(f"\nbytes to show the 41-step timeline: {shown} (the whole events: {full_bytes})")
            assert shown <= full_bytes / 10, (shown, full_bytes, counts)
            assert counts.get(told, 0) <= full_bytes / 10, (full_bytes, counts)
            assert not [r for r in counts if "/events/" in r]  # nothing opened, nothing fetched

            # The waterfall: a row per step, with model time, tool time, tokens and cost.
            steps = page.locator("#waterfall tr.step")
            await expect(steps).to_have_count(41)
            first = steps.nth(0)
            await expect(first.locator(".tools")).to_contain_text("ms")
            # A streamed answer records its time to first token, and the step row shows it.
            answered = [e for e in events if e["type"] == "model.responded"]
            assert all("first_token_ms" in e["data"] for e in answered)
            ttft = answered[0]["data"]["first_token_ms"]
            assert ttft < 1000  # a scripted answer: shown in ms, rounded as Math.round does
            await expect(first.locator(".model")).to_contain_text(
                f"first token {int(ttft + 0.5)} ms"
            )
            await expect(first.locator(".tokens")).to_have_text(json_usage(events, 0))
            await expect(first.locator(".cost")).to_contain_text("$0.0")
            await expect(steps.nth(40).locator(".tools")).to_have_text("–")
            await expect(page.locator("#waterfall tr.turn")).to_contain_text("turn 1")
            await expect(page.locator("#waterfall tr.turn .took")).to_contain_text("end_turn")
            width = (
                await steps.nth(0)
                .locator(".model-time")
                .evaluate("(e) => e.getBoundingClientRect().width")
            )
            assert width > 0

            # A tool result shows cut on its line; opened, the whole result arrives, folded.
            finished = page.locator('#timeline li[data-type="tool.finished"]').first
            await expect(finished).to_contain_text("ok [call_0_0] page 1: lorem")
            await expect(finished.locator(".size")).to_have_text("  (cut; whole: 20 KB)")
            assert "lorem ipsum dolor sit amet " * 20 not in await finished.inner_text()
            await finished.locator("button.line").click()
            fold = finished.locator(".whole details")
            await expect(fold.locator("summary")).to_contain_text("data.content (1 lines, 20008")
            await expect(finished.locator(".whole pre.json")).to_contain_text('"outcome": "ok"')
            await fold.locator("summary").click()
            assert len(await fold.locator("pre").inner_text()) == 20008
            assert [r for r in counts if "/events/" in r] == [
                f"sessions/{sid}/events/{finished_seq(events)}"
            ]
            await finished.locator("button.line").click()
            await expect(finished.locator(".whole")).to_be_hidden()

            # Errors are marked, and the filter keeps them alone.
            errors = page.locator("#timeline li.err")
            await expect(errors).to_have_count(1)
            await expect(errors).to_contain_text("error [call_6_0]")
            await expect(steps.nth(6)).to_have_class("step depth-0 err")
            await page.check("#errors-only")
            await expect(page.locator("#timeline li:visible")).to_have_count(1)
            await expect(page.locator("#error-count")).to_have_text(" (1)")
            await page.uncheck("#errors-only")

            # A compaction says what it cleared, or what it summarised (the page's own words
            # for the two shapes the log has).
            said = await page.evaluate(COMPACTIONS)
            assert said == [
                "cleared the results of 2 call(s) in events 3–9: call_0_0, call_1_0",
                "summarised events 3–40 into: the pages so far say lorem ipsum"
                " — by claude-3-5-haiku-latest ($0.000120)",
            ]

            # Keyboard: a line opens with Enter.
            await tab_to(page, '#timeline li[data-type="session.created"] button.line', 200)
            await page.keyboard.press("Enter")
            created = page.locator('#timeline li[data-type="session.created"]')
            await expect(created.locator("button.line")).to_have_attribute("aria-expanded", "true")
            await expect(created.locator(".whole pre.json")).to_contain_text("claude-3-5-haiku")
        finally:
            await rt.close()


def json_usage(events: list[dict[str, Any]], index: int) -> str:
    responded = [e for e in events if e["type"] == "model.responded"][index]
    usage = responded["data"]["usage"]
    return f"{usage['input_tokens']}+{usage['output_tokens']}"


def finished_seq(events: list[dict[str, Any]]) -> int:
    return next(e["seq"] for e in events if e["type"] == "tool.finished")


async def test_a_sub_agents_thread_folds_away_from_the_timeline_and_the_waterfall(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    (tmp_path / "threaded.py").write_text(THREADED_MODULE)
    env = {"PYTHONPATH": str(tmp_path)}
    with serve(tmp_path, "--workers", "2", "--allow-code", "threaded:*", env=env) as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            threaded = SessionSpec(
                model="python:threaded:model", task="pay", tools=("threaded:tools",)
            )
            ref = await rt.start(threaded)
            await Observer(rt, ref).until(
                "the payer's call to wait", lambda s: bool(s.view.pending_approvals)
            )
            page = await browser.new_page()
            await page.goto(f"{server.url}/ui#/s/{ref.session_id}")
            await give_token(page, ACME)
            payer_rows = page.locator('#timeline li[data-thread="manager-1/payer-1"]')
            await expect(payer_rows.first).to_be_visible(timeout=WAIT_MS)
            manager_steps = page.locator('#waterfall tr.step[data-thread="manager-1"]')
            await expect(manager_steps.first).to_be_visible()
            fold = page.locator('#threads li[data-thread="manager-1"] button.fold')
            await expect(fold).to_have_attribute("aria-expanded", "true")
            # Folding the manager hides its events and its child's; the main thread stays.
            await fold.focus()
            await page.keyboard.press("Enter")
            await expect(fold).to_have_attribute("aria-expanded", "false")
            await expect(payer_rows.first).to_be_hidden()
            await expect(page.locator('#timeline li[data-thread="manager-1"]').first).to_be_hidden()
            await expect(manager_steps.first).to_be_hidden()
            await expect(page.locator('#timeline li[data-thread=""]').first).to_be_visible()
            # The tree is not rebuilt by its refreshes: the fold button keeps the focus.
            await refreshed(page, "session-view", 2)
            await expect(fold).to_be_focused()
            await page.keyboard.press("Enter")
            await expect(payer_rows.first).to_be_visible()
        finally:
            await rt.close()
