"""Spend in the console (headless Chromium, the store's aggregates): requests without a known price
are flagged where spend is shown (the overview's total and per-model row say how many were left
out of the sum); the usage explorer groups and filters by tag, end user and session."""

from __future__ import annotations

from playwright.async_api import expect

from tests.http.console.conftest import KEY, MASTER, console_config, gateway
from tests.http.console.test_browser import browser, open_console  # noqa: F401 (the fixture)


async def test_the_overview_flags_unpriced_requests(upstream, browser):  # noqa: F811
    models = [{"name": "openai/gpt-4o", "aliases": ["gpt-4o"],
               "price": {"prompt_per_1m": 2.5, "completion_per_1m": 10.0},
               "deployments": [{"name": "d1", "base_url": upstream.url, "model": "gpt-4o"}]},
              {"name": "local/tuned", "deployments": [
                  {"name": "v", "provider": "vllm", "base_url": upstream.url, "model": "my-finetune"}]}]
    cfg = console_config(upstream.url, models=models, teams=[{"name": "ml"}])
    async with gateway(cfg) as c:
        for model in ("openai/gpt-4o", "local/tuned", "local/tuned"):
            r = await c.post("/v1/chat/completions", headers={"authorization": f"Bearer {KEY}"},
                             json={"model": model, "messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": 5})
            assert r.status_code == 200
        page = await open_console(browser, c.base_url)
        await expect(page.locator("#stat-spend .unpriced")).to_have_text("2 unpriced")
        tuned = page.locator("#ov-models tbody tr", has_text="local/tuned")
        await expect(tuned.locator(".unpriced")).to_have_attribute("data-unpriced", "2")
        priced = page.locator("#ov-models tbody tr", has_text="openai/gpt-4o")
        await expect(priced).to_contain_text("$")
        assert await priced.locator(".unpriced").count() == 0


async def test_the_usage_explorer_groups_and_filters_by_tag_end_user_and_session(upstream, browser):  # noqa: F811
    cfg = console_config(upstream.url, teams=[{"name": "ml"}])
    async with gateway(cfg) as c:
        for headers in ({"x-switchyard-tags": "search", "x-switchyard-end-user": "u-7"},
                        {"x-switchyard-tags": "search,chat", "x-switchyard-session": "s-1"}, {}):
            r = await c.post("/v1/chat/completions", headers={"authorization": f"Bearer {KEY}", **headers},
                             json={"model": "openai/gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": 5})
            assert r.status_code == 200
        page = await open_console(browser, c.base_url)
        await page.click('nav a[data-page="usage"]')
        await expect(page.locator("body")).to_have_attribute("data-loaded", "usage")
        await page.select_option('#usage-form select[name="group_by"]', "tag")
        await page.fill('#usage-form input[name="team"]', "ml")
        await page.click('#usage-form button[type="submit"]')
        rows = page.locator("#usage-agg tbody tr")
        await expect(rows).to_have_count(2)
        await expect(rows.nth(0)).to_contain_text("chat")
        await expect(rows.nth(1).locator("td").nth(1)).to_have_text("2")  # search: 2 requests
        # records say who each request was for
        await expect(page.locator("#usage-records tbody tr", has_text="session s-1")).to_contain_text(
            "tags search,chat")
        await page.select_option('#usage-form select[name="group_by"]', "model")
        await page.fill('#usage-form input[name="end_user"]', "u-7")
        await page.click('#usage-form button[type="submit"]')
        await expect(rows).to_have_count(1)
        await expect(rows.nth(0).locator("td").nth(1)).to_have_text("1")


async def test_the_overview_shows_budgets_near_their_limits_and_the_month(upstream, browser):  # noqa: F811
    # gpt-4o at $2.5 / $10 per 1M: the fake's answers cost a few hundred-thousandths of a dollar;
    # a budget of $0.0001 a day is soon more than half used.
    team = {"name": "ml", "limits": {"spend_per_day": 0.0001, "soft": True},
            "tag_limits": {"search": {"tokens_per_month": 10_000_000}}}
    cfg = console_config(upstream.url, teams=[team])
    async with gateway(cfg) as c:
        for _ in range(2):
            r = await c.post("/v1/chat/completions", headers={"authorization": f"Bearer {KEY}"},
                             json={"model": "openai/gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": 5})
            assert r.status_code == 200
        o = (await c.get("/admin/overview", params={"range": "24h"},
                         headers={"authorization": f"Bearer {MASTER}"})).json()
        (b,) = o["budgets"]  # the tag's budget is far from full: not listed
        assert (b["scope"], b["limit"]) == ("team ml", "spend_per_day") and b["fraction"] >= 0.5
        (m,) = [m for m in o["month"] if m["team"] == "ml"]
        assert m["spend_usd"] == o["total"]["cost_usd"] > 0
        assert m["projected_usd"] == m["spend_usd"] / m["days"] * m["days_in_month"]
        page = await open_console(browser, c.base_url)
        row = page.locator("#ov-budgets tbody tr", has_text="team ml")
        await expect(row).to_contain_text("spend_per_day")
        await expect(page.locator("#ov-month tbody tr", has_text="ml")).to_contain_text(
            f"of {m['days_in_month']}")
