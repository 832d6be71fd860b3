"""The web view's start form in a real Chromium against a real `tether serve`: the models the
server allows offered by provider (a provider only with its key here), model settings,
sub-agents and several metadata pairs (rows added and removed), all reaching the session's
`session.created` as a start over HTTP records them."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from server.support import ACME, ACME_HEADERS, serve
from server.test_web_view import WAIT_MS, browser, give_token

__all__ = ["browser"]  # the fixture, shared with the sessions' browser tests

MODEL = "python:tether.testing.runtime_fixtures:model"


async def test_the_start_form_offers_models_by_provider_and_sends_settings_agents_and_metadata(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    env = {"ANTHROPIC_API_KEY": "sk-never-used", "OPENAI_API_KEY": ""}
    with serve(tmp_path, "--workers", "2", env=env) as server:
        page = await browser.new_page()
        await page.goto(f"{server.url}/ui")
        await give_token(page, ACME)
        await page.click("#to-start")
        groups = page.locator("#start-offered optgroup")
        await expect(groups).to_have_count(3, timeout=WAIT_MS)
        labels = [await g.get_attribute("label") for g in await groups.all()]
        assert labels == ["python", "scripted", "anthropic"]  # no OpenAI key: not offered
        anthropic = page.locator('#start-offered optgroup[label="anthropic"] option')
        assert "anthropic:claude-sonnet-4-5" in await anthropic.all_inner_texts()

        await page.select_option("#start-offered", MODEL)
        await expect(page.locator("#start-model")).to_have_value(MODEL)
        await page.fill("#start-task", "echo set up in the form")
        await page.select_option("#start-reasoning", "high")
        await page.fill("#start-temperature", "0.5")
        await page.fill("#start-max-output", "300")
        await page.uncheck("#start-cache")
        await page.click("#start-agent-add")
        agent = page.locator("#start-agents li").first
        await agent.get_by_label("sub-agent name").fill("helper")
        await agent.get_by_label("its model").fill("scripted:demo")
        for key, value in [("team", "birds"), ("drop", "me"), ("ticket", "42")]:
            await page.click("#start-metadata-add")
            row = page.locator("#start-metadata li").last
            await row.get_by_label("metadata key").fill(key)
            await row.get_by_label("value").fill(value)
        await page.locator("#start-metadata li").nth(1).get_by_role("button").click()
        await expect(page.locator("#start-metadata li")).to_have_count(2)
        await page.click("#start-submit")
        await expect(page).to_have_url(re.compile(r"#/s/ses_"), timeout=WAIT_MS)
        session_id = page.url.split("#/s/")[1]
        answered = page.locator('#timeline li[data-type="model.responded"]')
        await expect(answered).to_contain_text("echo: set up in the form", timeout=WAIT_MS)
        await page.close()
        async with httpx.AsyncClient(base_url=server.url, headers=ACME_HEADERS) as client:
            events = (await client.get(f"/v1/sessions/{session_id}/events?limit=1")).json()
    metadata = events["events"][0]["data"]["metadata"]
    assert metadata["model_settings"]["reasoning"]["effort"] == "high"
    settings = metadata["model_settings"]
    assert (settings["temperature"], settings["max_output_tokens"], settings["cache"]) == (
        0.5,
        300,
        False,
    )
    assert (metadata["team"], metadata["ticket"]) == ("birds", "42") and "drop" not in metadata
    assert metadata["runner"]["agents"]["helper"]["model"] == "scripted:demo"
