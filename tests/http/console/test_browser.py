"""End to end in headless Chromium (Debian's ``chromium``) against a gateway on loopback with a
usage ledger: sign in, the overview counts the requests made, keys created / used / revoked /
rotated, the usage explorer pages and exports CSV, deployments, sign out. Each page's screenshot
goes to a temporary folder, or to ``$CONSOLE_SCREENSHOTS`` (``CONSOLE_SCREENSHOTS=docs/console``
refreshes the README's pictures) so that a test run leaves the checkout as it found it."""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from tests.conftest import free_port
from tests.fakes.upstream import Behaviour
from tests.http.console.conftest import KEY, MASTER, complete, console_config, gateway
from tests.policies.ledger.helpers import wait_rows

BOB = "sk-console-bob"
MONEY = re.compile(r"\$[\d,]+\.\d{4}(?!\d)")

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


async def open_console(browser: Browser, base_url: object, master: str = MASTER,
                       errors: list[str] | None = None, **context: Any) -> Page:
    """A page of a fresh browser context signed in with the master key, once the overview has
    loaded; ``errors`` collects the page's uncaught script errors."""
    page = await (await browser.new_context(**context)).new_page()
    if errors is not None:
        page.on("pageerror", lambda e: errors.append(str(e)))
    await page.goto(f"{str(base_url).rstrip('/')}/ui")
    await page.fill("#master_key", master)
    await page.click("button[type=submit]")
    await expect(page.locator("body")).to_have_attribute("data-loaded", "overview")
    return page


async def goto(page: Page, name: str) -> None:
    await page.click(f'nav a[data-page="{name}"]')
    await expect(page.locator("body")).to_have_attribute("data-loaded", name)


def config(upstream_url: str, ledger: str):
    """alice (team ml); bob (team ops: 2 requests a minute, one model); openai/down: a deployment
    that never answers, whose base URL carries credentials the console must not show."""
    down = f"http://user:pa55word@127.0.0.1:{free_port()}/v1?api-key=s3cret"
    return console_config(
        upstream_url, ledger=ledger,
        models=[{"name": "openai/gpt-4o", "aliases": ["gpt-4o"],
                 "price": {"prompt_per_1m": 2.5, "completion_per_1m": 10.0},
                 "deployments": [{"name": "d1", "base_url": upstream_url, "model": "gpt-4o", "weight": 3}]},
                {"name": "openai/down", "price": {"prompt_per_1m": 1.0},
                 "deployments": [{"name": "d9", "base_url": down, "model": "gpt-x"}]}],
        teams=[{"name": "ml", "limits": {"spend_per_day": 1.0}},
               {"name": "ops", "models": ["openai/gpt-4o"], "limits": {"rpm": 2}}],
        keys=[{"id": "alice", "team": "ml", "key": KEY}, {"id": "bob", "team": "ops", "key": BOB}])


