"""Structured output: whatever the seed, the output obeys the constraint."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from switchyard.core.canonical import Constraint
from switchyard.core.errors import InvalidRequest
from tests.engine.conftest import completion, run, text_of

SEEDS = st.integers(0, 2**31 - 1)
PROPS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green", "blue"]}},
    "required": ["ok", "color"],
    "additionalProperties": False,
}


def generate(engine, constraint: Constraint, seed: int, max_tokens: int = 48, **kw):
    chunks = run(engine, completion("Hello", constraint=constraint, seed=seed, max_tokens=max_tokens,
                                    temperature=1.0, **kw))
    return text_of(chunks), chunks[-1].finish_reason


@PROPS
@given(seed=SEEDS)
def test_json_schema(tiny_engine, seed):
    text, finish = generate(tiny_engine, Constraint("json_schema", SCHEMA), seed)
    assert finish == "stop"
    value = json.loads(text)
    assert set(value) == {"ok", "color"}
    assert isinstance(value["ok"], bool) and value["color"] in ("red", "green", "blue")


@PROPS
@given(seed=SEEDS)
def test_regex(tiny_engine, seed):
    text, finish = generate(tiny_engine, Constraint("regex", r"[a-z]{2,4}-[0-9]{1,3}"), seed)
    assert finish == "stop"
    assert re.fullmatch(r"[a-z]{2,4}-[0-9]{1,3}", text)


@PROPS
@given(seed=SEEDS, choices=st.lists(st.sampled_from(["yes", "no", "maybe", "red", "blue sky"]),
                                    min_size=1, max_size=4, unique=True))
def test_choice(tiny_engine, seed, choices):
    text, finish = generate(tiny_engine, Constraint("choice", choices), seed)
    assert finish == "stop" and text in choices


@PROPS
@given(seed=SEEDS)
def test_gbnf_grammar(tiny_engine, seed):
    gbnf = 'root ::= "id:" digit digit? " " ("on" | "off")\ndigit ::= [0-9]'
    text, finish = generate(tiny_engine, Constraint("grammar", gbnf), seed)
    assert finish == "stop"
    assert re.fullmatch(r"id:[0-9]{1,2} (on|off)", text)


@PROPS
@given(seed=SEEDS)
def test_lark_grammar(tiny_engine, seed):
    lark = 'start: "(" item ("," item)* ")"\nitem: /[ab]{1,3}/'
    text, finish = generate(tiny_engine, Constraint("lark", lark), seed, max_tokens=80)
    if finish == "stop":
        assert re.fullmatch(r"\([ab]{1,3}(,[ab]{1,3})*\)", text)
    else:  # cut off by max_tokens: still a prefix of a valid sentence
        assert finish == "length" and re.fullmatch(r"\(([ab]{1,3},)*[ab]{0,3}", text)


@PROPS
@given(seed=SEEDS)
def test_json_object(tiny_engine, seed):
    text, finish = generate(tiny_engine, Constraint("json_object"), seed, max_tokens=64)
    assert text.startswith("{")
    if finish == "stop":
        assert isinstance(json.loads(text), dict)


def test_constraint_with_n_and_streaming(tiny_engine):
    chunks = run(tiny_engine, completion("Hi", constraint=Constraint("choice", ["alpha", "beta"]), n=3,
                                         stream=True, seed=1, max_tokens=10))
    for i in range(3):
        assert text_of(chunks, i) in ("alpha", "beta")


@pytest.mark.parametrize("c", [
    Constraint("json_schema", {"type": "nonsense"}),
    Constraint("regex", "(unclosed"),
    Constraint("grammar", "root ::= missing_rule"),
    Constraint("lark", "start: ("),
    Constraint("choice", []),
])
def test_invalid_constraints_are_invalid_requests(tiny_engine, c):
    with pytest.raises(InvalidRequest) as e:
        run(tiny_engine, completion("Hi", constraint=c))
    assert e.value.param == "constraint"
    assert c.kind in e.value.message


def test_llguidance_tokenizer_built_only_when_first_needed(tiny_loaded):
    """An engine that never sees a constraint or a logprobs request does not hold llguidance's
    copy of the vocabulary (tens of MiB on a real model)."""
    from switchyard.engine.scheduler import Engine
    from tests.engine.conftest import Collector

    col = Collector()
    eng = Engine(tiny_loaded.model, tiny_loaded.tokenizer, col, max_batch=2)
    eng.collector = col
    run(eng, completion("Hello", temperature=0, max_tokens=4))
    assert "ll_tokenizer" not in vars(eng.constraints)
    chunks = run(eng, completion("Hello", temperature=0, max_tokens=4, logprobs=2))
    assert "ll_tokenizer" in vars(eng.constraints)
    assert chunks[-1].logprobs or any(c.logprobs for c in chunks)
