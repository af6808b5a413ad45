"""Canonical -> each upstream's dialect: names translated, what cannot be carried emulated (stop
sequences, the stop string in the output, echo) or refused with a 400 naming the parameter and
the model."""

from __future__ import annotations

from typing import Any

import pytest

from switchyard.core.errors import InvalidRequest
from switchyard.dialects.chat import CHAT
from switchyard.dialects.parse import parse_request
from switchyard.dialects.registry import DIALECTS
from switchyard.providers.openai.request import render_request

UPSTREAMS = ["openai", "vllm", "llamacpp", "mistralrs", "fireworks", "sgp"]


def req(caller: str, kind: str = "completion", **fields: Any):
    body: dict[str, Any] = {"model": "v/m", **fields}
    if kind == "chat":
        body.setdefault("messages", [{"role": "user", "content": "hi"}])
        return parse_request(CHAT, body, kind="chat")
    body.setdefault("prompt", "hi")
    return parse_request(DIALECTS[caller], body, kind="completion")


def render(upstream: str, r, allow: list[str] | None = None):
    return render_request(DIALECTS[upstream], r, "up-model", allow)


def refused(upstream: str, r) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as e:
        render(upstream, r)
    assert e.value.status == 400
    assert "v/m" in e.value.message  # names the model
    assert e.value.param and e.value.param.split(".")[0] in e.value.message  # names the parameter
    return e.value


# --- names are the upstream's own ------------------------------------------------------------

def test_sgp_names_reach_llamacpp_as_llamacpp_names() -> None:
    r = req("sgp", max_new_tokens=5, stop_sequences=["##"], return_token_log_probs=True, top_k=3,
            repetition_penalty=1.2, guided_choice=["yes", "no"])
    body, em = render("llamacpp", r)
    assert body["model"] == "up-model" and body["prompt"] == "hi"
    assert body["max_tokens"] == 5 and body["stop"] == ["##"] and body["logprobs"] == 0
    assert body["repeat_penalty"] == 1.2 and body["top_k"] == 3
    assert body["grammar"] == 'root ::= "yes" | "no"'
    for sgp_name in ("max_new_tokens", "stop_sequences", "return_token_log_probs", "guided_choice",
                     "repetition_penalty"):
        assert sgp_name not in body
    assert em.stop is None


def test_llamacpp_names_reach_sgp_as_sgp_names() -> None:
    r = req("llamacpp", n_predict=7, stop=["a"], n_probs=3, grammar='root ::= "a"')
    body, _ = render("sgp", r)
    assert body["max_new_tokens"] == 7 and body["stop_sequences"] == ["a"]
    assert body["include_stop_str_in_output"] is False
    assert body["logprobs"] is True and body["return_token_log_probs"] is True
    assert body["top_logprobs"] == 3
    assert body["guided_grammar"] == 'root ::= "a"'
    assert "n_predict" not in body and "stop" not in body and "n_probs" not in body


@pytest.mark.parametrize(("upstream", "expected"), [
    ("llamacpp", {"mirostat": 2, "mirostat_tau": 3.0, "mirostat_eta": 0.2}),
    ("fireworks", {"mirostat_target": 3.0, "mirostat_lr": 0.2}),
])
def test_mirostat(upstream: str, expected: dict[str, Any]) -> None:
    body, _ = render(upstream, req("llamacpp", mirostat=2, mirostat_tau=3.0, mirostat_eta=0.2))
    assert {k: body[k] for k in expected} == expected


@pytest.mark.parametrize("upstream", ["openai", "vllm", "mistralrs", "sgp"])
def test_mirostat_refused_where_unknown(upstream: str) -> None:
    e = refused(upstream, req("fireworks", mirostat_target=2.0))
    assert e.param == "mirostat_target"


def test_dry_to_llamacpp_and_mistralrs() -> None:
    r = req("mistralrs", dry_multiplier=0.8, dry_base=2.0, dry_allowed_length=3,
            dry_sequence_breakers=["\n"])
    want = {"dry_multiplier": 0.8, "dry_base": 2.0, "dry_allowed_length": 3, "dry_sequence_breakers": ["\n"]}
    for up in ("llamacpp", "mistralrs"):
        body, _ = render(up, r)
        assert {k: body[k] for k in want} == want
    assert refused("openai", r).param == "dry_multiplier"


