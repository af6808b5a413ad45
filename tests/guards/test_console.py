"""The console's overview shows which guardrails acted (in headless Chromium, Debian's
``chromium``), from the store's records, and never what they matched; /admin/overview says the same."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import MASTER, serve
from tests.guards.helpers import MODEL, guarded
from tests.http.console.test_browser import browser, open_console  # noqa: F401 -- the fixture

MAIL = "jane.doe@example.com"


async def test_the_overview_lists_the_guardrails_that_acted(browser: Browser) -> None:  # noqa: F811
    pii = [{"name": "pii", "detectors": ["email"]}]
    keys = [{"name": "keys", "detectors": ["secret"], "action": "block", "direction": "request"}]
    async with FakeUpstream() as up, serve(guarded(up.url, model=pii, team=keys)) as gw:
        for text in (f"a {MAIL}", f"b {MAIL}", "key AKIAIOSFODNN7EXAMPLE", "plain"):
            await gw.post("/v1/chat/completions", json={
                "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": text}]})
        await gw.app.state.gateway.drain()  # type: ignore[attr-defined]
        o = (await gw.get("/admin/overview?range=1h", headers={"authorization": f"Bearer {MASTER}"})).json()
        assert o["guardrails"] == [{"guardrail": "pii:redact", "requests": 2},
                                   {"guardrail": "keys:block", "requests": 1}]
        page = await open_console(browser, gw.base_url, MASTER)
        rows = page.locator("#ov-guardrails tr")
        await expect(rows.nth(1)).to_contain_text("pii:redact")
        await expect(rows.nth(1)).to_contain_text("2")
        await expect(rows.nth(2)).to_contain_text("keys:block")
        assert MAIL not in await page.content()
