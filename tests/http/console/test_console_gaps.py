"""The console's gaps an operator met on the first day, in headless Chromium against a gateway on
the in-memory store (no ledger): the overview breaks its errors down (an upstream that fails
shows apart from refusals); a request refused before routing is named, not a blank model row;
a key without a spend quota of its own shows its team's, not "(no daily quota)"; the usage
table fits a 1400 px window; the deployments page names each deployment's provider."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from tests.fakes.upstream import refused_url
from tests.http.console.conftest import KEY, complete, console_config, gateway
from tests.http.console.test_browser import ask, browser, goto, open_console  # noqa: F401 -- the browser fixture

LONG = "vendor/NothingHereWithARatherLongNameOfAModelThatDoesNotExistAtAllAndNeverWillExist0123456789"


def config(upstream_url: str):
    return console_config(
        upstream_url, router={"retries": 0, "cooldown_failures": 100},
        models=[{"name": "openai/gpt-4o", "aliases": ["gpt-4o"],
                 "price": {"prompt_per_1m": 2.5, "completion_per_1m": 10.0},
                 "deployments": [{"name": "d1", "base_url": upstream_url, "model": "gpt-4o"}]},
                {"name": "mistral/down", "price": {"prompt_per_1m": 1.0, "completion_per_1m": 1.0},
                 "deployments": [
                    {"name": "d9", "provider": "mistral", "base_url": refused_url(), "model": "m",
                     "api_key": "sk-upstream"}]}],
        teams=[{"name": "ml", "limits": {"spend_per_day": 1.0}}],
        keys=[{"id": "alice", "team": "ml", "key": KEY}])


async def test_the_consoles_first_day_gaps(upstream, browser: Browser) -> None:  # noqa: F811
    async with gateway(config(upstream.url)) as c:
        for _ in range(30):  # enough records to fill the usage table
            assert (await complete(c, KEY)).status_code == 200
        assert [await ask(c, KEY, "mistral/down") for _ in range(2)] == [502, 502]
        # refused before routing; the name it asked for, shown in the records, breaks nowhere
        assert await ask(c, KEY, LONG) == 404
        base = str(c.base_url).rstrip("/")
        problems: list[str] = []
        page = await open_console(browser, base, errors=problems, viewport={"width": 1400, "height": 900})

        # the errors, broken down: the upstream's 502s apart from the gateway's own 404
        rows = page.locator("#ov-errors tbody tr")
        await expect(rows).to_have_count(2)
        texts = [" | ".join(await r.locator("td").all_text_contents()) for r in await rows.all()]
        assert "upstream (a deployment was called) | 502 | mistral/down/d9 | 2" in texts, texts
        assert "refused by the gateway | 404 | - | 1" in texts, texts
        # the refused request's model row is named, not blank
        models = await page.locator("#ov-models tbody tr td:first-child").all_text_contents()
        assert "(refused before routing)" in models and "" not in models, models

        # alice has no spend quota of her own: her team's is the one in effect
        await goto(page, "keys")
        spend = await page.locator('[data-key-spend="alice"]').text_content()
        assert spend is not None and "no daily quota" not in spend and "/ $1.0000" in spend, spend

        # the usage table scrolls in its box: the page itself never gets wider than the window
        await goto(page, "usage")
        await page.fill('#usage-form input[name="team"]', "ml")  # (records without a ledger: by team)
        await page.click('#usage-form button[type="submit"]')
        await expect(page.locator("#usage-records tbody tr")).to_have_count(33)
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 1400, width
        model_cells = await page.locator("#usage-records tbody tr td:nth-child(4)").all_text_contents()
        assert "" not in model_cells and any(LONG in m for m in model_cells), model_cells

        # the deployments page names the provider
        await goto(page, "deployments")
        headers = await page.locator("#deployments-table thead th").all_text_contents()
        assert "Provider" in headers, headers
        await expect(page.locator('[data-provider="mistral/down/d9"]')).to_have_text("mistral")
        await expect(page.locator('[data-provider="openai/gpt-4o/d1"]')).to_have_text("openai")
        assert await page.evaluate("document.documentElement.scrollWidth") <= 1400
        assert problems == []
        await page.context.close()