@pytest.mark.parametrize(("upstream", "key", "value"), [
    ("llamacpp", "repeat_penalty", 1.3), ("vllm", "repetition_penalty", 1.3),
    ("mistralrs", "repetition_penalty", 1.3), ("fireworks", "repetition_penalty", 1.3),
    ("sgp", "repetition_penalty", 1.3)])
def test_repetition_penalty(upstream: str, key: str, value: float) -> None:
    body, _ = render(upstream, req("llamacpp", repeat_penalty=1.3))
    assert body[key] == value


def test_repetition_penalty_refused_by_openai() -> None:
    assert refused("openai", req("llamacpp", repeat_penalty=1.3)).param == "repeat_penalty"


def test_logit_bias_object_and_pairs() -> None:
    r = req("llamacpp", logit_bias=[[15, 2.0], [16, False]])
    assert render("openai", r)[0]["logit_bias"] == {"15": 2.0, "16": -100.0}
    assert render("llamacpp", req("openai", logit_bias={"15": 2}))[0]["logit_bias"] == [[15, 2.0]]


def test_unlimited_max_tokens() -> None:
    r = req("llamacpp", n_predict=-1)
    assert render("llamacpp", r)[0]["max_tokens"] == -1
    for up in ("openai", "sgp", "fireworks"):
        body, _ = render(up, r)
        assert "max_tokens" not in body and "max_new_tokens" not in body


# --- constraints ---------------------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


@pytest.mark.parametrize(("upstream", "expected"), [
    ("vllm", {"guided_json": SCHEMA}),
    ("sgp", {"guided_json": SCHEMA}),
    ("llamacpp", {"json_schema": SCHEMA}),
    ("mistralrs", {"grammar": {"type": "json_schema", "value": SCHEMA}}),
    ("fireworks", {"response_format": {"type": "json_object", "schema": SCHEMA}}),
])
def test_json_schema_constraint(upstream: str, expected: dict[str, Any]) -> None:
    body, _ = render(upstream, req("llamacpp", json_schema=SCHEMA))
    assert {k: body[k] for k in expected} == expected


@pytest.mark.parametrize(("upstream", "expected"), [
    ("vllm", {"guided_regex": "[0-9]+"}),
    ("sgp", {"guided_regex": "[0-9]+"}),
    ("mistralrs", {"grammar": {"type": "regex", "value": "[0-9]+"}}),
])
def test_regex_constraint(upstream: str, expected: dict[str, Any]) -> None:
    body, _ = render(upstream, req("sgp", guided_regex="[0-9]+"))
    assert {k: body[k] for k in expected} == expected


@pytest.mark.parametrize("upstream", ["llamacpp", "fireworks", "openai"])
def test_regex_refused_where_it_cannot_be_carried(upstream: str) -> None:
    e = refused(upstream, req("sgp", guided_regex="[0-9]+"))
    assert e.param == "guided_regex"


def test_choice_as_regex_for_mistralrs() -> None:
    body, _ = render("mistralrs", req("vllm", guided_choice=["a.b", "c"]))
    assert body["grammar"] == {"type": "regex", "value": r"(a\.b|c)"}


def test_lark_grammar_refused_by_llamacpp() -> None:
    r = req("mistralrs", grammar={"type": "lark", "value": 'start: "a"'})
    assert render("mistralrs", r)[0]["grammar"] == {"type": "lark", "value": 'start: "a"'}
    assert refused("llamacpp", r).param == "grammar"


def test_chat_json_schema_to_openai_chat() -> None:
    r = req("chat", "chat", response_format={"type": "json_schema",
                                             "json_schema": {"name": "o", "schema": SCHEMA}})
    body, _ = render("openai", r)
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert "prompt" not in body


# --- overflow ------------------------------------------------------------------------------------

def test_overflow_policy() -> None:
    r = req("fireworks", context_length_exceeded_behavior="error")
    assert render("fireworks", r)[0]["context_length_exceeded_behavior"] == "error"
    assert render("mistralrs", req("mistralrs", truncate_sequence=True))[0]["truncate_sequence"] is True
    r = req("mistralrs", truncate_sequence=True)
    assert render("fireworks", r)[0]["context_length_exceeded_behavior"] == "truncate"


