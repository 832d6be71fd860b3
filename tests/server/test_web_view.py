"""The web view (`GET /ui` of `tether serve`) in a real Chromium: it lists the tenant's
sessions, follows one live (its timeline and the model's streamed output), and steers it
(send a message, decide an approval, cancel), all through the same API and token; it shows a
session's sub-agent threads (the tree, a label on each row, an approval inside a thread); it
pages and filters the list, shows an approval's call and takes its decision by keyboard, says
when a session is not found or forbidden; it runs under its Content-Security-Policy with no
violation, and no page of another origin can frame it."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from server.support import ACME, GLOBEX, serve
from server.test_listing import start_many
from tether.runtime.base import SessionRef, SessionSpec
from tether.runtime.http import HttpRuntime
from tether.server.web import CSP
from tether.testing.runtime_conformance import Observer, spec

HOW = "install Debian's chromium (bash .ci/chromium.sh)"
WAIT_MS = 20_000


def chromium() -> str:
    path = os.environ.get("TETHER_TEST_CHROMIUM") or shutil.which("chromium") or ""
    if not path:
        if os.environ.get("CI"):
            pytest.fail(f"no Chromium in CI: {HOW}")
        pytest.skip(f"no Chromium: {HOW}")
    return path


@pytest.fixture
async def browser() -> AsyncIterator[object]:
    from playwright.async_api import async_playwright

    executable = chromium()
    async with async_playwright() as p:
        launched = await p.chromium.launch(
            executable_path=executable,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            yield launched
        finally:
            await launched.close()


async def give_token(page: Any, token: str) -> None:
    """Type the token as a person would; the page keeps it and loads what it shows. The box
    keeps the focus, so its next blur fires `change` again (which must not reload the view)."""
    await page.fill("#token", token)
    await page.dispatch_event("#token", "change")


async def refreshed(page: Any, view: str, times: int = 1) -> None:
    """Wait until `view` (a section's id) has refreshed `times` more times than now."""
    seen = await page.eval_on_selector(f"#{view}", "(e) => Number(e.dataset.refreshes || 0)")
    await page.wait_for_function(
        "([id, n]) => Number(document.getElementById(id).dataset.refreshes || 0) >= n",
        arg=[view, seen + times],
        timeout=WAIT_MS,
    )


async def test_the_web_view_lists_follows_and_steers_a_session(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    with serve(tmp_path, "--workers", "2") as server:
        acme, globex = HttpRuntime(server.url, ACME), HttpRuntime(server.url, GLOBEX)
        try:
            ref = await acme.start(spec("echo hello there"))
            await Observer(acme, ref).settled()
            theirs = await globex.start(spec("echo not yours"))

            page = await browser.new_page()
            await page.goto(f"{server.url}/ui")
            await expect(page.locator("#problem")).to_contain_text("token", timeout=WAIT_MS)
            await give_token(page, ACME)
            row = page.locator(f'tr[data-session="{ref.session_id}"]')
            await expect(row).to_contain_text("echo: hello there", timeout=WAIT_MS)
            # Another tenant's session is not listed.
            assert await page.locator(f'tr[data-session="{theirs.session_id}"]').count() == 0

            await row.click()
            await expect(page).to_have_url(f"{server.url}/ui#/s/{ref.session_id}")
            await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
            timeline = page.locator("#timeline li")
            await expect(timeline.last).to_contain_text("turn.ended", timeout=WAIT_MS)
            await expect(page.locator('#timeline li[data-type="model.responded"]')).to_contain_text(
                "echo: hello there"
            )

            # A message sent from the page runs a turn; its output streams into the page.
            await page.fill("#message", "echo from the page")
            await page.click("#send")
            await expect(page.locator("#live")).to_have_text("echo: from the page", timeout=WAIT_MS)
            await expect(page.locator('#timeline li[data-type="turn.ended"]')).to_have_count(
                2, timeout=WAIT_MS
            )

            # An approval: the page offers the decision, and the turn goes on once allowed.
            await page.fill("#message", "guarded launch")
            await page.click("#send")
            decision = page.locator("#approvals button", has_text="Allow")
            await expect(decision).to_be_visible(timeout=WAIT_MS)
            await decision.click()
            await expect(page.locator("#live")).to_contain_text(
                "guarded said: done: launch", timeout=WAIT_MS
            )

            await page.click("#cancel")
            await expect(page.locator("#state")).to_have_text("canceled", timeout=WAIT_MS)
            await expect(page.locator("#send")).to_be_disabled()
            status = await acme.poll(ref)
            # Two echo turns, the guarded one that stopped for the decision, and its sequel.
            assert status.state == "canceled" and status.view.turns == 4
        finally:
            await acme.close()
            await globex.close()


async def test_the_web_view_shows_model_and_tool_text_as_text(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    with serve(tmp_path, "--workers", "2") as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            ref = await rt.start(spec("echo <img src=x onerror=alert(1)>"))
            await Observer(rt, ref).settled()
            page = await browser.new_page()
            dialogs: list[str] = []
            page.on("dialog", lambda d: dialogs.append(d.message))
            await page.goto(f"{server.url}/ui#/s/{ref.session_id}")
            await give_token(page, ACME)
            responded = page.locator('#timeline li[data-type="model.responded"]')
            await expect(responded).to_contain_text("<img src=x", timeout=WAIT_MS)
            assert await page.locator("#timeline img").count() == 0 and dialogs == []
        finally:
            await rt.close()


# A boss whose manager asks a payer to pay: the payer's call waits for approval two threads
# down (`manager-1/payer-1:call_0_0`). Loaded by the server's worker from the test's directory;
# each model answers from its messages alone, so a worker that rebuilds it goes on the same.
THREADED_MODULE = '''
from tether import Agent, model_factory, tool
from tether.testing import ScriptedModel, call


def _asks(tool_name, **arguments):
    def reply(messages):
        results = [r.content for m in messages if m.role == "tool" for r in m.tool_results]
        return f"{tool_name}: {results[-1]}" if results else call(tool_name, **arguments)

    return ScriptedModel([reply], repeat_last=True)


@tool(effect="write", needs_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


payer = Agent(_asks("pay", amount=30), name="payer", tools=[pay])
manager = Agent(_asks("payer", task="pay 30"), name="manager", tools=[payer.as_tool()])
tools = [manager.as_tool()]


@model_factory
def model():
    return _asks("manager", task="get it paid")
'''


async def test_the_web_view_shows_the_thread_tree_and_decides_a_sub_agents_call(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    (tmp_path / "threaded.py").write_text(THREADED_MODULE)
    allow = ("--allow-code", "threaded:*")
    env = {"PYTHONPATH": str(tmp_path)}
    with serve(tmp_path, "--workers", "2", *allow, env=env) as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            threaded = SessionSpec(
                model="python:threaded:model", task="pay", tools=("threaded:tools",)
            )
            ref = await rt.start(threaded)
            waiting = await Observer(rt, ref).until(
                "the payer's call to wait", lambda s: bool(s.view.pending_approvals)
            )
            key = "manager-1/payer-1:call_0_0"
            assert waiting.view.pending_approvals == (key,)

            page = await browser.new_page()
            await page.goto(f"{server.url}/ui#/s/{ref.session_id}")
            await give_token(page, ACME)
            # The tree: each thread under its parent, with its agent and where it stands.
            tree = page.locator("#threads li")
            await expect(tree).to_have_count(2, timeout=WAIT_MS)
            manager, payer = tree.nth(0), tree.nth(1)
            await expect(manager).to_have_attribute("data-thread", "manager-1")
            # The manager waits too: its turn is held open by its child's call.
            await expect(manager).to_contain_text("manager · waiting_approval")
            await expect(manager).to_contain_text("runs call_0_0 of the main thread")
            await expect(payer).to_have_class("depth-2")
            await expect(payer).to_contain_text("payer · waiting_approval")
            await expect(payer).to_contain_text("runs call_0_0 of [manager-1]")

            # The timeline labels each row with its thread, deeper threads further in.
            started = page.locator('#timeline li[data-type="thread.started"]')
            await expect(started).to_have_count(2, timeout=WAIT_MS)
            await expect(started.nth(1).locator(".thread")).to_have_text("manager-1/payer-1")
            await expect(started.nth(1)).to_contain_text(
                "payer (scripted) runs call_0_0 of [manager-1]"
            )
            main_row = page.locator('#timeline li[data-type="session.created"]')
            assert await main_row.locator(".thread").count() == 0
            indents = [
                await page.eval_on_selector(
                    f'#timeline li[data-type="user.message"][data-thread="{t}"]',
                    "(e) => parseFloat(getComputedStyle(e).paddingLeft)",
                )
                for t in ("", "manager-1", "manager-1/payer-1")
            ]
            assert indents[0] < indents[1] < indents[2], indents

            # The approval names its thread, and Allow sends the whole key.
            line = page.locator(f'#approvals div[data-call="{key}"]')
            await expect(line.locator(".thread")).to_have_text("manager-1/payer-1")
            await expect(line).to_contain_text("call call_0_0 waits for a decision")
            await line.locator("button", has_text="Allow").click()
            await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
            await expect(tree.nth(1)).to_contain_text("payer · finished (end_turn)")
            finished = page.locator('#timeline li[data-type="thread.finished"]')
            await expect(finished.first).to_contain_text("end_turn: pay: paid 30", timeout=WAIT_MS)
            status = await rt.poll(ref)
            assert status.view.last_output == "manager: payer: pay: paid 30"
            assert status.view.decisions[key].allow
        finally:
            await rt.close()


async def test_a_row_click_opens_its_session_across_a_refresh_and_the_token_boxs_blur(
    tmp_path: Path, browser: object
) -> None:
    """The flake this guards against: the token box's `change` on blur reloaded the list,
    which rebuilt its rows between the click's mousedown and mouseup, and the click was lost."""
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    with serve(tmp_path, "--workers", "2") as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            ref = await rt.start(spec("echo click me"))
            await Observer(rt, ref).settled()
            page = await browser.new_page()
            await page.goto(f"{server.url}/ui")
            await give_token(page, ACME)
            row = page.locator(f'tr[data-session="{ref.session_id}"]')
            await expect(row).to_contain_text("echo: click me", timeout=WAIT_MS)
            box = await row.locator("td").nth(2).bounding_box()
            assert box is not None
            # The press blurs the token box (its `change` fires again); the list refreshes
            # while the button is held; the release still clicks the same row.
            await page.mouse.move(box["x"] + 5, box["y"] + 5)
            await page.mouse.down()
            await refreshed(page, "list-view")
            await page.mouse.up()
            await expect(page).to_have_url(f"{server.url}/ui#/s/{ref.session_id}")
            await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
            # The session's id in its row is a link too (a new tab, or the keyboard).
            await page.go_back()
            link = row.locator(f'a[href="#/s/{ref.session_id}"]')
            await link.focus()
            await page.keyboard.press("Enter")
            await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
        finally:
            await rt.close()


async def tab_to(page: Any, selector: str, presses: int = 60) -> None:
    """Press Tab until `selector` has the focus, as a keyboard user would (never a click)."""
    for _ in range(presses):
        if await page.evaluate("(s) => document.activeElement.matches(s)", selector):
            return
        await page.keyboard.press("Tab")
    raise AssertionError(f"{selector} never took the focus in {presses} presses of Tab")


async def test_an_approval_shows_its_call_and_is_decided_by_keyboard_alone(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    with serve(tmp_path, "--workers", "2") as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            ref = await rt.start(spec("guarded launch"))
            await Observer(rt, ref).until(
                "the call to wait", lambda s: bool(s.view.pending_approvals)
            )
            page = await browser.new_page()
            await page.goto(f"{server.url}/ui#/s/{ref.session_id}")
            await give_token(page, ACME)
            box = page.locator('#approvals div[data-call="call_0_0"]')
            # The tool, its effect class (approval.requested names it), and its full arguments.
            await expect(box.locator(".tool")).to_have_text("guarded", timeout=WAIT_MS)
            await expect(box.locator(".effect")).to_have_text("write")
            await expect(box.locator(".effect")).to_have_attribute("data-effect", "write")
            await expect(box.locator("pre")).to_have_text('{\n  "action": "launch"\n}')
            await expect(box).to_contain_text("call call_0_0 waits for a decision")

            await page.locator("#token").blur()
            await tab_to(page, '#approvals [data-call="call_0_0"] input.reason')
            await page.keyboard.type("checked the target")
            await page.keyboard.press("Tab")
            allow = box.locator("button.allow")
            await expect(allow).to_be_focused()
            # Refreshes come and go; the box is not rebuilt, so the focus stays on Allow.
            await refreshed(page, "session-view", 2)
            await expect(allow).to_be_focused()
            await expect(box.locator("input.reason")).to_have_value("checked the target")
            await page.keyboard.press("Enter")
            await expect(page.locator("#live")).to_contain_text(
                "guarded said: done: launch", timeout=WAIT_MS
            )
            decided = page.locator('#timeline li[data-type="approval.decided"]')
            await expect(decided).to_contain_text("allowed [call_0_0] — checked the target")
            await expect(page.locator("#approvals div")).to_have_count(0)

            # A second call of the same tool (its effect named again by its request),
            # and arguments this long start folded, opened from the keyboard.
            long_action = " ".join(["land"] * 160)
            await page.locator("#message").focus()
            await page.keyboard.type(f"guarded {long_action}")
            await page.keyboard.press("Tab")
            await expect(page.locator("#send")).to_be_focused()
            await page.keyboard.press("Enter")
            second = page.locator("#approvals div.approval")
            await expect(second.locator(".effect")).to_have_text("write", timeout=WAIT_MS)
            fold = second.locator("details")
            await expect(fold.locator("summary")).to_contain_text("arguments (3 lines")
            assert await fold.get_attribute("open") is None
            await tab_to(page, "#approvals summary")
            await page.keyboard.press("Enter")
            await expect(fold.locator("pre")).to_contain_text(long_action)
            await tab_to(page, "#approvals input.reason")
            await page.keyboard.type("not today")
            await page.keyboard.press("Tab")
            await page.keyboard.press("Tab")
            await expect(second.locator("button.deny")).to_be_focused()
            await page.keyboard.press("Enter")
            await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
            status = await rt.poll(ref)
            assert [(d.allow, d.reason) for d in status.view.decisions.values()] == [
                (True, "checked the target"),
                (False, "not today"),
            ]
            later = next(k for k in status.view.decisions if k != "call_0_0")
            await expect(decided.last).to_contain_text(f"denied [{later}] — not today")
        finally:
            await rt.close()


async def test_a_missing_or_foreign_session_is_said_so_and_leaves_nothing_of_the_last(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    with serve(tmp_path, "--workers", "2") as server:
        acme, globex = HttpRuntime(server.url, ACME), HttpRuntime(server.url, GLOBEX)
        try:
            ref = await acme.start(spec("echo mine"))
            await Observer(acme, ref).settled()
            theirs = await globex.start(spec("echo theirs"))
            page = await browser.new_page()
            missing: list[str] = []
            page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
            await page.goto(f"{server.url}/ui#/s/{ref.session_id}")
            await give_token(page, ACME)
            await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
            await expect(page.locator("#send")).to_be_enabled()
            await expect(page.locator("#timeline li").last).to_contain_text(
                "turn.ended", timeout=WAIT_MS
            )
            problem = page.locator("#session-problem")
            for other in ("no-such-session", theirs.session_id):
                await page.evaluate("(id) => { location.hash = '#/s/' + id; }", other)
                await expect(problem).to_have_text(
                    f"not found: no session {other} for this token", timeout=WAIT_MS
                )
                await expect(page.locator("#session-id")).to_have_text(other)
                for gone in ("#state", "#stop", "#figures", "#live"):
                    await expect(page.locator(gone)).to_have_text("")
                await expect(page.locator("#timeline li")).to_have_count(0)
                for control in ("#send", "#interrupt", "#cancel", "#message"):
                    await expect(page.locator(control)).to_be_disabled()
            # Back to one's own session: shown again, with no trace of the refusal.
            await page.go_back()
            await page.go_back()
            await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
            await expect(problem).to_be_hidden()
            # A token no tenant holds is refused as such.
            await give_token(page, "not-a-token-of-anyone")
            await expect(problem).to_contain_text("forbidden: a token no tenant holds")
            await expect(page.locator("#send")).to_be_disabled()
            # The icon is served (no 404 on a load); the only 404s were the refused sessions.
            icon = await page.request.get(f"{server.url}/ui/favicon.svg")
            assert icon.status == 200 and icon.headers["content-type"] == "image/svg+xml"
            assert await page.locator('link[rel="icon"]').get_attribute("href") == (
                "/ui/favicon.svg"
            )
            assert all("/v1/sessions/" in url for url in missing), missing
        finally:
            await acme.close()
            await globex.close()


async def test_the_list_pages_through_a_thousand_sessions_to_the_end_and_filters(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    with serve(tmp_path, "--workers", "0") as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            ids = await start_many(rt, 1_000)
            page = await browser.new_page()
            await page.goto(f"{server.url}/ui")
            await give_token(page, ACME)
            at, older = page.locator("#page-at"), page.locator("#page-older")
            await expect(at).to_have_text("page 1", timeout=WAIT_MS)
            await expect(page.locator("#page-newer")).to_be_disabled()
            seen: list[str] = []
            for number in range(1, 30):
                await expect(at).to_contain_text(f"page {number}", timeout=WAIT_MS)
                rows = await page.eval_on_selector_all(
                    "#sessions tr", "(rows) => rows.map((r) => r.dataset.session)"
                )
                seen += rows
                if await older.is_disabled():
                    break
                await older.click()
            # 50 a page: every one of the 1,000 seen once, on 20 pages.
            assert number == 20 and len(seen) == 1_000 and set(seen) == set(ids)
            await expect(at).to_have_text("page 20 (the last)")
            await page.locator("#page-newer").click()
            await expect(at).to_have_text("page 19")
            await expect(older).to_be_enabled()

            # Search by id, then filter by state: each starts again at the first page.
            target = ids[123]
            await page.fill("#filter-q", target)
            await expect(page.locator("#sessions tr")).to_have_count(1, timeout=WAIT_MS)
            await expect(page.locator("#sessions tr")).to_have_attribute("data-session", target)
            await expect(at).to_have_text("page 1 (the last)")
            await page.fill("#filter-q", "no-such-session")
            await expect(page.locator("#empty")).to_have_text("No session matches.")
            await expect(page.locator("#empty")).to_be_visible()
            await page.fill("#filter-q", "")
            await rt.cancel(SessionRef(target))
            await page.select_option("#filter-state", "canceled")
            await expect(page.locator("#sessions tr")).to_have_count(1, timeout=WAIT_MS)
            await expect(page.locator("#sessions tr td").nth(1)).to_have_text("canceled")
        finally:
            await rt.close()


# Collects the page's CSP violations from before its first script (Playwright's init scripts
# are not subject to the page's policy).
WATCH_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__violations.push(e.violatedDirective + " " + e.blockedURI));
"""


async def test_the_web_view_works_under_its_content_security_policy(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    with serve(tmp_path, "--workers", "2") as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            ref = await rt.start(spec("echo under policy"))
            await Observer(rt, ref).settled()
            page = await browser.new_page()
            console: list[str] = []
            page.on("console", lambda m: console.append(m.text))
            await page.add_init_script(WATCH_VIOLATIONS)
            response = await page.goto(f"{server.url}/ui")
            assert response is not None and response.headers["content-security-policy"] == CSP
            await give_token(page, ACME)
            # The script ran (from /ui/app.js) and its fetches reached the API...
            row = page.locator(f'tr[data-session="{ref.session_id}"]')
            await expect(row).to_contain_text("echo: under policy", timeout=WAIT_MS)
            await row.click()
            await expect(page).to_have_url(f"{server.url}/ui#/s/{ref.session_id}")
            await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
            await expect(page.locator("#timeline li").last).to_contain_text(
                "turn.ended", timeout=WAIT_MS
            )
            # ...and the style sheet (/ui/app.css) applies: the header is dark.
            background = await page.eval_on_selector(
                "header", "(e) => getComputedStyle(e).backgroundColor"
            )
            assert background == "rgb(29, 35, 48)"
            assert await page.evaluate("window.__violations") == []
            assert not [m for m in console if "Content Security Policy" in m], console

            # The watch does see a violation: an inline script put in by hand is refused.
            await page.evaluate(
                """() => { const s = document.createElement("script");
                   s.textContent = "window.__ran = true"; document.body.appendChild(s); }"""
            )
            await page.wait_for_function("window.__violations.length > 0", timeout=WAIT_MS)
            assert await page.evaluate("window.__ran === undefined")
            assert "script-src" in (await page.evaluate("window.__violations"))[0]
        finally:
            await rt.close()


@contextmanager
def framing_site(target: str) -> Iterator[str]:
    """Another origin on loopback: `/` frames `target` and, as a control, a page of its own."""
    pages = {
        "/": f'<iframe id="tether" src="{target}"></iframe><iframe id="own" src="/own"></iframe>',
        "/own": '<input id="token" value="a page that may be framed">',
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    site = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{site.server_address[1]}"
    finally:
        site.shutdown()
        site.server_close()
        thread.join(timeout=10)


async def test_the_web_view_cannot_be_framed_by_another_origin(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    with serve(tmp_path, "--workers", "0") as server, framing_site(f"{server.url}/ui") as site:
        page = await browser.new_page()
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text))
        await page.goto(site, wait_until="load")
        # The control: the site's own page renders in its frame.
        own = page.frame_locator("#own").locator("#token")
        await expect(own).to_have_value("a page that may be framed", timeout=WAIT_MS)

        # The web view does not: Chromium refuses it (frame-ancestors 'none', X-Frame-Options).
        def refused() -> bool:
            return any("frame-ancestors" in m or "X-Frame-Options" in m for m in console)

        for _ in range(WAIT_MS // 100):
            if refused():
                break
            await page.wait_for_timeout(100)
        assert refused(), console
        framed = page.frame_locator("#tether")
        assert await framed.locator("#token").count() == 0
        assert await framed.locator("button").count() == 0
