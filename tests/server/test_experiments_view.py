"""The web view's experiments (`/ui#/experiments` of `tether serve`) in a real Chromium: the
tenant's experiments listed (not another's), one opened with its chart drawn, its variants
with their intervals, each variant against the first with a verdict, and a link from each
run to its session; names from a log shown as text; no violation of the page's policy."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from experiment.fixtures import fetcher, flaky
from server.support import ACME, serve
from server.test_web_view import WAIT_MS, WATCH_VIOLATIONS, browser, give_token
from tether import Agent
from tether.experiment import Task, run_matrix
from tether.experiment.plan import import_check
from tether.store import open_store
from tether.store.base import Store
from tether.testing import ScriptedModel

__all__ = ["browser"]  # the fixture, shared with the sessions' browser tests

CHECKS = "def said_ok(result):\n    return result.output == 'ok'\n"
HOSTILE = "<img src=x onerror=alert(1)>"


def pair(store: Store, tenant: str) -> dict[str, Agent]:
    """`a` always fetches "ok", `b` never: the runs of `tenant`."""
    return {
        name: Agent(fetcher(), tools=[flaky(rate, 1)], store=store, metadata={"tenant": tenant})
        for name, rate in (("a", 1.0), ("b", 0.0))
    }


async def run_experiments(store_url: str) -> None:
    store = open_store(store_url)
    try:
        fetch = [Task("Fetch the answer.", check=import_check("exp_view:said_ok"), name="fetch")]
        await run_matrix(pair(store, "acme"), fetch, 4, experiment_id="shown")
        await run_matrix(pair(store, "globex"), fetch, 1, experiment_id="theirs")
        # A tag written by hand: a variant name no `run_matrix` would take.
        plan = {"variants": [HOSTILE], "tasks": [{"name": "t", "check": None}], "runs": 1}
        tag = {"id": "hostile", "variant": HOSTILE, "task": "t", "repeat": 0, "plan": plan}
        metadata = {"tenant": "acme", "experiment": tag}
        await Agent(ScriptedModel(["done"]), store=store, metadata=metadata).run(
            "do it", end_session=True
        )
    finally:
        await store.close()


async def test_the_web_view_shows_an_experiments_chart_verdicts_and_runs(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    (tmp_path / "exp_view.py").write_text(CHECKS)
    sys.path.insert(0, str(tmp_path))
    env = {"PYTHONPATH": str(tmp_path)}
    try:
        with serve(tmp_path, "--workers", "0", "--allow-check", "exp_view:*", env=env) as server:
            await asyncio.wait_for(run_experiments(server.store), 120)
            page = await browser.new_page()
            dialogs: list[str] = []
            page.on("dialog", lambda d: dialogs.append(d.message))
            await page.add_init_script(WATCH_VIOLATIONS)
            await page.goto(f"{server.url}/ui")
            await give_token(page, ACME)
            await page.click("#to-experiments")
            listed = page.locator('#experiments tr[data-experiment="shown"]')
            await expect(listed).to_contain_text("a, b", timeout=WAIT_MS)
            await expect(listed).to_contain_text("8")
            assert await page.locator('#experiments tr[data-experiment="theirs"]').count() == 0

            await listed.click()
            # The chart: the server's SVG, fetched with the token, drawn as an image.
            chart = page.locator("#chart")
            await page.wait_for_function(
                "() => document.getElementById('chart').naturalWidth > 0", timeout=WAIT_MS
            )
            assert (await chart.get_attribute("src") or "").startswith("blob:")
            # Another metric: its chart is fetched and drawn in place of the first.
            drawn = await chart.get_attribute("src")
            await page.select_option("#chart-metric", "tokens")
            await expect(chart).to_have_attribute("data-metric", "tokens", timeout=WAIT_MS)
            assert await chart.get_attribute("src") != drawn
            await expect(chart).to_have_attribute("alt", "each variant's tokens with its interval")
            await expect(page.locator('#variants tr[data-variant="a"]')).to_contain_text("100% [")
            await expect(page.locator('#variants tr[data-variant="b"]')).to_contain_text("0% [")
            verdict = page.locator('#comparisons tr[data-metric="pass_rate"] td[data-verdict]')
            await expect(verdict).to_have_text("worse")
            await expect(page.locator('#comparisons tr[data-metric="pass_rate"]')).to_contain_text(
                "b against a"
            )
            runs = page.locator("#runs tr")
            await expect(runs).to_have_count(8)
            first = runs.first.locator("a")
            session_id = await first.text_content()
            assert session_id and session_id.startswith("ses_")
            await first.click()
            await expect(page.locator("#session-id")).to_have_text(session_id, timeout=WAIT_MS)
            await expect(page.locator("#state")).to_have_text("completed", timeout=WAIT_MS)

            # A name from a log is text: no element made of it, no script run.
            await page.goto(f"{server.url}/ui#/e/hostile")
            row = page.locator("#variants tr").first
            await expect(row).to_contain_text(HOSTILE, timeout=WAIT_MS)
            await page.wait_for_function(
                "() => document.getElementById('chart').naturalWidth > 0", timeout=WAIT_MS
            )
            assert await page.locator("#experiment-view img").count() == 1  # the chart alone
            assert dialogs == []
            assert await page.evaluate("window.__violations") == []
    finally:
        sys.path.remove(str(tmp_path))