def test_overflow_error_is_openais_own_behaviour() -> None:
    # "error" is what OpenAI and vLLM do anyway: nothing to refuse, nothing to send.
    for up in ("openai", "vllm"):
        body, _ = render(up, req("fireworks", context_length_exceeded_behavior="error"))
        assert "context_length_exceeded_behavior" not in body and "truncate_sequence" not in body


def test_truncating_overflow_refused_where_unsupported() -> None:
    e = refused("openai", req("fireworks", context_length_exceeded_behavior="truncate"))
    assert e.param == "context_length_exceeded_behavior"


# --- stop sequences and the stop string ---------------------------------------------------------

def test_stops_passed_when_the_upstream_honors_them_as_asked() -> None:
    body, em = render("llamacpp", req("openai", stop=["a", "b"]))
    assert body["stop"] == ["a", "b"] and em.stop is None
    body, em = render("fireworks", req("fireworks", stop=["a"]))
    assert body["stop"] == ["a"] and em.stop is None


def test_fireworks_keeps_stop_in_output_so_openai_callers_get_emulation() -> None:
    body, em = render("fireworks", req("openai", stop=["a"]))
    assert "stop" not in body
    assert em.stop == ["a"] and em.include_stop is False


def test_fireworks_caller_to_llamacpp_keeps_the_stop_string() -> None:
    body, em = render("llamacpp", req("fireworks", stop=["END"]))
    assert "stop" not in body
    assert em.stop == ["END"] and em.include_stop is True


def test_more_stops_than_the_upstream_takes_are_emulated() -> None:
    stops = ["1", "2", "3", "4", "5", "6"]
    body, em = render("openai", req("llamacpp", stop=stops))
    assert "stop" not in body and em.stop == stops


@pytest.mark.parametrize("upstream", ["vllm", "sgp"])
def test_include_stop_str_passed_to_upstreams_that_take_it(upstream: str) -> None:
    body, em = render(upstream, req("sgp", stop_sequences=["x"], include_stop_str_in_output=True))
    assert body["include_stop_str_in_output"] is True and em.stop is None


def test_include_stop_str_emulated_for_openai() -> None:
    body, em = render("openai", req("sgp", stop=["x"], include_stop_str_in_output=True))
    assert "stop" not in body and em.stop == ["x"] and em.include_stop is True


# --- echo ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("upstream", ["openai", "vllm", "llamacpp", "mistralrs", "fireworks"])
def test_echo_passed_where_documented(upstream: str) -> None:
    body, em = render(upstream, req("openai", echo=True))
    assert body["echo"] is True and em.echo is None


def test_echo_the_dialect_cannot_write_is_refused_by_the_codec() -> None:
    # SGP's v4 completions document no echo: the driver emulates it before the codec renders
    # (test_upstream_http.py), so echo reaches the codec only from outside a route.
    with pytest.raises(InvalidRequest) as e:
        render("sgp", req("openai", echo=True, prompt="Once"))
    assert e.value.param == "echo"


def test_echo_of_token_ids_refused_where_it_cannot_be_emulated() -> None:
    with pytest.raises(InvalidRequest) as e:
        render("sgp", req("openai", echo=True, prompt=[1, 2]))
    assert e.value.param in ("echo", "prompt")


# --- prompts ------------------------------------------------------------------------------------

def test_prompt_forms_reach_the_upstream() -> None:
    assert render("openai", req("openai", prompt=["a", "b"]))[0]["prompt"] == ["a", "b"]
    assert render("openai", req("openai", prompt=[1, 2]))[0]["prompt"] == [1, 2]
    assert render("vllm", req("openai", prompt=[[1], [2, 3]]))[0]["prompt"] == [[1], [2, 3]]
    assert render("llamacpp", req("llamacpp", prompt=[1, "x", 2]))[0]["prompt"] == [1, "x", 2]


def test_prompt_forms_refused_where_unsupported() -> None:
    e = refused("openai", req("llamacpp", prompt=[1, "x", 2]))
    assert e.param == "prompt"
    e = refused("sgp", req("openai", prompt=["a", "b"]))
    assert e.param == "prompt"


