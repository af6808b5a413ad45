"""The console flags requests without a known price (headless Chromium, the store's aggregates):
the overview's spend and its per-model row say how many were left out of the sum."""

from __future__ import annotations

from playwright.async_api import expect

from tests.http.console.conftest import KEY, MASTER, console_config, gateway
from tests.http.console.test_browser import browser  # noqa: F401 (the fixture)


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
        page = await (await browser.new_context()).new_page()
        await page.goto(f"{str(c.base_url).rstrip('/')}/ui")
        await page.fill("#master_key", MASTER)
        await page.click("button[type=submit]")
        await expect(page.locator("body")).to_have_attribute("data-loaded", "overview")
        await expect(page.locator("#stat-spend .unpriced")).to_have_text("2 unpriced")
        tuned = page.locator("#ov-models tbody tr", has_text="local/tuned")
        await expect(tuned.locator(".unpriced")).to_have_attribute("data-unpriced", "2")
        priced = page.locator("#ov-models tbody tr", has_text="openai/gpt-4o")
        await expect(priced).to_contain_text("$")
        assert await priced.locator(".unpriced").count() == 0
