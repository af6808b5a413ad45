"""Chat messages as real clients send them: content as a list of parts."""

from __future__ import annotations

import pytest

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.errors import InvalidRequest
from tests.engine.conftest import run, text_of


def chat(messages, **kw) -> CanonicalRequest:
    return CanonicalRequest(kind="chat", model="local/tiny", dialect="openai", messages=messages,
                            max_tokens=6, temperature=0, **kw)


def test_text_parts_are_joined_like_a_string(tiny_engine):
    hello = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]
    parts = [{"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
             {"role": "user", "content": hello}]
    plain = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hello\nworld"}]
    a, b = run(tiny_engine, chat(parts)), run(tiny_engine, chat(plain))
    assert a[-1].usage.prompt_tokens == b[-1].usage.prompt_tokens
    assert text_of(a) == text_of(b)
    assert tiny_engine.count_tokens(chat(parts)) == tiny_engine.count_tokens(chat(plain))


@pytest.mark.parametrize("content, says", [
    ([{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}],
     "'image_url' part"),
    ([{"type": "text"}], "must be a"),
    (["hi"], "must be a"),
    (42, "string or a list"),
])
def test_other_parts_are_refused_naming_the_message(tiny_engine, content, says):
    msgs = [{"role": "user", "content": "first"}, {"role": "user", "content": content}]
    with pytest.raises(InvalidRequest, match=says) as e:
        run(tiny_engine, chat(msgs))
    assert e.value.param == "messages[1].content"
    assert "TypeError" not in e.value.message and "concatenate" not in e.value.message