# --- streaming, usage, SGP inference_* -----------------------------------------------------------

@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_stream_asks_for_usage_where_supported(upstream: str) -> None:
    body, _ = render(upstream, req("openai", stream=True))
    assert body["stream"] is True
    if upstream in ("openai", "vllm", "llamacpp", "mistralrs"):
        assert body["stream_options"] == {"include_usage": True}


def test_inference_extras() -> None:
    r = req("sgp", inference_timeout=12, inference_extra_params={"foo": 1})
    body, _ = render("sgp", r)
    assert body["inference_timeout"] == 12.0 and body["inference_extra_params"] == {"foo": 1}
    body, _ = render("openai", r)
    assert body["foo"] == 1 and "inference_timeout" not in body and "inference_extra_params" not in body


def test_vendor_extras_only_reach_the_callers_own_dialect_where_allowed() -> None:
    r = req("llamacpp", n_keep=4, samplers=["top_k"])
    assert render("llamacpp", r, ["n_keep"])[0]["n_keep"] == 4
    assert "samplers" not in render("llamacpp", r, ["n_keep"])[0]
    assert render("llamacpp", r, ["*"])[0]["samplers"] == ["top_k"]
    assert "n_keep" not in render("llamacpp", r)[0]  # nothing passes by default
    assert "n_keep" not in render("openai", r, ["*"])[0]


def test_passed_through_fields_never_set_what_the_gateway_owns() -> None:
    # an unknown field of the caller's dialect that another dialect owns: never forwarded
    r = req("openai", max_completion_tokens=4000, n_predict=9)
    body = render("openai", r, ["*"])[0]
    assert "max_completion_tokens" not in body and "n_predict" not in body


# --- refusals of what has no place upstream -----------------------------------------------------

@pytest.mark.parametrize(("caller", "fields", "upstream", "param"), [
    ("vllm", {"ignore_eos": True}, "openai", "ignore_eos"),
    ("llamacpp", {"typical_p": 0.9}, "openai", "typical_p"),
    ("vllm", {"min_p": 0.1}, "openai", "min_p"),
    ("vllm", {"top_k": 5}, "openai", "top_k"),
    ("openai", {"best_of": 3}, "llamacpp", "best_of"),
    ("mistralrs", {"tools": [{"type": "function", "function": {"name": "f"}}]}, "openai", "tools"),
    ("fireworks", {"images": ["data:image/png;base64,AA"]}, "openai", "images"),
    ("openai", {"suffix": "x"}, "fireworks", "suffix"),
    ("openai", {"best_of": 2}, "fireworks", "best_of"),
])
def test_refusals(caller: str, fields: dict[str, Any], upstream: str, param: str) -> None:
    e = refused(upstream, req(caller, **fields))
    assert e.param == param
    assert upstream in e.message


def test_best_of_equal_to_n_is_a_no_op_anywhere() -> None:
    body, _ = render("llamacpp", req("openai", best_of=1))
    assert "best_of" not in body
    body, _ = render("fireworks", req("openai", n=2, best_of=2))
    assert body["n"] == 2 and "best_of" not in body
    assert render("openai", req("openai", n=2, best_of=3))[0]["best_of"] == 3


def test_images_to_llamacpp_as_image_data() -> None:
    body, _ = render("llamacpp", req("fireworks", images=["data:image/png;base64,QUJD"]))
    assert body["image_data"] == [{"data": "QUJD", "id": 0}]
    body, _ = render("fireworks", req("fireworks", images=["data:image/png;base64,QUJD"]))
    assert body["images"] == ["data:image/png;base64,QUJD"]


# --- chat to every upstream -----------------------------------------------------------------------

@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_chat_request_to_every_upstream(upstream: str) -> None:
    r = req("chat", "chat", max_completion_tokens=9, stop=["x"], temperature=0.5, logprobs=True,
            top_logprobs=2, tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="auto")
    body, em = render(upstream, r)
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["max_tokens"] == 9 and body["temperature"] == 0.5
    assert body["logprobs"] is True and body["top_logprobs"] == 2
    assert body["tools"][0]["function"]["name"] == "f" and body["tool_choice"] == "auto"
    assert body.get("stop") == ["x"] or em.stop == ["x"]