async def ask(c, key: str, model: str) -> int:
    r = await c.post("/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
                     json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
    return r.status_code


async def ticks(page: Page, chart: str) -> list[str]:
    return await page.locator(f"#{chart} text.tick").all_text_contents()


async def test_the_console_in_a_browser(upstream, database_url, browser):
    async with gateway(config(upstream.url, database_url)) as c:
        made = 4
        for _ in range(made):
            assert (await complete(c, KEY)).status_code == 200
        # bob: 2 answered, then refused by his team's rpm, and by its model allow-list; alice's
        # 2 requests to the deployment that never answers; one request with no valid key
        assert [await ask(c, BOB, "openai/gpt-4o") for _ in range(3)] == [200, 200, 429]
        assert await ask(c, BOB, "openai/down") == 403
        assert [await ask(c, KEY, "openai/down") for _ in range(2)] == [502, 502]
        assert await ask(c, "sk-wrong", "openai/gpt-4o") == 401
        requests, errors, refused = made + 6, 4, 2
        await wait_rows(database_url, requests)
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
        # refused requests are counted: requests, errors (refusals included), refused, no key
        await expect(page.locator("#stat-requests")).to_have_text(str(requests))
        await expect(page.locator("#stat-errors")).to_have_text(str(errors))
        await expect(page.locator("#stat-refused")).to_have_text(str(refused))
        await expect(page.locator("#stat-unauth")).to_have_text("1")
        chart = page.locator("#chart-requests")
        await expect(chart).to_have_attribute("data-rendered", "1")
        bars = await chart.locator("rect").evaluate_all("rs => rs.map(r => Number(r.dataset.value))")
        assert sum(bars) == requests and max(bars) > 0
        # legends name every stacked series; count axes tick at integers only
        legend = "#chart-{} + ul.legend li"
        stacked = await page.locator(legend.format("requests")).all_text_contents()
        assert stacked == ["answered", "errors", "refused"]
        assert await page.locator(legend.format("tokens")).all_text_contents() == [
            "prompt", "cache read", "cache write", "completion"]
        for name in ("requests", "tokens"):
            marks = await ticks(page, f"chart-{name}")
            assert len(marks) >= 2 and all(re.fullmatch(r"\d+(\.\d)?[kMG]?|\d+", m) for m in marks), marks
            assert all("." not in m for m in marks if m[-1].isdigit()), marks
        assert all(MONEY.fullmatch(m) for m in await ticks(page, "chart-spend"))
        await expect(page.locator("#page-overview .tz")).to_have_text("Times in UTC")
        # who is refused now, and why
        now = page.locator("#ov-refused-now")
        await expect(now.locator("tr", has_text="rate_limit:rpm@team")).to_contain_text("bob")
        await expect(now.locator("tr", has_text="model_not_allowed")).to_contain_text("bob")
        await expect(page.locator("#ov-unauth")).to_contain_text("invalid_key")
        # the last hour by minute
        await page.click('[data-range="1h"]')
        await expect(page.locator("#ov-source")).to_contain_text("per minute")
        assert await chart.locator("g.bar").count() in (61, 62)
        minutes = await chart.locator("g.bar").evaluate_all("gs => gs.map(g => g.dataset.label)")
        assert all(m.endswith(":00Z") for m in minutes) and len({m[:16] for m in minutes}) == len(minutes)
        await expect(page.locator("#stat-requests")).to_have_text(str(requests))
        await page.click('[data-range="30d"]')
        await expect(page.locator('[data-range="30d"]')).to_have_class("on")
        await expect(page.locator("#ov-models")).to_contain_text("openai/gpt-4o")
        await page.click('[data-range="24h"]')
        await expect(page.locator("#stat-requests")).to_have_text(str(requests))
        # money at one precision everywhere on the page
        text = await page.locator("#page-overview").inner_text()
        assert "$" in text and all(MONEY.match(text, m.start()) for m in re.finditer(r"\$", text)), text
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
        # bob is restricted by his team: the models and limits in effect say where they come from
        await expect(page.locator('[data-key-models="bob"]')).to_have_text("openai/gpt-4o team")
        await expect(page.locator('[data-key-limits="bob"]')).to_have_text("rpm 2 team")
        await expect(page.locator('[data-key-limits="alice"]')).to_have_text("spend_per_day $1.0000 team")
        await expect(page.locator('[data-key-state="bob"]')).to_contain_text("limited: rate_limit:rpm@team")
        # every form field has a visible label (not a placeholder only)
        for form in ("team-form", "key-form", "usage-form"):
            fields = page.locator(f"#{form} input, #{form} select")
            for i in range(await fields.count()):
                label = await fields.nth(i).evaluate("e => e.labels.length ? e.labels[0].innerText : ''")
                label = label.strip()
                assert label, (form, await fields.nth(i).get_attribute("name"))
        # the team form sets concurrency and token quotas too
        await page.fill('#team-form input[name="name"]', "ops")
        await page.fill('#team-form input[name="max_concurrency"]', "3")
        await page.fill('#team-form input[name="tokens_per_day"]', "100000")
        await page.fill('#team-form input[name="tokens_per_month"]', "2000000")
        await page.click('#team-form button[type="submit"]')
        ops = page.locator("#teams-table tbody tr", has_text="tokens_per_month")
        await expect(ops).to_contain_text("max_concurrency 3")
        await expect(ops).to_contain_text("tokens_per_day 100,000")
        await expect(page.locator('[data-key-limits="bob"]')).to_contain_text("max_concurrency 3 team")
        # a team's daily spend quota, raised: the bar shows spend against the new quota
        await page.fill('#team-form input[name="name"]', "ml")
        await page.fill('#team-form input[name="spend_per_day"]', "2")
        await page.click('#team-form button[type="submit"]')
        ml = page.locator("#teams-table tbody tr", has_text="spend_per_day $2.0000")
        await expect(ml).to_contain_text("/ $2.0000")
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
        total = requests + answered - made
        await wait_rows(database_url, total)
        await goto(page, "usage")
        await expect(page.locator("#usage-agg")).to_contain_text("openai/gpt-4o")
        await expect(page.locator("#usage-records tbody tr")).to_have_count(total)
        heads = await page.locator("#usage-records thead th").all_text_contents()
        assert {"Time (UTC)", "Attempts", "Reason"} <= set(heads)
        col = {h: i + 1 for i, h in enumerate(heads)}
        refused_row = page.locator("#usage-records tbody tr", has_text="rate_limit:rpm@team")
        await expect(refused_row.locator(f"td:nth-child({col['Attempts']})")).to_have_text("0")
        # /admin/usage?status=429 finds the refusal
        await page.fill('#usage-form input[name="status"]', "429")
        await page.click('#usage-form button[type="submit"]')
        await expect(page.locator("#usage-records tbody tr")).to_have_count(1)
        await page.fill('#usage-form input[name="status"]', "")
        await page.fill('#usage-form input[name="key"]', "alice")
        await page.click('#usage-form button[type="submit"]')
        await expect(page.locator("#usage-records tbody tr")).to_have_count(made + 2)
        down = page.locator("#usage-records tbody tr", has_text="openai/down").first
        await expect(down.locator(f"td:nth-child({col['Attempts']})")).to_have_text("1")
        # pages of 3 from the cursor endpoint: 3, then 3 more (the last), and back
        await page.fill('#usage-form input[name="limit"]', "3")
        await page.click('#usage-form button[type="submit"]')
        await expect(page.locator("#usage-records tbody tr")).to_have_count(3)
        first = await page.locator("#usage-records tbody tr").all_inner_texts()
        await page.click("#next-page")
        await expect(page.locator("#page-no")).to_have_text("page 2")
        await expect(page.locator("#usage-records tbody tr")).to_have_count(3)
        assert not set(await page.locator("#usage-records tbody tr").all_inner_texts()) & set(first)
        await expect(page.locator("#next-page")).to_be_disabled()
        await page.click("#prev-page")
        await expect(page.locator("#page-no")).to_have_text("page 1")  # the table is filled with it
        await expect(page.locator("#usage-records tbody tr")).to_have_count(3)
        assert await page.locator("#usage-records tbody tr").all_inner_texts() == first
        await page.fill('#usage-form input[name="limit"]', "50")
        await page.click('#usage-form button[type="submit"]')
        await expect(page.locator("#usage-records tbody tr")).to_have_count(made + 2)
        await shot(page, "usage")
        async with page.expect_download() as dl:
            await page.click("#csv-link")
        path = await (await dl.value).path()
        rows = list(csv.DictReader(io.StringIO(Path(path).read_text())))
        assert len(rows) == made + 2 and {r["key_id"] for r in rows} == {"alice"}
        assert sorted(r["status"] for r in rows) == ["200"] * made + ["502"] * 2

        await goto(page, "deployments")
        await expect(page.locator("#deployments-table")).to_contain_text("openai/gpt-4o/d1")
        await expect(page.locator("#deployments-table")).to_contain_text("closed")
        # base URL (no credentials), the upstream's model name, weight; never answered: "—"
        table = page.locator("#deployments-table")
        d1 = table.locator("tbody tr", has_text="openai/gpt-4o/d1")
        await expect(d1).to_contain_text(upstream.url.rstrip("/"))
        await expect(d1).to_contain_text("gpt-4o")
        heads = await table.locator("thead th").all_text_contents()
        col = {h: i + 1 for i, h in enumerate(heads)}
        await expect(d1.locator(f"td:nth-child({col['Weight']})")).to_have_text("3")
        d9 = table.locator("tbody tr", has_text="openai/down/d9")
        await expect(d9.locator(f"td:nth-child({col['Latency (TTFB, EWMA)']})")).to_have_text("—")
        await expect(d9.locator(f"td:nth-child({col['Upstream model']})")).to_have_text("gpt-x")
        await expect(d9.locator(f"td:nth-child({col['Base URL']})")).to_have_text(re.compile(r"^http://127\.0\.0\.1:\d+/v1$"))
        # identical errors once, with their count
        await expect(d9.locator("ul.errors li")).to_have_count(1)
        await expect(d9.locator("ul.errors li b.count")).to_have_text(" \u00d72")  # " x2", the sign
        page_text = await page.content()
        assert "pa55word" not in page_text and "s3cret" not in page_text
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
