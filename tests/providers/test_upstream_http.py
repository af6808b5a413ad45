"""Through real sockets: every caller dialect x several upstream dialects, whole and streamed; the
stream relayed chunk by chunk; a client that hangs up closes the upstream; usage settled however a
stream ends; unreachable and stalled upstreams."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.conftest import free_port
from tests.fakes.upstream import Behaviour, FakeUpstream
from tests.gateway.conftest import KEY, base_config, upstream_model
from tests.gateway.helpers import StallingUpstream, recording_policies, sse_events, sse_objects, wait_for

MODEL = "vendor/caller"
HI = [{"role": "user", "content": "hi"}]

# caller dialect -> (path, headers, body without model)
CALLERS: dict[str, tuple[str, dict[str, str], dict[str, Any]]] = {
    "openai": ("/v1/completions", {}, {"prompt": "hi", "max_tokens": 3}),
    "vllm": ("/v1/completions", {"x-switchyard-dialect": "vllm"}, {"prompt": "hi", "max_tokens": 3}),
    "llamacpp": ("/v1/completions", {}, {"prompt": "hi", "n_predict": 3}),
    "mistralrs": ("/v1/completions", {"x-switchyard-dialect": "mistralrs"},
                  {"prompt": "hi", "max_tokens": 3}),
    "fireworks": ("/inference/v1/completions", {}, {"prompt": "hi", "max_tokens": 3}),
    "sgp": ("/v4/beta/completions", {"x-api-key": KEY}, {"prompt": "hi", "max_new_tokens": 3}),
    "llamacpp_native": ("/completion", {}, {"prompt": "hi", "n_predict": 3}),
    "chat": ("/v1/chat/completions", {}, {"messages": HI, "max_tokens": 3}),
}
UPSTREAMS = ["openai", "llamacpp", "sgp", "fireworks"]


def _config(url: str, dialect: str):
    return base_config([upstream_model(MODEL, url, dialect=dialect, model="upstream-name")])


def _all_dialects_config(url: str):
    """One model per upstream dialect, all on the same fake upstream: ``<dialect>/caller``."""
    return base_config([upstream_model(f"{d}/caller", url, dialect=d, model="upstream-name")
                        for d in UPSTREAMS])


def _request(caller: str, model: str = MODEL, **extra: Any) -> tuple[str, dict[str, str], dict[str, Any]]:
    path, headers, body = CALLERS[caller]
    return path, headers, {**body, **extra, "model": model}


def _check_upstream_saw(up: FakeUpstream, caller: str, dialect: str, stream: bool) -> None:
    seen = up.requests[-1]
    chat = caller == "chat"
    assert seen.path.endswith("/chat/completions" if chat else "/completions")
    if dialect == "sgp":
        assert "/beta/" in seen.path
        if not chat:
            assert seen.body["max_new_tokens"] == 3 and "max_tokens" not in seen.body
    else:  # OpenAI's own API bounds chat as max_completion_tokens (its reasoning models refuse max_tokens)
        bound = "max_completion_tokens" if chat and dialect == "openai" else "max_tokens"
        other = {"max_tokens", "max_completion_tokens"} - {bound}
        assert seen.body[bound] == 3 and other.isdisjoint(seen.body)
        assert "max_new_tokens" not in seen.body and "n_predict" not in seen.body
    assert seen.body["model"] == "upstream-name"
    assert bool(seen.body.get("stream")) is stream


def _check_whole(caller: str, model: str, j: dict[str, Any]) -> None:
    assert j["model"] == model
    if caller == "llamacpp_native":
        assert j["content"] == "w0 w1 w2" and j["stop"] is True and j["stop_type"] == "limit"
        assert j["tokens_predicted"] == 3
    elif caller == "chat":
        assert j["object"] == "chat.completion"
        assert j["choices"][0]["message"] == {"role": "assistant", "content": "w0 w1 w2"}
        assert j["usage"]["completion_tokens"] == 3
    else:
        assert j["object"] == "text_completion" and j["system_fingerprint"]
        assert j["choices"][0]["text"] == "w0 w1 w2"
        assert j["choices"][0]["finish_reason"] == "length"
        assert j["usage"]["completion_tokens"] == 3
        assert "cached_tokens" in j["usage"]["prompt_tokens_details"]


def _check_stream(caller: str, model: str, text: str) -> None:
    events = sse_events(text)
    objs = sse_objects(text)
    if caller == "llamacpp_native":
        assert "[DONE]" not in events  # the real server ends with its own stop event
        assert "".join(o["content"] for o in objs) == "w0 w1 w2"
        assert [o["stop"] for o in objs][-1] is True and not any(o["stop"] for o in objs[:-1])
        assert objs[-1]["tokens_predicted"] == 3 and objs[-1]["model"] == model
        return
    # SGP's SDKs parse every data line as JSON: its streams end without [DONE]
    assert (events[-1] == "[DONE]") is (caller != "sgp") and "[DONE]" not in events[:-1]
    assert all(o["model"] == model for o in objs)  # the caller's name in every chunk
    if caller == "chat":
        got = "".join(o["choices"][0]["delta"].get("content") or "" for o in objs if o["choices"])
    else:
        got = "".join(o["choices"][0]["text"] for o in objs if o["choices"])
    assert got == "w0 w1 w2"
    finishes = [o["choices"][0]["finish_reason"] for o in objs if o["choices"]]
    assert finishes[-1] == "length"
    usage = [o for o in objs if o.get("usage")]
    if caller in ("fireworks", "sgp"):  # documented: usage in the last chunk, unasked
        assert usage and usage[-1] is objs[-1] and objs[-1]["usage"]["completion_tokens"] == 3
    else:
        assert usage == []


@pytest.mark.parametrize("caller", list(CALLERS))
async def test_every_upstream_dialect_whole_and_streamed(upstream, gateway_for, caller: str) -> None:
    """The caller's dialect in, the upstream's dialect out, the caller's shape back."""
    async with gateway_for(_all_dialects_config(upstream.url)) as client:
        for dialect in UPSTREAMS:
            model = f"{dialect}/caller"
            path, headers, body = _request(caller, model)
            r = await client.post(path, json=body, headers=headers)
            assert r.status_code == 200, (dialect, r.text)
            assert r.headers["content-type"].startswith("application/json")
            _check_whole(caller, model, r.json())
            _check_upstream_saw(upstream, caller, dialect, stream=False)

            r = await client.post(path, json={**body, "stream": True}, headers=headers)
            assert r.status_code == 200, (dialect, r.text)
            assert r.headers["content-type"].startswith("text/event-stream")
            _check_stream(caller, model, r.text)
            _check_upstream_saw(upstream, caller, dialect, stream=True)


