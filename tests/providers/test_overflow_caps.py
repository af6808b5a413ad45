"""Item 7 of issue 21 through the HTTP surface: a Fireworks ``response_format`` schema refused by an
OpenAI upstream names the caller's own field."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import base_config, upstream_model

MODEL = "vendor/caller"
SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}}


@pytest.mark.parametrize("rf", [{"type": "json_object", "schema": SCHEMA},
                                {"type": "json_schema", "json_schema": {"name": "o", "schema": SCHEMA}}])
async def test_fireworks_response_format_refusal_names_response_format(upstream, gateway_for, rf) -> None:
    cfg = base_config([upstream_model(MODEL, upstream.url, dialect="openai", model="up")])
    async with gateway_for(cfg) as client:
        r = await client.post("/inference/v1/completions",
                              json={"model": MODEL, "prompt": "hi", "max_tokens": 3, "response_format": rf})
        print(r.status_code, r.text)
        assert r.status_code == 400
        assert "guided_json" not in r.text and "response_format" in r.text


# --- overflow policies where no context_window is configured: the upstream's own refusal states it

FIREWORKS: tuple[str, dict[str, str]] = ("/inference/v1/completions", {})
MISTRALRS: tuple[str, dict[str, str]] = ("/v1/completions", {"x-switchyard-dialect": "mistralrs"})


@pytest.mark.parametrize("upstream_dialect", ["openai", "vllm"])
@pytest.mark.parametrize("said", [{"context_length_exceeded_behavior": "truncate"}, {}])
async def test_fireworks_truncate_lowers_max_tokens_as_the_upstream_states(
        upstream, gateway_for, upstream_dialect: str, said: dict) -> None:
    upstream.context_window = 20
    cfg = base_config([upstream_model(MODEL, upstream.url, dialect=upstream_dialect, model="up")])
    async with gateway_for(cfg) as client:
        r = await client.post(FIREWORKS[0], json={"model": MODEL, "prompt": "hi", "max_tokens": 50, **said})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"].split() == [f"w{i}" for i in range(19)]
    sent = [s.body for s in upstream.requests]
    assert [b["max_tokens"] for b in sent] == [50, 19]  # refused once, then fitted: 20 - 1 prompt token
    assert all("context_length_exceeded_behavior" not in b for b in sent)


async def test_mistralrs_truncate_sequence_cuts_the_prompt_start(upstream, gateway_for) -> None:
    upstream.context_window = 20
    cfg = base_config([upstream_model(MODEL, upstream.url, dialect="openai", model="up")])
    prompt = " ".join(f"hello{i % 2}" for i in range(40)) + " END"
    async with gateway_for(cfg) as client:
        r = await client.post(MISTRALRS[0], headers=MISTRALRS[1], json={
            "model": MODEL, "prompt": prompt, "max_tokens": 3, "truncate_sequence": True})
        assert r.status_code == 200, r.text
    first, second = (s.body for s in upstream.requests)
    assert first["prompt"] == prompt and "truncate_sequence" not in first
    assert second["prompt"].endswith("END") and len(second["prompt"].split()) + 3 <= 20


async def test_overflow_error_policy_stays_the_upstreams_error(upstream, gateway_for) -> None:
    upstream.context_window = 20
    cfg = base_config([upstream_model(MODEL, upstream.url, dialect="openai", model="up")])
    async with gateway_for(cfg) as client:
        r = await client.post(FIREWORKS[0], json={"model": MODEL, "prompt": "hi", "max_tokens": 50,
                                                  "context_length_exceeded_behavior": "error"})
        assert r.status_code == 400 and "maximum context length is 20" in r.text
    assert len(upstream.requests) == 1  # no second try


async def test_a_prompt_over_the_stated_window_is_refused_naming_it(upstream, gateway_for) -> None:
    upstream.context_window = 5
    cfg = base_config([upstream_model(MODEL, upstream.url, dialect="openai", model="up")])
    async with gateway_for(cfg) as client:
        r = await client.post(FIREWORKS[0], json={"model": MODEL, "prompt": "a b c d e f g h",
                                                  "max_tokens": 2})
        assert r.status_code == 400 and "context window of 5 tokens" in r.text, r.text
    assert len(upstream.requests) == 1


# --- the window vLLM reports (GET /v1/models max_model_len), asked once per deployment

async def test_reported_window_fits_before_sending_and_is_asked_once(upstream, gateway_for) -> None:
    upstream.context_window = 20
    upstream.reported = {"up": 20, "other": 4096}
    cfg = base_config([upstream_model(MODEL, upstream.url, dialect="vllm", model="up")])
    async with gateway_for(cfg) as client:
        for _ in range(2):
            r = await client.post(FIREWORKS[0], json={"model": MODEL, "prompt": "hi", "max_tokens": 50})
            assert r.status_code == 200, r.text
        prompt = " ".join(f"hello{i % 2}" for i in range(40)) + " END"
        m = await client.post(MISTRALRS[0], headers=MISTRALRS[1], json={
            "model": MODEL, "prompt": prompt, "max_tokens": 3, "truncate_sequence": True})
        assert m.status_code == 200, m.text
    sent = [s.body for s in upstream.requests]
    assert len(sent) == 3  # each fitted before it was sent: no refusal, no second try
    assert all(b["max_tokens"] <= 19 for b in sent[:2])
    assert sent[2]["prompt"].endswith("END") and len(sent[2]["prompt"].split()) + 3 <= 20
    assert upstream.models_asked == 1


async def test_a_stalled_models_endpoint_is_unknown_within_its_bound(upstream, gateway_for) -> None:
    upstream.context_window = 20
    upstream.reported = {"up": 20}
    upstream.models_stall = 3  # past the 2 s bound (providers/openai/window.py TIMEOUT_S)
    cfg = base_config([upstream_model(MODEL, upstream.url, dialect="vllm", model="up")])
    async with gateway_for(cfg) as client:
        r = await client.post(FIREWORKS[0], json={"model": MODEL, "prompt": "hi", "max_tokens": 50})
        assert r.status_code == 200, r.text  # the stated window, after the upstream's refusal
    assert [s.body["max_tokens"] for s in upstream.requests] == [50, 19]


async def test_an_upstream_with_the_field_applies_the_policy_itself(upstream, gateway_for) -> None:
    cfg = base_config([upstream_model(MODEL, upstream.url, dialect="mistralrs", model="up")])
    async with gateway_for(cfg) as client:
        r = await client.post(MISTRALRS[0], headers=MISTRALRS[1], json={
            "model": MODEL, "prompt": "hi", "max_tokens": 3, "truncate_sequence": True})
        assert r.status_code == 200, r.text
    assert upstream.requests[-1].body["truncate_sequence"] is True and upstream.models_asked == 0
