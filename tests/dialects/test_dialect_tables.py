"""Every dialect table, every mapping: a body in some dialect -> the canonical request."""

from __future__ import annotations

from typing import Any

import pytest

from switchyard.core.canonical import Constraint, Dry, Mirostat
from switchyard.core.errors import InvalidRequest
from switchyard.dialects.chat import CHAT, chat_emits
from switchyard.dialects.fireworks import FIREWORKS
from switchyard.dialects.llamacpp import LLAMACPP, LLAMACPP_NATIVE
from switchyard.dialects.mistralrs import MISTRALRS
from switchyard.dialects.openai import OPENAI, VLLM
from switchyard.dialects.parse import parse_request
from switchyard.dialects.registry import sniff_completion_dialect
from switchyard.dialects.sgp import SGP
from switchyard.dialects.spec import Dialect

OBJ = {"type": "object"}
ALL = {"openai": OPENAI, "vllm": VLLM, "llamacpp": LLAMACPP, "mistralrs": MISTRALRS,
       "fireworks": FIREWORKS, "sgp": SGP}


def parse(d: Dialect, kind: str = "completion", strict: bool = False, **fields: Any):
    body = {"model": "v/m", **fields}
    if kind == "completion":
        body.setdefault("prompt", "hi")
    else:
        body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return parse_request(d, body, kind=kind, strict=strict)  # type: ignore[arg-type]


# --- field -> canonical, table by table ------------------------------------------------------

