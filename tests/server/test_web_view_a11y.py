"""The web view on a phone and with a keyboard, in a real Chromium against a real `tether
serve`: axe-core (npm, installed by `.ci/axe.sh`) finds no serious or critical violation on the
page before a token is given (its error in the header), the list (its search, filters and counts), the start form, a session and an approval at 1280
and 390 px wide; at 390 px nothing scrolls sideways and
every control is at least 24 px tall and wide; updates are announced by live regions."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from server.support import ACME, serve
from server.test_web_view import WAIT_MS, browser, give_token
from tether.runtime.http import HttpRuntime
from tether.testing.runtime_conformance import Observer, spec

__all__ = ["browser"]  # the fixture, shared with the sessions' browser tests

HOW = 'install axe-core: eval "$(bash .ci/axe.sh)"'
WIDTHS = (1280, 390)
# Controls a finger or a pointer must hit: WCAG 2.2's target size (minimum), 24 by 24 px.
CONTROLS = "button, input, select, textarea, summary, #sessions a, nav a, header a"


def axe_source() -> str:
    path = os.environ.get("TETHER_TEST_AXE", "")
    if not path or not Path(path).is_file():
        if os.environ.get("CI"):
            pytest.fail(f"no axe-core in CI: {HOW}")
        pytest.skip(f"no axe-core: {HOW}")
    return Path(path).read_text()


async def serious_violations(page: Any, source: str) -> list[str]:
    """axe-core's serious and critical violations of WCAG 2.x A and AA (and its best
    practices) on the page as it is, one line each."""
    if not await page.evaluate("() => typeof window.axe === 'object'"):
        await page.evaluate(source)
    found = await page.evaluate(
        """async () => {
          const result = await axe.run(document, {
            runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]},
            resultTypes: ["violations"],
          });
          return result.violations
            .filter((v) => v.impact === "serious" || v.impact === "critical")
            .map((v) => v.id + " (" + v.impact + "): " + v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", "));
        }"""
    )
    return list(found)


async def layout_problems(page: Any) -> list[str]:
    """Sideways scroll, and visible controls smaller than 24 by 24 px."""
    return list(
        await page.evaluate(
            """(selector) => {
              const problems = [];
              const root = document.documentElement;
              if (root.scrollWidth > root.clientWidth) problems.push("scrolls sideways: " + root.scrollWidth + " > " + root.clientWidth);
              for (const el of document.querySelectorAll(selector)) {
                const box = el.getBoundingClientRect();
                if (!box.width && !box.height) continue;  // not shown
                if (box.width < 24 || box.height < 24) {
                  problems.push((el.id || el.className || el.tagName) + " is " + Math.round(box.width) + "×" + Math.round(box.height));
                }
              }
              return problems;
            }""",
            CONTROLS,
        )
    )


async def test_every_screen_passes_axe_at_desktop_and_phone_widths(
    tmp_path: Path, browser: object
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    source = axe_source()
    with serve(tmp_path, "--workers", "2") as server:
        rt = HttpRuntime(server.url, ACME)
        try:
            done = await rt.start(spec("echo accessible"))
            await Observer(rt, done).settled()
            waiting = await rt.start(spec("guarded launch"))
            await Observer(rt, waiting).until(
                "the call to wait", lambda s: bool(s.view.pending_approvals)
            )
            found: dict[str, list[str]] = {}
            for width in WIDTHS:
                page = await browser.new_page(viewport={"width": width, "height": 844})
                await page.goto(f"{server.url}/ui")
                await expect(page.locator("#problem")).not_to_be_empty(timeout=WAIT_MS)
                found[f"no token at {width}"] = await serious_violations(page, source)
                found[f"no token layout at {width}"] = await layout_problems(page)
                await give_token(page, ACME)
                row = page.locator(f'tr[data-session="{done.session_id}"]')
                await expect(row).to_contain_text("echo: accessible", timeout=WAIT_MS)
                await expect(page.locator('#counts button[data-state="idle"]')).to_be_visible()
                found[f"list at {width}"] = await serious_violations(page, source)
                found[f"list layout at {width}"] = await layout_problems(page)

                await page.goto(f"{server.url}/ui#/new")
                await expect(page.locator("#start-tools input")).to_have_count(
                    3
                )  # note, guarded, tools
                found[f"start form at {width}"] = await serious_violations(page, source)
                found[f"start form layout at {width}"] = await layout_problems(page)

                await page.goto(f"{server.url}/ui#/s/{done.session_id}")
                await expect(page.locator("#state")).to_have_text("idle", timeout=WAIT_MS)
                await expect(page.locator("#timeline li").last).to_contain_text("turn.ended")
                await page.locator("#timeline li button.line").last.click()
                await expect(page.locator("#timeline .whole pre").last).to_be_visible()
                found[f"session at {width}"] = await serious_violations(page, source)
                found[f"session layout at {width}"] = await layout_problems(page)

                await page.goto(f"{server.url}/ui#/s/{waiting.session_id}")
                box = page.locator('#approvals div[data-call="call_0_0"]')
                await expect(box.locator(".tool")).to_have_text("guarded", timeout=WAIT_MS)
                found[f"approval at {width}"] = await serious_violations(page, source)
                found[f"approval layout at {width}"] = await layout_problems(page)
                await page.close()
            problems = [f"{k}: {p}" for k, v in found.items() for p in v]
            assert not problems, "\n".join(problems)
        finally:
            await rt.close()
