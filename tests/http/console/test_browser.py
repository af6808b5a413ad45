"""End to end in headless Chromium (Debian's ``chromium``) against a gateway on loopback with a
usage ledger: sign in, the overview counts the requests made, keys created / used / revoked /
rotated, the usage explorer pages and exports CSV, deployments, sign out. Each page's screenshot
goes to a temporary folder, or to ``$CONSOLE_SCREENSHOTS`` (``CONSOLE_SCREENSHOTS=docs/console``
refreshes the README's pictures) so that a test run leaves the checkout as it found it."""

from __future__ import annotations

import csv
import io
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from tests.fakes.upstream import Behaviour
from tests.http.console.conftest import KEY, MASTER, complete, console_config, gateway
from tests.policies.ledger.helpers import wait_rows

SHOTS = Path(os.environ.get("CONSOLE_SCREENSHOTS") or Path(tempfile.gettempdir()) / "switchyard-console")


def chromium_path() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        pytest.fail("the console's browser tests need Debian's chromium: apt-get install -y chromium "
                    "(make test installs it), or set CHROMIUM=/path/to/chromium", pytrace=False)
    return path


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=chromium_path(), headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        yield b
        await b.close()


async def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def goto(page: Page, name: str) -> None:
    await page.click(f'nav a[data-page="{name}"]')
    await expect(page.locator("body")).to_have_attribute("data-loaded", name)


