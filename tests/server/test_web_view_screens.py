"""Screenshots of the web view's screens for the documentation (docs/images/web-*.png), taken
in a real Chromium against a real `tether serve`. Run only when asked:

    TETHER_SCREENSHOTS=docs/images .venv/bin/python -m pytest tests/server/test_web_view_screens.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from server.support import ACME, serve
from server.test_web_view import WAIT_MS, browser, give_token
from server.test_web_view_timeline import READER_MODULE
from tether.runtime.base import SessionSpec
from tether.runtime.http import HttpRuntime
from tether.testing.runtime_conformance import Observer, spec

__all__ = ["browser"]  # the fixture, shared with the sessions' browser tests

PNG = b"\x89PNG\r\n\x1a\n"


async def test_screenshots_of_each_screen(tmp_path: Path, browser: object) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    out = os.environ.get("TETHER_SCREENSHOTS")
    if not out:
        pytest.skip("screenshots are taken only with TETHER_SCREENSHOTS=FOLDER")
    folder = Path(out)
    os.makedirs(folder, exist_ok=True)
    short = READER_MODULE.replace("PAGES = 40", "PAGES = 6").replace("7", "3")
    (tmp_path / "reader.py").write_text(short)
    env = {"PYTHONPATH": str(tmp_path)}
    with serve(tmp_path, "--workers", "2", "--allow-code", "reader:*", env=env) as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            for task in ("echo hello", "note 3", "echo what is the weather in Oslo?"):
                await Observer(rt, await rt.start(spec(task))).settled()
            reader = SessionSpec(model="python:reader:model", task="read", tools=("reader:tools",))
            read = await rt.start(reader)
            await Observer(rt, read).settled()
            waiting = await rt.start(spec("guarded deploy the release to production"))
            await Observer(rt, waiting).until(
                "the call to wait", lambda s: bool(s.view.pending_approvals)
            )
            shots: list[Path] = []
            for width, height, prefix in ((1280, 800, "web"), (390, 844, "web-phone")):
                page = await browser.new_page(viewport={"width": width, "height": height})
                await page.goto(f"{server.url}/ui")
                await give_token(page, ACME)
                await page.locator("#token").blur()
                await expect(page.locator("#sessions tr")).to_have_count(5, timeout=WAIT_MS)
                await expect(page.locator('#counts button[data-state="idle"]')).to_be_visible()
                shots.append(folder / f"{prefix}-list.png")
                await page.screenshot(path=shots[-1])

                await page.goto(f"{server.url}/ui#/new")
                # The fixtures' note, guarded and tools; the reader's fetch and tools.
                await expect(page.locator("#start-tools input")).to_have_count(5)
                await page.fill("#start-model", "python:tether.testing.runtime_fixtures:model")
                await page.fill("#start-task", "note 2")
                tools = "tether.testing.runtime_fixtures:tools"
                await page.locator(f'#start-tools input[value="{tools}"]').check()
                shots.append(folder / f"{prefix}-start.png")
                await page.screenshot(path=shots[-1], full_page=True)

                await page.goto(f"{server.url}/ui#/s/{read.session_id}")
                await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
                await expect(page.locator("#waterfall tr.step")).to_have_count(7)
                failed = page.locator("#timeline li.err").first
                await failed.locator("button.line").click()
                await expect(failed.locator(".whole pre.json")).to_be_visible()
                shots.append(folder / f"{prefix}-session.png")
                await page.screenshot(path=shots[-1], full_page=True)

                await page.goto(f"{server.url}/ui#/s/{waiting.session_id}")
                box = page.locator('#approvals div[data-call="call_0_0"]')
                await expect(box.locator(".tool")).to_have_text("guarded", timeout=WAIT_MS)
                await box.locator("input.reason").fill("checked the release notes")
                shots.append(folder / f"{prefix}-approval.png")
                await page.screenshot(path=shots[-1])
                await page.close()
            for shot in shots:
                assert shot.read_bytes().startswith(PNG), shot
        finally:
            await rt.close()
