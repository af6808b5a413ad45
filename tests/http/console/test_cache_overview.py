"""The console's overview shows the response cache's hits and the spend they saved (docs/cache.md),
in headless Chromium against a gateway whose model caches."""

from __future__ import annotations

from playwright.async_api import expect

from tests.http.console.conftest import KEY, console_config, gateway
from tests.http.console.test_browser import browser, open_console  # noqa: F401 -- the headless Chromium fixture


async def test_the_overview_shows_hits_and_savings(upstream, browser):  # noqa: F811
    model = {"name": "openai/gpt-4o", "cache": {"mode": "exact"},
             "price": {"prompt_per_1m": 2.5, "completion_per_1m": 10.0},
             "deployments": [{"name": "d1", "base_url": upstream.url, "model": "gpt-4o"}]}
    body = {"model": "openai/gpt-4o", "temperature": 0, "max_tokens": 5,
            "messages": [{"role": "user", "content": "hi"}]}
    async with gateway(console_config(upstream.url, models=[model])) as c:
        rs = [await c.post("/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"})
              for _ in range(3)]
        assert [r.headers["x-switchyard-cache"] for r in rs] == ["stored", "hit", "hit"]
        await c.app.gateway.policies.policy.flush()  # type: ignore[attr-defined]
        u = rs[0].json()["usage"]
        saved = 2 * (u["prompt_tokens"] * 2.5 + u["completion_tokens"] * 10.0) / 1e6
        page = await open_console(browser, c.base_url)
        await expect(page.locator("#stat-requests")).to_have_text("3")
        await expect(page.locator("#stat-cache-hits")).to_have_text("2 (66.7%)")
        text = await page.locator("#stat-cache-saved").text_content()
        assert text is not None and text.startswith("$")
        assert abs(float(text[1:].replace(",", "")) - saved) < 1e-4
