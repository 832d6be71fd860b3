"""The web view's session list and start form in a real Chromium against a real `tether
serve`: search, filters and sort sent to the API and kept in the page's address, counts per
state that filter when pressed, tokens and cost per row, a row's link opened in a new tab,
never another tenant's session; and a session started from the form, with the tools the
operator allows offered, and a refused start said as the server says it."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from server.support import ACME, GLOBEX, serve
from server.test_web_view import WAIT_MS, browser, give_token, tab_to
from tether.runtime.http import HttpRuntime
from tether.testing.runtime_conformance import Observer, spec

__all__ = ["browser"]  # the fixture, shared with the sessions' browser tests

TWIN = "python:tether.testing.runtime_fixtures:twin_a"  # a model of another name
MODEL = "python:tether.testing.runtime_fixtures:model"
TOOLS = "tether.testing.runtime_fixtures:tools"


async def test_the_list_searches_filters_sorts_and_counts(tmp_path: Path, browser: object) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    with serve(tmp_path, "--workers", "2") as server:
        acme, globex = HttpRuntime(server.url, ACME), HttpRuntime(server.url, GLOBEX)
        try:
            short = await acme.start(spec("echo pelican", metadata={"team": "birds"}))
            long = await acme.start(spec("note 3", metadata={"team": "birds"}))
            failed = await acme.start(spec("fail"))
            twin = await acme.start(replace(spec("zebra crossing"), model=TWIN))
            theirs = await globex.start(spec("echo secret pelican", metadata={"team": "birds"}))
            for rt, ref in [(acme, short), (acme, long), (acme, failed), (acme, twin)]:
                await Observer(rt, ref).settled()
            await Observer(globex, theirs).settled()

            page = await browser.new_page()
            await page.goto(f"{server.url}/ui")
            await give_token(page, ACME)
            rows = page.locator("#sessions tr")
            await expect(rows).to_have_count(4, timeout=WAIT_MS)
            await expect(page.locator('#counts button[data-state="idle"]')).to_have_text("idle 4")
            await expect(page.locator("#counts-total")).to_have_text("4 sessions:")
            # Tokens and cost per row; the task under the id.
            row = page.locator(f'tr[data-session="{long.session_id}"]')
            await expect(row.locator("td").nth(4)).not_to_have_text("0")
            await expect(row.locator("td").nth(5)).to_contain_text("$0.0")
            await expect(row.locator(".task")).to_have_text("note 3")

            # Search: the task's text, never another tenant's session that says it too.
            await page.fill("#filter-q", "PELICAN")
            await expect(rows).to_have_count(1, timeout=WAIT_MS)
            await expect(rows).to_have_attribute("data-session", short.session_id)
            await expect(page).to_have_url(re.compile(r"#/\?q=PELICAN$"))
            await page.fill("#filter-q", "")
            await page.select_option("#filter-stop", "error")
            await expect(rows).to_have_count(1, timeout=WAIT_MS)
            await expect(rows).to_have_attribute("data-session", failed.session_id)
            await page.select_option("#filter-stop", "")
            await expect(rows).to_have_count(4, timeout=WAIT_MS)
            # The model as the session names it (the datalist offers those of the rows seen).
            twin_row = page.locator(f'tr[data-session="{twin.session_id}"]')
            name = await twin_row.locator("td").nth(6).text_content() or ""
            assert name and name != await row.locator("td").nth(6).text_content()
            assert name in await page.eval_on_selector_all(
                "#models option", "(options) => options.map((o) => o.value)"
            )
            await page.fill("#filter-model", name)
            await expect(rows).to_have_count(1, timeout=WAIT_MS)
            await expect(rows).to_have_attribute("data-session", twin.session_id)
            await page.fill("#filter-model", "")

            # Metadata, sorted by tokens then by age; the filters survive a reload.
            await page.fill("#filter-meta", "team=birds")
            await page.select_option("#sort", "tokens")
            await expect(rows).to_have_count(2, timeout=WAIT_MS)
            order = "(rows) => rows.map((r) => r.dataset.session)"
            await expect(rows.first).to_have_attribute("data-session", long.session_id)
            assert await page.eval_on_selector_all("#sessions tr", order) == [
                long.session_id,
                short.session_id,
            ]
            await page.select_option("#sort", "oldest")
            await expect(rows.first).to_have_attribute("data-session", short.session_id)
            await page.reload()
            await expect(page.locator("#filter-meta")).to_have_value("team=birds")
            await expect(page.locator("#sort")).to_have_value("oldest")
            await expect(rows).to_have_count(2, timeout=WAIT_MS)
            await expect(rows.first).to_have_attribute("data-session", short.session_id)
            await expect(page.locator('#counts button[data-state="idle"]')).to_have_text("idle 2")

            # Creation time: nothing was created before 2000, everything after.
            await page.fill("#filter-before", "2000-01-01T00:00")
            await expect(page.locator("#empty")).to_have_text("No session matches.")
            await expect(rows).to_have_count(0, timeout=WAIT_MS)
            await page.fill("#filter-before", "")
            await page.fill("#filter-after", "2000-01-01T00:00")
            await expect(rows).to_have_count(2, timeout=WAIT_MS)

            # A count filters by its state when pressed, and clears it when pressed again.
            await page.click("#filter-clear")
            await expect(rows).to_have_count(4, timeout=WAIT_MS)
            idle = page.locator('#counts button[data-state="idle"]')
            await idle.click()
            await expect(page.locator("#filter-state")).to_have_value("idle")
            await expect(idle).to_have_attribute("aria-pressed", "true")
            await idle.click()
            await expect(page.locator("#filter-state")).to_have_value("")

            # A row's id is a real link: a modified click opens the session in a new tab,
            # which knows the token from the browser's storage.
            link = page.locator(f'tr[data-session="{short.session_id}"] a')
            async with page.context.expect_page() as opened:
                await link.click(modifiers=["Control"])
            tab = await opened.value
            await tab.wait_for_load_state()
            assert tab.url.endswith(f"/ui#/s/{short.session_id}")
            await expect(tab.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
            assert page.url.endswith("#/")  # the list stays where it was
        finally:
            await acme.close()
            await globex.close()


async def test_a_session_is_started_from_the_form_with_the_tools_the_server_allows(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    with serve(tmp_path, "--workers", "2") as server:
        page = await browser.new_page()
        await page.goto(f"{server.url}/ui")
        await give_token(page, ACME)
        await page.click("#to-start")
        await expect(page).to_have_url(f"{server.url}/ui#/new")
        await expect(page.locator("#start-allowed")).to_contain_text(
            "tether.testing.runtime_fixtures:*", timeout=WAIT_MS
        )
        offered = page.locator(f'#start-tools input[value="{TOOLS}"]')
        await expect(offered).to_have_count(1)
        await expect(page.locator("#start-tools li")).to_contain_text(["note, guarded"])

        # Code the operator did not allow: refused, and said so; nothing opens.
        await page.fill("#start-model", "python:os:system")
        await page.fill("#start-task", "echo no")
        await page.click("#start-submit")
        await expect(page.locator("#start-problem")).to_contain_text(
            "is not code this runtime may load", timeout=WAIT_MS
        )
        await expect(page).to_have_url(f"{server.url}/ui#/new")

        await page.fill("#start-model", MODEL)
        await page.fill("#start-task", "guarded open the pod bay doors")
        await offered.check()
        await page.fill("#start-steps", "5")
        await page.click("#start-submit")
        await expect(page).to_have_url(re.compile(r"#/s/ses_"), timeout=WAIT_MS)
        session_id = page.url.split("#/s/")[1]
        # It runs with the tool it was given: the call waits for its approval.
        box = page.locator('#approvals div[data-call="call_0_0"]')
        await expect(box.locator(".tool")).to_have_text("guarded", timeout=WAIT_MS)
        rt = HttpRuntime(server.url, ACME)
        try:
            listed = {s.session_id for s in await rt.sessions()}
            assert session_id in listed
        finally:
            await rt.close()


async def test_the_list_and_the_start_form_work_from_the_keyboard_alone(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    with serve(tmp_path, "--workers", "2") as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            for task in ("echo heron", "echo ibis", "fail"):
                await Observer(rt, await rt.start(spec(task))).settled()
            page = await browser.new_page()
            await page.goto(f"{server.url}/ui")
            await give_token(page, ACME)
            rows = page.locator("#sessions tr")
            await expect(rows).to_have_count(3, timeout=WAIT_MS)
            # The count of matches is a live region: a screen reader hears a filter's effect.
            await expect(page.locator("#counts-total")).to_have_attribute("role", "status")
            await page.locator("#token").blur()
            await tab_to(page, "#filter-q")
            await page.keyboard.type("heron")
            await expect(rows).to_have_count(1, timeout=WAIT_MS)
            await expect(page.locator("#counts-total")).to_have_text("1 session:")
            await page.keyboard.press("Control+A")
            await page.keyboard.press("Backspace")
            await expect(rows).to_have_count(3, timeout=WAIT_MS)
            await tab_to(page, "#sort")
            await page.keyboard.press("ArrowDown")  # recently updated -> newest
            await expect(page.locator("#sort")).to_have_value("newest")
            await tab_to(page, '#counts button[data-state="idle"]')
            await page.keyboard.press("Enter")
            await expect(page.locator("#filter-state")).to_have_value("idle")
            await tab_to(page, "#sessions a")
            await page.keyboard.press("Enter")
            await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)

            # The start form: reached from the header, filled and sent without a pointer.
            await page.goto(f"{server.url}/ui")
            await tab_to(page, "#to-start")
            await page.keyboard.press("Enter")
            await expect(page.locator(f'#start-tools input[value="{TOOLS}"]')).to_have_count(1)
            await tab_to(page, "#start-model")
            await page.keyboard.type(MODEL)
            await page.keyboard.press("Tab")
            await page.keyboard.type("echo typed, not clicked")
            await tab_to(page, f'#start-tools input[value="{TOOLS}"]')
            await page.keyboard.press("Space")
            await tab_to(page, "#start-submit")
            await page.keyboard.press("Enter")
            answered = page.locator('#timeline li[data-type="model.responded"]')
            await expect(answered).to_contain_text("echo: typed, not clicked", timeout=WAIT_MS)
            await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
        finally:
            await rt.close()
