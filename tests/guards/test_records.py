"""Which guard acted on which request, and how, in usage records and /metrics; and the matched
text nowhere: not in a record, a metric, a log line or an error body."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from tests.fakes.upstream import Behaviour, FakeUpstream
from tests.gateway.conftest import MASTER, serve
from tests.guards.helpers import MODEL, guarded
from tests.http.test_metrics import scrape, value

MAIL = "jane.doe@example.com"
AWS = "AKIAIOSFODNN7EXAMPLE"
CARD = "4111 1111 1111 1111"


async def test_records_and_metrics_name_the_guard_never_the_text(capsys: pytest.CaptureFixture[str],
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    pii = [{"name": "pii", "detectors": ["email", "payment_card"]}]
    keys = [{"name": "keys", "detectors": ["secret"], "action": "block", "direction": "request"}]
    async with FakeUpstream() as up, serve(guarded(up.url, model=pii, team=keys, access_log=True)) as gw:
        up.script.append(Behaviour(text=f"card {CARD} ok"))
        ok = await gw.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": f"mail {MAIL}"}]})
        blocked = await gw.post("/v1/chat/completions", json={
            "model": MODEL, "stream": True, "messages": [{"role": "user", "content": f"key {AWS}"}]})
        m = await scrape(gw)
        got: list[dict[str, object]] = []

        async def records() -> None:
            r = await gw.get("/admin/usage/records", headers={"authorization": f"Bearer {MASTER}"},
                             params={"team": "t"})
            got[:] = r.json()["data"]

        for _ in range(500):  # the refusal's record is written beside the answer: a deadline, 10 s
            await records()
            if len(got) == 2:
                break
            await asyncio.sleep(0.02)
        metrics_text = (await gw.get("/metrics")).text
    assert ok.status_code == 200
    assert ok.json()["choices"][0]["message"]["content"] == "card [PAYMENT_CARD_1] ok"
    assert blocked.status_code == 400
    by_status = {r["status"]: r for r in got}
    assert by_status[200]["guardrails"] == "pii:redact" and by_status[200]["reason"] == ""
    assert by_status[400]["guardrails"] == "keys:block" and by_status[400]["reason"] == "guardrail:keys"
    assert value(m, "switchyard_guardrail_actions_total", guardrail="pii", action="redact",
                 direction="request") == 1
    assert value(m, "switchyard_guardrail_actions_total", guardrail="pii", action="redact",
                 direction="response") == 1
    assert value(m, "switchyard_guardrail_actions_total", guardrail="keys", action="block",
                 direction="request") == 1
    out = capsys.readouterr()
    seen = {"records": json.dumps(got), "metrics": metrics_text, "logs": out.err + out.out + caplog.text,
            "error": blocked.text}
    assert '"event": "request"' in seen["logs"] or '"event":"request"' in seen["logs"]  # the access log ran
    for where, text in seen.items():
        for secret in (MAIL, AWS, CARD, "AKIAIOSF", "jane.doe"):
            assert secret not in text, (where, secret)
