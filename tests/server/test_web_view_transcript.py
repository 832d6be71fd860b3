"""A session's answer and transcript in the web view, and its paper cuts, in a real Chromium
against a real `tether serve`: a finished session shows its whole answer (past 2,000
characters) with no click, and its transcript: the task, a tool call with its arguments and
result, a sub-agent's thread opened under the call that started it (and its own sub-agent's
tool call), a long text cut and shown whole on request, copied whole; model text stays text;
axe finds nothing serious at 1280 and 390 px. The paper cuts: a state on one line, local
times with the exact one on hover, the experiment pages within 390 px, a no-token message for
a person, a retry's wait on the timeline."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import httpx

from server.support import ACME, serve, settled
from server.test_experiments_view import CHECKS, run_experiments
from server.test_web_view import WAIT_MS, WATCH_VIOLATIONS, browser, give_token
from server.test_web_view_a11y import axe_source, layout_problems, serious_violations
from tether.testing.runtime_fixtures import MODEL, TOOLS

__all__ = ["browser"]  # the fixture, shared with the sessions' browser tests

TESTS = str(Path(__file__).resolve().parents[1])  # where `runtime.subagent_models` lives
PARENT = "python:runtime.subagent_models:parent"
AS_ACME = {"authorization": f"Bearer {ACME}"}
HOSTILE = "<img src=x onerror=alert(1)><script>alert(2)</script>"
# A model that asks its researcher first, then answers with what it said and the whole task.
ANSWERER = """
from tether.published import model_factory
from tether.testing.scripted import ScriptedModel, call

def _reply(messages):
    last = max(i for i, m in enumerate(messages) if m.role == "user")
    results = [r.content for m in messages[last + 1:] for r in m.tool_results]
    if not results:
        return call("researcher", task="ask helper note 1")
    return "researcher said: " + results[-1] + "\\n\\n" + messages[last].text

@model_factory
def model():
    return ScriptedModel([_reply], repeat_last=True, name="scripted:answerer")
"""
# A model whose first call in a process fails with an error worth retrying (the count is the
# module's: a worker may build the model again for the retry).
FLAKY = """
from tether.errors import ServerError
from tether.published import model_factory
from tether.testing.scripted import Fail, ScriptedModel

CALLS = [0]

def _reply(messages):
    CALLS[0] += 1
    if CALLS[0] == 1:
        return Fail(ServerError("busy", status=503, retryable=True))
    return "recovered"

@model_factory
def model():
    return ScriptedModel([_reply], repeat_last=True, name="scripted:flaky")
