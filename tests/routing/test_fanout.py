"""Fan-out emulation: n, several prompts, best_of and embedding inputs as parallel upstream calls, merged."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator

from switchyard.core.canonical import CanonicalRequest, Chunk, TokenLogprob, Usage
from switchyard.routing import Router
from switchyard.routing.fanout import fan_out, needs_fanout, plan
from switchyard.routing.resolve import Caps
from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import serve
from tests.routing.conftest import completion, config, dep, group, records


def _no_n(router) -> None:
    """As if the deployment's provider row could not carry n (caps are a frozen row value)."""
    t = router.resolve("m/x").targets[0]
    t.caps = dataclasses.replace(t.caps, n=False)


def req(**kw) -> CanonicalRequest:
    return CanonicalRequest(kind="completion", model="m/x", dialect="openai", **kw)


def test_plan_numbers_choices_as_one_call_would():
    r = req(prompt=["a", "b"], n=3)
    subs = plan(r, Caps(n=False, prompts=False))
    assert len(subs) == 6 and all(s.req.n is None and len(s.req.prompt) == 1 for s in subs)
    assert sorted(s.index(0, 3) for s in subs) == list(range(6))
    # prompts fit in one call, n does not: each call returns one choice per prompt
    subs = plan(r, Caps(n=False))
    assert len(subs) == 3
    assert sorted(s.index(i, 3) for s in subs for i in range(2)) == list(range(6))
    # n fits, prompts do not (SGP): a call per prompt carrying n
    subs = plan(r, Caps(prompts=False))
    assert [s.req.n for s in subs] == [3, 3]
    assert sorted(s.index(i, 3) for s in subs for i in range(3)) == list(range(6))


def test_what_needs_fanning_out():
    assert not needs_fanout(req(prompt=["a"], n=2), Caps())
    assert needs_fanout(req(prompt=["a"], n=2), Caps(n=False))
    assert needs_fanout(req(prompt=["a", "b"]), Caps(prompts=False))
    assert needs_fanout(req(prompt=["a"], best_of=3), Caps(best_of=False))
    assert not needs_fanout(req(prompt=["a"], best_of=2, n=2), Caps(best_of=False))


async def test_best_of_ranks_by_mean_logprob_per_prompt():
    scores = {"a": [-0.5, -3.0, -0.1], "b": [-2.0, -0.2, -1.0]}
    seen: dict[str, int] = {}

    async def call(r: CanonicalRequest) -> AsyncIterator[Chunk]:
        p = r.prompt[0]
        k = seen[p] = seen.get(p, -1) + 1
        lp = scores[p][k]
        yield Chunk(index=0, text=f"{p}{k}", finish_reason="stop",
                    logprobs=[TokenLogprob("t", lp), TokenLogprob("u", lp)],
                    usage=Usage(prompt_tokens=1, completion_tokens=2))

    out = [ch async for ch in fan_out(call, req(prompt=["a", "b"], best_of=3, n=2), Caps(best_of=False,
                                                                                              n=False))]
    texts = {ch.index: ch.text for ch in out if ch.text}
    assert texts == {0: "a2", 1: "a0", 2: "b1", 3: "b2"}
    assert all(ch.logprobs is None for ch in out)  # not asked for: used for ranking only
    assert out[-1].usage == Usage(prompt_tokens=6, completion_tokens=12)  # every candidate is billed


async def test_several_prompts_to_an_sgp_upstream_are_parallel_calls(upstreams):
    up = upstreams[0]
    async with serve(config(group("m/x", dep("s", up.url, dialect="sgp")))) as client:
        r = await client.post("/v1/completions", json=completion("m/x", prompt=["one", "two"], n=2))
        recs = await records(client)
    assert r.status_code == 200, r.text
    assert sorted(x.body["prompt"] for x in up.requests) == ["one", "two"]
    assert all(x.body["n"] == 2 for x in up.requests)
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["usage"]["completion_tokens"] == 12  # 2 calls x 2 choices x 3 tokens
    assert len(recs) == 1 and recs[0].completion_tokens == 12