# (dialect, body fields, canonical field, expected value)
MAPPINGS: list[tuple[Dialect, dict[str, Any], str, Any]] = [
    # max tokens under every name
    (OPENAI, {"max_tokens": 7}, "max_tokens", 7),
    (VLLM, {"max_tokens": 7}, "max_tokens", 7),
    (LLAMACPP, {"max_tokens": -1}, "max_tokens", -1),
    (LLAMACPP, {"n_predict": 9}, "max_tokens", 9),
    (LLAMACPP_NATIVE, {"n_predict": 9}, "max_tokens", 9),
    (MISTRALRS, {"max_tokens": 5}, "max_tokens", 5),
    (FIREWORKS, {"max_tokens": 5}, "max_tokens", 5),
    (SGP, {"max_new_tokens": 11}, "max_tokens", 11),
    (SGP, {"max_tokens": 12}, "max_tokens", 12),
    (SGP, {"max_completion_tokens": 13}, "max_tokens", 13),
    (SGP, {"max_new_tokens": 13, "max_tokens": 13}, "max_tokens", 13),  # agreeing aliases
    (CHAT, {"max_completion_tokens": 14}, "max_tokens", 14),
    (OPENAI, {"max_completion_tokens": 15}, "max_tokens", 15),  # OpenAI's newer name, on completions too
    (VLLM, {"max_completion_tokens": 0}, "max_tokens", 0),
    (MISTRALRS, {"max_completion_tokens": 16}, "max_tokens", 16),
    (CHAT, {"max_tokens": 14}, "max_tokens", 14),
    # stop
    (OPENAI, {"stop": "\n"}, "stop", ["\n"]),
    (OPENAI, {"stop": ["a", "b", "c", "d"]}, "stop", ["a", "b", "c", "d"]),
    (LLAMACPP, {"stop": ["1", "2", "3", "4", "5", "6"]}, "stop", ["1", "2", "3", "4", "5", "6"]),
    (SGP, {"stop_sequences": ["x", "y"]}, "stop", ["x", "y"]),
    (SGP, {"stop": ["x"]}, "stop", ["x"]),
    (FIREWORKS, {"stop": ["END"]}, "stop", ["END"]),
    (MISTRALRS, {"stop": "example"}, "stop", ["example"]),
    (CHAT, {"stop": ["x"]}, "stop", ["x"]),
    # penalties
    (LLAMACPP, {"repeat_penalty": 1.3}, "repetition_penalty", 1.3),
    (VLLM, {"repetition_penalty": 1.2}, "repetition_penalty", 1.2),
    (MISTRALRS, {"repetition_penalty": 1.2}, "repetition_penalty", 1.2),
    (FIREWORKS, {"repetition_penalty": 1.2}, "repetition_penalty", 1.2),
    (SGP, {"repetition_penalty": 1.2}, "repetition_penalty", 1.2),
    (OPENAI, {"presence_penalty": -1.5}, "presence_penalty", -1.5),
    (OPENAI, {"frequency_penalty": 2}, "frequency_penalty", 2),
    # sampling
    (OPENAI, {"temperature": 0}, "temperature", 0),
    (OPENAI, {"top_p": 0.5}, "top_p", 0.5),
    (VLLM, {"top_k": -1}, "top_k", -1),
    (LLAMACPP, {"top_k": 40}, "top_k", 40),
    (SGP, {"top_k": 3}, "top_k", 3),
    (FIREWORKS, {"top_k": 50}, "top_k", 50),
    (VLLM, {"min_p": 0.1}, "min_p", 0.1),
    (LLAMACPP, {"min_p": 0.05}, "min_p", 0.05),
    (MISTRALRS, {"min_p": 0.05}, "min_p", 0.05),
    (LLAMACPP, {"typical_p": 0.9}, "typical_p", 0.9),
    (OPENAI, {"seed": 42}, "seed", 42),
    (LLAMACPP, {"seed": 42}, "seed", 42),
    (LLAMACPP, {"seed": -1}, "seed", None),  # llama.cpp: -1 = random = not said
    (VLLM, {"ignore_eos": True}, "ignore_eos", True),
    (FIREWORKS, {"ignore_eos": True}, "ignore_eos", True),
    (LLAMACPP, {"ignore_eos": True}, "ignore_eos", True),
    # mirostat
    (LLAMACPP, {"mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2}, "mirostat",
     Mirostat(mode=2, tau=4.0, eta=0.2)),
    (LLAMACPP, {"mirostat": 1}, "mirostat", Mirostat(mode=1, tau=5.0, eta=0.1)),
    (LLAMACPP, {"mirostat": 0, "mirostat_tau": 4.0}, "mirostat", None),
    (FIREWORKS, {"mirostat_target": 1.5, "mirostat_lr": 0.3}, "mirostat",
     Mirostat(mode=2, tau=1.5, eta=0.3)),
    (FIREWORKS, {"mirostat_target": 3}, "mirostat", Mirostat(mode=2, tau=3.0, eta=0.1)),
    # DRY
    (MISTRALRS, {"dry_multiplier": 0.8, "dry_base": 2.0, "dry_allowed_length": 3,
                 "dry_sequence_breakers": ["\n"]}, "dry",
     Dry(multiplier=0.8, base=2.0, allowed_length=3, sequence_breakers=["\n"])),
    (MISTRALRS, {"dry_multiplier": 0.5}, "dry", Dry(multiplier=0.5)),
    (MISTRALRS, {"dry_multiplier": 0}, "dry", None),  # 0 disables DRY
    (LLAMACPP, {"dry_multiplier": 0.8, "dry_base": 1.5}, "dry", Dry(multiplier=0.8, base=1.5)),
    # constraints: every spelling -> one Constraint
    (VLLM, {"guided_json": {"type": "object"}}, "constraint", Constraint("json_schema", OBJ)),
    (VLLM, {"guided_json": '{"type": "object"}'}, "constraint", Constraint("json_schema", OBJ)),
    (VLLM, {"guided_regex": "[a-z]+"}, "constraint", Constraint("regex", "[a-z]+")),
    (VLLM, {"guided_choice": ["yes", "no"]}, "constraint", Constraint("choice", ["yes", "no"])),
    (VLLM, {"guided_grammar": "root ::= \"a\""}, "constraint", Constraint("grammar", "root ::= \"a\"")),
    (SGP, {"guided_json": {"type": "object"}}, "constraint", Constraint("json_schema", OBJ)),
    (SGP, {"guided_regex": "a+"}, "constraint", Constraint("regex", "a+")),
    (SGP, {"guided_choice": ["a"]}, "constraint", Constraint("choice", ["a"])),
    (SGP, {"guided_grammar": "root ::= \"a\""}, "constraint", Constraint("grammar", "root ::= \"a\"")),
    (LLAMACPP, {"grammar": "root ::= [0-9]+"}, "constraint", Constraint("grammar", "root ::= [0-9]+")),
    (LLAMACPP, {"json_schema": {"type": "object"}}, "constraint", Constraint("json_schema", OBJ)),
    (MISTRALRS, {"grammar": {"type": "regex", "value": "a|b"}}, "constraint", Constraint("regex", "a|b")),
    (MISTRALRS, {"grammar": {"type": "json_schema", "value": {"type": "object"}}}, "constraint",
     Constraint("json_schema", OBJ)),
    (MISTRALRS, {"grammar": {"type": "lark", "value": "start: \"a\""}}, "constraint",
     Constraint("lark", "start: \"a\"")),
    (MISTRALRS, {"grammar": {"type": "llguidance", "value": "start: \"a\""}}, "constraint",
     Constraint("lark", "start: \"a\"")),
    (MISTRALRS, {"grammar": "root ::= \"a\""}, "constraint", Constraint("grammar", "root ::= \"a\"")),
    (FIREWORKS, {"response_format": {"type": "json_object"}}, "constraint", Constraint("json_object")),
    (FIREWORKS, {"response_format": {"type": "json_object", "schema": {"type": "object"}}}, "constraint",
     Constraint("json_schema", OBJ)),
    (CHAT, {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": OBJ}}},
     "constraint", Constraint("json_schema", OBJ)),
    (CHAT, {"response_format": {"type": "text"}}, "constraint", None),
    (VLLM, {"response_format": {"type": "json_object"}}, "constraint", Constraint("json_object")),
    # overflow policy
    (FIREWORKS, {"context_length_exceeded_behavior": "truncate"}, "overflow", "truncate_max_tokens"),
    (FIREWORKS, {"context_length_exceeded_behavior": "error"}, "overflow", "error"),
    (MISTRALRS, {"truncate_sequence": True}, "overflow", "truncate_prompt"),
    (MISTRALRS, {"truncate_sequence": False}, "overflow", "error"),
    # stop string in the output
    (VLLM, {"include_stop_str_in_output": True}, "include_stop_str_in_output", True),
    (SGP, {"include_stop_str_in_output": False}, "include_stop_str_in_output", False),
    # logprobs: int, bool + top_logprobs, return_token_log_probs, n_probs
    (OPENAI, {"logprobs": 3}, "logprobs", 3),
    (OPENAI, {"logprobs": 0}, "logprobs", 0),
    (VLLM, {"logprobs": 20}, "logprobs", 20),
    (FIREWORKS, {"logprobs": 5}, "logprobs", 5),
    (LLAMACPP, {"logprobs": 2}, "logprobs", 2),
    (LLAMACPP, {"n_probs": 7}, "logprobs", 7),
    (SGP, {"return_token_log_probs": True}, "logprobs", 0),
    (SGP, {"return_token_log_probs": False}, "logprobs", None),
    (SGP, {"logprobs": True}, "logprobs", 0),
    (SGP, {"logprobs": True, "top_logprobs": 20}, "logprobs", 20),
    (SGP, {"logprobs": False}, "logprobs", None),
    (CHAT, {"logprobs": True, "top_logprobs": 2}, "logprobs", 2),
    # echo / suffix / n / best_of
    (OPENAI, {"echo": True}, "echo", True),
    (FIREWORKS, {"echo": True}, "echo", True),
    (LLAMACPP, {"echo": True}, "echo", True),
    (MISTRALRS, {"echo": True}, "echo", True),
    (OPENAI, {"suffix": "}"}, "suffix", "}"),
    (SGP, {"suffix": "}"}, "suffix", "}"),
    (OPENAI, {"n": 3}, "n", 3),
    (FIREWORKS, {"n": 128}, "n", 128),
    (OPENAI, {"n": 2, "best_of": 3}, "best_of", 3),
    (SGP, {"best_of": 2}, "best_of", 2),
    # logit_bias: an object, or llama.cpp's pairs (false bans)
    (OPENAI, {"logit_bias": {"50256": -100}}, "logit_bias", {50256: -100.0}),
    (SGP, {"logit_bias": {"1": 5}}, "logit_bias", {1: 5.0}),
    (LLAMACPP, {"logit_bias": {"15": 1.5}}, "logit_bias", {15: 1.5}),
    (LLAMACPP, {"logit_bias": [[15, 1.0], [16, False]]}, "logit_bias", {15: 1.0, 16: -100.0}),
    (CHAT, {"logit_bias": {"7": 2}}, "logit_bias", {7: 2.0}),
    # images, tools
    (FIREWORKS, {"images": ["data:image/png;base64,AAAA"]}, "images", ["data:image/png;base64,AAAA"]),
    (LLAMACPP, {"image_data": [{"data": "AAAA", "id": 1}]}, "images", [{"data": "AAAA", "id": 1}]),
    (MISTRALRS, {"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools",
     [{"type": "function", "function": {"name": "f"}}]),
    (MISTRALRS, {"tool_choice": "none"}, "tool_choice", "none"),
    (SGP, {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto"},
     "tool_choice", "auto"),
    (CHAT, {"tool_choice": "required"}, "tool_choice", "required"),
    # stream options, user, SGP inference_*
    (OPENAI, {"stream": True, "stream_options": {"include_usage": True}}, "include_usage", True),
    (SGP, {"stream_options": {"include_usage": False}}, "include_usage", False),
    (LLAMACPP, {"stream_options": {"include_usage": True}}, "include_usage", True),
    (OPENAI, {"user": "u-1"}, "user", "u-1"),
    (FIREWORKS, {"user": "u-1"}, "user", "u-1"),
    (SGP, {"inference_timeout": 30}, "timeout", 30.0),
    (SGP, {"inference_extra_params": {"foo": 1}}, "extra_params", {"foo": 1}),
    (SGP, {"inference_extra_headers": {"x-a": "b"}}, "extra_headers", {"x-a": "b"}),
    (LLAMACPP, {"cache_prompt": False}, "cache_prompt", False),
    (LLAMACPP_NATIVE, {"cache_prompt": True}, "cache_prompt", True),
    (OPENAI, {"stream": True}, "stream", True),
    (OPENAI, {"temperature": None}, "temperature", None),  # explicit null = not said
]


def _ids(m: tuple[Dialect, dict[str, Any], str, Any]) -> str:
    return f"{m[0].name}:{','.join(m[1])}"


@pytest.mark.parametrize(("dialect", "fields", "target", "expected"), MAPPINGS,
                         ids=[_ids(m) for m in MAPPINGS])
def test_field_maps_to_canonical(dialect: Dialect, fields: dict[str, Any], target: str,
                                 expected: Any) -> None:
    kind = "chat" if dialect is CHAT else "completion"
    req = parse(dialect, kind, **fields)
    assert getattr(req, target) == expected
    assert req.extra == {}
    assert req.dialect == dialect.name


# --- prompts ---------------------------------------------------------------------------------

PROMPTS = [
    ("hi", [["hi"]][0]),
    (["a", "b"], ["a", "b"]),
    ([1, 2, 3], [[1, 2, 3]]),
    ([[1, 2], [3]], [[1, 2], [3]]),
]


@pytest.mark.parametrize("dialect", [OPENAI, VLLM, LLAMACPP, MISTRALRS, FIREWORKS], ids=lambda d: d.name)
@pytest.mark.parametrize(("prompt", "expected"), PROMPTS, ids=["str", "strs", "ids", "id-lists"])
def test_prompt_forms(dialect: Dialect, prompt: Any, expected: Any) -> None:
    assert parse(dialect, prompt=prompt).prompt == expected


def test_llamacpp_mixed_prompt_is_one_prompt() -> None:
    assert parse(LLAMACPP, prompt=[12, 34, "string", 56]).prompt == [[12, 34, "string", 56]]
    assert parse(LLAMACPP_NATIVE, prompt=[1, "x"]).prompt == [[1, "x"]]


@pytest.mark.parametrize("dialect", [OPENAI, FIREWORKS, MISTRALRS], ids=lambda d: d.name)
def test_mixed_prompt_refused_outside_llamacpp(dialect: Dialect) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse(dialect, prompt=[12, "x"])
    assert e.value.param == "prompt"


@pytest.mark.parametrize("prompt", [[], [[]], [1.5], [True], [-1], {"a": 1}, 3],
                         ids=["empty", "empty-ids", "float", "bool", "negative", "object", "int"])
def test_bad_prompts(prompt: Any) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse(OPENAI, prompt=prompt)
    assert e.value.param == "prompt"


def test_sgp_reads_the_sdks_openai_shaped_body() -> None:
    """scale-gp and scale-gp-beta send OpenAI's names: a prompt list, logprobs as a count, echo."""
    assert parse(SGP, prompt="x").prompt == ["x"]
    r = parse(SGP, prompt=["a", "b"], logprobs=2, echo=True, best_of=3, max_tokens=0)
    assert (r.prompt, r.logprobs, r.echo, r.best_of, r.max_tokens) == (["a", "b"], 2, True, 3, 0)
    assert parse(SGP, prompt="x", logprobs=0).logprobs == 0  # the chosen tokens only
    assert parse(SGP, prompt="x", logprobs=True, top_logprobs=3).logprobs == 3  # the reference's form
    assert parse(SGP, prompt="x", logprobs=False).logprobs is None
    for bad, param in (({"logprobs": 6}, "logprobs"), ({"logprobs": "2"}, "logprobs"),
                       ({"logprobs": 2, "top_logprobs": 3}, "top_logprobs"), ({"prompt": 3}, "prompt")):
        with pytest.raises(InvalidRequest) as e:
            parse(SGP, **{"prompt": "x", **bad})
        assert e.value.param == param


# --- required fields, aliases, unknown fields --------------------------------------------------

@pytest.mark.parametrize("dialect", list(ALL.values()), ids=list(ALL))
def test_model_and_prompt_required(dialect: Dialect) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_request(dialect, {"prompt": "x"}, kind="completion")
    assert e.value.param == "model"
    with pytest.raises(InvalidRequest) as e:
        parse_request(dialect, {"model": "v/m"}, kind="completion")
    assert e.value.param == "prompt"


def test_chat_requires_messages() -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_request(CHAT, {"model": "v/m"}, kind="chat")
    assert e.value.param == "messages"
    with pytest.raises(InvalidRequest) as e:
        parse(CHAT, "chat", messages=[{"content": "no role"}])
    assert e.value.param == "messages[0]"


def test_disagreeing_aliases_are_refused() -> None:
    with pytest.raises(InvalidRequest) as e:
        parse(SGP, max_new_tokens=5, max_tokens=6)
    assert "max_new_tokens" in e.value.message and "max_tokens" in e.value.message
    with pytest.raises(InvalidRequest):
        parse(LLAMACPP, n_predict=5, max_tokens=6)
    with pytest.raises(InvalidRequest):
        parse(SGP, stop=["a"], stop_sequences=["b"])


def test_two_constraints_are_refused() -> None:
    with pytest.raises(InvalidRequest) as e:
        parse(VLLM, guided_regex="a", guided_choice=["a"])
    assert "guided_choice" in e.value.message and "guided_regex" in e.value.message
    with pytest.raises(InvalidRequest):
        parse(LLAMACPP, grammar="root ::= \"a\"", json_schema={"type": "object"})


def test_unknown_fields_are_kept_as_extra() -> None:
    req = parse(OPENAI, vendor_knob=3, another={"a": 1})
    assert req.extra == {"vendor_knob": 3, "another": {"a": 1}}


def test_unknown_field_with_strict_key_is_refused() -> None:
    with pytest.raises(InvalidRequest) as e:
        parse(OPENAI, strict=True, vendor_knob=3)
    assert e.value.param == "vendor_knob"
    assert "vendor_knob" in e.value.message


def test_body_must_be_an_object() -> None:
    with pytest.raises(InvalidRequest):
        parse_request(OPENAI, [1, 2], kind="completion")


def test_llamacpp_table_does_not_know_openai_only_names() -> None:
    # best_of is not a llama.cpp field: it is an unknown extra, not silently mapped.
    assert parse(LLAMACPP, best_of=2).extra == {"best_of": 2}


# --- the dialect of a /v1/completions body -----------------------------------------------------

SNIFF = [
    ({"prompt": "x"}, "openai"),
    ({"prompt": "x", "logprobs": 2, "echo": True}, "openai"),
    ({"prompt": "x", "n_predict": 3}, "llamacpp"),
    ({"prompt": "x", "repeat_penalty": 1.1}, "llamacpp"),
    ({"prompt": "x", "mirostat": 2}, "llamacpp"),
    ({"prompt": "x", "cache_prompt": True}, "llamacpp"),
    ({"prompt": "x", "grammar": "root ::= \"a\""}, "llamacpp"),
    ({"prompt": "x", "json_schema": {}}, "llamacpp"),
    ({"prompt": "x", "grammar": {"type": "regex", "value": "a"}}, "mistralrs"),
    ({"prompt": "x", "dry_multiplier": 0.8}, "mistralrs"),
    ({"prompt": "x", "truncate_sequence": True}, "mistralrs"),
    ({"prompt": "x", "context_length_exceeded_behavior": "error"}, "fireworks"),
    ({"prompt": "x", "mirostat_target": 2}, "fireworks"),
    ({"prompt": "x", "images": []}, "fireworks"),
    ({"prompt": "x", "max_new_tokens": 3}, "sgp"),
    ({"prompt": "x", "stop_sequences": ["a"]}, "sgp"),
    ({"prompt": "x", "return_token_log_probs": True}, "sgp"),
    ({"prompt": "x", "guided_json": {}}, "vllm"),
    ({"prompt": "x", "include_stop_str_in_output": True}, "vllm"),
    # fields several products share do not decide alone: the distinctive one does
    ({"prompt": "x", "top_k": 40, "mirostat": 2}, "llamacpp"),
    ({"prompt": "x", "min_p": 0.1, "repeat_penalty": 1.1}, "llamacpp"),
    ({"prompt": "x", "repetition_penalty": 1.1, "dry_multiplier": 0.5}, "mistralrs"),
    ({"prompt": "x", "top_k": 4, "ignore_eos": True, "context_length_exceeded_behavior": "truncate"},
     "fireworks"),
    ({"prompt": "x", "top_k": 4, "max_new_tokens": 3}, "sgp"),
    ({"prompt": "x", "top_k": 4}, "vllm"),
    ({"prompt": "x", "response_format": {"type": "json_object", "schema": OBJ}}, "vllm"),
    ({"prompt": "x", "response_format": OBJ, "mirostat_target": 2}, "fireworks"),
]


@pytest.mark.parametrize(("body", "dialect"), SNIFF, ids=[f"{d}:{','.join(b)}" for b, d in SNIFF])
def test_sniff_completion_dialect(body: dict[str, Any], dialect: str) -> None:
    assert sniff_completion_dialect(body, {}).name == dialect


def test_dialect_header_wins() -> None:
    assert sniff_completion_dialect({"n_predict": 3}, {"x-switchyard-dialect": "SGP"}).name == "sgp"


def test_sniffed_llamacpp_body_keeps_every_field() -> None:
    body = {"model": "v/m", "prompt": "x", "top_k": 40, "min_p": 0.1, "mirostat": 2, "repeat_penalty": 1.2}
    d = sniff_completion_dialect(body, {})
    req = parse_request(d, body, kind="completion")
    assert req.extra == {}
    assert req.mirostat == Mirostat(2) and req.repetition_penalty == 1.2


def test_a_dialect_s_chat_emits_are_its_own_whatever_its_name() -> None:
    """Made once per dialect object, not per name: a dialect built with OpenAI's name and other
    rows gets its own."""
    assert chat_emits(OPENAI) is chat_emits(OPENAI)
    assert "frequency_penalty" in chat_emits(OPENAI) and "echo" not in chat_emits(OPENAI)
    bare = Dialect(name="openai", params=())
    assert "frequency_penalty" not in chat_emits(bare)
    assert "frequency_penalty" in chat_emits(OPENAI)
