"""What real clients send that the reference texts leave out: OpenAI's newer names on legacy
endpoints, products' overflow switches, the headers SDKs read on a 429."""

from __future__ import annotations

from tests.gateway.conftest import base_config, upstream_model


async def test_max_completion_tokens_on_completions_is_max_tokens(upstream, gateway_for) -> None:
    """The upstream sees max_tokens, and the reservation the bound: with a 12-token-a-minute key, a
    bound of 3 is admitted where the default 16 would not be."""
    cfg = base_config([upstream_model("v/m", upstream.url)],
                      keys=[{"id": "k1", "team": "t", "key": "sk-test-key", "limits": {"tpm": 12}}])
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/completions", json={"model": "v/m", "prompt": "hi",
                                                        "max_completion_tokens": 3})
        unbounded = await client.post("/v1/completions", json={"model": "v/m", "prompt": "hi"})
    assert r.status_code == 200, r.text
    sent = upstream.requests[0].body
    assert sent["max_tokens"] == 3 and "max_completion_tokens" not in sent
    assert unbounded.status_code == 429 and len(upstream.requests) == 1