async def test_n_to_an_upstream_without_n_runs_n_calls_at_once(upstreams):
    up = upstreams[0]
    up.default = Behaviour(stall=0.2)
    router = Router(config(group("m/x", dep("a", up.url))))
    _no_n(router)  # as if its dialect could not carry n
    async with serve(router.config, router=router) as client:
        r = await client.post("/v1/completions", json=completion("m/x", n=3))
    assert r.status_code == 200, r.text
    assert len(up.requests) == 3 and all("n" not in x.body for x in up.requests)
    assert up.peak == 3  # in parallel
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert body["usage"]["completion_tokens"] == 9


async def test_streaming_fanout_interleaves_reindexed_chunks(upstreams):
    up = upstreams[0]
    up.default = Behaviour(chunk_delay=0.01)
    router = Router(config(group("m/x", dep("a", up.url))))
    _no_n(router)
    async with serve(router.config, router=router) as client:
        r = await client.post("/v1/completions", json=completion("m/x", n=2, stream=True,
                                                                 stream_options={"include_usage": True}))
    assert r.status_code == 200, r.text
    events = [json.loads(line[6:]) for line in r.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    text: dict[int, str] = {}
    for e in events:
        for c in e.get("choices") or []:
            text[c["index"]] = text.get(c["index"], "") + c["text"]
    assert text == {0: "w0 w1 w2", 1: "w0 w1 w2"}
    assert events[-1]["usage"]["completion_tokens"] == 6


async def test_a_failed_call_of_a_fanout_retries_the_whole_attempt(upstreams):
    up = upstreams[0]
    up.script.append(Behaviour(status=500))
    router = Router(config(group("m/x", dep("a", up.url))))
    _no_n(router)
    async with serve(router.config, router=router) as client:
        r = await client.post("/v1/completions", json=completion("m/x", n=2))
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-attempts"] == "2"
    assert len(r.json()["choices"]) == 2


async def test_best_of_to_llamacpp_is_one_call_with_n(upstreams):
    up = upstreams[0]
    async with serve(config(group("m/x", dep("l", up.url, dialect="llamacpp")))) as client:
        r = await client.post("/v1/completions", json=completion("m/x", best_of=3))
    assert r.status_code == 200, r.text
    assert len(up.requests) == 1
    sent = up.requests[0].body
    assert sent["n"] == 3 and sent["logprobs"] == 0 and "best_of" not in sent
    body = r.json()
    assert len(body["choices"]) == 1 and body["choices"][0]["logprobs"] is None
    assert body["usage"]["completion_tokens"] == 9  # every candidate is billed


async def test_best_of_without_n_ranks_parallel_calls(upstreams):
    up = upstreams[0]
    up.script += [Behaviour(text="meh answer", logprob=-2.0), Behaviour(text="best answer", logprob=-0.1),
                  Behaviour(text="bad answer", logprob=-5.0)]
    router = Router(config(group("m/x", dep("l", up.url, dialect="llamacpp"))))
    _no_n(router)
    async with serve(router.config, router=router) as client:
        r = await client.post("/v1/completions", json=completion("m/x", best_of=3, logprobs=1))
    assert r.status_code == 200, r.text
    assert len(up.requests) == 3
    assert all("best_of" not in x.body and "n" not in x.body and x.body["logprobs"] == 1
               for x in up.requests)
    body = r.json()
    assert [c["text"] for c in body["choices"]] == ["best answer"]
    assert body["choices"][0]["logprobs"]["token_logprobs"] == [-0.1, -0.1]
    assert body["usage"]["completion_tokens"] == 6


async def test_best_of_with_echo_logprobs_ranks_past_the_null_first_prompt_token(upstreams):
    """Echo's first prompt token has a null logprob (nothing predicts it): ranking skips it, and
    the caller sees it null, not 0."""
    up = upstreams[0]
    up.script += [Behaviour(text="meh answer", logprob=-2.0), Behaviour(text="best answer", logprob=-0.1)]
    router = Router(config(group("m/x", dep("l", up.url, dialect="fireworks"))))
    _no_n(router)
    async with serve(router.config, router=router) as client:
        r = await client.post("/v1/completions", json=completion("m/x", prompt="say it", best_of=2,
                                                                 echo=True, logprobs=0))
    assert r.status_code == 200, r.text
    assert len(up.requests) == 2 and all(x.body["echo"] is True for x in up.requests)
    choice = r.json()["choices"][0]
    assert choice["text"] == "say itbest answer"
    lp = choice["logprobs"]
    assert lp["tokens"][:2] == ["say", " it"]
    assert lp["token_logprobs"] == [None, -0.5, -0.1, -0.1]


async def test_mean_logprob_skips_null_tokens():
    from switchyard.routing.fanout import mean_logprob

    assert mean_logprob([TokenLogprob("a", None), TokenLogprob("b", -1.0), TokenLogprob("c", -3.0)]) == -2.0
    assert mean_logprob([TokenLogprob("a", None)]) == float("-inf")


def _embed_req(n: int) -> CanonicalRequest:
    return CanonicalRequest(kind="embedding", model="m/x", dialect="embeddings",
                            prompt=[f"t{i}" for i in range(n)])


def test_embedding_inputs_fan_out_beyond_a_calls_limit():
    assert not needs_fanout(_embed_req(100), Caps(prompts=False))  # no limit: one call takes all
    assert not needs_fanout(_embed_req(96), Caps(embed_inputs=96))
    assert needs_fanout(_embed_req(97), Caps(embed_inputs=96))
    assert needs_fanout(_embed_req(2), Caps(embed_inputs=1))
    assert not needs_fanout(_embed_req(1), Caps(embed_inputs=1))


async def test_embedding_fan_out_merges_in_input_order_and_sums_usage():
    import asyncio

    async def call(r: CanonicalRequest) -> AsyncIterator[Chunk]:
        first = int(str(r.prompt[0])[1:])
        await asyncio.sleep(0.001 * (10 - first))  # later inputs answer first
        yield Chunk(embeddings=[[float(str(p)[1:])] for p in r.prompt],
                    usage=Usage(prompt_tokens=len(r.prompt)), finish_reason="stop")

    out = [ch async for ch in fan_out(call, _embed_req(10), Caps(embed_inputs=3))]
    assert len(out) == 1 and out[0].embeddings == [[float(i)] for i in range(10)]
    assert out[0].usage == Usage(prompt_tokens=10)

    async def unreported(r: CanonicalRequest) -> AsyncIterator[Chunk]:
        yield Chunk(embeddings=[[0.0]], usage=None if r.prompt == ["t1"] else Usage(prompt_tokens=1))

    out = [ch async for ch in fan_out(unreported, _embed_req(3), Caps(embed_inputs=1))]
    assert out[0].usage is None  # one call without a count: the gateway's estimate for the whole


async def test_embedding_fan_out_fails_whole_and_cancels_the_rest():
    import asyncio

    import pytest

    started: list[str] = []
    cancelled: list[str] = []

    async def call(r: CanonicalRequest) -> AsyncIterator[Chunk]:
        p = str(r.prompt[0])
        started.append(p)
        if p == "t0":
            raise RuntimeError("upstream broke")
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(p)
            raise
        yield Chunk(embeddings=[[0.0]])

    with pytest.raises(RuntimeError, match="upstream broke"):
        [ch async for ch in fan_out(call, _embed_req(20), Caps(embed_inputs=1))]
    # the calls waiting for a place never start; those under way are cancelled
    assert len(started) < 20 and sorted(cancelled) == sorted(p for p in started if p != "t0")