async def test_llamacpp_native_without_a_model_uses_the_only_one(upstream, gateway_for) -> None:
    async with gateway_for(_config(upstream.url, "llamacpp")) as client:
        r = await client.post("/completion", json={"prompt": "hi", "n_predict": 3})
        s = await client.post("/completion", json={"prompt": "hi", "n_predict": 3, "stream": True})
    assert r.status_code == 200 and r.json()["content"] == "w0 w1 w2"
    assert sse_objects(s.text)[-1]["stop"] is True
    assert upstream.requests[0].body["model"] == "upstream-name"


@pytest.mark.parametrize("caller", ["openai", "chat", "llamacpp"])
async def test_stream_usage_when_asked(upstream, gateway_for, caller: str) -> None:
    path, headers, body = _request(caller, stream=True, stream_options={"include_usage": True})
    async with gateway_for(_config(upstream.url, "openai")) as client:
        r = await client.post(path, json=body, headers=headers)
    objs = sse_objects(r.text)
    assert objs[-1]["choices"] == [] and objs[-1]["usage"]["completion_tokens"] == 3
    assert objs[-1]["usage"]["total_tokens"] == objs[-1]["usage"]["prompt_tokens"] + 3


async def test_stop_emulated_on_a_stream(upstream, gateway_for) -> None:
    # An OpenAI caller's stop sequence on a Fireworks upstream (which keeps the stop string):
    # the gateway cuts the text itself, without the stop string, and closes the upstream.
    upstream.default = Behaviour(text="alpha beta STOP gamma delta")
    async with gateway_for(_config(upstream.url, "fireworks")) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "stream": True,
                                                        "stop": [" STOP"]})
        w = await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "stop": [" STOP"]})
    objs = sse_objects(r.text)
    assert "".join(o["choices"][0]["text"] for o in objs if o["choices"]) == "alpha beta"
    assert objs[-1]["choices"][0]["finish_reason"] == "stop"
    assert w.json()["choices"][0]["text"] == "alpha beta"
    assert "stop" not in upstream.requests[0].body


async def test_echo_emulated_for_sgp_upstream(upstream, gateway_for) -> None:
    upstream.default = Behaviour(text="world")
    async with gateway_for(_config(upstream.url, "sgp")) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "hello ", "echo": True})
        ids = await client.post("/v1/completions", json={"model": MODEL, "prompt": [1, 2], "echo": True})
    assert r.json()["choices"][0]["text"] == "hello world"
    assert "echo" not in upstream.requests[0].body
    assert ids.status_code == 400 and ids.json()["error"]["param"] == "prompt"  # no text to prepend
    assert len(upstream.requests) == 1