"""
TREE = {
    "researcher": {"model": PARENT, "agents": ["helper"]},
    "helper": {"model": MODEL, "tools": list(TOOLS), "description": "Notes things."},
}


def long_task() -> str:
    lines = [
        f"line {i}: the answer goes on, and on, and on, past what a summary keeps."
        for i in range(40)
    ]
    return "\n".join([HOSTILE, *lines, "THE END"])


async def start(client: httpx.AsyncClient, body: dict[str, Any]) -> str:
    response = await client.post("/v1/sessions", headers=AS_ACME, json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["session_id"])


async def test_a_finished_session_shows_its_answer_and_transcript(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    source = axe_source()
    (tmp_path / "answerer.py").write_text(ANSWERER)
    allow = ("--allow-code", "runtime.subagent_models:*", "--allow-code", "answerer:*")
    env = {"PYTHONPATH": f"{TESTS}:{tmp_path}"}
    with serve(tmp_path, *allow, "--workers", "2", env=env) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            task = long_task()
            body = {"model": "python:answerer:model", "task": task, "agents": TREE}
            sid = await start(client, {**body, "end_after_turn": True})
            status = await settled(client, sid)
            assert status["state"] == "completed", status
            steps = {
                "model": MODEL,
                "task": "note 30",
                "tools": list(TOOLS),
                "end_after_turn": True,
            }
            long_id = await start(client, steps)
            assert (await settled(client, long_id))["state"] == "completed"
        answer = "researcher said: helper said: noted 1\n\n" + task
        assert status["last_output"] == answer and len(answer) > 2_000

        context = await browser.new_context(permissions=["clipboard-read", "clipboard-write"])
        page = await context.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: dialogs.append(d.message))
        await page.add_init_script(WATCH_VIOLATIONS)
        await page.goto(f"{server.url}/ui")
        await give_token(page, ACME)
        await page.goto(f"{server.url}/ui#/s/{sid}")
        await expect(page.locator("#state")).to_have_text("completed", timeout=WAIT_MS)

        # The whole answer, at the top, with no click; copied whole.
        await expect(page.locator("#answer-panel")).to_be_visible()
        await expect(page.locator("#answer-title")).to_have_text("answer")
        assert await page.locator("#answer").text_content() == answer
        await page.click("#answer-copy")
        await expect(page.locator("#answer-copy")).to_have_text("Copied")
        assert await page.evaluate("navigator.clipboard.readText()") == answer

        # The transcript: the task (cut, shown whole on request), the call with its
        # arguments, its result, the answer; the event list is still there.
        messages = page.locator("#transcript > ol > li.message")
        await expect(messages).to_have_count(4, timeout=WAIT_MS)
        roles = [await m.get_attribute("data-role") for m in await messages.all()]
        assert roles == ["user", "assistant", "tool", "assistant"]
        task_part = messages.nth(0).locator(".part.text")
        shown = await task_part.locator(".body").text_content()
        assert shown is not None and len(shown) == 2_000 and task.startswith(shown)
        await task_part.locator("button.whole").click()
        await expect(task_part.locator(".body")).to_have_text(task)
        await expect(task_part.locator("button.whole")).to_have_count(0)
        call = messages.nth(1).locator(".part.tool_call")
        await expect(call).to_contain_text("calls researcher")
        await expect(call.locator("pre.body")).to_contain_text('"task": "ask helper note 1"')
        result = messages.nth(2).locator(".part.tool_result")
        await expect(result).to_contain_text("result of researcher")
        await expect(result.locator("pre.body")).to_have_text("helper said: noted 1")
        await expect(page.locator("#timeline li").last).to_contain_text("session.ended")

        # The sub-agent's thread, under the call that started it, read when opened; and
        # its own sub-agent's, with the tool call it made.
        researcher = call.locator('details.subagent[data-thread="researcher-1"]')
        await expect(researcher.locator("summary")).to_contain_text("researcher · finished")
        await researcher.locator("summary").click()
        inner = researcher.locator(".thread-transcript > ol > li.message")
        await expect(inner).to_have_count(4, timeout=WAIT_MS)
        await expect(inner.nth(1)).to_contain_text("calls helper")
        helper = researcher.locator('details.subagent[data-thread="researcher-1/helper-1"]')
        await helper.locator("summary").click()
        note = helper.locator(".part.tool_call")
        await expect(note).to_contain_text("calls note", timeout=WAIT_MS)
        await expect(note.locator("pre.body")).to_contain_text('"text": "step 1"')
        await expect(helper.locator(".part.tool_result pre.body")).to_have_text("noted: step 1")

        # A long session's transcript opens a page at a time.
        await page.goto(f"{server.url}/ui#/s/{long_id}")
        messages = page.locator("#transcript > ol > li.message")
        await expect(messages).to_have_count(50, timeout=WAIT_MS)
        more = page.locator("#transcript > button.more")
        await expect(more).to_have_text("Show the next 12 of 12 more messages")
        await more.click()
        await expect(messages).to_have_count(62, timeout=WAIT_MS)
        await expect(more).to_be_hidden()
        await expect(messages.last).to_contain_text("noted 30")

        # Model text is text: no element made of it, nothing run, the policy held.
        assert await page.locator("#answer img, #transcript img, #transcript script").count() == 0
        assert dialogs == []
        assert await page.evaluate("window.__violations") == []

        found: dict[str, list[str]] = {}
        for width in (1280, 390):
            await page.set_viewport_size({"width": width, "height": 844})
            found[f"transcript at {width}"] = await serious_violations(page, source)
            found[f"transcript layout at {width}"] = await layout_problems(page)
        problems = [f"{k}: {p}" for k, v in found.items() for p in v]
        assert not problems, "\n".join(problems)
        await context.close()


async def test_paper_cuts_states_times_widths_token_and_retries(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    (tmp_path / "exp_view.py").write_text(CHECKS)
    (tmp_path / "flaky.py").write_text(FLAKY)
    sys.path.insert(0, str(tmp_path))
    env = {"PYTHONPATH": str(tmp_path)}
    allow = ("--allow-check", "exp_view:*", "--allow-code", "flaky:*", "--workers", "2")
    try:
        with serve(tmp_path, *allow, env=env) as server:
            await asyncio.wait_for(run_experiments(server.store), 120)
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                done = await start(
                    client, {"model": MODEL, "task": "echo hi", "end_after_turn": True}
                )
                retried = await start(client, {"model": "python:flaky:model", "task": "hello"})
                assert (await settled(client, done))["state"] == "completed"
                listed = (await client.get("/v1/sessions", headers=AS_ACME)).json()["sessions"]
            updated = next(s["updated"] for s in listed if s["session_id"] == done)

            page = await browser.new_page(viewport={"width": 390, "height": 844})
            # Before a token: what to do, said to a person in a browser.
            await page.goto(f"{server.url}/ui")
            await expect(page.locator("#problem")).to_contain_text(
                "Paste the token you were given", timeout=WAIT_MS
            )
            await give_token(page, ACME)
            row = page.locator(f'tr[data-session="{done}"]')
            state = row.locator("td").nth(1)
            await expect(state).to_have_text("completed", timeout=WAIT_MS)
            lines = await state.evaluate(
                "(td) => { const r = document.createRange(); r.selectNodeContents(td);"
                " return r.getClientRects().length; }"
            )
            assert lines == 1  # "completed", not "complete/d"

            # The list's times: local, to the second, the stored value on hover.
            await page.set_viewport_size({"width": 1280, "height": 844})
            when = row.locator("td").nth(7)
            assert await when.get_attribute("title") == updated
            said = await when.text_content()
            assert said and updated[:4] in said and "T" not in said
            assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d", said), said

            # The experiment pages fit a phone.
            await page.set_viewport_size({"width": 390, "height": 844})
            widths: dict[str, int] = {}
            await page.goto(f"{server.url}/ui#/experiments")
            listed_row = page.locator('#experiments tr[data-experiment="shown"]')
            await expect(listed_row).to_be_visible(timeout=WAIT_MS)
            assert await listed_row.locator("td").last.get_attribute("title")
            widths["experiments"] = await page.evaluate("document.documentElement.scrollWidth")
            await page.goto(f"{server.url}/ui#/e/shown")
            await expect(page.locator("#runs tr")).to_have_count(8, timeout=WAIT_MS)
            widths["experiment"] = await page.evaluate("document.documentElement.scrollWidth")
            assert widths == {"experiments": 390, "experiment": 390}

            # A retry's wait, on the timeline.
            await page.goto(f"{server.url}/ui#/s/{retried}")
            failed = page.locator('#timeline li[data-type="model.failed"]')
            await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
            await expect(failed).to_contain_text(
                re.compile(r"\(retrying in [0-9.]+ m?s\)"), timeout=WAIT_MS
            )
            await expect(page.locator("#answer")).to_have_text("recovered", timeout=WAIT_MS)

            # A live session's transcript takes in its new messages.
            messages = page.locator("#transcript > ol > li.message")
            await expect(messages).to_have_count(2, timeout=WAIT_MS)
            await page.fill("#message", "once more")
            await page.click("#send")
            await expect(messages).to_have_count(4, timeout=WAIT_MS)
            await expect(messages.nth(2)).to_contain_text("once more")
    finally:
        sys.path.remove(str(tmp_path))
