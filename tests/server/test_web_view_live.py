"""The web view's live panel in a real Chromium, following a session that a real `tether serve`
runs with a real provider model (`openai:gpt-4o-mini` at a loopback fake that streams SSE and
holds at barriers): the model's reasoning and a call's input, then its text, fill the panel
while the answer is still streaming, before the answer is in the log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from server.streaming_chat import StreamingChat, Turn, call, reasoning, serve_env, start, text
from server.support import ACME, serve
from server.test_web_view import WAIT_MS, browser, give_token  # noqa: F401  (a fixture)
from tether.testing.runtime_conformance import TOOLS


async def test_the_live_panel_fills_while_the_answer_streams(
    tmp_path: Path,
    browser: object,  # noqa: F811
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    following, call_shown, text_shown = asyncio.Event(), asyncio.Event(), asyncio.Event()
    asking = reasoning("I should ", "note it down.") + call(
        "call_note_1", "note", '{"text', '": "streamed', ' input"}'
    )
    answering = text("Noted: ", "streamed ", "into the page", ".")
    turns = [
        # Held at the first delta until the page follows, and at the finish until it showed
        # the call's input.
        Turn(asking, holds={1: following, 1 + len(asking): call_shown}),
        Turn(answering, holds={4: text_shown}),  # the last piece waits for the page
    ]
    async with StreamingChat(turns) as chat:
        with serve(tmp_path, "--workers", "2", env=serve_env(chat)) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
                sid = await start(client, "note this", tools=list(TOOLS))
            page = await browser.new_page()
            await page.goto(f"{server.url}/ui#/s/{sid}")
            await give_token(page, ACME)
            requested = page.locator('#timeline li[data-type="model.requested"]')
            responded = page.locator('#timeline li[data-type="model.responded"]')
            live = page.locator("#live")
            await expect(requested).to_have_count(1, timeout=WAIT_MS)
            following.set()  # the page reads the stream: what comes now reaches it

            thinking = live.locator(".live-reasoning")
            await expect(thinking).to_have_text("I should note it down.", timeout=WAIT_MS)
            tool_input = live.locator(".live-tool_input")
            await expect(tool_input).to_have_text('{"text": "streamed input"}', timeout=WAIT_MS)
            await expect(tool_input).to_have_attribute("data-call", "call_note_1")
            assert await responded.count() == 0  # the answer is still streaming
            call_shown.set()

            await expect(live).to_have_text("Noted: streamed into the page", timeout=WAIT_MS)
            assert await live.locator(".live-tool_input").count() == 0  # a new answer
            assert await responded.count() == 1  # only the first answer is in the log
            text_shown.set()
            await expect(live).to_have_text("Noted: streamed into the page.", timeout=WAIT_MS)
            await expect(page.locator("#state")).to_have_text("completed", timeout=WAIT_MS)
            await expect(responded).to_have_count(2)