async def test_multiple_prompts_and_n(upstream, gateway_for) -> None:
    async with gateway_for(_config(upstream.url, "openai")) as client:
        r = await client.post("/v1/completions",
                              json={"model": MODEL, "prompt": "x", "n": 2, "max_tokens": 2})
    assert [c["index"] for c in r.json()["choices"]] == [0, 1]
    assert upstream.requests[0].body["n"] == 2


async def test_refusal_names_param_and_model(upstream, gateway_for) -> None:
    async with gateway_for(_config(upstream.url, "openai")) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "mirostat": 2})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "mirostat" and "mirostat" in err["message"] and MODEL in err["message"]
    assert err["code"] == 400  # a llama.cpp caller: its error shape
    assert upstream.requests == []


async def test_sgp_extra_headers_and_params_reach_upstream(upstream, gateway_for) -> None:
    cfg = base_config([upstream_model(MODEL, upstream.url, dialect="openai", model="upstream-name",
                                      allow_extra_headers=["X-Trace"], allow_extra_params=["priority"])])
    async with gateway_for(cfg) as client:
        r = await client.post("/v4/beta/completions", json={
            "model": MODEL, "prompt": "x", "max_new_tokens": 1, "inference_extra_headers": {"x-trace": "t1"},
            "inference_extra_params": {"priority": 3}})
    assert r.status_code == 200, r.text
    seen = upstream.requests[0]
    assert seen.headers.get("x-trace") == "t1" and seen.body["priority"] == 3


# --- upstream errors pass through in the caller's shape ------------------------------------------

_ERR_CALLERS = ("openai", "sgp", "llamacpp_native", "chat")


@pytest.mark.parametrize(("path", "headers", "body"), [CALLERS[c] for c in _ERR_CALLERS], ids=_ERR_CALLERS)
async def test_upstream_4xx_passes_through(upstream, gateway_for, path, headers, body) -> None:
    upstream.default = Behaviour(status=400, error="prompt is too long for this model")
    body = {**body, "model": MODEL}
    async with gateway_for(_config(upstream.url, "openai")) as client:
        r = await client.post(path, json=body, headers=headers)
        s = await client.post(path, json={**body, "stream": True}, headers=headers)
    for resp in (r, s):
        assert resp.status_code == 400
        j = resp.json()
        assert "prompt is too long" in json.dumps(j)
        assert KEY not in resp.text


async def test_upstream_429_passes_through(upstream, gateway_for) -> None:
    upstream.default = Behaviour(status=429, error="slow down", retry_after=2)
    cfg = base_config([upstream_model(MODEL, upstream.url)], router={"retries": 0})
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": HI})
    assert r.status_code == 429
    assert "slow down" in r.json()["error"]["message"]
    assert r.json()["error"]["type"] == "rate_limit_error"
    assert r.headers["retry-after"] == "2"


async def test_unreachable_upstream_is_502(gateway_for) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    cfg = base_config([upstream_model(MODEL, url)], router={"retries": 0, "cooldown_failures": 100})
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "x"})
        s = await client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "stream": True})
    for resp in (r, s):
        assert resp.status_code == 502, resp.text
        assert resp.json()["error"]["type"] == "upstream_error"


async def test_stalled_upstream_is_504(upstream, gateway_for) -> None:
    upstream.default = Behaviour(stall=1)
    cfg = base_config([upstream_model(MODEL, upstream.url, timeout=0.2)], router={"retries": 0})
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "x"})
    assert r.status_code == 504, r.text
    assert "timed out" in r.json()["error"]["message"]


async def test_sgp_inference_timeout_bounds_the_call(upstream, gateway_for) -> None:
    upstream.default = Behaviour(stall=1)
    cfg = base_config([upstream_model(MODEL, upstream.url)], router={"retries": 0})
    async with gateway_for(cfg) as client:
        r = await client.post("/v4/beta/completions",
                              json={"model": MODEL, "prompt": "x", "inference_timeout": 0.2})
    assert r.status_code == 504, r.text


# --- relay without buffering; hang-ups; cut streams ------------------------------------------------

async def test_first_chunk_arrives_while_upstream_stalls(gateway_for) -> None:
    async with StallingUpstream() as up:
        cfg = base_config([upstream_model(MODEL, up.url, model="upstream-name")])
        async with gateway_for(cfg) as client, client.stream(
                "POST", "/v1/completions", json={"model": MODEL, "prompt": "x", "stream": True}) as r:
            assert r.status_code == 200
            lines = r.aiter_lines()
            first = None
            async for line in lines:
                if line.startswith("data: "):
                    first = json.loads(line[6:])
                    break
            # The upstream is still stalled: nothing after its first event has been written.
            assert not up.release.is_set() and up.writes_after_release == 0
            assert first["choices"][0]["text"] == "first" and first["model"] == MODEL
            up.release.set()
            rest = [line[6:] async for line in lines if line.startswith("data: ")]
    assert rest[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["text"] for e in rest[:-1]) == " more0 more1 more2"