async def test_the_console_in_a_browser(upstream, database_url, browser):
    async with gateway(console_config(upstream.url, ledger=database_url)) as c:
        made = 4
        for _ in range(made):
            assert (await complete(c, KEY)).status_code == 200
        await wait_rows(database_url, made)
        base = str(c.base_url).rstrip("/")
        ctx = await browser.new_context(viewport={"width": 1360, "height": 900}, accept_downloads=True)
        page = await ctx.new_page()
        problems: list[str] = []  # console errors include any CSP violation
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("dialog", lambda d: d.accept())

        # a wrong master key: the sign-in page again, never data
        await page.goto(f"{base}/ui")
        await expect(page.locator("#signin-form")).to_be_visible()
        await shot(page, "signin")
        await page.fill("#master_key", MASTER + "-wrong")
        await page.click("button[type=submit]")
        await expect(page.locator(".error")).to_have_text("Wrong master key.")
        await expect(page.locator("#signin-form")).to_be_visible()
        assert await page.locator("#page-overview").count() == 0
        assert not [ck for ck in await ctx.cookies() if ck["name"] == "sy_console"]

        assert problems == ["Failed to load resource: the server responded with a status of 401 "
                            "(Unauthorized)"]  # the wrong key's answer, and nothing else
        problems.clear()

        # sign in: the overview counts the requests this test made
        await page.fill("#master_key", MASTER)
        await page.click("button[type=submit]")
        await expect(page.locator("body")).to_have_attribute("data-loaded", "overview")
        assert MASTER not in await page.content()
        (cookie,) = [ck for ck in await ctx.cookies() if ck["name"] == "sy_console"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert await page.evaluate("document.cookie") == ""  # HttpOnly: invisible to scripts
        await expect(page.locator("#stat-requests")).to_have_text(str(made))
        chart = page.locator("#chart-requests")
        await expect(chart).to_have_attribute("data-rendered", "1")
        bars = await chart.locator("rect").evaluate_all("rs => rs.map(r => Number(r.dataset.value))")
        assert sum(bars) == made and max(bars) > 0
        await page.click('[data-range="30d"]')
        await expect(page.locator('[data-range="30d"]')).to_have_class("on")
        await expect(page.locator("#ov-models")).to_contain_text("openai/gpt-4o")
        await page.click('[data-range="24h"]')
        await expect(page.locator("#stat-requests")).to_have_text(str(made))
        await shot(page, "overview")

        # create a key, use it, revoke it and see it refused
        await goto(page, "keys")
        await page.select_option("#key-team", "ml")
        await page.fill('#key-form input[name="id"]', "browser")
        await page.click("#create-key")
        await expect(page.locator("#new-key-box")).to_be_visible()
        new_key = (await page.locator("#new-key").text_content() or "").strip()
        assert new_key.startswith("sk-sy-")
        assert (await complete(c, new_key)).status_code == 200
        await expect(page.locator('[data-key-state="browser"]')).to_have_text("active")
        # a team's daily spend quota, raised: the bar shows spend against the new quota
        await page.fill('#team-form input[name="name"]', "ml")
        await page.fill('#team-form input[name="spend_per_day"]', "2")
        await page.click('#team-form button[type="submit"]')
        ml = page.locator("#teams-table tbody tr", has_text="spend_per_day $2.00")
        await expect(ml).to_contain_text("/ $2.00")
        await expect(ml.locator("meter")).to_have_attribute("max", "2")
        await shot(page, "keys")
        await page.click("#new-key-done")
        await expect(page.locator("#new-key-box")).to_be_hidden()
        await page.click('[data-revoke="browser"]')
        await expect(page.locator('[data-key-state="browser"]')).to_have_text("revoked")
        assert (await complete(c, new_key)).status_code == 401

        # rotate one: the new secret works, the old one too for its grace period
        await page.fill('#key-form input[name="id"]', "rotating")
        await page.click("#create-key")
        await expect(page.locator("#new-key-id")).to_have_text("rotating")
        old = (await page.locator("#new-key").text_content() or "").strip()
        await page.click('[data-rotate="rotating"]')
        await page.fill('#rotate-form input[name="grace_seconds"]', "120")
        await page.click("#rotate-ok")
        await expect(page.locator("#new-key")).not_to_have_text(old)
        rotated = (await page.locator("#new-key").text_content() or "").strip()
        assert rotated.startswith("sk-sy-") and rotated != old
        assert (await complete(c, rotated)).status_code == 200
        assert (await complete(c, old)).status_code == 200
        answered = made + 3

        # set a limit and an allowlist: the same PATCH a script sends, in force at once
        await page.click('[data-edit="rotating"]')
        await page.fill('#edit-form input[name="rpm"]', "7")
        await page.fill('#edit-form input[name="models"]', "openai/gpt-4o")
        await page.click("#edit-ok")
        row = page.locator("#keys-table tr", has=page.locator('[data-key-state="rotating"]'))
        await expect(row).to_contain_text("rpm 7")
        r = await complete(c, rotated)
        assert r.status_code == 200 and r.headers["x-ratelimit-limit-requests"] == "7"
        answered += 1

        # the usage explorer: cursor pages and a CSV export of what was asked
        await wait_rows(database_url, answered)
        await goto(page, "usage")
        await expect(page.locator("#usage-agg")).to_contain_text("openai/gpt-4o")
        await expect(page.locator("#usage-records tbody tr")).to_have_count(answered)
        await page.fill('#usage-form input[name="key"]', "alice")
        await page.click('#usage-form button[type="submit"]')
        await expect(page.locator("#usage-records tbody tr")).to_have_count(made)
        # pages of 3 from the cursor endpoint: 3, then 1, and back
        await page.fill('#usage-form input[name="limit"]', "3")
        await page.click('#usage-form button[type="submit"]')
        await expect(page.locator("#usage-records tbody tr")).to_have_count(3)
        first = await page.locator("#usage-records tbody tr").all_inner_texts()
        await page.click("#next-page")
        await expect(page.locator("#page-no")).to_have_text("page 2")
        await expect(page.locator("#usage-records tbody tr")).to_have_count(1)
        assert (await page.locator("#usage-records tbody tr").inner_text()) not in first
        await expect(page.locator("#next-page")).to_be_disabled()
        await page.click("#prev-page")
        await expect(page.locator("#usage-records tbody tr")).to_have_count(3)
        assert await page.locator("#usage-records tbody tr").all_inner_texts() == first
        await page.fill('#usage-form input[name="limit"]', "50")
        await page.click('#usage-form button[type="submit"]')
        await expect(page.locator("#usage-records tbody tr")).to_have_count(made)
        await shot(page, "usage")
        async with page.expect_download() as dl:
            await page.click("#csv-link")
        path = await (await dl.value).path()
        rows = list(csv.DictReader(io.StringIO(Path(path).read_text())))
        assert len(rows) == made and {r["key_id"] for r in rows} == {"alice"}
        assert all(r["status"] == "200" for r in rows)

        await goto(page, "deployments")
        await expect(page.locator("#deployments-table")).to_contain_text("openai/gpt-4o/d1")
        await expect(page.locator("#deployments-table")).to_contain_text("closed")
        await shot(page, "deployments")
        # An upstream's Retry-After opens the breaker; the operator closes it from the page.
        upstream.script.append(Behaviour(status=429, retry_after=3600, error="slow down"))
        assert (await complete(c, KEY)).status_code == 429
        await goto(page, "deployments")
        await page.click('[data-reset="openai/gpt-4o/d1"]')
        await expect(page.locator('[data-reset="openai/gpt-4o/d1"]')).to_have_count(0)
        await expect(page.locator("#deployments-table")).to_contain_text("closed")
        assert (await complete(c, KEY)).status_code == 200

        await page.click("#signout")
        await expect(page.locator("#signin-form")).to_be_visible()
        assert problems == []
        await ctx.close()
