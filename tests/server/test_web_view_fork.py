"""Forking from the web view, in a real Chromium against a real `tether serve`: "Fork from
here" on a step of a two-turn session opens a small form; its Fork sends
`POST /v1/sessions/{id}/fork` at that step and lands on the child's page, which shows its
parent (a link) and the fork point, runs the new message on the parent's prefix, and is
listed among the parent's forks on the parent's page and by the list's "forks of" filter. A
refusal (a point the session does not have, another tenant's session) is said in the form.
axe finds nothing serious on these pages at 1280 and 390 px, and nothing scrolls sideways."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from server.support import ACME, ACME_HEADERS, GLOBEX, serve
from server.test_web_view import WAIT_MS, WATCH_VIOLATIONS, browser, give_token
from server.test_web_view_a11y import axe_source, layout_problems, serious_violations
from tether.runtime.http import HttpRuntime
from tether.testing.runtime_conformance import Observer, spec

__all__ = ["browser"]  # the fixture, shared with the sessions' browser tests

FORKS_SHOWN = 20  # lineage.js: the forks a session's page lists


async def two_turns(rt: HttpRuntime) -> str:
    """A session that has run two turns and waits for a third (idle)."""
    ref = await rt.start(spec("echo one"))
    observer = Observer(rt, ref)
    await observer.settled()
    await rt.send(ref, "echo two")
    await observer.until("its second turn", lambda s: s.state == "idle" and s.view.turns == 2)
    return ref.session_id


async def test_fork_from_here_opens_the_child_which_shows_its_parent(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, Route, expect

    assert isinstance(browser, Browser)
    source = axe_source()
    with serve(tmp_path, "--workers", "2") as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            parent = await two_turns(rt)
            page = await browser.new_page()
            await page.add_init_script(WATCH_VIOLATIONS)
            await page.goto(f"{server.url}/ui")
            await give_token(page, ACME)
            await page.goto(f"{server.url}/ui#/s/{parent}")
            await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
            ends = page.locator('#timeline li[data-type="turn.ended"]')
            await expect(ends).to_have_count(2, timeout=WAIT_MS)
            # A fork point at each turn's start (its opening message) and end, no more.
            forks = page.locator("#timeline button.fork")
            await expect(forks).to_have_count(4)
            labels = [await b.get_attribute("aria-label") for b in await forks.all()]
            assert [label.split(" (seq")[0] for label in labels if label] == [
                "fork from here: the start of turn 1",
                "fork from here: the end of turn 1",
                "fork from here: the start of turn 2",
                "fork from here: the end of turn 2",
            ]
            end_of_first = ends.first
            at = int(await end_of_first.get_attribute("data-seq") or 0)
            assert at > 0

            # The form opens under its step.
            await end_of_first.locator("button.fork").click()
            form = end_of_first.locator(".fork-form")
            await expect(form).to_be_visible()
            await expect(end_of_first.locator("button.fork")).to_have_attribute(
                "aria-expanded", "true"
            )
            await expect(form.locator("textarea").first).to_be_focused()
            await form.get_by_label("message for the fork (optional)").fill("echo branched")
            problem = form.locator(".fork-problem")

            # A refusal is said in the form, as the server says it: the request is changed on
            # its way (a point past the session's end, then another tenant's token), the
            # answer is the real server's.
            async def past_the_end(route: Route) -> None:
                body = json.loads(route.request.post_data or "{}")
                await route.continue_(post_data=json.dumps({**body, "at": {"seq": 10_000}}))

            await page.route("**/fork", past_the_end)
            await form.locator("button.fork-submit").click()
            await expect(problem).to_contain_text("not forked: ", timeout=WAIT_MS)
            await expect(problem).to_contain_text("there is no seq 10000")
            await page.unroute("**/fork")

            async def as_globex(route: Route) -> None:
                headers = {**route.request.headers, "authorization": f"Bearer {GLOBEX}"}
                await route.continue_(headers=headers)

            await page.route("**/fork", as_globex)
            await form.locator("button.fork-submit").click()
            await expect(problem).to_have_text(
                f"not forked: no session {parent} for this token", timeout=WAIT_MS
            )
            await page.unroute("**/fork")
            assert len((await rt.sessions(10)).sessions) == 1  # nothing was forked

            # Fork: the child's page opens, shows its parent and where it branched off, and
            # runs the new message on the parent's first turn.
            found: dict[str, list[str]] = {}
            for width in (1280, 390):
                await page.set_viewport_size({"width": width, "height": 844})
                found[f"fork form at {width}"] = await serious_violations(page, source)
                found[f"fork form layout at {width}"] = await layout_problems(page)
            await page.set_viewport_size({"width": 1280, "height": 844})
            await form.locator("button.fork-submit").click()
            await page.wait_for_url(
                lambda url: "#/s/" in url and not url.endswith(parent), timeout=WAIT_MS
            )
            child = page.url.split("#/s/")[1]
            await expect(page.locator("#session-id")).to_have_text(child)
            link = page.locator("#parent-link")
            await expect(link).to_have_text(parent, timeout=WAIT_MS)
            assert await link.get_attribute("href") == f"#/s/{parent}"
            await expect(page.locator("#forked-from")).to_have_text(
                f"forked from {parent} at seq {at} (fork)"
            )
            await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
            await expect(page.locator("#answer")).to_have_text("echo: branched")
            messages = page.locator("#transcript > ol > li.message")
            await expect(messages).to_have_count(4, timeout=WAIT_MS)
            said = [await m.locator(".body").first.text_content() for m in await messages.all()]
            assert said == ["echo one", "echo: one", "echo branched", "echo: branched"]
            forked = page.locator('#timeline li[data-type="session.forked"]')
            await expect(forked).to_have_attribute("data-seq", str(at + 1))
            await expect(forked).to_contain_text(f"fork of {parent} at seq {at}")
            for width in (1280, 390):
                await page.set_viewport_size({"width": width, "height": 844})
                found[f"child at {width}"] = await serious_violations(page, source)
                found[f"child layout at {width}"] = await layout_problems(page)
            await page.set_viewport_size({"width": 1280, "height": 844})

            # The parent's page lists its fork; the link opens the child again.
            await link.click()
            await expect(page).to_have_url(f"{server.url}/ui#/s/{parent}")
            listed = page.locator(f'#forks li[data-session="{child}"]')
            await expect(listed).to_have_text(f"{child} idle", timeout=WAIT_MS)
            await expect(page.locator("#forks-said")).to_have_text("1 fork:")
            await expect(page.locator("#forks-more")).to_be_hidden()
            await expect(page.locator("#forked-from")).to_be_hidden()
            found["parent at 1280"] = await serious_violations(page, source)
            await listed.locator("a").click()
            await expect(page.locator("#parent-link")).to_have_text(parent, timeout=WAIT_MS)

            # Past 20 forks the page says it shows the newest 20 and links to them all: the
            # list, filtered by "forks of" (kept in the address).
            async with httpx.AsyncClient(base_url=server.url, headers=ACME_HEADERS) as client:
                for n in range(FORKS_SHOWN):
                    body = {"at": {"after_turn": 2}, "metadata": {"n": str(n)}}
                    made = await client.post(f"/v1/sessions/{parent}/fork", json=body)
                    assert made.status_code == 201, made.text
            await page.goto(f"{server.url}/ui#/s/{parent}")
            await expect(page.locator("#forks li")).to_have_count(FORKS_SHOWN, timeout=WAIT_MS)
            await expect(page.locator("#forks-said")).to_have_text(
                f"the newest {FORKS_SHOWN} of its forks:"
            )
            await page.locator("#forks-more").click()
            await expect(page).to_have_url(f"{server.url}/ui#/?parent={parent}")
            await expect(page.locator("#filter-parent")).to_have_value(parent)
            rows = page.locator("#sessions tr")
            await expect(rows).to_have_count(FORKS_SHOWN + 1, timeout=WAIT_MS)
            assert parent not in [await r.get_attribute("data-session") for r in await rows.all()]
            await expect(page.locator(f'#sessions tr[data-session="{child}"]')).to_be_visible()

            assert await page.evaluate("window.__violations") == []
            problems = [f"{k}: {p}" for k, v in found.items() for p in v]
            assert not problems, "\n".join(problems)
        finally:
            await rt.close()
