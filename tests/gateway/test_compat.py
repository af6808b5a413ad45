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


# --- overflow policies, honoured by the gateway where the window is known ------------------------

LONG = "abcdefgh " * 10  # 90 bytes: 23 tokens by the gateway's estimate (a non-OpenAI model)


def windowed(url: str, window: int | None = 30):  # type: ignore[no-untyped-def]
    m = upstream_model("v/m", url)
    if window is not None:
        m["context_window"] = window
    return base_config([m])


async def test_fireworks_truncate_lowers_max_tokens_for_an_openai_upstream(upstream, gateway_for) -> None:
    async with gateway_for(windowed(upstream.url)) as client:
        cut = await client.post("/inference/v1/completions", json={
            "model": "v/m", "prompt": LONG, "max_tokens": 100,
            "context_length_exceeded_behavior": "truncate"})
        # Fireworks' default: the same without saying it
        default = await client.post("/inference/v1/completions", json={"model": "v/m", "prompt": LONG,
                                                                        "max_tokens": 100})
        fits = await client.post("/inference/v1/completions", json={
            "model": "v/m", "prompt": "hi", "max_tokens": 5, "context_length_exceeded_behavior": "truncate"})
        error = await client.post("/inference/v1/completions", json={
            "model": "v/m", "prompt": LONG, "max_tokens": 100, "context_length_exceeded_behavior": "error"})
    assert cut.status_code == default.status_code == fits.status_code == 200, (cut.text, default.text)
    sent = [x.body for x in upstream.requests]
    assert [b["max_tokens"] for b in sent] == [30 - 23, 30 - 23, 5]
    assert not any("context_length_exceeded_behavior" in b for b in sent)  # honoured here, not sent
    assert error.status_code == 400 and error.json()["error"]["param"] == "max_tokens"
    assert "context window of 30" in error.json()["error"]["message"] and len(upstream.requests) == 3


async def test_mistralrs_truncate_sequence_cuts_the_prompt_start(upstream, gateway_for) -> None:
    async with gateway_for(windowed(upstream.url)) as client:
        r = await client.post("/v1/completions", json={"model": "v/m", "prompt": LONG + "THE END",
                                                        "max_tokens": 10, "truncate_sequence": True})
        ids = await client.post("/v1/completions", json={"model": "v/m", "prompt": list(range(50)),
                                                          "max_tokens": 10, "truncate_sequence": True})
        too_big = await client.post("/v1/completions", json={"model": "v/m", "prompt": "x",
                                                              "max_tokens": 30, "truncate_sequence": True})
    assert r.status_code == 200 and ids.status_code == 200, (r.text, ids.text)
    prompt = upstream.requests[0].body["prompt"]
    assert (LONG + "THE END").endswith(prompt) and len(prompt.encode()) <= (30 - 10) * 4
    assert len(prompt) > 60  # only the start went
    assert upstream.requests[1].body["prompt"] == list(range(30, 50))
    assert "truncate_sequence" not in upstream.requests[0].body
    # the completion alone fills the window: nothing to cut that would help
    assert too_big.status_code == 400 and too_big.json()["error"]["param"] == "max_tokens"


async def test_overflow_policies_without_a_window(upstream, gateway_for) -> None:
    """Without a configured window a truncating policy is accepted (issue 21 item 7): the request
    fits, so it goes as is, without the field; the default that changes nothing is accepted too.
    (Fitting to a reported or stated window: tests/providers/test_overflow_caps.py.)"""
    async with gateway_for(windowed(upstream.url, None)) as client:
        default = await client.post("/v1/completions", json={"model": "v/m", "prompt": "hi", "max_tokens": 2,
                                                              "truncate_sequence": False})
        accepted = await client.post("/v1/completions", json={"model": "v/m", "prompt": "hi", "max_tokens": 2,
                                                               "truncate_sequence": True})
    assert default.status_code == 200, default.text
    assert accepted.status_code == 200, accepted.text
    assert len(upstream.requests) == 2 and "truncate_sequence" not in upstream.requests[1].body


def test_keep_last_counts_as_the_gateway_counts() -> None:
    from switchyard.policies.tokens import count_text, encoding, keep_last

    enc = encoding("o200k_base")
    text = "The quick brown fox jumps over the lazy dog. " * 20 + "Ünïcödé tail"
    for keep in (1, 5, 17, 64):
        for e in (enc, None):
            out = keep_last(text, keep, e)
            assert text.endswith(out) and 0 < count_text(out, e) <= keep
    assert keep_last("short", 50, enc) == "short" and keep_last("x", 0, None) == ""


# --- 429s carry OpenAI's six x-ratelimit headers ---------------------------------------------------

def limited_config(url: str, **limits: int):  # type: ignore[no-untyped-def]
    return base_config([upstream_model("v/m", url)],
                       keys=[{"id": "k1", "team": "t", "key": "sk-test-key", "limits": limits}])


RATE_HEADERS = [f"x-ratelimit-{what}-{kind}" for kind in ("requests", "tokens")
                for what in ("limit", "remaining", "reset")]


async def test_a_429_states_both_per_minute_limits(upstream, gateway_for) -> None:
    body = {"model": "v/m", "prompt": "hi", "max_tokens": 10}
    async with gateway_for(limited_config(upstream.url, rpm=2, tpm=1000)) as client:
        ok = [await client.post("/v1/completions", json=body) for _ in range(2)]
        by_rpm = await client.post("/v1/completions", json=body)
    assert [r.status_code for r in ok] == [200, 200] and by_rpm.status_code == 429
    h = by_rpm.headers
    assert all(name in h for name in RATE_HEADERS), dict(h)
    assert (h["x-ratelimit-limit-requests"], h["x-ratelimit-remaining-requests"]) == ("2", "0")
    assert h["x-ratelimit-limit-tokens"] == "1000"
    # the second admission left 1000 - 2 x 11 reserved; a little has refilled since
    assert 1000 - 22 <= int(h["x-ratelimit-remaining-tokens"]) <= 1000

    async with gateway_for(limited_config(upstream.url, rpm=100, tpm=15)) as client:
        first = await client.post("/v1/completions", json=body)
        by_tpm = await client.post("/v1/completions", json=body)
    assert first.status_code == 200 and by_tpm.status_code == 429
    h = by_tpm.headers
    assert all(name in h for name in RATE_HEADERS), dict(h)
    assert (h["x-ratelimit-limit-tokens"], h["x-ratelimit-remaining-tokens"]) == ("15", "0")
    assert h["x-ratelimit-limit-requests"] == "100" and int(h["x-ratelimit-remaining-requests"]) == 99


async def test_a_truncated_max_tokens_is_reserved_as_the_window_allows(upstream, gateway_for) -> None:
    """Fireworks callers ask for large max_tokens and let truncation fit it: the limits hold what
    the window lets through, not the ask."""
    m = upstream_model("v/m", upstream.url)
    m["context_window"] = 30
    cfg = base_config([m], keys=[{"id": "k1", "team": "t", "key": "sk-test-key", "limits": {"tpm": 100}}])
    async with gateway_for(cfg) as client:
        r = await client.post("/inference/v1/completions", json={"model": "v/m", "prompt": LONG,
                                                                  "max_tokens": 100_000})
    assert r.status_code == 200, r.text
    assert upstream.requests[0].body["max_tokens"] == 30 - 23
