"""Every documented range: a violation is refused naming the parameter and the allowed range, in
the caller's error shape (400, or 422 {"detail": [...]} where the dialect documents it)."""

from __future__ import annotations

from typing import Any

import pytest

from switchyard.core.errors import InvalidRequest
from switchyard.dialects.errors import error_json
from switchyard.dialects.parse import parse_request
from switchyard.dialects.registry import DIALECTS
from tests.gateway.conftest import KEY, base_config, upstream_model

# (dialect, bad fields, the parameter to blame, a fragment the message must carry)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("openai", {"temperature": -0.1}, "temperature", "between 0 and 2"),
    ("openai", {"temperature": 2.5}, "temperature", "between 0 and 2"),
    ("openai", {"temperature": "hot"}, "temperature", "must be a number"),
    ("openai", {"top_p": 1.5}, "top_p", "between 0 and 1"),
    ("openai", {"logprobs": 6}, "logprobs", "between 0 and 5"),
    ("openai", {"logprobs": True}, "logprobs", "must be an integer"),
    ("openai", {"n": 0}, "n", "between 1 and 128"),
    ("openai", {"n": 129}, "n", "between 1 and 128"),
    ("openai", {"n": 3, "best_of": 2}, "best_of", "greater than or equal to n"),
    ("openai", {"best_of": 200}, "best_of", "between 1 and 128"),
    ("openai", {"presence_penalty": -2.5}, "presence_penalty", "between -2 and 2"),
    ("openai", {"frequency_penalty": 2.01}, "frequency_penalty", "between -2 and 2"),
    ("openai", {"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
    ("openai", {"stop": [""]}, "stop", "non-empty"),
    ("openai", {"max_tokens": -1}, "max_tokens", "at least 0"),
    ("openai", {"logit_bias": {"5": 101}}, "logit_bias", "between -100 and 100"),
    ("openai", {"logit_bias": {"tok": 1}}, "logit_bias", "token ids"),
    ("openai", {"seed": 1.5}, "seed", "integer"),
    ("openai", {"stream_options": {"include_usage": "yes"}}, "stream_options.include_usage", "boolean"),
    ("openai", {"stream": True, "best_of": 2}, "best_of", "cannot be streamed"),
    ("vllm", {"logprobs": 21}, "logprobs", "between 0 and 20"),
    ("vllm", {"top_k": -2}, "top_k", "at least -1"),
    ("vllm", {"min_p": 1.5}, "min_p", "between 0 and 1"),
    ("vllm", {"repetition_penalty": 0}, "repetition_penalty", "between 0 and 2"),
    ("vllm", {"repetition_penalty": 2.5}, "repetition_penalty", "between 0 and 2"),
    ("vllm", {"guided_regex": "("}, "guided_regex", "regular expression"),
    ("vllm", {"guided_choice": []}, "guided_choice", "non-empty"),
    ("vllm", {"guided_json": "{not json"}, "guided_json", "not valid JSON"),
    ("llamacpp", {"temperature": 3}, "temperature", "between 0 and 2"),
    ("llamacpp", {"mirostat": 3}, "mirostat", "one of [0, 1, 2]"),
    ("llamacpp", {"mirostat": 2, "mirostat_tau": -1}, "mirostat_tau", "at least 0"),
    ("llamacpp", {"mirostat": 2, "mirostat_eta": -0.1}, "mirostat_eta", "at least 0"),
    ("llamacpp", {"max_tokens": -2}, "max_tokens", "at least -1"),
    ("llamacpp", {"n_predict": -5}, "n_predict", "at least -1"),
    ("llamacpp", {"logprobs": 6}, "logprobs", "between 0 and 5"),
    ("llamacpp", {"n_probs": 21}, "n_probs", "between 0 and 20"),
    ("llamacpp", {"repeat_penalty": -1}, "repeat_penalty", "at least 0"),
    ("llamacpp", {"typical_p": 0}, "typical_p", "between 0 and 1"),
    ("llamacpp", {"min_p": 2}, "min_p", "between 0 and 1"),
    ("llamacpp", {"dry_multiplier": 0.8, "dry_base": 0.5}, "dry_base", "at least 1"),
    ("llamacpp", {"grammar": "  "}, "grammar", "must not be empty"),
    ("llamacpp", {"logit_bias": [[1, 200]]}, "logit_bias", "between -100 and 100"),
    ("llamacpp", {"cache_prompt": "yes"}, "cache_prompt", "boolean"),
    ("mistralrs", {"grammar": {"type": "xml", "value": "a"}}, "grammar.type", "must be one of"),
    ("mistralrs", {"grammar": {"value": "a"}}, "grammar", "type"),
    ("mistralrs", {"grammar": {"type": "regex", "value": "("}}, "grammar.value", "regular expression"),
    ("mistralrs", {"dry_multiplier": -1}, "dry_multiplier", "at least 0"),
    ("mistralrs", {"dry_allowed_length": -1, "dry_multiplier": 1}, "dry_allowed_length", "at least 0"),
    ("mistralrs", {"top_k": -1}, "top_k", "at least 0"),
    ("mistralrs", {"truncate_sequence": "yes"}, "truncate_sequence", "boolean"),
    ("fireworks", {"logprobs": 6}, "logprobs", "between 0 and 5"),
    ("fireworks", {"n": 129}, "n", "between 1 and 128"),
    ("fireworks", {"top_k": 129}, "top_k", "between 0 and 128"),
    ("fireworks", {"temperature": 2.5}, "temperature", "between 0 and 2"),
    ("fireworks", {"top_p": -0.1}, "top_p", "between 0 and 1"),
    ("fireworks", {"repetition_penalty": 0}, "repetition_penalty", "between 0 and 2"),
    ("fireworks", {"max_tokens": 0}, "max_tokens", "at least 1"),
    ("fireworks", {"context_length_exceeded_behavior": "drop"}, "context_length_exceeded_behavior",
     "one of ['truncate', 'error']"),
    ("fireworks", {"stop": ["1", "2", "3", "4", "5"]}, "stop", "at most 4"),
    ("fireworks", {"mirostat_target": -1}, "mirostat_target", "at least 0"),
    ("fireworks", {"response_format": {"type": "xml"}}, "response_format.type", "json_object"),
    ("sgp", {"top_logprobs": 21, "logprobs": True}, "top_logprobs", "between 0 and 20"),
    ("sgp", {"top_logprobs": 3}, "top_logprobs", "requires logprobs"),
    ("sgp", {"top_logprobs": 3, "logprobs": False}, "top_logprobs", "requires logprobs"),
    ("sgp", {"max_new_tokens": 0}, "max_new_tokens", "at least 1"),
    ("sgp", {"max_completion_tokens": 0}, "max_completion_tokens", "at least 1"),
    ("sgp", {"stop_sequences": ["1", "2", "3", "4", "5"]}, "stop_sequences", "at most 4"),
    ("sgp", {"stop": ["1", "2", "3", "4", "5"]}, "stop", "at most 4"),
    ("sgp", {"inference_timeout": -1}, "inference_timeout", "positive"),
    ("sgp", {"temperature": 3}, "temperature", "between 0 and 2"),
    ("sgp", {"n": 0}, "n", "between 1 and 128"),
    ("sgp", {"n": 2, "best_of": 1}, "best_of", "greater than or equal to n"),
    ("sgp", {"logprobs": 6}, "logprobs", "between 0 and 5"),
    ("sgp", {"logprobs": "2"}, "logprobs", "a boolean or an integer"),
    ("sgp", {"inference_extra_headers": ["x"]}, "inference_extra_headers", "object"),
    ("chat", {"top_logprobs": 21, "logprobs": True}, "top_logprobs", "between 0 and 20"),
    ("chat", {"top_logprobs": 2}, "top_logprobs", "requires logprobs"),
    ("chat", {"temperature": 3}, "temperature", "between 0 and 2"),
    ("chat", {"stop": ["1", "2", "3", "4", "5"]}, "stop", "at most 4"),
    ("chat", {"max_completion_tokens": 0}, "max_completion_tokens", "at least 1"),
    ("chat", {"messages": []}, "messages", "must not be empty"),
    ("chat", {"response_format": {"type": "json_schema"}}, "response_format.json_schema", "schema"),
]


def _dialect(name: str):
    from switchyard.dialects.chat import CHAT
    return CHAT if name == "chat" else DIALECTS[name]


def _body(dialect: str, fields: dict[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {"model": "v/m"}
    if dialect == "chat":
        base["messages"] = [{"role": "user", "content": "hi"}]
    else:
        base["prompt"] = "hi"
    return {**base, **fields}


@pytest.mark.parametrize(("dialect", "fields", "param", "fragment"), CASES,
                         ids=[f"{d}:{p}={list(f.values())[-1]!r}" for d, f, p, _ in CASES])
def test_range_violation_names_param_and_range(dialect: str, fields: dict[str, Any], param: str,
                                               fragment: str) -> None:
    kind = "chat" if dialect == "chat" else "completion"
    with pytest.raises(InvalidRequest) as e:
        parse_request(_dialect(dialect), _body(dialect, fields), kind=kind)
    assert e.value.param == param
    assert param.split(".")[0] in e.value.message
    assert fragment in e.value.message
    assert e.value.status == 400


# At the edges of every range the value is accepted.
EDGES: list[tuple[str, dict[str, Any]]] = [
    ("openai", {"temperature": 0, "top_p": 0, "logprobs": 5, "n": 128, "best_of": 128,
                "presence_penalty": -2, "frequency_penalty": 2, "stop": ["a", "b", "c", "d"],
                "max_tokens": 0}),
    ("openai", {"temperature": 2, "top_p": 1, "logprobs": 0, "n": 1, "logit_bias": {"1": -100}}),
    ("vllm", {"logprobs": 20, "top_k": -1, "min_p": 1, "repetition_penalty": 2}),
    ("llamacpp", {"max_tokens": -1, "mirostat": 2, "mirostat_tau": 0, "n_probs": 20, "logprobs": 5,
                  "stop": ["1", "2", "3", "4", "5", "6"], "typical_p": 1}),
    ("fireworks", {"logprobs": 5, "n": 128, "top_k": 128, "repetition_penalty": 2, "max_tokens": 1}),
    ("sgp", {"top_logprobs": 20, "logprobs": True, "stop_sequences": ["1", "2", "3", "4"],
             "inference_timeout": 0.5}),
    ("sgp", {"top_logprobs": 2, "return_token_log_probs": True}),
    ("chat", {"top_logprobs": 20, "logprobs": True, "max_completion_tokens": 1}),
]


@pytest.mark.parametrize(("dialect", "fields"), EDGES, ids=[d for d, _ in EDGES])
def test_range_edges_are_accepted(dialect: str, fields: dict[str, Any]) -> None:
    kind = "chat" if dialect == "chat" else "completion"
    parse_request(_dialect(dialect), _body(dialect, fields), kind=kind)


# --- the error's shape per dialect -----------------------------------------------------------

def test_named_openai_proxy_and_sgp_validation_is_422_detail() -> None:
    err = InvalidRequest("temperature must be between 0 and 2 (got 3)", param="temperature")
    for shape, named in (("openai", True), ("sgp", False), ("sgp", True)):
        status, body = error_json(shape, err, named)
        assert status == 422
        assert body == {"detail": [{"loc": ["body", "temperature"],
                                    "msg": "temperature must be between 0 and 2 (got 3)",
                                    "type": "value_error"}]}


def test_llamacpp_error_code_is_the_status() -> None:
    err = InvalidRequest("prompt is required", param="prompt")
    for shape in ("llamacpp", "llamacpp_native"):
        status, body = error_json(shape, err)
        assert status == 400
        assert body["error"]["code"] == 400
        assert body["error"]["type"] == "invalid_request_error"
        assert body["error"]["message"] == "prompt is required"


@pytest.mark.parametrize("shape", ["openai", "vllm", "mistralrs", "fireworks", "chat"])
def test_other_dialects_error_object(shape: str) -> None:
    """A plain OpenAI body (dialect not named) gets OpenAI's own 400 with ``param``."""
    status, body = error_json(shape, InvalidRequest("n must be ...", param="n"))
    assert status == 400
    assert body["error"]["param"] == "n" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"] == "n must be ..."


# --- through the HTTP surface, one per endpoint and shape --------------------------------------

HTTP_CASES = [
    # (path, headers, body, status, how to read the message)
    ("/v1/completions", {}, {"temperature": 5}, 400, "error"),
    ("/v1/completions", {"x-switchyard-dialect": "openai"}, {"temperature": 5}, 422, "detail"),
    ("/v1/completions", {"x-switchyard-dialect": "vllm"}, {"logprobs": 21}, 400, "error"),
    ("/v1/completions", {}, {"mirostat": 7}, 400, "llama"),
    ("/v1/completions", {}, {"dry_multiplier": -1}, 400, "error"),
    ("/completion", {}, {"n_predict": -3}, 400, "llama"),
    ("/inference/v1/completions", {}, {"logprobs": 6}, 400, "error"),
    ("/v4/beta/completions", {}, {"top_logprobs": 21, "logprobs": True}, 422, "detail"),
    ("/v1/chat/completions", {}, {"top_p": 2}, 400, "error"),
]


@pytest.mark.parametrize(("path", "headers", "fields", "status", "shape"), HTTP_CASES,
                         ids=[f"{p}:{next(iter(f))}:{s}" for p, _, f, s, _ in HTTP_CASES])
async def test_http_validation_error_in_callers_shape(upstream, gateway_for, path, headers, fields,
                                                      status, shape) -> None:
    param = next(iter(fields))
    cfg = base_config([upstream_model("v/m", upstream.url)])
    body = _body("chat" if "chat" in path else "x", fields)
    async with gateway_for(cfg) as client:
        r = await client.post(path, json=body, headers=headers)
    assert r.status_code == status, r.text
    j = r.json()
    if shape == "detail":
        msg = j["detail"][0]["msg"]
        assert j["detail"][0]["loc"] == ["body", param]
    else:
        msg = j["error"]["message"]
        if shape == "llama":
            assert j["error"]["code"] == status
        else:
            assert j["error"]["param"] == param
    assert param in msg
    assert upstream.requests == []  # refused before any upstream call
    assert KEY not in r.text


async def test_unknown_field_passes_through_to_own_dialect(upstream, gateway_for) -> None:
    cfg = base_config([upstream_model("v/m", upstream.url, dialect="llamacpp",
                                      allow_extra_params=["samplers", "n_keep"])])
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/completions", json={"model": "v/m", "prompt": "hi", "n_predict": 2,
                                                        "samplers": ["top_k"], "n_keep": 4})
    assert r.status_code == 200, r.text
    assert "x-switchyard-warning" not in r.headers
    sent = upstream.requests[0].body
    assert sent["samplers"] == ["top_k"] and sent["n_keep"] == 4


async def test_unknown_field_dropped_with_warning_for_other_dialect(upstream, gateway_for) -> None:
    cfg = base_config([upstream_model("v/m", upstream.url, dialect="openai")])
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/completions", json={"model": "v/m", "prompt": "hi", "n_predict": 2,
                                                        "samplers": ["top_k"], "n_keep": 4})
    assert r.status_code == 200, r.text
    assert "n_keep" in r.headers["x-switchyard-warning"]
    assert "samplers" in r.headers["x-switchyard-warning"]
    sent = upstream.requests[0].body
    assert "samplers" not in sent and "n_keep" not in sent
    assert sent["max_tokens"] == 2  # n_predict reached the OpenAI upstream under its own name