async def test_client_hangup_closes_upstream_and_settles_usage(gateway_for) -> None:
    async with StallingUpstream(more=500) as up:
        cfg = base_config([upstream_model(MODEL, up.url, model="upstream-name")])
        policies, settled = recording_policies(cfg)
        async with gateway_for(cfg, policies=policies) as client:
            async with client.stream("POST", "/v1/completions",
                                     json={"model": MODEL, "prompt": "x", "stream": True}) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        break  # got the first chunk: hang up while the upstream is stalled
            await wait_for(lambda: up.saw_close)  # the gateway closed its upstream connection
            await wait_for(lambda: bool(settled))
            gw = client.app.state.gateway  # type: ignore[attr-defined]
            await gw.drain()
    assert up.writes_after_release == 0 and not up.finished
    assert settled[0].status == 499
    assert settled[0].usage.completion_tokens == 1  # the one chunk that was relayed


async def test_client_hangup_mid_flow_stops_upstream(gateway_for) -> None:
    async with StallingUpstream(more=2000) as up:
        up.release.set()  # no stall: the upstream streams as fast as it can
        cfg = base_config([upstream_model(MODEL, up.url, model="upstream-name")])
        async with gateway_for(cfg) as client:
            async with client.stream("POST", "/v1/completions",
                                     json={"model": MODEL, "prompt": "x", "stream": True}) as r:
                n = 0
                async for line in r.aiter_lines():
                    n += line.startswith("data: ")
                    if n == 5:
                        break
            await wait_for(lambda: up.saw_close)
    assert not up.finished and up.writes_after_release < 2000


async def test_stream_cut_by_upstream_settles_counted_usage(upstream, gateway_for) -> None:
    upstream.default = Behaviour(cut_after=2)
    cfg = _config(upstream.url, "openai")
    policies, settled = recording_policies(cfg)
    async with gateway_for(cfg, policies=policies) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 5,
                                                        "stream": True})
        await client.app.state.gateway.drain()  # type: ignore[attr-defined]
    assert r.status_code == 200
    events = sse_events(r.text)
    objs = [json.loads(e) for e in events if e != "[DONE]"]
    assert [o["choices"][0]["text"] for o in objs[:2]] == ["w0", " w1"]
    assert "error" in objs[-1]  # the break is reported in the stream, which still ends properly
    assert events[-1] == "[DONE]"
    assert upstream.cut == 1
    assert settled[-1].status == 502 and settled[-1].usage.completion_tokens == 2


async def test_whole_answer_settles_reported_usage(upstream, gateway_for) -> None:
    cfg = _config(upstream.url, "openai")
    policies, settled = recording_policies(cfg)
    async with gateway_for(cfg, policies=policies) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 4})
    assert r.status_code == 200
    assert settled[-1].status == 200 and settled[-1].usage.completion_tokens == 4
    assert settled[-1].deployment == f"{MODEL}/d1"


async def test_concurrent_streams_share_the_pool(upstream, gateway_for) -> None:
    async with gateway_for(_config(upstream.url, "llamacpp")) as client:
        async def one(i: int) -> str:
            r = await client.post("/v1/completions", json={"model": MODEL, "prompt": f"p{i}",
                                                            "max_tokens": 3, "stream": True})
            return "".join(o["choices"][0]["text"] for o in sse_objects(r.text) if o["choices"])
        texts = await asyncio.gather(*(one(i) for i in range(8)))
    assert texts == ["w0 w1 w2"] * 8



async def test_logprobs_in_each_callers_shape(upstream, gateway_for) -> None:
    upstream.default = Behaviour(text="ab cd", logprob=-0.5)
    async with gateway_for(_config(upstream.url, "openai")) as client:
        legacy = await client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "logprobs": 0})
        sgp = await client.post("/v4/beta/completions", json={"model": MODEL, "prompt": "x",
                                                               "return_token_log_probs": True})
    lp = legacy.json()["choices"][0]["logprobs"]
    assert lp["tokens"] == ["ab", " cd"] and lp["token_logprobs"] == [-0.5, -0.5]
    assert lp["text_offset"] == [0, 2]
    content = sgp.json()["choices"][0]["logprobs"]["content"]
    assert [(c["token"], c["logprob"]) for c in content] == [("ab", -0.5), (" cd", -0.5)]
    assert content[0]["bytes"] == list(b"ab")
    assert upstream.requests[1].body["logprobs"] == 0  # SGP's boolean became OpenAI's integer