async def test_unknown_field_with_strict_key_is_400(upstream, gateway_for) -> None:
    cfg = base_config([upstream_model("v/m", upstream.url)],
                      keys=[{"id": "k1", "team": "t", "key": KEY, "strict": True}])
    async with gateway_for(cfg) as client:
        r = await client.post("/inference/v1/completions",
                              json={"model": "v/m", "prompt": "hi", "vendor_knob": 1})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "vendor_knob"
    assert "vendor_knob" in r.json()["error"]["message"]
    assert upstream.requests == []


async def test_invalid_json_body(upstream, gateway_for) -> None:
    cfg = base_config([upstream_model("v/m", upstream.url)])
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/chat/completions", content=b"{nope",
                              headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert "JSON" in r.json()["error"]["message"]


# Each names the field as the caller sent it (issue 23, item 16): of two disagreeing aliases, the
# one that contradicts the first; a constraint or mirostat field by its own name, not the group's.
NAMED_AS_SENT = [
    ("/v1/chat/completions", {"max_tokens": 5, "max_completion_tokens": 7}, "max_completion_tokens"),
    ("/v1/chat/completions", {"max_completion_tokens": 7, "max_tokens": 5}, "max_tokens"),
    ("/v4/beta/completions", {"max_new_tokens": 7, "max_tokens": 5}, "max_tokens"),
    ("/v1/chat/completions", {"guided_regex": "a+"}, "guided_regex"),
    ("/v1/chat/completions", {"guided_grammar": 'root ::= "a"'}, "guided_grammar"),
    ("/inference/v1/completions", {"mirostat_lr": 0.5}, "mirostat_lr"),
    ("/v4/beta/completions", {"inference_timeout": 1e-320}, "inference_timeout"),
]


@pytest.mark.parametrize(("path", "fields", "param"), NAMED_AS_SENT,
                         ids=[f"{p}:{','.join(f)}" for p, f, _ in NAMED_AS_SENT])
async def test_errors_name_the_field_as_sent(upstream, gateway_for, path, fields, param) -> None:
    cfg = base_config([upstream_model("v/m", upstream.url)])  # an openai upstream
    async with gateway_for(cfg) as client:
        r = await client.post(path, json=_body("chat" if "chat" in path else "x", fields))
    assert r.status_code in (400, 422), r.text
    j = r.json()
    named = j["detail"][0]["loc"][-1] if "detail" in j else j["error"].get("param")
    msg = j["detail"][0]["msg"] if "detail" in j else j["error"]["message"]
    assert named == param, r.text
    assert param in msg
    assert upstream.requests == []
